"""The status page as HTML: pure functions from plain data to text (no I/O, no clock).

The pages are built from :mod:`.markup`'s pieces, which escape everything that came from a
forge, a caller or the store. The page has no script at all and one stylesheet
(``/ui/style.css``), which the Content-Security-Policy allows alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reviewbot.server.ui.markup import (
    Reader,
    badge,
    e,
    page,
    pr_link,
    short,
    table,
    time_tag,
)
from reviewbot.server.ui.wording import (
    activity_cells,
    merge_why,
    merged_text,
    verdict_cells,
)
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.status import StatusSnapshot


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


def trains_section(snapshot: StatusSnapshot, now: float) -> str:
    """Each merge queue's trains: their queued PRs and their cars in flight."""
    rows = []
    for t in snapshot.trains:
        queued = " ".join(pr_link(snapshot, t.forge, t.repo, n) for n in t.queued)
        cars = "<br>".join(
            f"car {e(c.car)}: {badge(c.status)} "
            + " ".join(f"#{e(n)}" for n in c.batch)
            + (f" at <code>{e(short(c.tested_sha))}</code>" if c.tested_sha else "")
            + f", {time_tag(c.since, now)}"
            for c in t.cars
        )
        where = f"{t.forge}:{snapshot.name(t.forge, t.repo)} {t.base}"
        rows.append((e(where), e(t.train), queued or "none", cars or "none"))
    heads = ("queue", "train", "queued", "cars in flight")
    shown = table(heads, rows, "No merge queue holds a pull request.")
    return (
        '<section id="merge-queue"><h2>Merge queue</h2>'
        '<p class="note">Each base branch\'s trains: the pull requests queued in them, first '
        "to land first, and the cars being tested (a car is the base plus the cars ahead "
        "plus its pull requests).</p>"
        f"{shown}</section>"
    )


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
            trains_section(snap, now),
            merges_section(snap, now),
            runs_section(snap, now),
        ]
    )
    return page("reviewbot status", body, view.reader, view.csrf)


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
