"""What the status page says about each record: a verdict, a decision, a merge, a lease's
end, in plain words (pure functions over the stores' rows)."""

from __future__ import annotations

from collections.abc import Sequence

from reviewbot.core.lease_history import HistoryEntry
from reviewbot.server.ui.markup import (
    badge,
    checks,
    e,
    reasons,
    says_only_checks,
    short,
)
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision
from reviewbot.store.status import Activity, MergeRow, PullRow

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
