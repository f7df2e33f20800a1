"""The review pipeline: an eligible PR head -> a recorded verdict -> a native review.

``ReviewPipeline.review`` evaluates one head under the reviewer lease pinned to it:
required checks (branch protection of the base plus the repository's ``required_checks``)
and the check results of the head go through the pure policy; the decision and its outbox
row are written in one transaction that is fenced by the lease epoch. The drainer then
posts the row (inline, right away, and again from its loop after a failure or a restart),
and the canonical PR state comment is brought up to date.

When the repository's rules list external ``reviewers``, they run for the head before the
reviewer lease is taken (the lease is short; a reviewer may run for minutes), and their
findings join the verdict: an ``error`` finding requests changes, every finding becomes an
inline comment of the same native review, and a failed reviewer leaves the head without a
review (decision ``error``, reason ``reviewer_error``).

``on_eligible`` is the gate's hook: it decides whether an eligible delivery needs an
evaluation (a check event re-runs the policy only while the head is still waiting,
failing or without required checks; a human dismissing the bot's review re-opens the head).
An explicit request (the API, MCP ``review_pr``, a Crew call) at a head the bot judged less
than ``review_request_dedupe_s`` ago, or approved, has nothing new to evaluate: it reads and
writes nothing more, not even the state comment, however often it is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from reviewbot.config import RepoRules, Settings
from reviewbot.core import policy
from reviewbot.core.clock import Clock, iso
from reviewbot.core.findings import Finding, inline_comments, merge_findings, summary_lines
from reviewbot.core.gate import same_login
from reviewbot.core.leases import LeaseClaim, Refused
from reviewbot.core.models import (
    CheckResult,
    PullRequestSnapshot,
    RepoRef,
    RequiredChecks,
    ReviewEvent,
    ReviewState,
)
from reviewbot.core.policy import Verdict, VerdictKind
from reviewbot.core.prstate import (
    AUTHOR_IS_BOT,
    ERROR,
    HEAD_MOVED,
    DecisionKind,
    request_repeats,
)
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.ingress import api, crew
from reviewbot.observe import Telemetry
from reviewbot.runtime.review.outbox import (
    AFTER_OUTBOX,
    Fence,
    FenceRefused,
    OutboxDrainer,
    PostOutcome,
    ReviewerLeases,
    crash_point,
)
from reviewbot.runtime.review.state_comment import MISSING_CHECKS, StateComments
from reviewbot.runtime.reviewers.runner import ReviewerLimits, ToolsEndpoint, review_pull
from reviewbot.runtime.reviewers.runs import received, run_id_for
from reviewbot.runtime.reviewers.sandbox import Sandbox, probe
from reviewbot.runtime.reviewers.sessions import SessionManager
from reviewbot.store.database import Tx
from reviewbot.store.review_outbox import NewOutbox, OutboxRow
from reviewbot.store.reviews import NewDecision, ReviewDecision, ReviewStore

log = logging.getLogger(__name__)

CHECK_EVENTS = frozenset({"status", "check_run", "check_suite"})
# A caller asking for a review (the API and MCP review_pr, a Crew call), not a forge event.
REQUEST_EVENTS = frozenset({api.EVENT, crew.EVENT})
# Decisions after which a check event (or a sweep) at the same head is worth a new
# evaluation. NO_REQUIRED_CHECKS is one: the required checks may have been configured since
# (branch protection, or the rules at a restart), and the head must not stay unreviewed.
REEVALUATE = frozenset(
    {
        DecisionKind.WAITING,
        DecisionKind.NO_REQUIRED_CHECKS,
        DecisionKind.REQUEST_CHANGES,
        DecisionKind.ERROR,
        DecisionKind.LEASE_HELD,
        DecisionKind.SUPERSEDED,
    }
)


@dataclass(frozen=True)
class ReviewRequest:
    """One evaluation: a PR, the head it is for (None: the live head), and why."""

    forge: str
    repo: str  # OWNER/NAME
    number: int
    head_sha: str | None = None
    delivery_id: str | None = None
    source: str = "api"
    event: str | None = None
    action: str | None = None
    pull: PullRequestSnapshot | None = None  # the live PR when the caller just read it
    sender: str | None = None  # who caused the event, when the forge says
    # The review job's claim (its fence): the verdict is recorded only while it is held.
    fence: Fence | None = None


@dataclass
class ExternalReviewers:
    """How the pipeline runs a repository's reviewer commands.

    ``sessions`` must be the manager the tools endpoint answers for, or a reviewer's
    ``REVIEWBOT_SESSION_TOKEN`` would be unknown there; ``endpoint`` opens each run's own
    tools socket (every process that reviews has one: ``serve``, ``mcp --stdio``,
    ``reviewbot review``; ``None`` only where no tools are served, and the reviewers then get
    no ``REVIEWBOT_TOOLS_SOCKET``). ``sandbox`` is probed once, when the service is built
    (``build_service``); ``sandbox.state.describe()`` is what health views show.
    """

    sessions: SessionManager = field(default_factory=SessionManager)
    endpoint: ToolsEndpoint | None = None
    limits: ReviewerLimits = field(default_factory=ReviewerLimits)
    sandbox: Sandbox = field(default_factory=lambda: Sandbox(probe("on")))


Checks = tuple[RequiredChecks, list[CheckResult]]


@dataclass(frozen=True)
class ReviewersFailed:
    """Why the head gets no review: ``sandbox_unavailable`` or ``reviewer_error``."""

    code: ReasonCode
    detail: str


@dataclass
class ReviewOutcome:
    decision: ReviewDecision
    outbox: list[OutboxRow] = field(default_factory=list)
    posts: list[PostOutcome] = field(default_factory=list)
    state_comment: str | None = None  # created / edited / unchanged / failed
    claim: LeaseClaim | None = None  # the reviewer lease still held for posting
    pull: PullRequestSnapshot | None = None  # the live PR the evaluation read

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision.to_json(),
            "outbox": [row.to_json() for row in self.outbox],
            "posted": [p.to_json() for p in self.posts],
            "state_comment": self.state_comment,
        }


# Reviewer errors named one by one among a decision's blockers (the PR state comment shows
# them); the rest are counted.
MAX_ERROR_BLOCKERS = 20


def _blockers(verdict: Verdict, findings: tuple[Finding, ...] = ()) -> tuple[str, ...]:
    out = [
        f"{c.name} {c.state.value.replace('_', ' ')}" + (f" ({c.url})" if c.url else "")
        for c in verdict.failed
    ]
    out += [f"{c.name} pending" for c in verdict.pending]
    out += [f"{name} not reported" for name in verdict.missing]
    if verdict.kind is VerdictKind.NO_REQUIRED_CHECKS:
        out.append("no required checks are configured")
    if verdict.reason is ReasonCode.PROTECTION_UNREADABLE:
        out += [gap.describe() for gap in verdict.unreadable]
    errors = [f"reviewer error at {f.path}:{f.line}" for f in findings if f.blocking]
    out += errors[:MAX_ERROR_BLOCKERS]
    if len(errors) > MAX_ERROR_BLOCKERS:
        out.append(f"{len(errors) - MAX_ERROR_BLOCKERS} more reviewer errors")
    return tuple(out)


def missing_comment_body(names: list[str], grace_s: float, marker: str) -> str:
    listed = "\n".join(f"- `{' '.join(n.split()).replace('`', '')}`" for n in names)
    return (
        f"Required check{'s' if len(names) != 1 else ''} not reported after "
        f"{grace_s:g} seconds:\n\n{listed}\n\nThe review waits until every required check "
        f"reports.\n\n{marker}"
    )


class ReviewPipeline:
    def __init__(
        self,
        settings: Settings,
        store: ReviewStore,
        forges: Mapping[str, Forge],
        leases: ReviewerLeases,
        drainer: OutboxDrainer,
        *,
        clock: Clock,
        comments: StateComments | None = None,
        drain_inline: bool = True,
        external: ExternalReviewers | None = None,
        telemetry: Telemetry | None = None,
        parity: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        """``comments``: the PR state comment to keep up to date (``None``: none);
        ``parity``: asked before each review (``runtime.parity.ParityGate``)."""
        self.telemetry = telemetry or Telemetry()
        self.parity = parity
        self.settings = settings
        self.store = store
        self.forges = forges
        self.leases = leases
        self.drainer = drainer
        # Rows are queued in the store the drainer posts them from.
        self.outbox = drainer.store
        self.clock = clock
        self.locks = drainer.locks
        self.drain_inline = drain_inline
        self.comments = comments
        self.external = external or ExternalReviewers()

    # -- the gate's hook ---------------------------------------------------------------

    async def on_eligible(
        self, eligible: Any, *, fence: Fence | None = None
    ) -> ReviewOutcome | None:
        """Hook for ``GateRunner(on_eligible=...)`` (an ``EligiblePull``); ``fence``: the
        claim of its review job (see :class:`ReviewRequest`)."""
        trigger = eligible.trigger
        pull: PullRequestSnapshot = eligible.pull
        request = ReviewRequest(
            forge=pull.forge,
            repo=pull.ref.full_name,
            number=pull.number,
            head_sha=eligible.decision.head_sha or pull.head_sha,
            delivery_id=eligible.delivery_id,
            source=eligible.decision.source,
            event=trigger.event,
            action=trigger.action,
            pull=pull,
            sender=trigger.sender,
            fence=fence,
        )
        outcome = await self.handle(request)
        received_at = getattr(eligible, "received_at", None)
        if outcome is not None and received_at and any(p.status == "posted" for p in outcome.posts):
            latency = self.clock() - float(received_at)
            self.telemetry.review_latency_observed(pull.forge, eligible.delivery_id, latency)
        return outcome

    async def handle(self, request: ReviewRequest) -> ReviewOutcome | None:
        """Evaluate when the event calls for it; otherwise only refresh the state comment.

        The decision is taken under the PR's lock, so two deliveries of one head that race
        (a webhook and a sweep) evaluate it once.
        """
        head = request.head_sha or (request.pull.head_sha if request.pull else None)
        dismissed = request.event == "pull_request_review" and request.action == "dismissed"
        if request.event == "pull_request_review" and not dismissed and request.sender:
            # The echo of the bot's own review changes nothing: no reads, no edits.
            try:
                bot = await self.forges[request.forge].bot_login()
            except ForgeError:
                bot = ""
            if bot and same_login(request.sender, bot):
                return None
        async with self.locks.hold(request.forge, request.repo, request.number):
            needed = True
            if head is not None:
                assessed = await self.store.run(self._assess, request, head)
                if assessed is None:
                    return None  # nothing new: no evaluation, no read, no edit
                needed = assessed
            if dismissed and head:
                evaluate = await self._reopen_if_dismissed(request, head)
            else:
                evaluate = needed
            if evaluate:
                return await self._review_locked(request)
            if self.comments is not None:
                await self.comments.sync_locked(
                    request.forge, request.repo, request.number, request.pull
                )
            return None

    def _assess(self, request: ReviewRequest, head: str) -> bool | None:
        """One read of the latest verdict at ``head``: ``None`` when ``request`` repeats an
        explicit request (nothing to do), else whether the head needs an evaluation."""
        latest = self.store.latest_verdict(request.forge, request.repo, request.number)
        if self._repeated_request(request, head, latest):
            return None
        return self._needs_evaluation(request, head, latest)

    def _repeated_request(
        self, request: ReviewRequest, head: str, latest: ReviewDecision | None
    ) -> bool:
        """Whether ``request`` is an explicit request with nothing new to evaluate at
        ``head`` (see :func:`~reviewbot.core.prstate.request_repeats`)."""
        if request.event not in REQUEST_EVENTS or request.source == "sweep":
            return False
        if latest is None or latest.head_sha != head:
            return False
        window = self.settings.review_request_dedupe_s
        if not request_repeats(latest.decision, latest.decided_at, self.clock(), window):
            return False
        log.info(
            "review request %s for %s:%s#%s deduplicated: head %s was judged %s at %s",
            request.delivery_id,
            request.forge,
            request.repo,
            request.number,
            head[:12],
            latest.decision,
            iso(latest.decided_at),
        )
        return True

    @staticmethod
    def _needs_evaluation(request: ReviewRequest, head: str, latest: ReviewDecision | None) -> bool:
        if latest is None or latest.head_sha != head:
            return True  # nothing decided at this head yet, or a new head
        if latest.decision == DecisionKind.APPROVE:
            return False  # final at this head, unless a human dismisses the review
        if request.event in CHECK_EVENTS or request.source == "sweep":
            # A check result can only move a head that is waiting, failing or had nothing
            # to judge.
            return latest.decision in REEVALUATE
        # Any other eligible event (reopened, ready for review, labels, an explicit request)
        # may change what the gate and the policy see: evaluate again.
        return True

    async def _reopen_if_dismissed(self, request: ReviewRequest, head: str) -> bool:
        """A human dismissed the bot's review at ``head``: the head may be reviewed again."""
        forge = self.forges[request.forge]
        posted = {
            row.forge_review_id: row
            for row in await self.store.run(
                self.outbox.for_pull, request.forge, request.repo, request.number
            )
            if row.status == "posted" and row.head_sha == head and row.forge_review_id
        }
        if not posted:
            return False
        try:
            reviews = await forge.list_reviews(request.repo, request.number)
        except ForgeError as exc:
            log.warning("cannot list reviews of %s#%s: %s", request.repo, request.number, exc)
            return False
        dismissed = [r.id for r in reviews if r.id in posted and r.state is ReviewState.DISMISSED]
        if not dismissed:
            return False
        # Only a dismissal not yet answered re-opens (one round per dismissed review).
        reopened = [
            d
            for d in await self.store.run(
                self.store.decisions, request.forge, request.repo, request.number
            )
            if d.decision == DecisionKind.REOPENED and d.head_sha == head
        ]
        if len(reopened) >= len(dismissed):
            return False
        await self.store.run(
            self.store.record_decision,
            NewDecision(
                forge=request.forge,
                repo=request.repo,
                number=request.number,
                head_sha=head,
                decision=DecisionKind.REOPENED,
                reason_code=ReasonCode.REVIEW_DISMISSED.value,
                detail=f"review {dismissed[-1]} was dismissed; the head is evaluated again",
                delivery_id=request.delivery_id,
                source=request.source,
            ),
        )
        return True

    # -- one evaluation ----------------------------------------------------------------

    async def review(self, request: ReviewRequest) -> ReviewOutcome:
        """Evaluate the head, record the verdict (+ outbox), post, refresh the state comment."""
        async with self.locks.hold(request.forge, request.repo, request.number):
            return await self._review_locked(request)

    async def _review_locked(self, request: ReviewRequest) -> ReviewOutcome:
        if self.settings.rules_for(RepoRef.parse(request.repo, forge=request.forge)) is None:
            # Not this bot's repository (an organization-wide installation reaches many):
            # silent there on every entry path, as the gate is for webhooks.
            return await self._note(
                NewDecision(
                    forge=request.forge,
                    repo=request.repo,
                    number=request.number,
                    head_sha=request.head_sha or "",
                    decision=DecisionKind.SKIP,
                    reason_code=ReasonCode.REPO_NOT_CONFIGURED.value,
                    delivery_id=request.delivery_id,
                    source=request.source,
                ),
                DecisionKind.SKIP,
                ReasonCode.REPO_NOT_CONFIGURED.value,
                f"{request.forge}:{request.repo} has no [repos] table and there are no "
                "[defaults]: nothing is evaluated or posted there",
            )
        refused = None if self.parity is None else await self.parity()
        if refused is not None:
            # Not the code, configuration or schema on disk: it reviews nothing until it
            # restarts, and says so (the restarted process reviews the head again).
            code = ReasonCode.RESTART_REQUIRED.value
            return await self._note(_error_decision(request, code), ERROR, code, refused)
        outcome = await self._evaluate(request)
        try:
            if self.drain_inline:
                for row in outcome.outbox:
                    if row.status == "pending":
                        post = await self.drainer.post_locked(row.id, claim=outcome.claim)
                        outcome.posts.append(post)
                # The rows as posting left them, and the claim given back: one store call.
                outcome.outbox = await self.store.run(
                    self._refreshed_releasing, outcome.outbox, outcome.claim
                )
                outcome.claim = None
        finally:
            if outcome.claim is not None:
                await self.store.run(self.leases.release, outcome.claim)
                outcome.claim = None
        # A forge that just could not be reached would only fail the edit after its retries.
        unreachable = outcome.decision.reason_code == ReasonCode.FORGE_UNREACHABLE.value
        if self.comments is not None and not unreachable:
            outcome.state_comment = await self.comments.sync_locked(
                request.forge, request.repo, request.number, outcome.pull or request.pull
            )
        return outcome

    def _refreshed_releasing(
        self, rows: list[OutboxRow], claim: LeaseClaim | None
    ) -> list[OutboxRow]:
        refreshed = [self.outbox.get(r.id) or r for r in rows]
        if claim is not None:
            self.leases.release(claim)
        return refreshed

    async def _evaluate(self, request: ReviewRequest) -> ReviewOutcome:
        forge = self.forges[request.forge]
        base = _error_decision(request, ReasonCode.FORGE_ERROR.value)
        pull = request.pull
        try:
            if pull is None:
                pull = await forge.get_pull(request.repo, request.number)
            bot = await forge.bot_login()
        except ForgeError as exc:  # the code says what to fix (pr_not_found, forge_auth_failed...)
            return await self._note(base, ERROR, reason_for(exc).value, str(exc))
        outcome = await self._evaluate_pull(request, forge, pull, bot, base)
        outcome.pull = pull
        return outcome

    async def _evaluate_pull(
        self,
        request: ReviewRequest,
        forge: Forge,
        pull: PullRequestSnapshot,
        bot: str,
        base: NewDecision,
    ) -> ReviewOutcome:
        head = request.head_sha or pull.head_sha
        base = _with(base, head_sha=head)
        if pull.head_sha != head:
            detail = f"the trigger names {head}, the pull request's head is {pull.head_sha}"
            return await self._note(base, HEAD_MOVED, ReasonCode.HEAD_MOVED.value, detail)
        if pull.state != "open" or pull.merged:
            detail = f"the pull request is {'merged' if pull.merged else pull.state}"
            return await self._note(
                base, DecisionKind.PR_CLOSED, ReasonCode.PR_CLOSED.value, detail
            )
        if same_login(pull.author, bot):
            return await self._note(
                base,
                AUTHOR_IS_BOT,
                ReasonCode.AUTHOR_IS_BOT.value,
                f"{pull.author} is the bot's own login; reviewer and author must differ",
                blockers=("the author is the bot",),
            )
        checks: Checks | None = None
        findings: tuple[Finding, ...] | None = None
        rules = (
            self.settings.rules_for(RepoRef.parse(request.repo, forge=request.forge)) or RepoRules()
        )
        if not rules.reviewers:  # nothing runs in between: one store call for both
            claim = await self.store.run(self._supersede_then_acquire, request, head)
        else:
            await self.store.run(self._supersede_older_heads, request, head)
            # Before the lease: it is short, and a reviewer may run for minutes.
            try:
                checks = await self._read_checks(forge, request.repo, pull.base_ref, head)
            except ForgeError as exc:
                return await self._note(base, ERROR, reason_for(exc).value, str(exc))
            if _verdict(rules, checks).kind is not VerdictKind.WAITING:
                ran = await self._external_findings(request, pull, rules)
                if isinstance(ran, ReviewersFailed):
                    return await self._note(base, ERROR, ran.code.value, ran.detail)
                findings = ran
            claim = await self.store.run(
                self.leases.acquire, request.forge, request.repo, request.number, head
            )
        if isinstance(claim, Refused):
            return await self._note(
                base, DecisionKind.LEASE_HELD, ReasonCode.LEASE_HELD.value, claim.detail
            )
        try:
            outcome = await self._decide(
                request, forge, pull, claim, base, checks=checks, findings=findings
            )
        except BaseException:
            await self.store.run(self.leases.release, claim)
            raise
        # Posting right away goes on under the same claim; the caller releases it.
        outcome.claim = claim
        return outcome

    async def _read_checks(self, forge: Forge, repo: str, base_ref: str, head: str) -> Checks:
        # Independent reads: ask both at once.
        protection, results = await asyncio.gather(
            forge.required_checks(repo, base_ref), forge.check_results(repo, head)
        )
        return protection, list(results)

    async def _external_findings(
        self, request: ReviewRequest, pull: PullRequestSnapshot, rules: RepoRules
    ) -> tuple[Finding, ...] | ReviewersFailed:
        """The reviewers' findings at this head, or why they failed (what to record).

        Reviewers run at most once per (PR, head, round): a successful run's findings are
        kept, and every later evaluation of the head in that round (a check finishing, a
        label, a sweep) reuses them, so the verdict it posts still carries them. A new head,
        or a human dismissing the bot's review (a new round), runs them again. A failed run
        is not kept: the next evaluation of the head tries again. The caller runs this only
        when the checks no longer wait, so pending status events never start reviewers.
        """
        kept = await self.store.run(
            self.store.reviewer_findings, pull.forge, request.repo, pull.number, pull.head_sha
        )
        if kept is not None:
            return kept
        # A delivery names its run; an explicit request (command line, API) gets its own.
        delivery_id = request.delivery_id or f"{request.source}-{uuid.uuid4().hex[:12]}"
        # What was received, as the journal kept it: the reviewer's delivery.json carries it.
        payload, headers = await self.store.run(received, self.store.db, request.delivery_id)
        where: dict[str, Any] = {
            "forge": pull.forge,
            "repo": request.repo,
            "pr": pull.number,
            "head": pull.head_sha,
            "delivery_id": delivery_id,
        }
        self.telemetry.reviewer_run_started(commands=len(rules.reviewers), **where)
        started = time.perf_counter()
        outcome = await review_pull(
            rules.reviewers,
            settings=self.settings,
            sessions=self.external.sessions,
            pull=pull,
            delivery_id=delivery_id,
            source=request.source,
            endpoint=self.external.endpoint,
            event=request.event,
            action=request.action,
            payload=payload,
            headers=headers,
            limits=self.external.limits,
            sandbox=self.external.sandbox,
        )
        self.telemetry.reviewer_run(
            results=[(r.command, r.error.kind.value if r.error else None) for r in outcome.results],
            duration_s=time.perf_counter() - started,
            **where,
        )
        if outcome.failed:
            code = (
                ReasonCode.SANDBOX_UNAVAILABLE
                if outcome.sandbox_unavailable
                else ReasonCode.REVIEWER_ERROR
            )
            return ReviewersFailed(code, "; ".join(outcome.errors))
        run_id = run_id_for(
            forge=pull.forge,
            owner=pull.owner,
            name=pull.name,
            number=pull.number,
            head_sha=pull.head_sha,
            delivery_id=delivery_id,
        )
        return await self.store.run(
            self.store.save_reviewer_findings,
            pull.forge,
            request.repo,
            pull.number,
            pull.head_sha,
            run_id,
            outcome.findings,
        )

    def _supersede_then_acquire(self, request: ReviewRequest, head: str) -> LeaseClaim | Refused:
        """:meth:`_supersede_older_heads`, then the reviewer lease at ``head``."""
        self._supersede_older_heads(request, head)
        return self.leases.acquire(request.forge, request.repo, request.number, head)

    def _supersede_older_heads(self, request: ReviewRequest, head: str) -> None:
        latest = self.store.latest_verdict(request.forge, request.repo, request.number)
        self.leases.supersede_head(request.forge, request.repo, request.number, head)
        dropped = self.outbox.drop_pending_for_other_heads(
            request.forge, request.repo, request.number, head
        )
        if (
            latest is not None
            and latest.head_sha != head
            and latest.decision != DecisionKind.SUPERSEDED
        ):
            self.store.record_decision(
                NewDecision(
                    forge=request.forge,
                    repo=request.repo,
                    number=request.number,
                    head_sha=latest.head_sha,
                    decision=DecisionKind.SUPERSEDED,
                    reason_code=ReasonCode.SUPERSEDED.value,
                    detail=f"the head moved to {head}"
                    + (f"; dropped outbox rows {dropped}" if dropped else ""),
                    delivery_id=request.delivery_id,
                    source=request.source,
                )
            )

    async def _decide(
        self,
        request: ReviewRequest,
        forge: Forge,
        pull: PullRequestSnapshot,
        claim: LeaseClaim,
        base: NewDecision,
        *,
        checks: Checks | None = None,
        findings: tuple[Finding, ...] | None = None,
    ) -> ReviewOutcome:
        """The verdict under the lease; ``checks`` already read (when the reviewers ran
        first) are not read again, ``findings`` are the reviewers' (``None``: none ran)."""
        base = _with(base, worker=claim.worker, epoch=claim.epoch)
        rules = (
            self.settings.rules_for(RepoRef.parse(request.repo, forge=request.forge)) or RepoRules()
        )
        if checks is None:
            try:
                checks = await self._read_checks(forge, request.repo, pull.base_ref, base.head_sha)
            except ForgeError as exc:
                return await self._note(base, ERROR, reason_for(exc).value, str(exc))
        verdict = _verdict(rules, checks)
        found = findings or ()
        verdict = merge_findings(verdict, found)
        shown = f"{pull.forge}:{request.repo}#{pull.number}"
        notes = summary_lines(found, pull=shown)
        outboxes: list[NewOutbox] = []
        event = verdict.review_event
        if event is not None:
            outboxes.append(
                NewOutbox(
                    verdict=verdict.kind.value,
                    event=event.value,
                    render_body=lambda marker: policy.render_review_body(
                        verdict, marker, notes, pull=shown
                    ),
                    comments=inline_comments(found),
                )
            )
        overdue = (
            await self.store.run(self._overdue_missing, base, verdict) if verdict.missing else []
        )
        if overdue and verdict.kind is VerdictKind.WAITING:
            grace = self.settings.missing_check_grace_s
            outboxes.append(
                NewOutbox(
                    verdict=MISSING_CHECKS,
                    event=ReviewEvent.COMMENT.value,
                    render_body=lambda marker: missing_comment_body(overdue, grace, marker),
                )
            )
        decision = _with(
            base,
            decision=verdict.kind.value,
            reason_code=verdict.reason.value,
            detail=_summary(verdict, found),
            blockers=_blockers(verdict, found),
            pending=tuple(c.name for c in verdict.pending),
            missing=verdict.missing,
            failed=tuple(c.name for c in verdict.failed),
        )
        try:
            recorded = await self.store.run(
                self.outbox.record,
                decision,
                outboxes,
                fence=_both(request.fence, self.leases.fence(claim)),
            )
        except FenceRefused as exc:
            return await self._note(
                base, DecisionKind.SUPERSEDED, ReasonCode.SUPERSEDED.value, str(exc)
            )
        if recorded.created:
            crash_point(AFTER_OUTBOX)
            if not self.drain_inline:  # posted right after this returns, under the claim
                self.drainer.wake()
        return ReviewOutcome(recorded.decision, list(recorded.outboxes))

    def _overdue_missing(self, base: NewDecision, verdict: Verdict) -> list[str]:
        seen = self.store.note_missing(
            base.forge, base.repo, base.number, base.head_sha, list(verdict.missing)
        )
        now = self.clock()
        grace = self.settings.missing_check_grace_s
        return [n for n in verdict.missing if n in seen and now - seen[n] >= grace]

    async def _note(
        self,
        base: NewDecision,
        decision: str,
        code: str,
        detail: str,
        *,
        blockers: tuple[str, ...] = (),
    ) -> ReviewOutcome:
        recorded = await self.store.run(
            self.store.record_decision,
            _with(
                base,
                decision=decision,
                reason_code=code,
                detail=detail,
                blockers=blockers or ((detail,) if decision in (ERROR, HEAD_MOVED) else ()),
            ),
        )
        return ReviewOutcome(recorded)


def _error_decision(request: ReviewRequest, code: str) -> NewDecision:
    """An ``error`` decision about ``request``'s head with ``code`` (the base the
    evaluation's own outcomes are made from)."""
    return NewDecision(
        forge=request.forge,
        repo=request.repo,
        number=request.number,
        head_sha=request.head_sha or "",
        decision=ERROR,
        reason_code=code,
        delivery_id=request.delivery_id,
        source=request.source,
    )


def _verdict(rules: RepoRules, checks: Checks) -> Verdict:
    protection, results = checks
    return policy.evaluate(
        protection,
        rules.required_checks,
        results,
        approve_without_checks=rules.approve_without_checks,
    )


def _summary(verdict: Verdict, findings: tuple[Finding, ...] = ()) -> str:
    text = _checks_summary(verdict)
    if findings:
        errors = sum(1 for f in findings if f.blocking)
        n = len(findings)
        text += (
            f"; external reviewers: {n} finding{'s' if n != 1 else ''}, "
            f"{errors} error{'s' if errors != 1 else ''}"
        )
    return text


def _checks_summary(verdict: Verdict) -> str:
    if verdict.reason is ReasonCode.REVIEWER_FINDINGS:
        return "an external reviewer reported errors"
    if verdict.reason is ReasonCode.PROTECTION_UNREADABLE:
        return (
            "the forge's rules for the branch could not be read and the repository configures "
            "no required_checks: " + "; ".join(gap.describe() for gap in verdict.unreadable)
        )
    unread = (
        " (configured checks only: " + "; ".join(g.describe() for g in verdict.unreadable) + ")"
        if verdict.unreadable
        else ""
    )
    if verdict.kind is VerdictKind.APPROVE:
        n = len(verdict.passed)
        return f"{n} required check{'s' if n != 1 else ''} passed{unread}"
    if verdict.kind is VerdictKind.REQUEST_CHANGES:
        return "failed: " + ", ".join(c.name for c in verdict.failed) + unread
    if verdict.kind is VerdictKind.WAITING:
        parts = []
        if verdict.pending:
            parts.append("pending: " + ", ".join(c.name for c in verdict.pending))
        if verdict.missing:
            parts.append("missing: " + ", ".join(verdict.missing))
        return "; ".join(parts) + unread
    return "no required checks are configured (set approve_without_checks = true to approve)"


def _both(job: Fence | None, lease: Fence) -> Fence:
    """The job's fence (a claim lost: nothing is written, the job is another's), then the
    lease's (superseded: recorded as such)."""
    if job is None:
        return lease

    def check(tx: Tx) -> None:
        job(tx)
        lease(tx)

    return check


def _with(base: NewDecision, **changes: Any) -> NewDecision:
    return replace(base, **changes)
