"""The outbox drainer: turns recorded verdicts into native reviews, exactly once.

For each pending outbox row, under the reviewer lease pinned to the row's head:

1. count the attempt (committed before anything is sent);
2. re-read the PR: a moved head or a closed PR drops the post (``head_moved`` recorded); a
   first attempt right after its evaluation (on GitHub, whose reads cost rate limit) takes
   the evaluation's read when it is at most ``REREAD_AFTER_S`` old;
3. if an earlier attempt may have posted (attempts > 1), list the bot's reviews at that
   SHA and adopt the one whose body carries the row's hidden marker;
4. otherwise submit the review pinned to the head SHA and record the forge's review id.

5xx, timeouts and rate limits leave the row pending with a later ``next_attempt_at``
(``retry_after`` honoured); the loop resumes pending rows after a restart. A crash between
the post and the record is covered by step 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from reviewbot.core import errors
from reviewbot.core.lease_history import EndReason, HistoryEntry
from reviewbot.core.leases import Lease, LeaseClaim, LeaseTarget, Refused, Role
from reviewbot.core.models import PullRequestSnapshot, ReviewEvent, ReviewState
from reviewbot.core.prstate import HEAD_MOVED, DecisionKind
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    HeadMoved,
    NotFound,
    PendingReview,
    PermissionDenied,
    RateLimited,
)
from reviewbot.observe import Telemetry
from reviewbot.runtime.background import cancel_and_wait
from reviewbot.runtime.pull_locks import PullLocks
from reviewbot.store.database import Tx
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.review_outbox import DROPPED, FAILED, PENDING, POSTED, OutboxRow, OutboxStore
from reviewbot.store.reviews import NewDecision

log = logging.getLogger(__name__)

# The pre-post check reads the pull again unless this task read it at most this long ago.
REREAD_AFTER_S = 1.0

# Test-only: when set to a crash point name, the process exits with status 137 at that
# point, as if killed, so tests can prove recovery. Never set it in production.
CRASH_ENV = "REVIEWBOT_TEST_CRASH_AT"
AFTER_OUTBOX = "after_outbox"
AFTER_POST = "after_post"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os._exit(137)


Fence = Callable[[Tx], None]

# Outcomes of a drain attempt that closed the row.
FINISHED = frozenset({"posted", "adopted", "dropped", "failed"})


class FenceRefused(errors.Refused):
    """A guarded write found that the lease epoch it carries is no longer the live one."""

    code = "superseded"


class ReviewerLeases(Protocol):
    """The reviewer lease as the pipeline uses it; the worker identity is bound inside."""

    @property
    def worker(self) -> str: ...

    def acquire(
        self, forge: str, repo: str, number: int, head_sha: str
    ) -> LeaseClaim | Refused: ...

    def release(self, claim: LeaseClaim) -> None: ...

    def fence(self, claim: LeaseClaim) -> Fence:
        """A callable for a write transaction; raises :class:`FenceRefused` when not held."""
        ...

    def supersede_head(self, forge: str, repo: str, number: int, new_head: str) -> None: ...

    def active(self, forge: str, repo: str, number: int) -> list[Lease]: ...

    def history(self, forge: str, repo: str, number: int) -> list[HistoryEntry]: ...


class StoreReviewerLeases:
    """:class:`ReviewerLeases` over the store's :class:`~reviewbot.store.leases.LeaseStore`."""

    def __init__(self, leases: LeaseStore, worker: str) -> None:
        self.store = leases
        self._worker = worker

    @property
    def worker(self) -> str:
        return self._worker

    @staticmethod
    def target(forge: str, repo: str, number: int) -> LeaseTarget:
        return LeaseTarget(forge, repo, number, Role.REVIEWER)

    def acquire(self, forge: str, repo: str, number: int, head_sha: str) -> LeaseClaim | Refused:
        try:
            lease = self.store.acquire(self.target(forge, repo, number), self._worker, head_sha)
        except LeaseRefused as exc:
            return exc.refusal
        return lease.claim

    def release(self, claim: LeaseClaim) -> None:
        with contextlib.suppress(LeaseRefused):
            self.store.release(claim, reason=EndReason.REVIEWED)

    def fence(self, claim: LeaseClaim) -> Fence:
        def check(tx: Tx) -> None:
            try:
                self.store.check_held(tx, claim)
            except LeaseRefused as exc:
                raise FenceRefused(str(exc)) from exc

        return check

    def supersede_head(self, forge: str, repo: str, number: int, new_head: str) -> None:
        self.store.supersede_head(forge, repo, number, new_head)

    def active(self, forge: str, repo: str, number: int) -> list[Lease]:
        return self.store.list_leases(forge=forge, repo=repo, number=number, live_only=True)

    def history(self, forge: str, repo: str, number: int) -> list[HistoryEntry]:
        return self.store.history(forge, repo, number, limit=50)


class PostOutcome:
    """What one drain attempt of one row did."""

    def __init__(self, row: OutboxRow, status: str, detail: str = "", review_id: int | None = None):
        self.row = row
        self.status = status  # posted, adopted, dropped, failed, retry, busy, skipped
        self.detail = detail
        self.review_id = review_id
        # The pull as read live just before a review was posted: what the state comment
        # after it may judge on instead of reading the pull again.
        self.pull: PullRequestSnapshot | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "outbox_id": self.row.id,
            "verdict": self.row.verdict,
            "event": self.row.event,
            "head_sha": self.row.head_sha,
            "status": self.status,
            "detail": self.detail,
            "review_id": self.review_id,
        }


class OutboxDrainer:
    def __init__(
        self,
        store: OutboxStore,
        forges: Mapping[str, Forge],
        leases: ReviewerLeases,
        *,
        locks: PullLocks | None = None,
        clock: Callable[[], float],
        backoff_base_s: float = 2.0,
        backoff_max_s: float = 300.0,
        max_attempts: int = 20,
        idle_poll_s: float = 1.0,
        on_finished: Callable[[OutboxRow], object] | None = None,
        after_drain: Callable[[str, str, int], Awaitable[object]] | None = None,
        telemetry: Telemetry | None = None,
        parity: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.store = store
        self.telemetry = telemetry or Telemetry()
        self.forges = forges
        self.leases = leases
        self.locks = locks or PullLocks()
        self.clock = clock
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_attempts = max_attempts
        self.idle_poll_s = idle_poll_s
        self.on_finished = on_finished
        # Run (outside the PR lock) after the loop finished a row: the state comment.
        self.after_drain = after_drain
        # Asked before each post (runtime.parity.ParityGate): a process that is not what is
        # on disk posts no review; the row waits, pending, for a process that is.
        self.parity = parity
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- the loop --------------------------------------------------------------------

    def start(self) -> None:
        """Drain pending rows (including those a previous process left) until stopped."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="review-outbox")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self.drain_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad row must not stop the drainer
                self.telemetry.error("outbox", "outbox drain failed")
            self._wake.clear()
            next_at = await self.store.run(self.store.next_due_at)
            timeout = self.idle_poll_s
            if next_at is not None:
                timeout = min(timeout, max(0.01, next_at - self.clock()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def drain_due(self) -> list[PostOutcome]:
        """One pass over every row that is due now."""
        outcomes = []
        for row in await self.store.run(self.store.due, self.clock()):
            async with self.locks.hold(row.forge, row.repo, row.number):
                outcome = await self.post_locked(row.id)
            outcomes.append(outcome)
            if outcome.status in FINISHED and self.after_drain is not None:
                try:
                    await self.after_drain(row.forge, row.repo, row.number)
                except Exception:  # the state comment is informative; the post stands
                    log.exception("after-drain hook failed for outbox row %s", row.id)
        return outcomes

    # -- one row ---------------------------------------------------------------------

    async def post(self, outbox_id: int) -> PostOutcome | None:
        row = await self.store.run(self.store.get, outbox_id)
        if row is None:
            return None
        async with self.locks.hold(row.forge, row.repo, row.number):
            return await self.post_locked(outbox_id)

    async def post_locked(self, outbox_id: int, *, claim: LeaseClaim | None = None) -> PostOutcome:
        """Drain one row; the caller holds the PR's lock (and may lend its lease claim)."""
        if claim is not None:  # the row is read and its attempt begun in one store call
            fence = self.leases.fence(claim)
            row, started = await self.store.run(self._read_and_begin, outbox_id, fence)
        else:
            row = await self.store.run(self.store.get, outbox_id)
        if row is None:
            raise KeyError(f"no outbox row {outbox_id}")
        if row.status != PENDING:
            return PostOutcome(row, "skipped", f"already {row.status}", row.forge_review_id)
        refused = None if self.parity is None else await self.parity()
        if refused is not None:
            later = self.clock() + self._delay(row.attempts)
            await self.store.run(
                self.store.retry_later, row.id, later, f"restart_required: {refused}"
            )
            return PostOutcome(row, "busy", refused)
        if claim is not None:
            return await self._attempted(row, started, claim, fence)
        got = await self.store.run(
            self.leases.acquire, row.forge, row.repo, row.number, row.head_sha
        )
        if isinstance(got, Refused):
            # Another live worker holds the reviewer role for this PR: try again later.
            await self.store.run(
                self.store.retry_later,
                row.id,
                self.clock() + self._delay(row.attempts),
                got.detail,
            )
            return PostOutcome(row, "busy", got.detail)
        try:
            return await self._attempt(row, got)
        finally:
            with contextlib.suppress(Exception):
                await self.store.run(self.leases.release, got)

    def _read_and_begin(
        self, outbox_id: int, fence: Fence
    ) -> tuple[OutboxRow | None, OutboxRow | FenceRefused | None]:
        """The row, and (when it is pending) its attempt begun under ``fence``: what
        :meth:`_attempted` is given, or the refusal of the fence."""
        row = self.store.get(outbox_id)
        if row is None or row.status != PENDING:
            return row, None
        try:
            return row, self.store.begin_attempt(row.id, fence=fence)
        except FenceRefused as exc:
            return row, exc

    async def _attempt(self, row: OutboxRow, claim: LeaseClaim) -> PostOutcome:
        fence = self.leases.fence(claim)
        started: OutboxRow | FenceRefused | None
        try:
            started = await self.store.run(self.store.begin_attempt, row.id, fence=fence)
        except FenceRefused as exc:
            started = exc
        return await self._attempted(row, started, claim, fence)

    async def _attempted(
        self,
        row: OutboxRow,
        started: OutboxRow | FenceRefused | None,
        claim: LeaseClaim,
        fence: Fence,
    ) -> PostOutcome:
        """Post the row whose attempt ``started`` (or say why it did not)."""
        if isinstance(started, FenceRefused):
            return PostOutcome(row, "busy", str(started))
        if started is None:
            return PostOutcome(row, "skipped", "no longer pending")
        row = started
        forge = self.forges[row.forge]
        note = self._note(row, claim)
        try:
            # A first attempt posting right after its evaluation may take the evaluation's
            # own read as the re-read when it is at most REREAD_AFTER_S old: a new read would
            # narrow the race with a push by no more than that read's age.
            within = REREAD_AFTER_S if row.attempts == 1 else 0.0
            pull = await forge.get_pull(row.repo, row.number, read_within_s=within)
            if pull.state != "open" or pull.merged:
                detail = f"the pull request is {'merged' if pull.merged else pull.state}"
                return await self._close(
                    row,
                    DROPPED,
                    detail,
                    note(DecisionKind.PR_CLOSED, ReasonCode.PR_CLOSED.value, detail),
                )
            if pull.head_sha != row.head_sha:
                detail = f"the head moved from {row.head_sha} to {pull.head_sha} before posting"
                return await self._close(
                    row, DROPPED, detail, note(HEAD_MOVED, ReasonCode.HEAD_MOVED.value, detail)
                )
            if row.attempts > 1:
                adopted = await self._find_posted(forge, row)
                if adopted is not None:
                    detail = f"adopted review {adopted} posted by an earlier attempt"
                    return await self._close(
                        row,
                        POSTED,
                        detail,
                        note(DecisionKind.POSTED, ReasonCode.REVIEW_POSTED.value, detail),
                        adopted,
                        fence,
                    )
            review = await forge.submit_review(
                row.repo,
                row.number,
                commit_sha=row.head_sha,
                event=ReviewEvent(row.event),
                body=row.body,
                comments=row.comments,
            )
            crash_point(AFTER_POST)
            if review.state is ReviewState.PENDING:
                raise PendingReview("the forge stored the review as pending", operation="submit")
            detail = f"review {review.id} posted at {row.head_sha}"
            closed = await self._close(
                row,
                POSTED,
                detail,
                note(DecisionKind.POSTED, ReasonCode.REVIEW_POSTED.value, detail),
                review.id,
                fence,
            )
            closed.pull = pull
            return closed
        except (ForgeUnavailable, RateLimited) as exc:
            return self._retry(row, exc)
        except HeadMoved as exc:
            detail = f"the forge refused the review: {exc}"
            return await self._close(
                row, DROPPED, detail, note(HEAD_MOVED, ReasonCode.HEAD_MOVED.value, detail)
            )
        except (PermissionDenied, AuthenticationFailed, NotFound, PendingReview) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            return await self._close(
                row, FAILED, detail, note(DecisionKind.ERROR, ReasonCode.FORGE_ERROR.value, detail)
            )
        except ForgeError as exc:
            if row.attempts >= self.max_attempts:
                detail = f"gave up after {row.attempts} attempts: {exc}"
                return await self._close(
                    row,
                    FAILED,
                    detail,
                    note(DecisionKind.ERROR, ReasonCode.FORGE_ERROR.value, detail),
                )
            return self._retry(row, exc)
        except FenceRefused as exc:
            # Posted (maybe) but the record was fenced off: the row stays pending and the
            # next attempt adopts the review by its marker.
            await self.store.run(self.store.retry_later, row.id, self.clock(), str(exc))
            return PostOutcome(row, "busy", str(exc))

    def _note(self, row: OutboxRow, claim: LeaseClaim) -> Callable[[str, str, str], NewDecision]:
        def make(decision: str, code: str, detail: str) -> NewDecision:
            return NewDecision(
                forge=row.forge,
                repo=row.repo,
                number=row.number,
                head_sha=row.head_sha,
                decision=decision,
                reason_code=code,
                detail=detail,
                source="outbox",
                worker=claim.worker,
                epoch=claim.epoch,
            )

        return make

    async def _find_posted(self, forge: Forge, row: OutboxRow) -> int | None:
        me = await forge.bot_login()
        for review in await forge.list_reviews(row.repo, row.number):
            if (
                review.reviewer == me
                and row.marker in review.body
                and review.commit_sha in (None, row.head_sha)
                and review.state is not ReviewState.PENDING
            ):
                return review.id
        return None

    async def _close(
        self,
        row: OutboxRow,
        status: str,
        detail: str,
        decision: NewDecision,
        review_id: int | None = None,
        fence: Fence | None = None,
    ) -> PostOutcome:
        done, finished = await self.store.run(
            self._finish,
            row.id,
            status,
            decision=decision,
            forge_review_id=review_id,
            error=None if status == POSTED else detail,
            fence=fence,
        )
        if not done:
            return PostOutcome(row, "skipped", "closed by another attempt")
        label = "adopted" if status == POSTED and detail.startswith("adopted") else status
        if status == POSTED:
            self.telemetry.review_posted(row, review_id, adopted=label == "adopted")
        if self.on_finished is not None and finished is not None:
            self.on_finished(finished)
        return PostOutcome(row, label, detail, review_id)

    def _finish(
        self,
        outbox_id: int,
        status: str,
        *,
        decision: NewDecision,
        forge_review_id: int | None,
        error: str | None,
        fence: Fence | None,
    ) -> tuple[bool, OutboxRow | None]:
        """Close the row (:meth:`OutboxStore.finish`); whether it was closed here, and the
        closed row when ``on_finished`` is to hear of it (read in the same store call)."""
        closed = self.store.finish(
            outbox_id,
            status,
            decision=decision,
            forge_review_id=forge_review_id,
            error=error,
            fence=fence,
        )
        if not closed:
            return False, None
        return True, self.store.get(outbox_id) if self.on_finished is not None else None

    def _retry(self, row: OutboxRow, exc: ForgeError) -> PostOutcome:
        delay = self._delay(row.attempts)
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            delay = max(exc.retry_after, 0.0)
        self.store.retry_later(row.id, self.clock() + delay, str(exc))
        self._wake.set()
        return PostOutcome(row, "retry", f"{exc}; next attempt in {delay:g}s")

    def _delay(self, attempts: int) -> float:
        return float(min(self.backoff_base_s * 2.0 ** max(attempts - 1, 0), self.backoff_max_s))
