"""Review jobs: an eligible head is reviewed exactly once, eventually, across crashes.

The gate writes a job with each eligible decision, claimed by this process for one claim
term. The gate's hook reviews it right away, renewing the claim while the review runs (an
external reviewer may take minutes), and finishes the job. When the process stops first
(kill -9, or a shutdown whose grace the review outlasts), the claim lapses and the loop of
whichever process runs next claims the job and reviews the head again from the live PR. The
pipeline's decision at the head and the outbox's unique key make the repeat harmless: the
review starts again at most, it is never posted twice.

While its claim is renewed no other process takes a job over. A holder that lost its claim
anyway (a renewal came too late, and another process had taken the job) stops the review
when a renewal finds out, and its verdict is refused by the job's fence in the recording
transaction: it logs the loss and leaves the job to the new holder.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable

from reviewbot.core.clock import Clock
from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.background import cancel_and_wait, repeat
from reviewbot.runtime.claims import ClaimLost, Sleep, holding
from reviewbot.runtime.review.outbox import Fence, crash_point
from reviewbot.runtime.review.pipeline import ReviewOutcome, ReviewPipeline, ReviewRequest
from reviewbot.store import review_jobs
from reviewbot.store.database import Database, is_transient
from reviewbot.store.review_jobs import JobClaim, ReviewJob

log = logging.getLogger(__name__)

# The review of a job: given the fence its verdict is recorded under (None: no job).
Work = Callable[[Fence | None], Awaitable[object]]

AFTER_GATE = "after_gate"  # test-only crash point: the job is committed, no review started
MAX_ATTEMPTS = 5  # a job failing this often with an unexpected error is finished with it


class ReviewJobs:
    def __init__(
        self,
        db: Database,
        pipeline: ReviewPipeline,
        worker: str,
        *,
        clock: Clock,
        term_s: float,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """``sleep`` paces the renewals (a third of ``term_s`` apart); tests pass their own."""
        self.db = db
        self.pipeline = pipeline
        self.worker = worker
        self.clock = clock
        self.term_s = term_s
        self.sleep = sleep
        self.lost = 0  # jobs given up because another process took them over (metrics, tests)
        self._task: asyncio.Task[None] | None = None

    def claim(self) -> JobClaim:
        """A new claim: each names its own holder, so two claims in one process differ."""
        return JobClaim(f"{self.worker}/{uuid.uuid4().hex[:12]}", self.clock() + self.term_s)

    async def run(
        self, job_id: int | None, claim: JobClaim | None, attempts: int, work: Work
    ) -> None:
        """Do ``work`` for a claimed job, renewing the claim, then finish the job.

        A failure leaves the job claimed until its claim lapses (then it is retried), up to
        :data:`MAX_ATTEMPTS` (a store fault, without a bound); cancellation (shutdown)
        leaves it for the next start; a claim lost to another process leaves the job to
        that process.
        """
        if job_id is None or claim is None:
            await work(None)
            return
        crash_point(AFTER_GATE)
        holder = claim.worker
        if not await self._renew(job_id, holder):
            return  # the claim lapsed before the review started: another took the job
        try:
            done = await holding(
                work(review_jobs.fence(job_id, holder)),
                functools.partial(self._renew, job_id, holder),
                self.term_s / 3,
                what=f"review job {job_id}",
                sleep=self.sleep,
            )
        except asyncio.CancelledError:
            raise
        except ClaimLost:
            self._lost(job_id, holder)
            return
        except Exception as exc:
            if is_transient(exc):
                # The store failed, not the review: never a reason to give up on the head.
                # The job is tried again when its claim lapses, however often that takes.
                log.warning("review job %s: the store failed (%s); tried again later", job_id, exc)
                return
            log.exception("review job %s failed", job_id)
            if attempts >= MAX_ATTEMPTS:
                await self._finish(job_id, holder, f"{type(exc).__name__}: {exc}")
            return
        if _lease_held(done) and attempts < MAX_ATTEMPTS:
            # Another holder's reviewer lease: a live holder posts, and this job's next try
            # finds its verdict; one that died holding it (a crash) leaves the head to this
            # job, tried again when its claim lapses, as the lease does.
            log.info("review job %s: the reviewer lease is held; tried again later", job_id)
            return
        await self._finish(job_id, holder, None)

    def _claim_for(self, holder: str) -> JobClaim:
        return JobClaim(holder, self.clock() + self.term_s)

    async def _finish(self, job_id: int, holder: str, error: str | None) -> None:
        at = self.clock()
        if not await self.db.run(review_jobs.finish, self.db, job_id, holder, at, error):
            self._lost(job_id, holder)

    def _lost(self, job_id: int, holder: str) -> None:
        self.lost += 1
        log.warning(
            "review job %s: claim %s passed to another worker; its result is dropped",
            job_id,
            holder,
        )

    async def _renew(self, job_id: int, holder: str) -> bool:
        return await self.db.run(review_jobs.renew, self.db, job_id, self._claim_for(holder))

    # -- resuming ----------------------------------------------------------------------

    async def resume_once(self) -> int:
        """Claim and review one unfinished job whose claim lapsed; how many ran (0 or 1).

        One at a time: a job claimed here but waiting behind another's review would not be
        renewed, and another process would take it over."""
        claim = self.claim()
        jobs = await self.db.run(review_jobs.claim_lapsed, self.db, claim, self.clock(), 1)
        for job in jobs:
            await self.run(job.id, claim, job.attempts, _handle(self.pipeline, job))
        return len(jobs)

    def start(self) -> None:
        # A lapsed claim is noticed within a third of a term.
        every = self.term_s / 3
        self._task = asyncio.create_task(
            repeat(self._resume_all, every, log, "resuming review jobs failed")
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _resume_all(self) -> None:
        while await self.resume_once():
            pass


def _lease_held(done: object) -> bool:
    """Did the review stop at another holder's reviewer lease?"""
    return (
        isinstance(done, ReviewOutcome) and done.decision.reason_code == ReasonCode.LEASE_HELD.value
    )


def _request(job: ReviewJob, fence: Fence | None) -> ReviewRequest:
    return ReviewRequest(
        forge=job.forge,
        repo=job.repo,
        number=job.number,
        head_sha=job.head_sha,
        delivery_id=job.delivery_id,
        source=job.source,
        event=job.event,
        action=job.action,
        sender=job.sender,
        fence=fence,
    )


def _handle(pipeline: ReviewPipeline, job: ReviewJob) -> Work:
    return lambda fence: pipeline.handle(_request(job, fence))
