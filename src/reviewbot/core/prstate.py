"""The canonical PR state comment: one comment per PR, rendered from records only.

The comment carries a hidden marker so the bot finds and edits the same comment every
time instead of adding a second one. Rendering is a pure function: the same records give
the same text byte for byte, so an unchanged state needs no edit at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

STATE_MARKER = "<!-- reviewbot:pr-state -->"


class DecisionKind(StrEnum):
    """What the review pipeline records (``review_decisions.decision``): the four policy
    verdicts, the outcomes that leave a head without a review, and the posting notes."""

    APPROVE = "approve"
    REQUEST_CHANGES = "request_changes"
    WAITING = "waiting"
    NO_REQUIRED_CHECKS = "no_required_checks"
    HEAD_MOVED = "head_moved"
    AUTHOR_IS_BOT = "author_is_bot"
    ERROR = "error"
    PR_CLOSED = "pr_closed"
    LEASE_HELD = "lease_held"
    SUPERSEDED = "superseded"
    REOPENED = "reopened"
    POSTED = "posted"
    MISSING_REPORTED = "missing_reported"


# The names the renderer and its tests use.
APPROVE = DecisionKind.APPROVE
REQUEST_CHANGES = DecisionKind.REQUEST_CHANGES
WAITING = DecisionKind.WAITING
NO_REQUIRED_CHECKS = DecisionKind.NO_REQUIRED_CHECKS
HEAD_MOVED = DecisionKind.HEAD_MOVED
AUTHOR_IS_BOT = DecisionKind.AUTHOR_IS_BOT
ERROR = DecisionKind.ERROR


@dataclass(frozen=True)
class LeaseLine:
    role: str
    holder: str
    epoch: int
    head_sha: str | None
    expires_at: str


@dataclass(frozen=True)
class DeliveryLine:
    delivery_id: str
    source: str
    event: str
    action: str | None
    received_at: str


@dataclass(frozen=True)
class PostedReview:
    verdict: str  # approve / request_changes / comment
    head_sha: str
    status: str  # pending, posted, dropped, failed
    forge_review_id: int | None = None


@dataclass(frozen=True)
class PRStateRecords:
    """Everything the comment shows, read from the store (and the PR as last seen)."""

    pr: str  # FORGE:OWNER/REPO#N
    pr_state: str  # open, closed, merged
    head_sha: str
    author: str
    decision: str | None  # latest review decision at this head, None when not evaluated
    decision_detail: str = ""
    blockers: tuple[str, ...] = ()
    review: PostedReview | None = None
    leases: tuple[LeaseLine, ...] = ()
    last_delivery: DeliveryLine | None = None
    automerge: bool = False
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NextStep:
    who: str
    action: str


def review_status(rec: PRStateRecords) -> str:
    """One line: what the bot's review at the current head is."""
    short = rec.head_sha[:12]
    review = rec.review
    if review is not None and review.head_sha == rec.head_sha:
        label = {
            "approve": "approved",
            "request_changes": "changes requested",
            "comment": "commented",
        }.get(review.verdict, review.verdict)
        if review.status == "posted":
            ref = f" (review {review.forge_review_id})" if review.forge_review_id else ""
            return f"{label} at `{short}`{ref}"
        if review.status == "pending":
            return f"{label} at `{short}`, posting"
        if review.status == "dropped":
            return f"{label} not posted: the head moved"
        return f"{label} at `{short}` could not be posted"
    labels: dict[str | None, str] = {
        None: "not evaluated yet",
        WAITING: "waiting for required checks",
        NO_REQUIRED_CHECKS: "no review: no required checks are configured",
        HEAD_MOVED: "no review: the head moved before posting",
        AUTHOR_IS_BOT: "no review: the bot does not review its own pull requests",
        ERROR: "evaluation failed",
    }
    return labels.get(rec.decision, str(rec.decision))


def next_step(rec: PRStateRecords) -> NextStep:
    """Who acts next and what they do, from the decision alone."""
    if rec.pr_state == "merged":
        return NextStep("nobody", "none: the pull request is merged")
    if rec.pr_state != "open":
        return NextStep("nobody", "none: the pull request is closed")
    review = rec.review
    posted = review is not None and review.head_sha == rec.head_sha and review.status == "posted"
    if rec.decision == APPROVE:
        if not posted:
            return NextStep("reviewbot", "post the approving review")
        if rec.automerge:
            return NextStep("merger", f"merge at `{rec.head_sha[:12]}`")
        return NextStep("maintainers", f"merge at `{rec.head_sha[:12]}`")
    if rec.decision == REQUEST_CHANGES:
        if not posted:
            return NextStep("reviewbot", "post the review requesting changes")
        return NextStep(rec.author, "fix the failing checks and push")
    if rec.decision == WAITING:
        return NextStep("CI", "report the pending and missing required checks")
    if rec.decision == NO_REQUIRED_CHECKS:
        return NextStep(
            "maintainers",
            "configure required checks (or set approve_without_checks = true)",
        )
    if rec.decision == HEAD_MOVED:
        return NextStep("reviewbot", "review the new head")
    if rec.decision == AUTHOR_IS_BOT:
        return NextStep("maintainers", "review by a human")
    if rec.decision == ERROR:
        return NextStep("operators", "look at the recorded error and re-run the review")
    return NextStep("reviewbot", "evaluate the required checks")


def _escape(text: str) -> str:
    # Keep user-controlled text from closing the marker or breaking a table row.
    return text.replace("<!--", "&lt;!--").replace("-->", "--&gt;").replace("|", "\\|")


def render_pr_state(rec: PRStateRecords) -> str:
    """The full comment body, starting with :data:`STATE_MARKER`."""
    step = next_step(rec)
    lines = [
        STATE_MARKER,
        f"### reviewbot state for {_escape(rec.pr)}",
        "",
        "| | |",
        "|---|---|",
        f"| State | {_escape(rec.pr_state)} |",
        f"| Head | `{_escape(rec.head_sha)}` |",
        f"| Review | {_escape(review_status(rec))} |",
        f"| Next | {_escape(step.who)} |",
        f"| Next action | {_escape(step.action)} |",
    ]
    if rec.decision_detail:
        lines.append(f"| Detail | {_escape(rec.decision_detail)} |")
    for key in sorted(rec.extra):
        lines.append(f"| {_escape(key)} | {_escape(rec.extra[key])} |")
    lines += ["", "**Blockers**", ""]
    lines += [f"- {_escape(b)}" for b in rec.blockers] or ["- none"]
    lines += ["", "**Active leases**", ""]
    lines += [
        f"- {_escape(lease.role)}: `{_escape(lease.holder)}`, epoch {lease.epoch}, "
        f"head `{_escape((lease.head_sha or '-')[:12])}`, until {_escape(lease.expires_at)}"
        for lease in rec.leases
    ] or ["- none"]
    lines += ["", "**Last delivery**", ""]
    d = rec.last_delivery
    if d is None:
        lines.append("- none")
    else:
        what = d.event + (f".{d.action}" if d.action else "")
        lines.append(
            f"- `{_escape(d.delivery_id)}` ({_escape(d.source)} {_escape(what)}, "
            f"received {_escape(d.received_at)})"
        )
    return "\n".join(lines) + "\n"
