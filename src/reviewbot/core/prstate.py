"""The canonical PR state comment: one comment per PR, rendered from records and one live read.

The comment carries a hidden marker so the bot finds and edits the same comment every
time instead of adding a second one. Rendering is a pure function: the same records give
the same text byte for byte, so an unchanged state needs no edit at all.

Below the table for people, the comment ends with a fenced ``reviewbot-state`` block of
``KEY: value`` lines for agents (:func:`parse_pr_state` reads it back; :data:`BLOCK_KEYS`
lists the keys in order). ``BLOCKER:`` and ``LEASE:`` repeat, one line each, after their
counts ``BLOCKERS:`` and ``LEASES:``; ``QUEUE:`` (the PR's merge-queue spot) is there
only while the PR is queued. Every value is one line: whitespace runs (newlines
included) become one space, and comment delimiters are broken up, so user text can neither
end the block nor the marker. The epoch of a lease is never shown: the comment is public.

``MERGE_READY``, ``NEXT_PROMPT``, ``VALIDATION``, ``NATIVE_REVIEW_PROOF`` and ``ISSUE`` come
from one live read of the PR (:class:`Live`): ``MERGE_READY`` is
:func:`reviewbot.core.merge.merge_readiness`, the answer ``resolve_capability``, the status
page and a merge's refusal give too, never a second opinion from the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from reviewbot.core import policy
from reviewbot.core.after_merge import linked_issues
from reviewbot.core.clock import iso
from reviewbot.core.merge import PrFacts, Readiness, merge_readiness, same_sha
from reviewbot.core.models import ReviewState
from reviewbot.core.reasons import ReasonCode

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
    SKIP = "skip"  # not the bot's repository: nothing evaluated, nothing posted


UNREADABLE = ReasonCode.PROTECTION_UNREADABLE.value

# The names the renderer and its tests use.
APPROVE = DecisionKind.APPROVE
REQUEST_CHANGES = DecisionKind.REQUEST_CHANGES
WAITING = DecisionKind.WAITING
NO_REQUIRED_CHECKS = DecisionKind.NO_REQUIRED_CHECKS
HEAD_MOVED = DecisionKind.HEAD_MOVED
AUTHOR_IS_BOT = DecisionKind.AUTHOR_IS_BOT
ERROR = DecisionKind.ERROR

# Verdicts that judged the head. An explicit review request at a head that has one would only
# repeat it for a while (its checks may change later, and their webhook may be lost); the
# other outcomes (an error, a held lease, a superseded evaluation) did not judge the head.
JUDGED = frozenset({REQUEST_CHANGES, WAITING, NO_REQUIRED_CHECKS, AUTHOR_IS_BOT})


def request_repeats(decision: str, decided_at: float, now: float, window_s: float) -> bool:
    """Whether an explicit review request at the head of the latest ``decision`` (taken at
    ``decided_at``) has nothing new to evaluate: an approval is final at its head, another
    verdict that judged the head stands for ``window_s`` seconds."""
    if decision == APPROVE:
        return True
    return decision in JUDGED and 0 <= now - decided_at < window_s


class PullState(StrEnum):
    """STATE of the comment: where the PR stands in the review-and-merge flow."""

    NOT_EVALUATED = "not_evaluated"
    WAITING_FOR_CHECKS = "waiting_for_checks"
    CHANGES_REQUESTED = "changes_requested"
    APPROVING = "approving"  # approved at the head, the review not on the forge yet
    READY_TO_MERGE = "ready_to_merge"
    MERGING = "merging"  # a merger holds the live lease at the head
    REVIEWING_NEW_HEAD = "reviewing_new_head"
    NEEDS_ATTENTION = "needs_attention"  # no required checks, an error, the bot's own PR
    DRAFT = "draft"
    CLOSED = "closed"
    MERGED = "merged"


@dataclass(frozen=True)
class LeaseLine:
    role: str
    holder: str
    phase: str
    head_sha: str | None  # the candidate head the lease is pinned to
    expires_at: str


@dataclass(frozen=True)
class Change:
    """Something that happened to the PR: when, by whom, what, and why."""

    at: float
    by: str
    what: str
    why: str = ""


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
class CheckLine:
    """One check at the head (VALIDATION): its newest state, or ``missing`` when a required
    check was not reported."""

    name: str
    state: str
    required: bool


@dataclass(frozen=True)
class ReviewProof:
    """The bot's own native review at the head, as the forge lists it now."""

    id: int
    state: str
    url: str


@dataclass(frozen=True)
class Live:
    """What the comment shows from the PR's live facts: one read, one readiness answer."""

    readiness: Readiness
    checks: tuple[CheckLine, ...] = ()
    review: ReviewProof | None = None
    issues: tuple[int, ...] = ()  # the issues the description says it closes


def live_of(facts: PrFacts, configured_checks: Sequence[str], bot_login: str | None) -> Live:
    """The comment's live fields from ``facts`` (a pull alone when it is closed or merged)."""
    pull = facts.pull
    readiness = merge_readiness(facts, configured_checks)
    issues = linked_issues(pull.body, pull.owner, pull.name)
    if not facts.merge_read:
        return Live(readiness, issues=issues)
    required = policy.required_names(facts.protection, configured_checks)
    newest = policy.newest_results(facts.results)
    checks = [
        CheckLine(name, r.state.value, any(q.matches(name) for q in required))
        for name, r in sorted(newest.items())
    ]
    checks += [
        CheckLine(q.text, "missing", True)
        for q in required
        if not any(q.matches(name) for name in newest)
    ]
    proof = None
    if bot_login:
        mine = [
            r
            for r in sorted(facts.reviews, key=lambda r: r.id)
            if r.reviewer.lower() == bot_login.lower()
            and same_sha(r.commit_sha, facts.head)
            and r.state is not ReviewState.DISMISSED
        ]
        if mine:
            last = mine[-1]
            proof = ReviewProof(last.id, last.state.value, last.html_url)
    return Live(readiness, tuple(checks), proof, issues)


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
    reason_code: str = ""  # the latest decision's reason code
    review: PostedReview | None = None
    leases: tuple[LeaseLine, ...] = ()
    last_delivery: DeliveryLine | None = None
    automerge: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    draft: bool = False
    changes: tuple[Change, ...] = ()  # candidates; the newest is "what happened and why"
    # The PR's live facts (:func:`live_of`); ``None`` when they were not read, and then
    # MERGE_READY is "no": readiness is never guessed from the records.
    live: Live | None = None
    # Its spot in the merge queue (:meth:`reviewbot.core.queue_spot.QueueSpot.line`), if queued.
    queue: str = ""


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
    if rec.decision == WAITING and rec.reason_code == UNREADABLE:
        return "no review: the forge's rules for the branch could not be read"
    labels: dict[str | None, str] = {
        None: "not evaluated yet",
        WAITING: "waiting for required checks",
        NO_REQUIRED_CHECKS: "no review: no required checks are configured",
        HEAD_MOVED: "no review: the head moved before posting",
        AUTHOR_IS_BOT: "no review: the bot does not review its own pull requests",
        ERROR: "evaluation failed",
    }
    return labels.get(rec.decision, str(rec.decision))


def _merger_at_head(rec: PRStateRecords) -> LeaseLine | None:
    for lease in rec.leases:
        if lease.role == "merger" and lease.phase == "claimed" and lease.head_sha == rec.head_sha:
            return lease
    return None


def pull_state(rec: PRStateRecords) -> PullState:
    """The STATE line, from the records."""
    if rec.pr_state == "merged":
        return PullState.MERGED
    if rec.pr_state != "open":
        return PullState.CLOSED
    if rec.draft:
        return PullState.DRAFT
    if rec.decision is None:
        return PullState.NOT_EVALUATED
    if _merger_at_head(rec) is not None:
        return PullState.MERGING
    review = rec.review
    posted = review is not None and review.head_sha == rec.head_sha and review.status == "posted"
    by_decision: dict[str, PullState] = {
        APPROVE: PullState.READY_TO_MERGE if posted else PullState.APPROVING,
        REQUEST_CHANGES: PullState.CHANGES_REQUESTED,
        WAITING: PullState.NEEDS_ATTENTION
        if rec.reason_code == UNREADABLE
        else PullState.WAITING_FOR_CHECKS,
        HEAD_MOVED: PullState.REVIEWING_NEW_HEAD,
        NO_REQUIRED_CHECKS: PullState.NEEDS_ATTENTION,
        AUTHOR_IS_BOT: PullState.NEEDS_ATTENTION,
        ERROR: PullState.NEEDS_ATTENTION,
    }
    state = by_decision.get(rec.decision, PullState.NOT_EVALUATED)
    if state is PullState.READY_TO_MERGE and _live_blockers(rec):
        return PullState.NEEDS_ATTENTION  # approved by the bot, but the forge's rules say no
    return state


def _live_blockers(rec: PRStateRecords) -> tuple[str, ...]:
    """The codes that block a merge now, by the live readiness answer (none unread)."""
    return () if rec.live is None else rec.live.readiness.codes


def merge_ready(rec: PRStateRecords) -> bool:
    """MERGE_READY: the one readiness answer (:func:`reviewbot.core.merge.merge_readiness`)
    over the PR's live facts at this head; "no" when they were not read."""
    live = rec.live
    return live is not None and live.readiness.ready and same_sha(live.readiness.head, rec.head_sha)


def next_prompt(rec: PRStateRecords) -> str:
    """NEXT_PROMPT: what an agent should do next, from the live blockers' next actions."""
    if rec.pr_state == "merged":
        return "nothing: the pull request is merged"
    if rec.pr_state != "open":
        return "nothing: the pull request is closed"
    if rec.live is None:
        return "read the pull request's capability (resolve_capability) before acting"
    return rec.live.readiness.next_prompt()


def next_step(rec: PRStateRecords) -> NextStep:
    """Who acts next and what they do, from the decision alone."""
    if rec.pr_state == "merged":
        return NextStep("nobody", "none: the pull request is merged")
    if rec.pr_state != "open":
        return NextStep("nobody", "none: the pull request is closed")
    if rec.draft:
        return NextStep(rec.author, "mark the pull request ready for review")
    merger = _merger_at_head(rec) if rec.decision is not None else None
    if merger is not None:
        return NextStep(merger.holder, f"merge at `{rec.head_sha[:12]}`")
    review = rec.review
    posted = review is not None and review.head_sha == rec.head_sha and review.status == "posted"
    if rec.decision == APPROVE:
        if not posted:
            return NextStep("reviewbot", "post the approving review")
        if rec.live is not None and not rec.live.readiness.ready:
            first = rec.live.readiness.blockers[0]
            who = {
                ReasonCode.CHECKS_NOT_GREEN: "CI",
                ReasonCode.PROTECTION_UNREADABLE: "operators",
                ReasonCode.PERMISSION_DENIED: "operators",
            }.get(first.code, rec.author)
            return NextStep(who, first.next_action)
        if rec.automerge:
            return NextStep("merger", f"merge at `{rec.head_sha[:12]}`")
        return NextStep("maintainers", f"merge at `{rec.head_sha[:12]}`")
    if rec.decision == REQUEST_CHANGES:
        if not posted:
            return NextStep("reviewbot", "post the review requesting changes")
        return NextStep(rec.author, "fix the failing checks and push")
    if rec.decision == WAITING and rec.reason_code == UNREADABLE:
        return NextStep(
            "operators",
            "grant the bot the permission its blockers name, or configure required_checks",
        )
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
        f"| State | {_escape(pull_state(rec).value)} ({_escape(rec.pr_state)}) |",
        f"| Head | `{_escape(rec.head_sha)}` |",
        f"| Review | {_escape(review_status(rec))} |",
        f"| Next | {_escape(step.who)} |",
        f"| Next action | {_escape(step.action)} |",
        f"| Merge ready | {'yes' if merge_ready(rec) else 'no'} |",
    ]
    if rec.decision_detail:
        lines.append(f"| Detail | {_escape(rec.decision_detail)} |")
    if rec.queue:
        lines.append(f"| Merge queue | {_escape(rec.queue)} |")
    for key in sorted(rec.extra):
        lines.append(f"| {_escape(key)} | {_escape(rec.extra[key])} |")
    lines += ["", "**Blockers**", ""]
    lines += [f"- {_escape(b)}" for b in rec.blockers] or ["- none"]
    lines += ["", "**Active leases**", ""]
    lines += [
        f"- {_escape(lease.role)}: `{_escape(lease.holder)}`, {_escape(lease.phase)}, "
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
    view = state_view(rec)
    if view.what_happened:
        lines += ["", "**What happened**", ""]
        why = f": {_escape(view.why)}" if view.why else ""
        lines.append(
            f"- {_escape(view.last_updated_at)}, {_escape(view.last_updated_by)}: "
            f"{_escape(view.what_happened)}{why}"
        )
    lines += ["", render_block(view)]
    return "\n".join(lines) + "\n"


# --- the machine-readable block ----------------------------------------------------------------

BLOCK_INFO = "reviewbot-state"
BLOCK_KEYS = (
    "PR",
    "STATE",
    "WHO_IS_NEXT",
    "NEXT_ACTION",
    "HEAD_SHA",
    "REVIEW_STATUS",
    "MERGE_READY",
    "NEXT_PROMPT",
    "ISSUE",
    "VALIDATION",
    "NATIVE_REVIEW_PROOF",
    "BLOCKERS",
    "BLOCKER",
    "LEASES",
    "LEASE",
    "LAST_UPDATED_BY",
    "LAST_UPDATED_AT",
    "WHAT_HAPPENED",
    "WHY",
    "QUEUE",
)
# A LEASE line's fields, in order; what a lease records beyond these (its target branch and
# SHA, session, issue, blocker) is shown as further ``name=value`` fields of the same line.
_LEASE_FIELDS = ("role", "holder", "phase", "head", "expires")


def one_line(text: str) -> str:
    """``text`` as a block value: one line, no comment delimiters (idempotent)."""
    flat = " ".join(text.split())
    while "<!--" in flat or "-->" in flat:
        flat = flat.replace("<!--", "< !--").replace("-->", "-- >")
    return flat


def _token(text: str) -> str:
    """A LEASE field value: no spaces or '=' (identities, SHAs and ISO times have none)."""
    return "".join("_" if c.isspace() or c == "=" else c for c in one_line(text)) or "-"


@dataclass(frozen=True)
class LeaseEntry:
    role: str
    holder: str
    phase: str
    head_sha: str
    expires_at: str


@dataclass(frozen=True)
class PRStateView:
    """What the ``reviewbot-state`` block says; :func:`parse_pr_state` gives it back."""

    pr: str
    state: str
    who_is_next: str
    next_action: str
    head_sha: str
    review_status: str
    merge_ready: bool
    blockers: tuple[str, ...] = ()
    leases: tuple[LeaseEntry, ...] = ()
    next_prompt: str = ""
    issue: str = ""  # "#N", several space-separated, or "none"
    validation: str = ""  # "NAME=STATE" per check at the head, ", "-separated, or "none"
    native_review_proof: str = ""  # "id=N state=S url=U" of the bot's review at the head
    last_updated_by: str = ""
    last_updated_at: str = ""
    what_happened: str = ""
    why: str = ""
    queue: str = ""  # its merge-queue spot; empty when it is in no queue


def latest_change(changes: Sequence[Change]) -> Change | None:
    """The newest change (the later one in the sequence on a tie)."""
    newest: Change | None = None
    for change in changes:
        if newest is None or change.at >= newest.at:
            newest = change
    return newest


def state_view(rec: PRStateRecords) -> PRStateView:
    step = next_step(rec)
    last = latest_change(rec.changes)
    return PRStateView(
        pr=one_line(rec.pr),
        state=pull_state(rec).value,
        who_is_next=one_line(step.who),
        next_action=one_line(step.action),
        head_sha=one_line(rec.head_sha),
        review_status=one_line(review_status(rec)),
        merge_ready=merge_ready(rec),
        next_prompt=one_line(next_prompt(rec)),
        issue=_issue_field(rec),
        validation=_validation_field(rec),
        native_review_proof=_proof_field(rec),
        blockers=tuple(one_line(b) for b in rec.blockers if one_line(b)),
        leases=tuple(
            LeaseEntry(
                _token(lease.role),
                _token(lease.holder),
                _token(lease.phase),
                _token(lease.head_sha or "-"),
                _token(lease.expires_at),
            )
            for lease in rec.leases
        ),
        last_updated_by=one_line(last.by) if last else "",
        last_updated_at=iso(last.at) if last else "",
        what_happened=one_line(last.what) if last else "",
        why=one_line(last.why) if last else "",
        queue=one_line(rec.queue),
    )


def _issue_field(rec: PRStateRecords) -> str:
    issues = () if rec.live is None else rec.live.issues
    return " ".join(f"#{n}" for n in issues) or "none"


def _validation_field(rec: PRStateRecords) -> str:
    checks = () if rec.live is None else rec.live.checks
    shown = [f"{c.name}{'' if c.required else ' (optional)'}={c.state}" for c in checks]
    return one_line(", ".join(shown)) or "none"


def _proof_field(rec: PRStateRecords) -> str:
    proof = None if rec.live is None else rec.live.review
    if proof is None:
        return "none"
    return f"id={proof.id} state={proof.state} url={_token(proof.url)}"


def render_block(view: PRStateView) -> str:
    """The fenced ``reviewbot-state`` block of ``view``."""
    lines = [
        f"```{BLOCK_INFO}",
        f"PR: {view.pr}",
        f"STATE: {view.state}",
        f"WHO_IS_NEXT: {view.who_is_next}",
        f"NEXT_ACTION: {view.next_action}",
        f"HEAD_SHA: {view.head_sha}",
        f"REVIEW_STATUS: {view.review_status}",
        f"MERGE_READY: {'yes' if view.merge_ready else 'no'}",
        f"NEXT_PROMPT: {view.next_prompt}",
        f"ISSUE: {view.issue}",
        f"VALIDATION: {view.validation}",
        f"NATIVE_REVIEW_PROOF: {view.native_review_proof}",
        f"BLOCKERS: {len(view.blockers)}",
    ]
    lines += [f"BLOCKER: {b}" for b in view.blockers]
    lines.append(f"LEASES: {len(view.leases)}")
    lines += [
        f"LEASE: role={x.role} holder={x.holder} phase={x.phase} head={x.head_sha}"
        f" expires={x.expires_at}"
        for x in view.leases
    ]
    lines += [
        f"LAST_UPDATED_BY: {view.last_updated_by}",
        f"LAST_UPDATED_AT: {view.last_updated_at}",
        f"WHAT_HAPPENED: {view.what_happened}",
        f"WHY: {view.why}",
    ]
    if view.queue:  # only a queued PR's block has the line
        lines.append(f"QUEUE: {view.queue}")
    lines.append("```")
    return "\n".join(lines)


def parse_pr_state(body: str) -> PRStateView:
    """The ``reviewbot-state`` block of a state comment; ``ValueError`` when there is none
    or a required key is missing. Unknown keys are ignored (newer bots may add some)."""
    lines = body.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == f"```{BLOCK_INFO}")
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```")
    except StopIteration:
        raise ValueError(f"no ```{BLOCK_INFO} block in the comment") from None
    single: dict[str, str] = {}
    blockers: list[str] = []
    leases: list[LeaseEntry] = []
    for line in lines[start + 1 : end]:
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "BLOCKER":
            blockers.append(value)
        elif key == "LEASE":
            fields = dict(part.partition("=")[::2] for part in value.split())
            leases.append(LeaseEntry(*(fields.get(name, "") for name in _LEASE_FIELDS)))
        else:
            single[key] = value
    missing = [k for k in ("PR", "STATE", "HEAD_SHA") if k not in single]
    if missing:
        raise ValueError(f"the {BLOCK_INFO} block lacks {', '.join(missing)}")
    return PRStateView(
        pr=single["PR"],
        state=single["STATE"],
        who_is_next=single.get("WHO_IS_NEXT", ""),
        next_action=single.get("NEXT_ACTION", ""),
        head_sha=single["HEAD_SHA"],
        review_status=single.get("REVIEW_STATUS", ""),
        merge_ready=single.get("MERGE_READY", "no") == "yes",
        next_prompt=single.get("NEXT_PROMPT", ""),
        issue=single.get("ISSUE", ""),
        validation=single.get("VALIDATION", ""),
        native_review_proof=single.get("NATIVE_REVIEW_PROOF", ""),
        blockers=tuple(blockers),
        leases=tuple(leases),
        last_updated_by=single.get("LAST_UPDATED_BY", ""),
        last_updated_at=single.get("LAST_UPDATED_AT", ""),
        what_happened=single.get("WHAT_HAPPENED", ""),
        why=single.get("WHY", ""),
        queue=single.get("QUEUE", ""),
    )
