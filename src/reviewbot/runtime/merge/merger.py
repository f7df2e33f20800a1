"""Merging a pull request at the exact head that was approved, under the merger lease.

:meth:`Merger.merge` is the one merge path: the HTTP API (``POST /api/v1/merges``), the
command line (``reviewbot merge``) and automerge all go through it.

1. Read the live state: the PR, its reviews, the required checks of its base branch, the
   check results of the pinned head, and the merger lease row; ask
   :func:`reviewbot.core.merge.decide`. A refusal lists every reason.
2. Record the attempt (``sending``) in a transaction fenced by (holder, epoch): a superseded
   holder stops here, having written nothing.
   A caller that holds a lane (automerge) confirms it here too: a lost lane stops here.
3. Send the merge pinned to the head (GitHub ``sha``, Gitea ``head_commit_id``).
4. The forge says the head moved (409): record ``head_moved``, release the lease, supersede
   leases pinned to the old head, and have the new head reviewed.
5. The forge failed (5xx, timeout): **re-read the PR before anything else**. Merged at the
   pin: it went through, record it. Otherwise nothing is retried: the caller gets
   ``forge_unavailable`` and a later call starts again from step 1 (which sees a merge that
   did happen).
6. Merged: verify from the live PR (merged flag and merge commit at the pin), record the
   merge commit (fenced), release the lease, and bring the PR state comment up to date.
   Not confirmed (the re-read fails or shows it unmerged): the attempt is ``unverified``,
   nothing is recorded as merged, and the lease stays held until the reconcile sweep (or
   the holder's next call) sees the merge, or the lease expires. The merge is never sent
   a second time while an attempt is unverified.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reviewbot.config import RepoRules, Settings
from reviewbot.core.errors import ReviewbotError
from reviewbot.core.lease_history import EndReason
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role, check_full_sha
from reviewbot.core.merge import MergeAction, MergeInputs, decide, same_sha
from reviewbot.core.models import PullRequestSnapshot, RepoRef
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    HeadMoved,
    NotFound,
    NotMergeable,
    PermissionDenied,
    RateLimited,
    reason_for,
)
from reviewbot.observe import Telemetry
from reviewbot.runtime.merge.facts import read_pr_facts
from reviewbot.runtime.pull_locks import PullLocks
from reviewbot.runtime.review.pipeline import ReviewPipeline, ReviewRequest
from reviewbot.store import merges as merge_rows
from reviewbot.store.after_merge import ActionRow
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.merges import MergeAttempt, MergeStore

log = logging.getLogger(__name__)

MERGE_METHODS = ("merge", "squash", "rebase")

# Hooks the server (or the command line) plugs in.
StateCommentHook = Callable[[str, str, int, PullRequestSnapshot | None], Awaitable[object]]
ReReviewHook = Callable[[str, str, int, str], Awaitable[object]]
# Asked before each merge: why this process may not act now (``restart_required``), or None.
ParityHook = Callable[[], Awaitable[str | None]]
# Run once a merge is confirmed (runtime.merge.after_merge.AfterMerge): forge, repo, number,
# the merged pull as the forge shows it, the merged head; answers what it recorded.
AfterMergeHook = Callable[[str, str, int, PullRequestSnapshot, str], Awaitable[list[ActionRow]]]


class MergeError(ReviewbotError):
    """The merge could not be decided: the forge failed or refused the credentials."""


@dataclass(frozen=True)
class MergeRequest:
    forge: str
    repo: str  # OWNER/NAME
    number: int
    head_sha: str  # the pin
    worker: str
    epoch: int
    method: str | None = None  # None: the repository's merge_method
    record_refusals: bool = True  # automerge asks often; it records only what it sends
    # Asked right before the merge is recorded and sent; False stops it (``lane_lost``):
    # automerge confirms it still holds the branch's merge lane across replicas.
    fence: Callable[[], Awaitable[bool]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # A prefix is refused: it could name another commit by the time the merge is sent.
        check_full_sha(self.head_sha)

    @property
    def claim(self) -> LeaseClaim:
        target = LeaseTarget(self.forge, self.repo, self.number, Role.MERGER)
        return LeaseClaim(target, self.worker, self.epoch)


@dataclass
class MergeOutcome:
    merged: bool
    head_sha: str
    merge_commit_sha: str | None = None
    codes: tuple[str, ...] = ()
    detail: str = ""
    already_merged: bool = False  # an earlier attempt had merged it
    new_head: str | None = None  # the head the PR moved to (head_moved)
    attempt_id: int | None = None
    recorded: bool = False  # the merge is in the merges table
    approvers: tuple[str, ...] = ()
    state_comment: str | None = None
    notes: list[str] = field(default_factory=list)
    after_merge: list[ActionRow] = field(default_factory=list)  # recorded by this call

    @property
    def code(self) -> str | None:
        return self.codes[0] if self.codes else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "merged": self.merged,
            "head_sha": self.head_sha,
            "merge_commit_sha": self.merge_commit_sha,
            "already_merged": self.already_merged,
            "recorded": self.recorded,
            "approvers": list(self.approvers),
        }
        if not self.merged:
            out["error"] = self.code
            out["codes"] = list(self.codes)
            out["detail"] = self.detail
        if self.new_head:
            out["new_head"] = self.new_head
        if self.after_merge:
            out["after_merge"] = [row.to_json() for row in self.after_merge]
        return out


def _forge_failure(exc: ForgeError) -> MergeError:
    reason = reason_for(exc).value
    if isinstance(exc, PermissionDenied | AuthenticationFailed):
        return MergeError(f"the forge refused: {exc}", code=reason)
    if isinstance(exc, NotFound):
        return MergeError(str(exc), code=reason)
    if isinstance(exc, ForgeUnavailable | RateLimited):
        unreachable = reason == ReasonCode.FORGE_UNREACHABLE
        return MergeError(str(exc), code=reason if unreachable else "forge_unavailable")
    return MergeError(str(exc), code=ReasonCode.FORGE_ERROR.value)


class Merger:
    def __init__(
        self,
        settings: Settings,
        forges: Mapping[str, Forge],
        leases: LeaseStore,
        merges: MergeStore,
        *,
        clock: Callable[[], float] = time.time,
        state_comment: StateCommentHook | None = None,
        re_review: ReReviewHook | None = None,
        telemetry: Telemetry | None = None,
        parity: ParityHook | None = None,
        after_merge: AfterMergeHook | None = None,
    ) -> None:
        """``parity``: asked before each merge (``runtime.parity.ParityGate``);
        ``after_merge``: run once a merge is confirmed (the repository's rules decide)."""
        self.telemetry = telemetry or Telemetry()
        self.parity = parity
        self.after_merge = after_merge
        self.settings = settings
        self.forges = forges
        self.leases = leases
        self.merges = merges
        self.clock = clock
        self.state_comment = state_comment
        self.re_review = re_review
        # One merge of a PR at a time in this process, even for one (worker, epoch).
        self.pull_locks = PullLocks()

    def method_for(self, request: MergeRequest) -> str:
        rules = (
            self.settings.rules_for(RepoRef.parse(request.repo, forge=request.forge)) or RepoRules()
        )
        method = request.method or rules.merge_method
        if method not in MERGE_METHODS:
            raise ValueError(f"method must be one of {', '.join(MERGE_METHODS)}, not {method!r}")
        return method

    async def merge(self, request: MergeRequest) -> MergeOutcome:
        """Merge at the pin or refuse (every reason). Raises :class:`MergeError` when the
        forge failed so that nothing could be decided, or ``ValueError`` for a bad request."""
        started = time.perf_counter()
        try:
            async with self.pull_locks.hold(request.forge, request.repo, request.number):
                outcome = await self._merge_locked(request)
        except MergeError as exc:
            self._report(request, "error", (exc.code,), str(exc), started)
            raise
        if outcome.merged:
            kind = "already_merged" if outcome.already_merged else "merged"
        else:
            kind = "refused"
        self._report(request, kind, outcome.codes, outcome.detail, started)
        return outcome

    def _report(
        self,
        request: MergeRequest,
        outcome: str,
        codes: tuple[str, ...],
        detail: str,
        started: float,
    ) -> None:
        self.telemetry.merge_finished(
            forge=request.forge,
            repo=request.repo,
            pr=request.number,
            head=request.head_sha,
            worker=request.worker,
            epoch=request.epoch,
            outcome=outcome,
            codes=codes,
            detail=detail,
            duration_s=time.perf_counter() - started,
        )

    async def _merge_locked(self, request: MergeRequest) -> MergeOutcome:
        forge = self.forges.get(request.forge)
        if forge is None:
            raise MergeError(
                f"{request.forge} is not configured", code=ReasonCode.FORGE_NOT_CONFIGURED.value
            )
        method = self.method_for(request)
        claim = request.claim
        if self.parity is not None:
            refused = await self.parity()
            if refused is not None:
                code = ReasonCode.RESTART_REQUIRED.value
                return MergeOutcome(False, request.head_sha, codes=(code,), detail=refused)
        pending = await self.merges.run(
            self.merges.unverified, request.forge, request.repo, request.number
        )
        if pending:
            return await self._reverify(forge, claim, request, pending[-1])
        try:
            facts = await read_pr_facts(forge, request.repo, request.number, request.head_sha)
        except ForgeError as exc:
            raise _forge_failure(exc) from None
        pull = facts.pull
        rules = (
            self.settings.rules_for(RepoRef.parse(request.repo, forge=request.forge)) or RepoRules()
        )
        lease = await self.leases.run(self.leases.get, claim.target)
        decision = decide(
            MergeInputs.of(
                facts,
                configured_checks=rules.required_checks,
                lease=lease,
                claim=claim,
                now=self.clock(),
            )
        )
        if decision.action is MergeAction.ALREADY_MERGED:
            return await self._merged(
                claim, pull, request.head_sha, method, None, pull.merge_commit_sha, already=True
            )
        if decision.action is MergeAction.REFUSE:
            outcome = MergeOutcome(
                merged=False,
                head_sha=request.head_sha,
                codes=decision.codes,
                detail=decision.summary(),
                approvers=decision.approvers,
            )
            lease_ok = not {"superseded", "lease_not_held"} & set(decision.codes)
            if request.record_refusals and lease_ok:
                with contextlib.suppress(LeaseRefused):
                    outcome.attempt_id = await self.merges.run(
                        self.merges.refused,
                        claim,
                        request.head_sha,
                        method,
                        decision.codes,
                        outcome.detail,
                    )
            if ReasonCode.HEAD_MOVED.value in decision.codes and lease_ok:
                await self._head_moved(claim, request, pull.head_sha, outcome)
            return outcome
        return await self._send(forge, claim, request, pull, method, decision.approvers)

    async def _send(
        self,
        forge: Forge,
        claim: LeaseClaim,
        request: MergeRequest,
        pull: PullRequestSnapshot,
        method: str,
        approvers: tuple[str, ...],
    ) -> MergeOutcome:
        pin = request.head_sha
        if request.fence is not None and not await request.fence():
            detail = "the merge lane of this branch was lost before the merge call; not sent"
            return MergeOutcome(False, pin, codes=(ReasonCode.LANE_LOST.value,), detail=detail)
        try:
            # A full term ahead for the call, and the attempt on record before it is sent.
            await self.leases.run(self.leases.heartbeat, claim)
            attempt = await self.merges.run(self.merges.begin, claim, pin, method)
        except LeaseRefused as exc:
            return MergeOutcome(False, pin, codes=(exc.code,), detail=str(exc))
        try:
            result = await forge.merge(request.repo, request.number, head_sha=pin, method=method)
        except HeadMoved as exc:
            new_head = await self._live_head(forge, request)
            outcome = MergeOutcome(
                False,
                pin,
                codes=(ReasonCode.HEAD_MOVED.value,),
                detail=f"the forge refused the pinned merge: {exc}",
                attempt_id=attempt,
                approvers=approvers,
            )
            await self._finish(claim, attempt, merge_rows.HEAD_MOVED, outcome)
            await self._head_moved(claim, request, new_head, outcome)
            return outcome
        except (ForgeUnavailable, NotMergeable, RateLimited, ForgeError) as exc:
            # It may have merged all the same: look before deciding anything.
            return await self._after_failure(forge, claim, request, method, attempt, exc, approvers)
        verified, why = await self._confirmed(forge, request, result.merge_commit_sha)
        if verified is None:
            return await self._unverified(claim, pin, attempt, why, approvers)
        sha = result.merge_commit_sha or verified.merge_commit_sha
        outcome = await self._merged(claim, verified, pin, method, attempt, sha)
        outcome.approvers = approvers
        return outcome

    async def _confirmed(
        self, forge: Forge, request: MergeRequest, answered_sha: str | None
    ) -> tuple[PullRequestSnapshot | None, str]:
        """The live PR when it confirms the merge at the pin (merged flag and a merge
        commit), else ``None`` and why not."""
        try:
            pull = await forge.get_pull(request.repo, request.number)
        except ForgeError as exc:
            return None, f"the re-read after the merge call failed: {exc}"
        if not pull.merged:
            return None, "the re-read after the merge call shows the pull request unmerged"
        if not same_sha(pull.head_sha, request.head_sha):
            return None, f"the pull request merged at {pull.head_sha}, not at the pin"
        if not (pull.merge_commit_sha or answered_sha):
            return None, "the forge names no merge commit"
        return pull, ""

    async def _unverified(
        self,
        claim: LeaseClaim,
        pin: str,
        attempt: int,
        why: str,
        approvers: tuple[str, ...] = (),
    ) -> MergeOutcome:
        """Nothing is recorded as merged and the lease stays held: the sweep (or the next
        call of the holder) reads the PR again; the merge is never sent twice."""
        t = claim.target
        detail = f"{why}; the merge stays unverified until the forge confirms it"
        outcome = MergeOutcome(
            False,
            pin,
            codes=(merge_rows.UNVERIFIED_CODE,),
            detail=detail,
            attempt_id=attempt,
            approvers=approvers,
        )
        log.warning("merge of %s:%s#%s unverified: %s", t.forge, t.repo, t.number, why)
        await self._finish(claim, attempt, merge_rows.UNVERIFIED, outcome)
        return outcome

    async def _reverify(
        self, forge: Forge, claim: LeaseClaim, request: MergeRequest, attempt: MergeAttempt
    ) -> MergeOutcome:
        """A merge call already went out for this PR: read, never send again."""
        pull, why = await self._confirmed(forge, request, None)
        if pull is None:
            detail = f"merge attempt {attempt.id} is unverified: {why}; it is not sent again"
            return MergeOutcome(
                False,
                attempt.head_sha,
                codes=(merge_rows.UNVERIFIED_CODE,),
                detail=detail,
                attempt_id=attempt.id,
            )
        return await self._record_confirmed(pull, attempt)

    async def _record_confirmed(
        self, pull: PullRequestSnapshot, attempt: MergeAttempt
    ) -> MergeOutcome:
        await self.merges.run(self.merges.confirm, attempt.id, pull.merge_commit_sha)
        claim = LeaseClaim(
            LeaseTarget(attempt.forge, attempt.repo, attempt.number, Role.MERGER),
            attempt.holder,
            attempt.epoch,
        )
        with contextlib.suppress(LeaseRefused):
            await self.leases.run(self.leases.release, claim, reason=EndReason.MERGED)
        outcome = MergeOutcome(
            True,
            attempt.head_sha,
            merge_commit_sha=pull.merge_commit_sha,
            already_merged=True,
            attempt_id=attempt.id,
            recorded=True,
            detail="the forge confirmed the merge",
        )
        await self._after_merge(claim, pull, attempt.head_sha, outcome)
        outcome.state_comment = await self._comment(
            attempt.forge, attempt.repo, attempt.number, pull
        )
        return outcome

    async def verify_unverified(self) -> list[MergeOutcome]:
        """The sweep's pass over unverified merges: record the confirmed ones, and end as
        ``unknown`` those whose lease lapsed unconfirmed. Never sends a merge.

        A ``sending`` attempt whose lease is no longer its sender's was left by a process
        that stopped between the merge call and recording its answer: the forge may have
        merged it. It is judged like an unverified one; while its sender still holds the
        lease the call may be in flight, and it is left alone."""
        done = []
        for attempt in await self.merges.run(self.merges.unverified, sending=True):
            forge = self.forges.get(attempt.forge)
            if forge is None:
                continue
            request = MergeRequest(
                attempt.forge,
                attempt.repo,
                attempt.number,
                attempt.head_sha,
                attempt.holder,
                attempt.epoch,
            )
            async with self.pull_locks.hold(attempt.forge, attempt.repo, attempt.number):
                lease = await self.leases.run(self.leases.get, request.claim.target)
                held = (
                    lease is not None
                    and lease.holder == attempt.holder
                    and lease.epoch == attempt.epoch
                    and lease.live(self.clock())
                )
                if attempt.status == merge_rows.SENDING and held:
                    continue  # its sender may still be waiting for the forge's answer
                pull, why = await self._confirmed(forge, request, None)
                if pull is not None:
                    done.append(await self._record_confirmed(pull, attempt))
                    continue
                if not held:
                    ended = (
                        "the process sending it stopped before recording an answer"
                        if attempt.status == merge_rows.SENDING
                        else "the lease ended"
                    )
                    detail = f"{ended} and the forge shows no merge at the pin ({why})"
                    await self.merges.run(self.merges.give_up, attempt.id, detail)
        return done

    async def _after_failure(
        self,
        forge: Forge,
        claim: LeaseClaim,
        request: MergeRequest,
        method: str,
        attempt: int,
        exc: ForgeError,
        approvers: tuple[str, ...],
    ) -> MergeOutcome:
        pin = request.head_sha
        try:
            pull = await forge.get_pull(request.repo, request.number)
        except ForgeError as read_exc:
            detail = f"the merge call failed ({exc}) and the re-read failed too ({read_exc}): "
            detail += "whether it merged is unknown; nothing was retried"
            await self._finish(
                claim,
                attempt,
                merge_rows.UNKNOWN,
                MergeOutcome(False, pin, codes=("forge_unavailable",), detail=detail),
            )
            raise MergeError(detail, code="forge_unavailable") from None
        if pull.merged and same_sha(pull.head_sha, pin):
            outcome = await self._merged(
                claim,
                pull,
                pin,
                method,
                attempt,
                pull.merge_commit_sha,
                note=f"the merge call answered {exc}, the re-read shows it merged",
            )
            outcome.approvers = approvers
            return outcome
        if not same_sha(pull.head_sha, pin):
            outcome = MergeOutcome(
                False,
                pin,
                codes=(ReasonCode.HEAD_MOVED.value,),
                detail=f"the merge call failed ({exc}) and the head is now {pull.head_sha}",
                attempt_id=attempt,
            )
            await self._finish(claim, attempt, merge_rows.HEAD_MOVED, outcome)
            await self._head_moved(claim, request, pull.head_sha, outcome)
            return outcome
        if isinstance(exc, NotMergeable):
            outcome = MergeOutcome(
                False,
                pin,
                codes=(ReasonCode.NOT_MERGEABLE.value,),
                detail=f"the forge refused the merge: {exc}",
                attempt_id=attempt,
            )
            await self._finish(claim, attempt, merge_rows.NOT_MERGEABLE, outcome)
            return outcome
        detail = f"the merge call failed ({exc}); the pull request is not merged. Nothing was "
        detail += "retried: call again (the next attempt reads the live state first)"
        await self._finish(
            claim,
            attempt,
            merge_rows.UNKNOWN,
            MergeOutcome(False, pin, codes=("forge_unavailable",), detail=detail),
        )
        if isinstance(exc, PermissionDenied | AuthenticationFailed):
            raise _forge_failure(exc)
        unavailable = isinstance(exc, ForgeUnavailable | RateLimited)
        raise MergeError(
            detail, code="forge_unavailable" if unavailable else ReasonCode.FORGE_ERROR.value
        )

    async def _finish(
        self, claim: LeaseClaim, attempt: int, status: str, outcome: MergeOutcome
    ) -> None:
        try:
            await self.merges.run(
                self.merges.finish,
                claim,
                attempt,
                status,
                codes=outcome.codes,
                detail=outcome.detail,
            )
        except LeaseRefused as exc:
            outcome.notes.append(f"not recorded: {exc}")

    async def _merged(
        self,
        claim: LeaseClaim,
        pull: PullRequestSnapshot,
        pin: str,
        method: str,
        attempt: int | None,
        merge_commit_sha: str | None,
        *,
        already: bool = False,
        note: str = "",
    ) -> MergeOutcome:
        t = claim.target
        outcome = MergeOutcome(
            True,
            pin,
            merge_commit_sha=merge_commit_sha,
            already_merged=already,
            detail=note,
            attempt_id=attempt,
        )
        existing = await self.merges.run(self.merges.merge_of, t.forge, t.repo, t.number)
        if existing is not None:
            outcome.recorded = True
            outcome.merge_commit_sha = outcome.merge_commit_sha or existing.merge_commit_sha
        try:
            if attempt is None and existing is None:
                attempt = await self.merges.run(self.merges.begin, claim, pin, method)
                outcome.attempt_id = attempt
            if attempt is not None:
                await self.merges.run(
                    self.merges.finish,
                    claim,
                    attempt,
                    merge_rows.MERGED,
                    detail=note or "merged",
                    merge_commit_sha=merge_commit_sha,
                )
                outcome.recorded = True
        except LeaseRefused as exc:
            # The forge merged it; the record waits for a holder of the live claim.
            outcome.notes.append(f"merge not recorded: {exc}")
            log.warning("merge of %s not recorded: %s", t, exc)
        with contextlib.suppress(LeaseRefused):
            await self.leases.run(self.leases.release, claim, reason=EndReason.MERGED)
        await self._after_merge(claim, pull, pin, outcome)
        outcome.state_comment = await self._comment(t.forge, t.repo, t.number, pull)
        return outcome

    async def _after_merge(
        self, claim: LeaseClaim, pull: PullRequestSnapshot, head: str, outcome: MergeOutcome
    ) -> None:
        """The repository's after-merge actions; whatever they meet, the merge stands."""
        if self.after_merge is None or not pull.merged:
            return
        t = claim.target
        try:
            outcome.after_merge = await self.after_merge(t.forge, t.repo, t.number, pull, head)
        except Exception as exc:  # the merge answer must not depend on them
            log.warning("after-merge actions of %s: %s", t, exc)
            outcome.notes.append(f"after-merge actions not finished: {exc}")

    async def _head_moved(
        self,
        claim: LeaseClaim,
        request: MergeRequest,
        new_head: str | None,
        outcome: MergeOutcome,
    ) -> None:
        with contextlib.suppress(LeaseRefused):
            await self.leases.run(self.leases.release, claim, reason=EndReason.HEAD_MOVED)
        outcome.new_head = new_head
        if new_head and not same_sha(new_head, request.head_sha):
            await self.leases.run(
                self.leases.supersede_head, request.forge, request.repo, request.number, new_head
            )
            if self.re_review is not None:
                try:
                    await self.re_review(request.forge, request.repo, request.number, new_head)
                except Exception as exc:  # the merge answer must not depend on it
                    log.warning(
                        "re-review of %s:%s#%s at %s failed: %s",
                        request.forge,
                        request.repo,
                        request.number,
                        new_head,
                        exc,
                    )
                    outcome.notes.append(f"re-review not started: {exc}")
        outcome.state_comment = await self._comment(
            request.forge, request.repo, request.number, None
        )

    async def _live_head(self, forge: Forge, request: MergeRequest) -> str | None:
        try:
            return (await forge.get_pull(request.repo, request.number)).head_sha
        except ForgeError:
            return None

    async def _comment(
        self, forge: str, repo: str, number: int, pull: PullRequestSnapshot | None
    ) -> str | None:
        if self.state_comment is None:
            return None
        try:
            return str(await self.state_comment(forge, repo, number, pull))
        except Exception as exc:
            log.warning("state comment of %s:%s#%s: %s", forge, repo, number, exc)
            return "failed"


class ReviewRequestHook:
    """A :data:`ReReviewHook` that reviews the new head in this process, through ``pipeline``
    (where no server queues it through the gate: the command line)."""

    def __init__(self, pipeline: ReviewPipeline, *, source: str) -> None:
        self.pipeline = pipeline
        self.source = source

    async def __call__(self, forge: str, repo: str, number: int, head: str) -> object:
        request = ReviewRequest(
            forge, repo, number, head_sha=head, source=self.source, event="head_moved"
        )
        return await self.pipeline.review(request)
