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
evaluation (a check event re-runs the policy only while the head is still waiting or
failing; a human dismissing the bot's review re-opens the head).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reviewbot.config import RepoRules, Settings
from reviewbot.core import policy
from reviewbot.core.findings import Finding, inline_comments, merge_findings, summary_lines
from reviewbot.core.gate import same_login
from reviewbot.core.leases import LeaseClaim, Refused
from reviewbot.core.leases import iso as lease_iso
from reviewbot.core.models import (
    CheckResult,
    PullRequestSnapshot,
    RequiredChecks,
    ReviewEvent,
    ReviewState,
)
from reviewbot.core.policy import Verdict, VerdictKind
from reviewbot.core.prstate import (
    AUTHOR_IS_BOT,
    ERROR,
    HEAD_MOVED,
    STATE_MARKER,
    WAITING,
    DeliveryLine,
    LeaseLine,
    PostedReview,
    PRStateRecords,
    render_pr_state,
)
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, NotFound, reason_for
from reviewbot.runtime.outbox import (
    AFTER_OUTBOX,
    FenceRefused,
    OutboxDrainer,
    PostOutcome,
    PullLocks,
    ReviewerLeases,
    StoreReviewerLeases,
    crash_point,
)
from reviewbot.runtime.reviewers import ReviewerLimits, review_pull
from reviewbot.runtime.runs import run_id_for
from reviewbot.runtime.sessions import SessionManager
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseStore
from reviewbot.store.reviews import (
    NewDecision,
    NewOutbox,
    OutboxRow,
    ReviewDecision,
    ReviewStore,
    body_sha256,
)

log = logging.getLogger(__name__)

CHECK_EVENTS = frozenset({"status", "check_run", "check_suite"})
MISSING_CHECKS = "missing_checks"
# Decisions after which a check event at the same head is worth a new evaluation.
REEVALUATE = frozenset({WAITING, "request_changes", ERROR, "lease_held", "superseded"})


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


@dataclass
class ExternalReviewers:
    """How the pipeline runs a repository's reviewer commands.

    ``sessions`` must be the manager the server's tools route answers for
    (``app[SESSIONS]``), or a reviewer's ``REVIEWBOT_SESSION_TOKEN`` would be unknown there;
    ``api_url`` is the server's base URL (``None`` when nothing serves HTTP, as on the
    command line: the reviewers then get no ``REVIEWBOT_API_URL``).
    """

    sessions: SessionManager = field(default_factory=SessionManager)
    api_url: str | None = None
    limits: ReviewerLimits = field(default_factory=ReviewerLimits)


Checks = tuple[RequiredChecks, list[CheckResult]]


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


def _blockers(verdict: Verdict, findings: tuple[Finding, ...] = ()) -> tuple[str, ...]:
    out = [
        f"{c.name} {c.state.value.replace('_', ' ')}" + (f" ({c.url})" if c.url else "")
        for c in verdict.failed
    ]
    out += [f"{c.name} pending" for c in verdict.pending]
    out += [f"{name} not reported" for name in verdict.missing]
    if verdict.kind is VerdictKind.NO_REQUIRED_CHECKS:
        out.append("no required checks are configured")
    out += [f"reviewer error at {f.path}:{f.line}" for f in findings if f.blocking]
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
        clock: Callable[[], float],
        locks: PullLocks | None = None,
        drain_inline: bool = True,
        state_comment: bool = True,
        external: ExternalReviewers | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.forges = forges
        self.leases = leases
        self.drainer = drainer
        self.clock = clock
        self.locks = locks or drainer.locks
        self.drain_inline = drain_inline
        self.state_comment = state_comment
        self.external = external or ExternalReviewers()

    # -- the gate's hook ---------------------------------------------------------------

    async def on_eligible(self, eligible: Any) -> ReviewOutcome | None:
        """Hook for ``GateRunner(on_eligible=...)`` (an ``EligiblePull``)."""
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
        )
        return await self.handle(request)

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
            if dismissed and head:
                evaluate = await self._reopen_if_dismissed(request, head)
            else:
                evaluate = head is None or self._needs_evaluation(request, head)
            if evaluate:
                return await self._review_locked(request)
            if self.state_comment:
                await self._sync_state_comment(
                    request.forge, request.repo, request.number, request.pull
                )
            return None

    def _needs_evaluation(self, request: ReviewRequest, head: str) -> bool:
        latest = self.store.latest_verdict(request.forge, request.repo, request.number)
        if latest is None or latest.head_sha != head:
            return True  # nothing decided at this head yet, or a new head
        if latest.decision == "approve":
            return False  # final at this head, unless a human dismisses the review
        if request.event in CHECK_EVENTS or request.source == "sweep":
            # A check result can only move a head that is waiting or failing.
            return latest.decision in REEVALUATE
        # Any other eligible event (reopened, ready for review, labels, an explicit request)
        # may change what the gate and the policy see: evaluate again.
        return True

    async def _reopen_if_dismissed(self, request: ReviewRequest, head: str) -> bool:
        """A human dismissed the bot's review at ``head``: the head may be reviewed again."""
        forge = self.forges[request.forge]
        posted = {
            row.forge_review_id: row
            for row in self.store.outbox_for_pull(request.forge, request.repo, request.number)
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
            for d in self.store.decisions(request.forge, request.repo, request.number)
            if d.decision == "reopened" and d.head_sha == head
        ]
        if len(reopened) >= len(dismissed):
            return False
        self.store.record_decision(
            NewDecision(
                forge=request.forge,
                repo=request.repo,
                number=request.number,
                head_sha=head,
                decision="reopened",
                reason_code=ReasonCode.REVIEW_DISMISSED.value,
                detail=f"review {dismissed[-1]} was dismissed; the head is evaluated again",
                delivery_id=request.delivery_id,
                source=request.source,
            )
        )
        return True

    # -- one evaluation ----------------------------------------------------------------

    async def review(self, request: ReviewRequest) -> ReviewOutcome:
        """Evaluate the head, record the verdict (+ outbox), post, refresh the state comment."""
        async with self.locks.hold(request.forge, request.repo, request.number):
            return await self._review_locked(request)

    async def _review_locked(self, request: ReviewRequest) -> ReviewOutcome:
        outcome = await self._evaluate(request)
        try:
            if self.drain_inline:
                for row in outcome.outbox:
                    if row.status == "pending":
                        post = await self.drainer.post_locked(row.id, claim=outcome.claim)
                        outcome.posts.append(post)
                outcome.outbox = [self.store.outbox(r.id) or r for r in outcome.outbox]
        finally:
            if outcome.claim is not None:
                await asyncio.to_thread(self.leases.release, outcome.claim)
                outcome.claim = None
        if self.state_comment:
            outcome.state_comment = await self._sync_state_comment(
                request.forge, request.repo, request.number, outcome.pull or request.pull
            )
        return outcome

    async def _evaluate(self, request: ReviewRequest) -> ReviewOutcome:
        forge = self.forges[request.forge]
        base = NewDecision(
            forge=request.forge,
            repo=request.repo,
            number=request.number,
            head_sha=request.head_sha or "",
            decision=ERROR,
            reason_code=ReasonCode.FORGE_ERROR.value,
            delivery_id=request.delivery_id,
            source=request.source,
        )
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
            return await self._note(base, "pr_closed", ReasonCode.PR_CLOSED.value, detail)
        if same_login(pull.author, bot):
            return await self._note(
                base,
                AUTHOR_IS_BOT,
                ReasonCode.AUTHOR_IS_BOT.value,
                f"{pull.author} is the bot's own login; reviewer and author must differ",
                blockers=("the author is the bot",),
            )
        await asyncio.to_thread(self._supersede_older_heads, request, head)
        checks: Checks | None = None
        findings: tuple[Finding, ...] | None = None
        rules = self.settings.rules_for(request.forge, request.repo) or RepoRules()
        if rules.reviewers:
            # Before the lease: it is short, and a reviewer may run for minutes.
            try:
                checks = await self._read_checks(forge, request.repo, pull.base_ref, head)
            except ForgeError as exc:
                return await self._note(base, ERROR, ReasonCode.FORGE_ERROR.value, str(exc))
            if _verdict(rules, checks).kind is not VerdictKind.WAITING:
                ran = await self._external_findings(request, pull, rules)
                if isinstance(ran, str):
                    code = ReasonCode.REVIEWER_ERROR.value
                    return await self._note(base, ERROR, code, ran)
                findings = ran
        claim = await asyncio.to_thread(
            self.leases.acquire, request.forge, request.repo, request.number, head
        )
        if isinstance(claim, Refused):
            return await self._note(base, "lease_held", ReasonCode.LEASE_HELD.value, claim.detail)
        try:
            outcome = await self._decide(
                request, forge, pull, claim, base, checks=checks, findings=findings
            )
        except BaseException:
            await asyncio.to_thread(self.leases.release, claim)
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
    ) -> tuple[Finding, ...] | str:
        """The reviewers' findings at this head, or why they failed (the detail to record).

        Reviewers run at most once per (PR, head, round): a successful run's findings are
        kept, and every later evaluation of the head in that round (a check finishing, a
        label, a sweep) reuses them, so the verdict it posts still carries them. A new head,
        or a human dismissing the bot's review (a new round), runs them again. A failed run
        is not kept: the next evaluation of the head tries again. The caller runs this only
        when the checks no longer wait, so pending status events never start reviewers.
        """
        kept = await asyncio.to_thread(
            self.store.reviewer_findings, pull.forge, request.repo, pull.number, pull.head_sha
        )
        if kept is not None:
            return kept
        # A delivery names its run; an explicit request (command line, API) gets its own.
        delivery_id = request.delivery_id or f"{request.source}-{uuid.uuid4().hex[:12]}"
        outcome = await review_pull(
            rules.reviewers,
            settings=self.settings,
            sessions=self.external.sessions,
            pull=pull,
            delivery_id=delivery_id,
            source=request.source,
            api_url=self.external.api_url,
            event=request.event,
            action=request.action,
            limits=self.external.limits,
        )
        if outcome.failed:
            return "; ".join(outcome.errors)
        run_id = run_id_for(
            forge=pull.forge,
            owner=pull.owner,
            name=pull.name,
            number=pull.number,
            head_sha=pull.head_sha,
            delivery_id=delivery_id,
        )
        return await asyncio.to_thread(
            self.store.save_reviewer_findings,
            pull.forge,
            request.repo,
            pull.number,
            pull.head_sha,
            run_id,
            outcome.findings,
        )

    def _supersede_older_heads(self, request: ReviewRequest, head: str) -> None:
        latest = self.store.latest_verdict(request.forge, request.repo, request.number)
        self.leases.supersede_head(request.forge, request.repo, request.number, head)
        dropped = self.store.drop_pending_for_other_heads(
            request.forge, request.repo, request.number, head
        )
        if latest is not None and latest.head_sha != head and latest.decision != "superseded":
            self.store.record_decision(
                NewDecision(
                    forge=request.forge,
                    repo=request.repo,
                    number=request.number,
                    head_sha=latest.head_sha,
                    decision="superseded",
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
        rules = self.settings.rules_for(request.forge, request.repo) or RepoRules()
        if checks is None:
            try:
                checks = await self._read_checks(forge, request.repo, pull.base_ref, base.head_sha)
            except ForgeError as exc:
                return await self._note(base, ERROR, ReasonCode.FORGE_ERROR.value, str(exc))
        verdict = _verdict(rules, checks)
        found = findings or ()
        verdict = merge_findings(verdict, found)
        notes = summary_lines(found)
        outboxes: list[NewOutbox] = []
        event = verdict.review_event
        if event is not None:
            outboxes.append(
                NewOutbox(
                    verdict=verdict.kind.value,
                    event=event.value,
                    render_body=lambda marker: policy.render_review_body(verdict, marker, notes),
                    comments=inline_comments(found),
                )
            )
        overdue = await asyncio.to_thread(self._overdue_missing, base, verdict)
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
            recorded = await asyncio.to_thread(
                self.store.record, decision, outboxes, fence=self.leases.fence(claim)
            )
        except FenceRefused as exc:
            return await self._note(base, "superseded", ReasonCode.SUPERSEDED.value, str(exc))
        if recorded.created:
            crash_point(AFTER_OUTBOX)
            self.drainer.wake()
        return ReviewOutcome(recorded.decision, list(recorded.outboxes))

    def _overdue_missing(self, base: NewDecision, verdict: Verdict) -> list[str]:
        if not verdict.missing:
            return []
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
        recorded = await asyncio.to_thread(
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

    # -- the canonical state comment ---------------------------------------------------

    async def sync_state_comment(
        self, forge: str, repo: str, number: int, pull: PullRequestSnapshot | None = None
    ) -> str:
        async with self.locks.hold(forge, repo, number):
            return await self._sync_state_comment(forge, repo, number, pull)

    async def _sync_state_comment(
        self, forge_name: str, repo: str, number: int, pull: PullRequestSnapshot | None
    ) -> str:
        forge = self.forges[forge_name]
        try:
            if pull is None:
                pull = await forge.get_pull(repo, number)
            body = await asyncio.to_thread(self.render_state, forge_name, repo, number, pull)
            if body is None:
                return "unchanged"
            known = self.store.state_comment(forge_name, repo, number)
            if known is not None:
                comment_id, sha = known
                if sha == body_sha256(body):
                    return "unchanged"
                try:
                    await forge.edit_comment(repo, comment_id, body)
                except NotFound:
                    known = None  # deleted by someone: look for another, else create
                else:
                    await asyncio.to_thread(
                        self.store.save_state_comment, forge_name, repo, number, comment_id, body
                    )
                    return "edited"
            found = await forge.find_comment(repo, number, STATE_MARKER)
            if found is not None:
                if found.body != body:
                    await forge.edit_comment(repo, found.id, body)
                await asyncio.to_thread(
                    self.store.save_state_comment, forge_name, repo, number, found.id, body
                )
                return "edited"
            created = await forge.create_comment(repo, number, body)
            await asyncio.to_thread(
                self.store.save_state_comment, forge_name, repo, number, created.id, body
            )
            return "created"
        except ForgeError as exc:
            log.warning("state comment of %s:%s#%s: %s", forge_name, repo, number, exc)
            return "failed"

    def render_state(
        self, forge: str, repo: str, number: int, pull: PullRequestSnapshot | None
    ) -> str | None:
        """The state comment from the records (``None`` before any decision)."""
        latest = self.store.latest_verdict(forge, repo, number)
        if latest is None:
            return None
        head = latest.head_sha
        pr_state = "open"
        author = ""
        if pull is not None:
            head = pull.head_sha if pull.head_sha else head
            pr_state = "merged" if pull.merged else pull.state
            author = pull.author
        decision = latest if latest.head_sha == head else None
        rows = [
            r
            for r in self.store.outbox_for_pull(forge, repo, number)
            if r.head_sha == head and r.verdict != MISSING_CHECKS
        ]
        review = None
        if rows:
            newest = rows[-1]
            review = PostedReview(
                newest.verdict, newest.head_sha, newest.status, newest.forge_review_id
            )
        leases = tuple(
            LeaseLine(
                lease.target.role.value,
                lease.holder,
                lease.epoch,
                lease.head_sha,
                lease_iso(lease.expires_at),
            )
            for lease in self.leases.active(forge, repo, number)
        )
        seen = self.store.last_delivery(forge, repo, number)
        delivery = None
        if seen is not None:
            delivery = DeliveryLine(
                str(seen["delivery_id"]),
                str(seen["source"]),
                str(seen["event"]),
                seen["action"],
                str(seen["received_at"]),
            )
        rules = self.settings.rules_for(forge, repo)
        records = PRStateRecords(
            pr=f"{forge}:{repo}#{number}",
            pr_state=pr_state,
            head_sha=head,
            author=author or "the author",
            decision=decision.decision if decision else None,
            decision_detail=decision.detail if decision else "",
            blockers=decision.blockers if decision else (),
            review=review,
            leases=leases,
            last_delivery=delivery,
            automerge=bool(rules and rules.automerge),
        )
        return render_pr_state(records)


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
        text += f"; external reviewers: {len(findings)} findings, {errors} errors"
    return text


def _checks_summary(verdict: Verdict) -> str:
    if verdict.reason is ReasonCode.REVIEWER_FINDINGS:
        return "an external reviewer reported errors"
    if verdict.kind is VerdictKind.APPROVE:
        return f"{len(verdict.passed)} required checks passed"
    if verdict.kind is VerdictKind.REQUEST_CHANGES:
        return "failed: " + ", ".join(c.name for c in verdict.failed)
    if verdict.kind is VerdictKind.WAITING:
        parts = []
        if verdict.pending:
            parts.append("pending: " + ", ".join(c.name for c in verdict.pending))
        if verdict.missing:
            parts.append("missing: " + ", ".join(verdict.missing))
        return "; ".join(parts)
    return "no required checks are configured (set approve_without_checks = true to approve)"


def _with(base: NewDecision, **changes: Any) -> NewDecision:
    from dataclasses import replace

    return replace(base, **changes)


# -- assembly ----------------------------------------------------------------------------


@dataclass
class ReviewParts:
    """A pipeline with its store, drainer and lease store, for one process."""

    pipeline: ReviewPipeline
    drainer: OutboxDrainer
    store: ReviewStore
    lease_store: LeaseStore
    worker: str

    def close(self) -> None:
        self.lease_store.close()


def build_review(
    settings: Settings,
    db: SQLiteDatabase,
    forges: Mapping[str, Forge],
    *,
    client: str,
    clock: Callable[[], float] = time.time,
    backoff_base_s: float = 2.0,
    sessions: SessionManager | None = None,
    api_url: str | None = None,
) -> ReviewParts:
    """Register this process's reviewer worker and build the pipeline around it.

    ``sessions`` and ``api_url`` are for the repositories' external reviewers (see
    :class:`ExternalReviewers`); by default a fresh manager and no API URL.
    """
    lease_store = LeaseStore(db, settings.leases, clock=clock)
    record = lease_store.register_worker(
        "reviewbot", client=client, session_id=f"pid-{os.getpid()}", role="reviewer"
    )
    leases = StoreReviewerLeases(lease_store, record.identity)
    store = ReviewStore(db, clock)
    drainer = OutboxDrainer(store, forges, leases, clock=clock, backoff_base_s=backoff_base_s)
    external = ExternalReviewers(sessions or SessionManager(), api_url)
    pipeline = ReviewPipeline(
        settings, store, forges, leases, drainer, clock=clock, external=external
    )
    drainer.after_drain = pipeline.sync_state_comment
    return ReviewParts(pipeline, drainer, store, lease_store, record.identity)


class ReviewService:
    """The pipeline inside the server: the gate's eligible hook, the drainer, the sweep.

    ``create_app(settings, on_eligible=service.on_eligible)`` then ``service.attach(app)``;
    the parts are built at start-up, once the server opened the store and the forges.
    External reviewers run as sessions of the app's manager (``app[SESSIONS]``, the one the
    tools route answers for); once the site listens, ``set_api_url(base)`` gives them the
    URL to call the tools at.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        backoff_base_s: float = 2.0,
        reconcile: bool = True,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.backoff_base_s = backoff_base_s
        self.reconcile = reconcile
        self.parts: ReviewParts | None = None
        self.reconciler: Any = None
        self.automerge: Any = None  # the automerger, when the server has the merge API
        self.api_url: str | None = None
        self._ready = asyncio.Event()

    def set_api_url(self, url: str | None) -> None:
        """The server's base URL, known once its site listens; reviewers run after it get it."""
        self.api_url = url
        if self.parts is not None:
            self.parts.pipeline.external.api_url = url

    async def on_eligible(self, eligible: Any) -> None:
        await self._ready.wait()
        assert self.parts is not None
        await self.parts.pipeline.on_eligible(eligible)
        if self.automerge is not None:  # a review or a check may have made it mergeable
            await self.automerge.after_event(eligible.pull)

    def attach(self, app: Any) -> None:
        from reviewbot.app import STATE

        app.on_startup.append(self._startup)
        app.on_cleanup.insert(0, self._cleanup)
        self._state_key = STATE

    async def _startup(self, app: Any) -> None:
        from reviewbot.runtime.reconcile import Reconciler
        from reviewbot.runtime.tools import SESSIONS

        st = app[self._state_key]
        assert st.db is not None
        self.parts = build_review(
            self.settings,
            st.db,
            st.forges,
            client="reviewbot-serve",
            clock=self.clock,
            backoff_base_s=self.backoff_base_s,
            sessions=app.get(SESSIONS),
            api_url=self.api_url,
        )
        from reviewbot.api.leases import join_review

        self.automerge = join_review(app, self.parts)
        self.parts.drainer.start()
        if self.reconcile and st.journal is not None:
            self.reconciler = Reconciler(
                self.settings,
                self.parts.store,
                st.forges,
                self.parts.pipeline,
                st.journal.append,
            )
            self.reconciler.start()
        self._ready.set()

    async def _cleanup(self, app: Any) -> None:
        if self.reconciler is not None:
            await self.reconciler.stop()
        if self.parts is not None:
            await self.parts.drainer.stop()
            self.parts.close()
