"""Renewal and fencing of claims, on both stores, with a clock and renewal ticks the test
moves by hand (nothing here waits for the wall clock).

A delivery batch or a review job whose claim is renewed while it is worked on is not taken
over past its original term; one whose renewals stopped is, by whoever asks after the term;
and the holder that lost it writes nothing: its decisions, its verdict, its finish and its
re-queue are refused, and a renewal that finds the claim taken stops the work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from itertools import count
from pathlib import Path
from typing import Any, cast

import pytest

from reviewbot.core.attempts import RetryPolicy
from reviewbot.ingress.errors import TriggerError
from reviewbot.runtime.ingestion.gate_runner import GateRunner
from reviewbot.runtime.ingestion.workers import WorkerPool
from reviewbot.runtime.review.jobs import MAX_ATTEMPTS, ReviewJobs
from reviewbot.sim.clock import ManualClock
from reviewbot.store import decisions, journal, review_jobs
from reviewbot.store.claims import ClaimLost
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord, ToRecord
from reviewbot.store.journal import DeliveryClaim, NewDelivery, StoredDelivery
from reviewbot.store.review_jobs import JobClaim
from reviewbot.store.reviews import NewDecision, ReviewStore
from tests.integration.review_support import wait_for
from tests.integration.server_support import WAIT_S, make_settings
from tests.support.store_faults import disk_io_error

HEAD = "c" * 40
T0 = 1_767_225_600.0
TERM_S = 60.0


def add_deliveries(db: Database, n: int) -> list[str]:
    ids = [f"d-{i:03d}" for i in range(n)]
    for i, delivery_id in enumerate(ids):
        journal.insert_delivery(db, NewDelivery(delivery_id, "api", b"{}", T0 + i))
    return ids


def decision_rows(db: Database) -> list[str]:
    with db.read() as tx:
        rows = tx.all("SELECT delivery_id FROM pr_gate_decisions ORDER BY delivery_id")
    return [r["delivery_id"] for r in rows]


def holders(db: Database) -> dict[str, tuple[str, str | None]]:
    with db.read() as tx:
        rows = tx.all("SELECT delivery_id, status, claimed_by FROM deliveries")
    return {r["delivery_id"]: (r["status"], r["claimed_by"]) for r in rows}


def skip_record(delivery: StoredDelivery, held_by: str | None) -> ToRecord:
    row = DecisionRecord(delivery.delivery_id, "api", "skip", (), T0)
    return ToRecord([row], finish_delivery=(True, None), held_by=held_by)


# --- the store: deliveries -------------------------------------------------------------------


def test_a_renewed_delivery_claim_is_not_taken_over_past_its_first_term(db: Database) -> None:
    (one,) = add_deliveries(db, 1)
    journal.claim_batch(db, 10, claim=DeliveryClaim("a", T0, T0 + 60))
    assert journal.renew_claims(db, [one], DeliveryClaim("a", T0 + 50, T0 + 110)) == []
    # Past the first term, within the renewed one: nobody takes it.
    assert journal.claim_batch(db, 10, claim=DeliveryClaim("b", T0 + 100, T0 + 160)) == []
    assert journal.resume_unfinished(db, lapsed_at=T0 + 100) == []
    # Renewals stopped: past the renewed term it is taken over.
    (taken,) = journal.claim_batch(db, 10, claim=DeliveryClaim("b", T0 + 110, T0 + 170))
    assert (taken.delivery_id, taken.claimed_by, taken.attempts) == (one, "b", 2)


def test_the_holder_that_lost_a_delivery_writes_nothing_for_it(db: Database) -> None:
    mine, theirs = add_deliveries(db, 2)
    claimed = journal.claim_batch(db, 10, claim=DeliveryClaim("a", T0, T0 + 60))
    assert {d.claimed_by for d in claimed} == {"a"}
    # One of the batch's claims lapses and is taken over (a claimed one at a time).
    journal.renew_claims(db, [mine], DeliveryClaim("a", T0 + 50, T0 + 110))
    (taken,) = journal.claim_batch(db, 10, claim=DeliveryClaim("b", T0 + 61, T0 + 121))
    assert taken.delivery_id == theirs
    # The old holder's renewal names what it lost, and renews the rest.
    assert journal.renew_claims(db, [mine, theirs], DeliveryClaim("a", T0 + 70, T0 + 130)) == [
        theirs
    ]
    # Its record: written for the delivery it holds, refused for the one it lost.
    by_id = {d.delivery_id: d for d in claimed}
    results = decisions.record_many(db, [skip_record(by_id[d], "a") for d in (mine, theirs)])
    assert [r.lost for r in results] == [False, True]
    assert decision_rows(db) == [mine]
    # Neither a re-queue nor a failed attempt of the old holder touches the lost one.
    journal.requeue(db, [theirs], holder="a")
    lost = decisions.fail_delivery(db, theirs, "boom", RetryPolicy(), T0 + 71, "a")
    assert lost.lost and lost.records == ()
    assert holders(db) == {mine: ("done", "a"), theirs: ("processing", "b")}
    # The new holder records it.
    (result,) = decisions.record_many(db, [skip_record(taken, "b")])
    assert not result.lost
    assert decision_rows(db) == [mine, theirs]
    # A finished delivery is held by nobody: gating it again (a replay) is not fenced.
    done = journal.get_delivery(db, mine)
    assert done is not None and (done.claimed_by, done.held_by) == ("a", None)


# --- the store: review jobs ------------------------------------------------------------------

_decision_ids = count(1)


def add_job(db: Database, claim: JobClaim) -> int:
    with db.write() as tx:
        return review_jobs.insert_in(
            tx,
            decision_id=next(_decision_ids),
            delivery_id="d",
            source="github",
            forge="github",
            repo="acme/api",
            number=7,
            head_sha=HEAD,
            event="pull_request",
            action="opened",
            sender="dev",
            claim=claim,
            created_at=T0,
        )


def verdict() -> NewDecision:
    return NewDecision("github", "acme/api", 7, HEAD, "approve", "checks_passed")


def verdicts(db: Database) -> int:
    with db.read() as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM review_decisions")
    assert row is not None
    return int(row["n"])


def test_a_stale_job_holder_records_no_verdict_and_cannot_finish(db: Database) -> None:
    store = ReviewStore(db, lambda: T0)
    job = add_job(db, JobClaim("a", until=T0 + 30))
    assert review_jobs.renew(db, job, JobClaim("a", T0 + 50))
    assert review_jobs.claim_lapsed(db, JobClaim("b", T0 + 100), now=T0 + 40) == []
    # a stops renewing; b takes the job over after the renewed term.
    (taken,) = review_jobs.claim_lapsed(db, JobClaim("b", T0 + 110), now=T0 + 50)
    assert taken.id == job
    with pytest.raises(ClaimLost):
        store.record_decision(verdict(), fence=review_jobs.fence(job, "a"))
    assert verdicts(db) == 0
    assert review_jobs.finish(db, job, "a", T0 + 60) is False
    # The holder records and finishes.
    store.record_decision(verdict(), fence=review_jobs.fence(job, "b"))
    assert verdicts(db) == 1
    assert review_jobs.finish(db, job, "b", T0 + 60) is True
    assert review_jobs.unfinished(db) == []


# --- the runtime: renewal ticks the test controls --------------------------------------------


class Ticks:
    """The ``sleep`` of the renewers: each sleeps until :meth:`tick` wakes every sleeper."""

    def __init__(self) -> None:
        self._sleepers: list[asyncio.Future[None]] = []
        self.asleep = asyncio.Event()

    async def sleep(self, _seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._sleepers.append(fut)
        self.asleep.set()
        await fut

    async def tick(self) -> None:
        """Wake the renewers, and wait until each renewed and sleeps again."""
        await asyncio.wait_for(self.asleep.wait(), WAIT_S)
        sleepers, self._sleepers = self._sleepers, []
        self.asleep.clear()
        for fut in sleepers:
            fut.set_result(None)
        await asyncio.wait_for(self.asleep.wait(), WAIT_S)

    async def tick_once(self) -> None:
        """Wake the renewers without waiting for them to sleep again (one may stop)."""
        await asyncio.wait_for(self.asleep.wait(), WAIT_S)
        sleepers, self._sleepers = self._sleepers, []
        self.asleep.clear()
        for fut in sleepers:
            fut.set_result(None)


class Gate:
    """The real gate runner behind a gate the test opens: gating waits for ``release``."""

    def __init__(self, db: Database, tmp_path: Path, clock: ManualClock) -> None:
        def unreadable(delivery: StoredDelivery, forges: Sequence[str]) -> Any:
            raise TriggerError("not a delivery the test gates")

        self.runner = GateRunner(
            db, make_settings(tmp_path / "settings"), {}, parse=unreadable, clock=clock
        )
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def process(self, batch: Sequence[StoredDelivery]) -> object:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return await self.runner.process_batch(batch)


@asynccontextmanager
async def pool_on(
    db: Database, gate: Gate, clock: ManualClock, ticks: Ticks
) -> AsyncIterator[WorkerPool]:
    pool = WorkerPool(
        db,
        gate.process,
        size=1,
        batch=8,
        clock=clock,
        claim_as=("replica-a", TERM_S),
        sleep=ticks.sleep,
    )
    await pool.start()
    try:
        await asyncio.wait_for(gate.entered.wait(), WAIT_S)
        yield pool
    finally:
        gate.release.set()
        await pool.stop(grace_s=WAIT_S)
        await gate.runner.aclose()


async def test_a_batch_gated_past_its_term_keeps_its_claim_and_is_recorded_once(
    db: Database, tmp_path: Path
) -> None:
    ids = await db.run(add_deliveries, db, 2)
    clock, ticks = ManualClock(T0), Ticks()
    gate = Gate(db, tmp_path, clock)
    async with pool_on(db, gate, clock, ticks) as pool:
        for _ in range(3):  # 90 s of gating against a 60 s term, renewed every 30 s
            clock.advance(TERM_S / 2)
            await ticks.tick()
            other = DeliveryClaim("replica-b", clock(), clock() + TERM_S)
            assert await db.run(journal.claim_batch, db, 10, None, claim=other) == []
        gate.release.set()
        await wait_for(lambda: sorted(decision_rows(db)) == ids, "the record")
        assert pool.lost == 0
    assert sorted(decision_rows(db)) == ids  # one decision each, by the first holder
    # (an unreadable delivery ends ``failed``: finished, not left to be gated again)
    assert {status for status, _ in holders(db).values()} == {"failed"}
    assert all((h or "").startswith("replica-a/") for _, h in holders(db).values())


async def test_a_batch_whose_renewals_stopped_is_taken_over_and_its_result_dropped(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await db.run(add_deliveries, db, 2)
    clock, ticks = ManualClock(T0), Ticks()
    gate = Gate(db, tmp_path, clock)
    async with pool_on(db, gate, clock, ticks):
        # The process stalls: no renewal runs, the term lapses, another replica takes over.
        clock.advance(TERM_S + 1)
        other = DeliveryClaim("replica-b", clock(), clock() + TERM_S)
        taken = await db.run(journal.claim_batch, db, 10, None, claim=other)
        assert sorted(d.delivery_id for d in taken) == ids
        # The stalled gate finishes and records: refused, logged, nothing written.
        with caplog.at_level(logging.WARNING):
            gate.release.set()
            await wait_for(lambda: "passed to another worker" in caplog.text, "the drop")
        assert decision_rows(db) == []
    # Stopping the pool re-queued nothing of what replica-b holds.
    assert set(holders(db).values()) == {("processing", "replica-b")}
    results = decisions.record_many(db, [skip_record(d, "replica-b") for d in taken])
    assert not any(r.lost for r in results) and decision_rows(db) == ids


async def test_a_renewal_that_finds_the_batch_taken_stops_the_gate(
    db: Database, tmp_path: Path
) -> None:
    ids = await db.run(add_deliveries, db, 2)
    clock, ticks = ManualClock(T0), Ticks()
    gate = Gate(db, tmp_path, clock)
    async with pool_on(db, gate, clock, ticks) as pool:
        clock.advance(TERM_S + 1)
        other = DeliveryClaim("replica-b", clock(), clock() + TERM_S)
        assert len(await db.run(journal.claim_batch, db, 10, None, claim=other)) == 2
        await ticks.tick_once()  # the late renewal finds both taken
        await wait_for(lambda: pool.lost == len(ids), "the loss")
        assert gate.cancelled
    assert decision_rows(db) == []
    assert set(holders(db).values()) == {("processing", "replica-b")}


# --- the runtime: review jobs ----------------------------------------------------------------


class Review:
    """A review job's work: waits for ``release``, then records its verdict under the fence."""

    def __init__(self, db: Database, clock: ManualClock) -> None:
        self.store = ReviewStore(db, clock)
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def __call__(self, fence: Any) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        await self.store.run(self.store.record_decision, verdict(), fence=fence)


def review_jobs_on(db: Database, clock: ManualClock, ticks: Ticks) -> ReviewJobs:
    # The pipeline is only used to resume jobs, which these tests do not.
    return ReviewJobs(
        db, cast(Any, None), "replica-a", clock=clock, term_s=TERM_S, sleep=ticks.sleep
    )


async def test_a_review_renewed_past_its_term_is_not_taken_over_and_finishes_once(
    db: Database,
) -> None:
    clock, ticks = ManualClock(T0), Ticks()
    jobs = review_jobs_on(db, clock, ticks)
    claim = jobs.claim()
    job = await db.run(add_job, db, claim)
    review = Review(db, clock)
    running = asyncio.create_task(jobs.run(job, claim, 1, review))
    await asyncio.wait_for(review.started.wait(), WAIT_S)
    for _ in range(4):  # 120 s of reviewing against a 60 s term
        clock.advance(TERM_S / 2)
        await ticks.tick()
        other = JobClaim("replica-b", clock() + TERM_S)
        assert await db.run(review_jobs.claim_lapsed, db, other, clock()) == []
    review.release.set()
    await asyncio.wait_for(running, WAIT_S)
    assert verdicts(db) == 1 and jobs.lost == 0
    assert await db.run(review_jobs.unfinished, db) == []


async def test_a_review_whose_claim_was_taken_over_records_nothing(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    clock, ticks = ManualClock(T0), Ticks()
    jobs = review_jobs_on(db, clock, ticks)
    claim = jobs.claim()
    job = await db.run(add_job, db, claim)
    review = Review(db, clock)
    running = asyncio.create_task(jobs.run(job, claim, 1, review))
    await asyncio.wait_for(review.started.wait(), WAIT_S)
    clock.advance(TERM_S + 1)  # stalled: no renewal ran
    (taken,) = await db.run(review_jobs.claim_lapsed, db, JobClaim("b", clock() + 60), clock())
    with caplog.at_level(logging.WARNING):
        review.release.set()
        await asyncio.wait_for(running, WAIT_S)
    assert verdicts(db) == 0 and jobs.lost == 1
    assert "passed to another worker" in caplog.text
    (left,) = await db.run(review_jobs.unfinished, db)
    assert (left.id, left.attempts) == (taken.id, 2)


async def test_a_renewal_that_finds_the_job_taken_stops_the_review(db: Database) -> None:
    clock, ticks = ManualClock(T0), Ticks()
    jobs = review_jobs_on(db, clock, ticks)
    claim = jobs.claim()
    job = await db.run(add_job, db, claim)
    review = Review(db, clock)
    running = asyncio.create_task(jobs.run(job, claim, 1, review))
    await asyncio.wait_for(review.started.wait(), WAIT_S)
    clock.advance(TERM_S + 1)
    await db.run(review_jobs.claim_lapsed, db, JobClaim("b", clock() + 60), clock())
    await ticks.tick_once()
    await asyncio.wait_for(running, WAIT_S)  # returns without the release
    assert review.cancelled and jobs.lost == 1 and verdicts(db) == 0
    assert len(await db.run(review_jobs.unfinished, db)) == 1


@pytest.mark.parametrize("fault", ["store", "bug"])
async def test_a_review_failing_on_its_last_attempt_ends_only_for_a_fault_of_its_own(
    db: Database, fault: str
) -> None:
    """At its last attempt a review that fails on a bug is finished with the error; one the
    store failed is left for its claim to lapse and is tried again: a disk outage never
    leaves a head without its review."""
    clock, ticks = ManualClock(T0), Ticks()
    jobs = review_jobs_on(db, clock, ticks)
    claim = jobs.claim()
    job = await db.run(add_job, db, claim)

    async def failing(fence: Any) -> None:
        if fault == "bug":
            raise RuntimeError("a bug in the review")
        raise disk_io_error()

    await asyncio.wait_for(jobs.run(job, claim, MAX_ATTEMPTS, failing), WAIT_S)
    left = await db.run(review_jobs.unfinished, db)
    if fault == "store":
        assert [j.id for j in left] == [job]
        clock.advance(TERM_S + 1)  # its claim lapses: another try takes it
        taken = await db.run(review_jobs.claim_lapsed, db, JobClaim("b", clock() + 60), clock())
        assert [j.id for j in taken] == [job]
    else:
        assert left == []
        with db.read() as tx:
            row = tx.one("SELECT status, last_error FROM review_jobs WHERE id = ?", (job,))
        assert row is not None and row["last_error"] == "RuntimeError: a bug in the review"
