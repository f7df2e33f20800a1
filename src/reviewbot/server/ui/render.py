"""The status page as HTML: pure functions from plain data to text (no I/O, no clock).

The pages are built from :mod:`.markup`'s pieces, which escape everything that came from a
forge, a caller or the store. The page has no script at all and one stylesheet
(``/ui/style.css``), which the Content-Security-Policy allows alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reviewbot.core.lease_history import HistoryEntry
from reviewbot.runtime.explain import PullFacts
from reviewbot.server.ui.markup import (
    Reader,
    badge,
    checks,
    e,
    page,
    pr_link,
    reasons,
    says_only_checks,
    short,
    table,
    time_tag,
)
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision
from reviewbot.store.status import Activity, MergeRow, PullRow, StatusSnapshot

# Gate skips that say nothing about the PR itself (an event the bot ignores, a repeat, an
# older head): a newer one of these leaves the PR's review verdict standing.
NOT_ABOUT_THE_PULL = frozenset(
    {
        "action_ignored",
        "duplicate_delivery",
        "recorded",
        "not_pull_request_event",
        "no_open_pull_requests",
        "routed_to_listener",
        "head_moved",
    }
)
# Why a lease claim ended (docs/reason-codes.md, "Lease history"), in plain words.
LEASE_ENDS = {
    "manual-release": "its holder released it",
    "abandoned": "its holder gave up without finishing",
    "finished": "its holder finished what it claimed it for",
    "merged": "the pull request was merged under it",
    "head-moved": "the pull request's head moved away from the claimed commit",
    "reviewed": "the bot recorded its review verdict",
    "heartbeat-lapsed": "its holder stopped renewing it and its term ran out",
    "worker-heartbeat-lapsed": "its holder's worker stopped sending heartbeats",
    "superseded": "another claim replaced it",
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class StatusView:
    reader: Reader
    checks: Sequence[Check]
    snapshot: StatusSnapshot
    now: float
    csrf: str
    repo_filter: str = ""


@dataclass(frozen=True)
class PullView:
    reader: Reader
    forge: str
    repo: str  # the canonical key
    number: int
    explanation: str  # what `reviewbot explain FORGE:OWNER/REPO#N` prints
    snapshot: StatusSnapshot  # scoped to the repository; this PR's rows are picked here
    now: float
    csrf: str
    facts: PullFacts | None = None  # the records `explain` words, shown as sections
    lease_history: Sequence[HistoryEntry] = ()  # oldest first, as `explain` prints it


def health_section(checks: Sequence[Check]) -> str:
    ready = all(c.ok for c in checks)
    state = "ready" if ready else "not ready: " + ", ".join(c.name for c in checks if not c.ok)
    rows = [(badge("ok" if c.ok else "failing"), e(c.name), e(c.detail)) for c in checks]
    return (
        f'<section id="health"><h2>Health</h2><p class="state {"ok" if ready else "failing"}">'
        f"Serving; {e(state)}</p>{table(('state', 'check', 'detail'), rows, 'No checks ran.')}"
        "</section>"
    )


def queue_section(snapshot: StatusSnapshot, now: float) -> str:
    queue = snapshot.queue
    counts = ", ".join(f"{e(n)} {e(status)}" for status, n in sorted(queue.counts.items()))
    oldest = "Nothing is waiting to be gated."
    if queue.oldest_at is not None:
        which = f" ({e(queue.oldest_id)}, {e(queue.oldest_source)})" if queue.oldest_id else ""
        oldest = f"The oldest waiting delivery{which} arrived {time_tag(queue.oldest_at, now)}."
    return (
        '<section id="queue"><h2>Queue</h2>'
        f"<p>Deliveries: {counts or 'none yet'}.</p><p>{oldest}</p>"
        f"<p>Review jobs waiting: {e(queue.jobs_pending)}.</p></section>"
    )


def merged_text(head: str | None, commit: str | None, method: str | None) -> str:
    """What merged: the head, the forge's merge commit and the method."""
    text = f"merged <code>{e(short(head))}</code>"
    if commit:
        text += f" as <code>{e(short(commit))}</code>"
    return text + (f" ({e(method)})" if method else "")


def verdict_cells(p: PullRow) -> tuple[str, str, str]:
    """A PR's head, verdict now and why: its newest review verdict, or a newer gate
    decision that keeps it from being reviewed (a draft, a skip label...) or that let a
    new head through which has no verdict yet."""
    newer_gate = p.gate_at > (p.verdict_at or 0.0)
    # A merged PR's "closed" adds nothing: the merge line says it, beside the verdict.
    ignored = NOT_ABOUT_THE_PULL | ({"pr_closed"} if p.merged else set())
    blocked = p.gate != "eligible" and not set(p.gate_reasons) <= ignored
    new_head = p.gate == "eligible" and p.head_sha not in (None, p.verdict_head)
    if p.verdict is None or (newer_gate and (blocked or new_head)):
        head, word = p.head_sha, p.gate
        details = p.gate_details or ("",) * len(p.gate_reasons)
        why = reasons(zip(p.gate_reasons, details, strict=True), word)
        if p.gate == "eligible":
            why += '<p class="detail">No review verdict at this head yet.</p>'
    else:
        head, word = p.verdict_head, p.verdict
        why = verdict_why(
            p.verdict, p.verdict_reason or "", p.verdict_detail, p.failed, p.missing, p.pending
        )
    shown = badge(word)
    if p.merged:
        shown += " " + badge("merged")
        what = merged_text(p.merged_head, p.merge_commit, p.merge_method)
        why = f'<p class="merged">{what}</p>{why}'
    return f"<code>{e(short(head))}</code>", shown, why


def pulls_section(snapshot: StatusSnapshot, title: str = "Pull requests") -> str:
    rows = [
        (pr_link(snapshot, p.forge, p.repo, p.number), *verdict_cells(p)) for p in snapshot.pulls
    ]
    shown = table(("pull request", "head", "verdict", "why"), rows, "No pull request yet.")
    return (
        f'<section id="pulls"><h2>{e(title)}</h2>'
        '<p class="note">The verdict now, and what it rests on.</p>'
        f"{shown}</section>"
    )


def gate_why(d: DecisionRecord) -> str:
    event = f"{d.event}{'/' + d.action if d.action else ''}" if d.event else ""
    why = reasons(((r.code, r.detail) for r in d.reasons), d.decision)
    return why + (f'<p class="detail">on {e(event)}</p>' if event else "")


def verdict_why(
    verdict: str,
    code: str,
    detail: str,
    failed: Sequence[str],
    missing: Sequence[str],
    pending: Sequence[str],
) -> str:
    """A review verdict's reason in words, and the checks it rests on (named once)."""
    if says_only_checks(detail, failed, missing, pending):
        detail = ""
    return reasons([(code, detail)], verdict) + checks(failed, missing, pending)


def review_why(r: ReviewDecision) -> str:
    return verdict_why(r.decision, r.reason_code, r.detail, r.failed, r.missing, r.pending)


def merge_why(m: MergeRow) -> str:
    by = f" by {e(m.holder)} (lease epoch {e(m.epoch)})"
    if m.status == "merged":
        return f"<p>{merged_text(m.head_sha, m.merge_commit, m.method)}{by}</p>"
    if m.status == "sending":
        return f"<p>the merge call is out ({e(m.method)}){by}</p>"
    if m.codes:
        return reasons((code, m.detail if i == 0 else "") for i, code in enumerate(m.codes))
    return f"<p>{e(m.detail or m.status.replace('_', ' '))}{by}</p>"


def lease_why(x: HistoryEntry) -> str:
    text = f"{e(x.target.role.value)} lease, epoch {e(x.epoch)}, held by {e(x.holder)}"
    if x.previous_holder:
        text += f" (taken over from {e(x.previous_holder)})"
    if x.reason:
        ended = LEASE_ENDS.get(x.reason, x.reason.replace("-", " "))
        text += f": {e(ended)} <code>{e(x.reason)}</code>"
    if not x.recorded:
        text += " (seen by the clock, not yet recorded)"
    return f"<p>{text}</p>"


def activity_cells(a: Activity) -> tuple[str, str]:
    """The outcome (a badge and the head) and the reason of one stage's record."""
    r = a.record
    if isinstance(r, DecisionRecord):
        word, head, why = r.decision, r.head_sha, gate_why(r)
    elif isinstance(r, ReviewDecision):
        word, head, why = r.decision, r.head_sha, review_why(r)
    elif isinstance(r, MergeRow):
        word, head, why = r.status, r.head_sha, merge_why(r)
    else:
        word, head, why = r.event.value, r.head_sha, lease_why(r)
    at = f" at <code>{e(short(head))}</code>" if head else ""
    return badge(word) + at, why


def decisions_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            time_tag(a.at, now),
            pr_link(snapshot, a.forge, a.repo, a.number)
            if a.forge and a.repo and a.number is not None
            else e(a.record.source if isinstance(a.record, DecisionRecord) else ""),
            e(a.stage),
            *activity_cells(a),
        )
        for a in snapshot.activity
    ]
    heads = ("when", "about", "stage", "outcome", "why")
    shown = table(heads, rows, "No decision yet.")
    return (
        '<section id="decisions"><h2>Recent decisions</h2>'
        '<p class="note">Every stage, newest first: the gate (may the bot act on an event?), '
        "the review (what the required checks say), the merge and the leases.</p>"
        f"{shown}</section>"
    )


def leases_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            pr_link(snapshot, x.forge, x.repo, x.number),
            e(x.role),
            e(x.holder),
            e(x.epoch),
            f"<code>{e(short(x.head_sha))}</code>",
            time_tag(x.expires_at, now),
        )
        for x in snapshot.leases
    ]
    heads = ("pull request", "role", "holder", "epoch", "head", "expires")
    shown = table(heads, rows, "No live lease.")
    return f'<section id="leases"><h2>Live leases</h2>{shown}</section>'


def merges_section(snapshot: StatusSnapshot, now: float, lead: str = "") -> str:
    """Merge attempts, newest first; ``lead``: the PR page's sentence on its merge."""
    rows = [
        (
            time_tag(m.started_at, now),
            pr_link(snapshot, m.forge, m.repo, m.number),
            f"{badge(m.status)} at <code>{e(short(m.head_sha))}</code>",
            e(m.method),
            f"{e(m.holder)} (epoch {e(m.epoch)})",
            merge_why(m) if m.status != "merged" else merged_text(m.head_sha, m.merge_commit, None),
        )
        for m in snapshot.merges
    ]
    heads = ("when", "pull request", "outcome", "method", "by", "what")
    shown = table(heads, rows, "No merge yet.")
    if lead:
        return f'<section id="merges"><h2>Merge</h2><p class="state ok">{lead}</p>{shown}</section>'
    return f'<section id="merges"><h2>Recent merges</h2>{shown}</section>'


def runs_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            time_tag(r.ran_at, now),
            pr_link(snapshot, r.forge, r.repo, r.number),
            f"<code>{e(short(r.head_sha))}</code> round {e(r.round)}",
            e(r.run_id),
            e(r.findings),
        )
        for r in snapshot.runs
    ]
    heads = ("when", "pull request", "head", "run", "findings")
    shown = table(heads, rows, "No external reviewer ran.")
    return f'<section id="runs"><h2>Reviewer runs</h2>{shown}</section>'


def render_status(view: StatusView) -> str:
    snap, now = view.snapshot, view.now
    locked = view.reader.repo is not None
    filter_form = (
        '<form class="filter" method="get" action="/"><label for="repo">Repository</label>'
        f'<input id="repo" name="repo" value="{e(view.repo_filter or view.reader.repo or "")}"'
        f' placeholder="FORGE:OWNER/NAME"{" readonly" if locked else ""}>'
        '<button type="submit">Filter</button><a href="/">all</a></form>'
    )
    body = "".join(
        [
            "<h1>Status</h1>",
            health_section(view.checks),
            queue_section(snap, now),
            filter_form,
            pulls_section(snap),
            decisions_section(snap, now),
            leases_section(snap, now),
            merges_section(snap, now),
            runs_section(snap, now),
        ]
    )
    return page("reviewbot status", body, view.reader, view.csrf)


def gate_section(rows: Sequence[DecisionRecord], now: float) -> str:
    shown = table(
        ("when", "outcome", "why", "delivery"),
        [
            (
                time_tag(d.decided_at, now),
                badge(d.decision)
                + (f" at <code>{e(short(d.head_sha))}</code>" if d.head_sha else ""),
                gate_why(d),
                f"<code>{e(d.delivery_id)}</code>",
            )
            for d in rows
        ],
        "No gate decision recorded.",
    )
    return (
        '<section id="gate"><h2>Gate decisions</h2>'
        '<p class="note">May the bot act on an event about this pull request? Newest first.</p>'
        f"{shown}</section>"
    )


def reviews_section(rows: Sequence[ReviewDecision], now: float) -> str:
    shown = table(
        ("when", "verdict", "why", "delivery"),
        [
            (
                time_tag(r.decided_at, now),
                f"{badge(r.decision)} at <code>{e(short(r.head_sha))}</code>",
                review_why(r),
                f"<code>{e(r.delivery_id)}</code>" if r.delivery_id else "",
            )
            for r in rows
        ],
        "No review verdict recorded.",
    )
    return (
        '<section id="reviews"><h2>Review verdicts</h2>'
        '<p class="note">What the required checks said at each head, and what was posted. '
        f"Newest first.</p>{shown}</section>"
    )


def lease_history_section(rows: Sequence[HistoryEntry], now: float) -> str:
    shown = table(
        ("when", "event", "what", "by"),
        [
            (
                time_tag(x.at, now),
                f"{badge(x.event.value)} at <code>{e(short(x.head_sha))}</code>",
                lease_why(x),
                e(x.actor),
            )
            for x in rows
        ],
        "No lease history.",
    )
    return (
        '<section id="lease-history"><h2>Lease history</h2>'
        '<p class="note">Who held the reviewer and merger leases, and how each claim ended. '
        f"Oldest first.</p>{shown}</section>"
    )


def findings_section(facts: PullFacts) -> str:
    if not facts.findings or not facts.reviews:
        return ""
    head = short(facts.reviews[0].head_sha)
    items = "".join(
        f"<li>{badge(f.severity.value)} <code>{e(f.path)}:{e(f.line)}</code> {e(f.message)}</li>"
        for f in facts.findings
    )
    return (
        f'<section id="findings"><h2>External reviewers\' findings at <code>{e(head)}</code>'
        f'</h2><ul class="findings">{items}</ul></section>'
    )


def render_pull(view: PullView) -> str:
    snap, n = view.snapshot, view.number
    label = f"{view.forge}:{snap.name(view.forge, view.repo)}#{n}"

    scoped = StatusSnapshot(
        queue=snap.queue,
        pulls=[p for p in snap.pulls if p.number == n],
        leases=[x for x in snap.leases if x.number == n],
        merges=[m for m in snap.merges if m.number == n],
        runs=[r for r in snap.runs if r.number == n],
        display=snap.display,
    )
    facts = view.facts
    merge = None if facts is None else facts.merge
    lead = ""
    if merge is not None:
        what = merged_text(merge["head_sha"], merge["merge_commit_sha"], merge["method"])
        lead = f"{what} by {e(merge['holder'])} under lease epoch {e(merge['epoch'])}."
    merges = merges_section(scoped, view.now, lead=lead)
    # A merged PR's merge comes first; an unmerged one's attempts after why it waits.
    parts = [f"<h1>{e(label)}</h1>", pulls_section(scoped, "Verdict now")]
    parts += [merges] if lead else []
    if facts is not None:
        parts += [
            reviews_section(facts.reviews, view.now),
            gate_section(facts.decisions, view.now),
        ]
    parts += [] if lead else [merges]
    parts.append(leases_section(scoped, view.now))
    if facts is not None:
        parts += [lease_history_section(view.lease_history, view.now), findings_section(facts)]
    parts += [
        runs_section(scoped, view.now),
        # The same records as the command prints them, to paste into an issue.
        '<section id="explain"><h2>As text</h2><details><summary>What '
        f"<code>reviewbot explain {e(label)}</code> prints</summary>"
        f"<pre>{e(view.explanation)}</pre></details></section>",
    ]
    return page(f"{label} · reviewbot", "".join(parts), view.reader, view.csrf)


def render_error(code: str, detail: str, reader: Reader | None, csrf: str) -> str:
    body = (
        f'<h1>Not shown</h1><p class="error" role="alert">{e(detail)} (<code>{e(code)}</code>)'
        '</p><p><a href="/">Back to the status page</a></p>'
    )
    return page("Not shown · reviewbot", body, reader, csrf)


def render_login(csrf: str, *, message: str = "", link: str = "") -> str:
    note = f'<p class="error" role="alert">{e(message)}</p>' if message else ""
    if link:
        fields = (
            f'<input type="hidden" name="link" value="{e(link)}">'
            "<p>This sign-in link opens the status page in this browser.</p>"
            '<button type="submit">Open the status page</button>'
        )
    else:
        fields = (
            '<label for="token">Token with the <code>read</code> scope</label>'
            '<input id="token" name="token" type="password" autocomplete="off" required>'
            '<button type="submit">Sign in</button>'
        )
    body = (
        f"<h1>Sign in</h1>{note}"
        '<form method="post" action="/login" class="login">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">{fields}</form>'
        "<p>Create a token with <code>reviewbot token create --name NAME --scopes read</code>"
        " or a sign-in link with <code>reviewbot token link NAME</code>.</p>"
    )
    return page("Sign in · reviewbot", body)
