"""Merging a pull request at the exact head that was approved, under the merger lease.

:meth:`Merger.merge` is the one merge path: the HTTP API (``POST /api/v1/merges``), the
command line (``reviewbot merge``) and automerge all go through it.

1. Read the live state: the PR, its reviews, the required checks of its base branch, the
   check results of the pinned head, and the merger lease row; ask
   :func:`reviewbot.core.merge.decide`. A refusal lists every reason.
2. Record the attempt (``sending``) in a transaction fenced by (holder, epoch): a superseded
   holder stops here, having written nothing.
3. Send the merge pinned to the head (GitHub ``sha``, Gitea ``head_commit_id``).
4. The forge says the head moved (409): record ``head_moved``, release the lease, supersede
   leases pinned to the old head, and have the new head reviewed.
5. The forge failed (5xx, timeout): **re-read the PR before anything else**. Merged at the
   pin: it went through, record it. Otherwise nothing is retried: the caller gets
   ``forge_unavailable`` and a later call starts again from step 1 (which sees a merge that
   did happen).
6. Merged: verify from the live PR, record the merge commit (fenced), release the lease,
   and bring the PR state comment up to date.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reviewbot.config import RepoRules, Settings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.core.merge import MergeAction, MergeInputs, decide, same_sha
from reviewbot.core.models import PullRequestSnapshot
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
from reviewbot.store import merges as merge_rows
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.merges import MergeStore

log = logging.getLogger(__name__)

MERGE_METHODS = ("merge", "squash", "rebase")

# Hooks the server (or the command line) plugs in.
StateCommentHook = Callable[[str, str, int, PullRequestSnapshot | None], Awaitable[object]]
ReReviewHook = Callable[[str, str, int, str], Awaitable[object]]


class MergeError(Exception):
    """The merge could not be decided: the forge failed or refused the credentials.

    ``code`` is the API error code, ``status`` its HTTP status.
    """

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


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
        return out


def _forge_failure(exc: ForgeError) -> MergeError:
    reason = reason_for(exc).value
    if isinstance(exc, PermissionDenied | AuthenticationFailed):
        return MergeError(403, reason, f"the forge refused: {exc}")
    if isinstance(exc, NotFound):
        return MergeError(404, reason, str(exc))
    if isinstance(exc, ForgeUnavailable | RateLimited):
        unreachable = reason == ReasonCode.FORGE_UNREACHABLE
        return MergeError(503, reason if unreachable else "forge_unavailable", str(exc))
    return MergeError(502, ReasonCode.FORGE_ERROR.value, str(exc))


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
    ) -> None:
        self.settings = settings
        self.forges = forges
        self.leases = leases
        self.merges = merges
        self.clock = clock
        self.state_comment = state_comment
        self.re_review = re_review
        # One merge of a PR at a time in this process, even for one (worker, epoch).
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}

    def method_for(self, request: MergeRequest) -> str:
        rules = self.settings.rules_for(request.forge, request.repo) or RepoRules()
        method = request.method or rules.merge_method
        if method not in MERGE_METHODS:
            raise ValueError(f"method must be one of {', '.join(MERGE_METHODS)}, not {method!r}")
        return method

    async def merge(self, request: MergeRequest) -> MergeOutcome:
        """Merge at the pin or refuse (every reason). Raises :class:`MergeError` when the
        forge failed so that nothing could be decided, or ``ValueError`` for a bad request."""
        key = (request.forge, request.repo, request.number)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            return await self._merge_locked(request)

    async def _merge_locked(self, request: MergeRequest) -> MergeOutcome:
        forge = self.forges.get(request.forge)
        if forge is None:
            raise MergeError(
                400, ReasonCode.FORGE_NOT_CONFIGURED.value, f"{request.forge} is not configured"
            )
        method = self.method_for(request)
        claim = request.claim
        try:
            pull, reviews, protection, results = await self._read(forge, request)
        except ForgeError as exc:
            raise _forge_failure(exc) from None
        rules = self.settings.rules_for(request.forge, request.repo) or RepoRules()
        decision = decide(
            MergeInputs(
                pull=pull,
                pin=request.head_sha,
                reviews=reviews,
                protection=protection,
                configured_checks=rules.required_checks,
                results=results,
                lease=self.leases.get(claim.target),
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
                    outcome.attempt_id = self.merges.refused(
                        claim, request.head_sha, method, decision.codes, outcome.detail
                    )
            if ReasonCode.HEAD_MOVED.value in decision.codes and lease_ok:
                await self._head_moved(claim, request, pull.head_sha, outcome)
            return outcome
        return await self._send(forge, claim, request, pull, method, decision.approvers)

    async def _read(
        self, forge: Forge, request: MergeRequest
    ) -> tuple[PullRequestSnapshot, list[Any], Any, list[Any]]:
        pull = await forge.get_pull(request.repo, request.number)
        reviews, protection, results = await asyncio.gather(
            forge.list_reviews(request.repo, request.number),
            forge.required_checks(request.repo, pull.base_ref),
            forge.check_results(request.repo, request.head_sha),
        )
        return pull, reviews, protection, results

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
        try:
            # A full term ahead for the call, and the attempt on record before it is sent.
            self.leases.heartbeat(claim)
            attempt = self.merges.begin(claim, pin, method)
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
            self._finish(claim, attempt, merge_rows.HEAD_MOVED, outcome)
            await self._head_moved(claim, request, new_head, outcome)
            return outcome
        except (ForgeUnavailable, NotMergeable, RateLimited, ForgeError) as exc:
            # It may have merged all the same: look before deciding anything.
            return await self._after_failure(forge, claim, request, method, attempt, exc, approvers)
        sha = result.merge_commit_sha
        verified: PullRequestSnapshot | None = None
        try:
            verified = await forge.get_pull(request.repo, request.number)
        except ForgeError as exc:
            log.warning(
                "merge of %s:%s#%s: verify read failed: %s",
                request.forge,
                request.repo,
                request.number,
                exc,
            )
        if verified is not None and not verified.merged:
            log.warning(
                "merge of %s:%s#%s answered merged, the PR does not show it yet",
                request.forge,
                request.repo,
                request.number,
            )
        if verified is not None and verified.merged:
            sha = sha or verified.merge_commit_sha
        outcome = await self._merged(claim, verified or pull, pin, method, attempt, sha)
        outcome.approvers = approvers
        return outcome

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
            self._finish(
                claim,
                attempt,
                merge_rows.UNKNOWN,
                MergeOutcome(False, pin, codes=("forge_unavailable",), detail=detail),
            )
            raise MergeError(503, "forge_unavailable", detail) from None
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
            self._finish(claim, attempt, merge_rows.HEAD_MOVED, outcome)
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
            self._finish(claim, attempt, merge_rows.NOT_MERGEABLE, outcome)
            return outcome
        detail = f"the merge call failed ({exc}); the pull request is not merged. Nothing was "
        detail += "retried: call again (the next attempt reads the live state first)"
        self._finish(
            claim,
            attempt,
            merge_rows.UNKNOWN,
            MergeOutcome(False, pin, codes=("forge_unavailable",), detail=detail),
        )
        if isinstance(exc, PermissionDenied | AuthenticationFailed):
            raise _forge_failure(exc)
        raise MergeError(
            503 if isinstance(exc, ForgeUnavailable | RateLimited) else 502,
            "forge_unavailable"
            if isinstance(exc, ForgeUnavailable | RateLimited)
            else ReasonCode.FORGE_ERROR.value,
            detail,
        )

    def _finish(self, claim: LeaseClaim, attempt: int, status: str, outcome: MergeOutcome) -> None:
        try:
            self.merges.finish(claim, attempt, status, codes=outcome.codes, detail=outcome.detail)
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
        existing = self.merges.merge_of(t.forge, t.repo, t.number)
        if existing is not None:
            outcome.recorded = True
            outcome.merge_commit_sha = outcome.merge_commit_sha or existing.merge_commit_sha
        try:
            if attempt is None and existing is None:
                attempt = self.merges.begin(claim, pin, method)
                outcome.attempt_id = attempt
            if attempt is not None:
                self.merges.finish(
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
            self.leases.release(claim)
        outcome.state_comment = await self._comment(t.forge, t.repo, t.number, pull)
        return outcome

    async def _head_moved(
        self,
        claim: LeaseClaim,
        request: MergeRequest,
        new_head: str | None,
        outcome: MergeOutcome,
    ) -> None:
        with contextlib.suppress(LeaseRefused):
            self.leases.release(claim)
        outcome.new_head = new_head
        if new_head and not same_sha(new_head, request.head_sha):
            self.leases.supersede_head(request.forge, request.repo, request.number, new_head)
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


def standalone_pipeline(
    settings: Settings,
    db: Any,
    forges: Mapping[str, Forge],
    leases: LeaseStore,
    worker: str,
    clock: Callable[[], float] = time.time,
) -> Any:
    """A review pipeline over the store, for the state comment and a re-review at a new head,
    where no review service runs (the command line). Its drainer is not started: what it
    records is posted inline or by a server's drainer."""
    from reviewbot.runtime.outbox import OutboxDrainer, StoreReviewerLeases
    from reviewbot.runtime.review import ReviewPipeline
    from reviewbot.store.reviews import ReviewStore

    store = ReviewStore(db, clock)
    reviewer = StoreReviewerLeases(leases, worker)
    drainer = OutboxDrainer(store, forges, reviewer, clock=clock)
    return ReviewPipeline(settings, store, forges, reviewer, drainer, clock=clock)


class ReviewRequestHook:
    """A :data:`ReReviewHook` that reviews the new head in this process, through ``pipeline``
    (where no server queues it through the gate: the command line)."""

    def __init__(self, pipeline: Any, *, source: str) -> None:
        self.pipeline = pipeline
        self.source = source

    async def __call__(self, forge: str, repo: str, number: int, head: str) -> object:
        from reviewbot.runtime.review import ReviewRequest

        request = ReviewRequest(
            forge, repo, number, head_sha=head, source=self.source, event="head_moved"
        )
        return await self.pipeline.review(request)
