"""The worker pool that drains the delivery journal.

Each worker claims a batch of the oldest queued deliveries (``queued -> processing``, one
transaction), gates them one after the other, and records all their decisions and finishes
them in one transaction. Batches keep the store's write lock, which the acknowledgement path
needs for its journal commits, free most of the time. The journal wakes the workers when it
commits new deliveries; at start, deliveries a crash left ``queued`` or ``processing`` are
taken up again (``resume=False`` leaves ``processing`` ones alone: a pool sharing the store
with a process that may be working on them must not take them over). On stop, a batch in
flight (from the moment its claim is taken, when it shows ``processing``) gets a grace period
and is gated once; what does not finish in it goes back to ``queued`` for the next start.

The workers are supervised: one that raises is logged and started again after a backoff, and
a store error (disk full, I/O error, busy) while claiming, gating or re-queueing backs off
and retries instead of ending the worker, so the pool never shrinks. A batch that fails for
another reason is gated again one delivery at a time, so one bad delivery holds up no other.
Deliveries waiting out a retry backoff are claimed when it ends (a timer wakes the pool).

With ``claim_as`` (replicas on one database) each batch is claimed under a name of its own
for a term, and the claim is renewed every third of the term while the batch is gated, so
a slow forge does not hand the batch to another replica. A batch whose claim was taken over
anyway (the process stalled past the term) is not recorded: the gate's record is fenced on
the claim, and a renewal that finds every delivery of the batch taken stops the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from reviewbot.core.attempts import RetryPolicy
from reviewbot.core.clock import Clock
from reviewbot.runtime.claims import ClaimLost, Sleep, holding
from reviewbot.store import decisions, journal
from reviewbot.store.database import Database, is_transient
from reviewbot.store.journal import DeliveryClaim, StoredDelivery

log = logging.getLogger(__name__)
T = TypeVar("T")

BatchFn = Callable[[Sequence[StoredDelivery]], Coroutine[Any, Any, object]]
RETRY_AFTER_FAILURE_S = 1.0
# Backoff of a worker restarted after it raised, and of a store call that failed transiently.
RESTART = RetryPolicy(max_attempts=1_000_000, base_s=0.05, max_s=5.0)
# While acknowledgements are being written, a worker waits for a quiet moment (checking
# every DEFER_STEP_S) before it takes a batch. Meanwhile the pool as a whole gates in
# slices: one small batch at a time, and after a slice that took t seconds the next waits
# t * (1 - GATE_SHARE) / GATE_SHARE, so gating takes at most GATE_SHARE of the time while
# acknowledgements keep coming. A slice takes longer the busier the process is, so under a
# burst that saturates it the ack path keeps its priority, and under a load it can carry
# the slices follow quickly and the queue keeps up. A burst is gated right after it.
DEFER_STEP_S = 0.005
POLL_MAX_S = 5.0  # replicas look for unclaimed or lapsed work at least this often
GATE_SHARE = 0.2


class WorkerPool:
    def __init__(
        self,
        db: Database,
        process_batch: BatchFn,
        *,
        size: int = 4,
        batch: int = 16,
        ingress_busy: Callable[[], bool] | None = None,
        gate_share: float = GATE_SHARE,
        clock: Clock = time.time,
        restart: RetryPolicy = RESTART,
        retry: RetryPolicy | None = None,
        claim_as: tuple[str, float] | None = None,
        resume: bool = True,
        sleep: Sleep = asyncio.sleep,
    ):
        """``sleep`` paces the renewal of claims (``claim_as``); tests pass their own."""
        self.db = db
        self.sleep = sleep
        # (holder, term in seconds): replicas on one database claim deliveries with a term,
        # so a replica that dies leaves them to lapse and another takes them up; ``None``
        # (one process per store): a start takes up everything left unfinished.
        self.claim_as = claim_as
        self._poller: asyncio.Task[None] | None = None
        self.process_batch = process_batch
        self.size = size
        self.batch = batch
        self.ingress_busy = ingress_busy
        self.gate_share = gate_share
        self._slice_due = 0.0  # loop time from which the next slice may start (busy only)
        self._slice_started: float | None = None  # the slice running now, if one is
        self.clock = clock
        self.restart = restart
        self.retry = retry or RetryPolicy()  # of one delivery that keeps failing
        self.resume = resume
        self.restarts = 0  # workers started again after they raised (health, metrics)
        self.store_errors = 0  # transient store errors retried
        self._retry_timer: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self._generation = 0  # bumped by every wake-up, so none is lost
        self._idle = asyncio.Event()
        self._busy = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # Workers between taking a claim and finishing its batch: stop() lets them finish.
        self._working: set[asyncio.Task[Any]] = set()
        # Batches being gated: their ids and the claim they hold (None: unclaimed).
        self._in_flight: dict[asyncio.Task[object], tuple[list[str], str | None]] = {}
        self._claims: set[asyncio.Future[list[StoredDelivery]]] = set()
        self._claimed: dict[str, str | None] = {}  # claimed here and not yet finished
        self.lost = 0  # deliveries whose claim another worker took over (metrics, tests)
        # Store calls run on threads of our own, so stop() can wait until none touches the
        # store any more (the store may be closed right after).
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gate-store")
        self.processed = 0

    async def start(self) -> int:
        """Take up unfinished deliveries and start the workers; returns how many were found.

        Without ``resume``, nothing is reset: queued deliveries are still claimed one by one
        (a claim is atomic, so no delivery is gated twice), ``processing`` ones are left to
        whoever holds them."""
        lapsed_at = None if self.claim_as is None else self.clock()
        resumed = (
            await self._store(
                functools.partial(journal.resume_unfinished, lapsed_at=lapsed_at), self.db
            )
            if self.resume
            else []
        )
        if resumed:
            log.info("resuming %d unfinished deliveries", len(resumed))
        for n in range(self.size):
            self._tasks.append(asyncio.create_task(self._supervise(n), name=f"gate-worker-{n}"))
        if self.claim_as is not None:
            self._poller = asyncio.create_task(self._poll(self.claim_as[1]), name="gate-poll")
        self.submit(resumed or ["start"])
        return len(resumed)

    async def _poll(self, term_s: float) -> None:
        """Replicas: look for work now and then. Another replica may have acknowledged a
        delivery and died before claiming it, or died holding claims that have lapsed since;
        nothing else would wake this pool for them."""
        while True:
            await asyncio.sleep(min(max(term_s / 4, 0.05), POLL_MAX_S))
            self.submit()

    def submit(self, delivery_ids: Iterable[str] = ()) -> None:
        """New deliveries are in the journal: wake the workers (the ids are not needed)."""
        self._generation += 1
        self._idle.clear()
        self._wake.set()

    async def wait_idle(self) -> None:
        """Until the journal has nothing queued for this pool (tests, one-shot commands)."""
        await self._idle.wait()

    def alive(self) -> int:
        """Workers running (a supervised worker that raised counts while it waits to restart)."""
        return sum(1 for task in self._tasks if not task.done())

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking work; let batches in flight (claims being taken included) finish for
        ``grace_s``, then re-queue what is left."""
        self._stopping = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if self._poller is not None:
            self._poller.cancel()
        # Idle workers stop at once. A worker taking a claim goes on to gate what it took
        # (that is in flight: it already shows ``processing``), then ends on its own.
        working = [task for task in self._tasks if task in self._working]
        for task in self._tasks:
            if task not in self._working:
                task.cancel()
        if working:
            await asyncio.wait(working, timeout=grace_s)
        in_flight = dict(self._in_flight)
        for task in self._tasks:
            task.cancel()  # past the grace; batches are shielded and re-queued below
        for busy, (ids, holder) in in_flight.items():
            busy.cancel()
            with contextlib.suppress(BaseException):
                await busy
            await self._requeue(ids, holder, uncharge=False)
            log.info("re-queued %d deliveries at shutdown", len(ids))
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()
        # A claim cut short by the stop still completes on its thread: wait for it, and put
        # what it took (and anything else claimed here and not finished) back in the queue.
        if self._claims:
            await asyncio.wait(list(self._claims))
        if self._claimed:
            by_holder: dict[str | None, list[str]] = {}
            for delivery_id, holder in sorted(self._claimed.items()):
                by_holder.setdefault(holder, []).append(delivery_id)
            with contextlib.suppress(Exception):  # a failing store: resumed at the next start
                for holder, ids in by_holder.items():
                    await self._store(
                        functools.partial(journal.requeue, holder=holder), self.db, ids
                    )
            self._claimed.clear()
        await asyncio.get_running_loop().run_in_executor(None, self._threads.shutdown, True)

    async def _store(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def _supervise(self, n: int) -> None:
        """Run one worker; if it raises, log it and start it again after a backoff."""
        failures = 0
        while not self._stopping:
            try:
                await self._work()
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._stopping:
                    return
                failures += 1
                self.restarts += 1
                delay = self.restart.delay(failures)
                log.exception("gate worker %d failed; restarting it in %.2f s", n, delay)
                await asyncio.sleep(delay)
                self._wake.set()  # look at the queue again on restart

    async def _retrying(self, fn: Callable[..., T], *args: Any) -> T:
        """A store call retried with backoff while it fails transiently (disk full, I/O)."""
        failures = 0
        while True:
            try:
                return await self._store(fn, *args)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failures += 1
                self.store_errors += 1
                delay = self.restart.delay(failures)
                log.warning("store error (%s); retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)

    async def _requeue(self, ids: Sequence[str], holder: str | None, *, uncharge: bool) -> None:
        """Back to the queue: only what ``holder`` still holds (another claimer's is its);
        ``uncharge``: the store failed, so the claim's attempt is given back."""
        requeue = functools.partial(journal.requeue, holder=holder, uncharge=uncharge)
        await self._retrying(requeue, self.db, list(ids))

    def _new_claim(self) -> DeliveryClaim | None:
        """A claim of its own for one batch (``None``: one process per store, no claims)."""
        if self.claim_as is None:
            return None
        holder, term_s = self.claim_as
        now = self.clock()
        return DeliveryClaim(f"{holder}/{uuid.uuid4().hex[:8]}", now, now + term_s)

    async def _schedule_retry(self) -> None:
        """Wake the pool when the earliest delivery waiting out a backoff is due."""
        due = await self._store(journal.next_attempt_at, self.db)
        if due is None:
            return
        delay = max(0.0, due - self.clock()) + 0.01
        loop = asyncio.get_running_loop()
        if self._retry_timer is not None:
            if self._retry_timer.when() <= loop.time() + delay:
                return
            self._retry_timer.cancel()
        self._retry_timer = loop.call_later(delay, self._retry_due)

    def _retry_due(self) -> None:
        self._retry_timer = None
        self.submit()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            while True:  # claim until the journal has nothing queued
                generation = self._generation
                self._busy += 1
                sliced = False
                try:
                    claimed, sliced = await self._claim()
                    if claimed:
                        await self._run(claimed)
                finally:
                    self._busy -= 1
                    self._working.discard(_this_task())
                    if sliced:
                        self._end_slice()
                if self._stopping:
                    return
                # Look again while something arrived since this look began: another worker
                # may already have cleared the wake-up meant for it.
                if not claimed and generation == self._generation:
                    break
            self._wake.clear()  # nothing new arrived while this worker looked
            await self._schedule_retry()
            if self._busy == 0 and generation == self._generation:
                self._idle.set()

    async def _defer_to_ingress(self) -> tuple[int, bool]:
        """Wait for a quiet spell or for the pool's next slice: the batch size to take, and
        whether it is a slice (ended by :meth:`_end_slice`)."""
        if self.ingress_busy is None:
            return self.batch, False
        loop = asyncio.get_running_loop()
        quiet = 0
        while quiet < 2:
            # Quiet twice with a turn of the loop between: requests that arrived while the
            # loop was stalled (by gating, say) are read in that turn and make it busy.
            if not self.ingress_busy():
                quiet += 1
                if quiet == 1:
                    await asyncio.sleep(DEFER_STEP_S)
                continue
            quiet = 0
            now = loop.time()
            if self._slice_started is None and now >= self._slice_due:
                # Still busy: a small batch, so each slice between acknowledgements is short.
                self._slice_started = now
                return max(1, self.batch // 4), True
            await asyncio.sleep(DEFER_STEP_S)
        return self.batch, False

    def _end_slice(self) -> None:
        """The slice this worker ran is over: the next waits in proportion to its length."""
        started, self._slice_started = self._slice_started, None
        if started is None:
            return
        now = asyncio.get_running_loop().time()
        self._slice_due = now + (now - started) * (1 - self.gate_share) / self.gate_share

    async def _claim(self) -> tuple[list[StoredDelivery], bool]:
        """Claimed deliveries, and whether they are a slice taken while ingress is busy."""
        size, sliced = await self._defer_to_ingress()
        self._working.add(_this_task())
        try:
            return await self._claim_size(size), sliced
        except BaseException:
            if sliced:
                self._end_slice()
            raise

    async def _claim_size(self, size: int) -> list[StoredDelivery]:
        mine = self._new_claim()
        now = self.clock() if mine is None else mine.now
        claim = asyncio.ensure_future(
            self._store(functools.partial(journal.claim_batch, claim=mine), self.db, size, now)
        )
        self._claims.add(claim)
        claim.add_done_callback(self._claim_done)
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.store_errors += 1
            log.warning("could not claim deliveries (%s); retrying", exc)
            await asyncio.sleep(RETRY_AFTER_FAILURE_S)
            self._wake.set()  # the queue still holds them: look again
            return []

    def _claim_done(self, claim: asyncio.Future[list[StoredDelivery]]) -> None:
        self._claims.discard(claim)
        if not claim.cancelled() and claim.exception() is None:
            self._claimed.update((d.delivery_id, d.held_by) for d in claim.result())

    async def _run(self, claimed: list[StoredDelivery]) -> None:
        try:
            await self._run_batch(claimed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_transient(exc):
                # The store failed: the batch is back in the queue, tried after a pause.
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                self._wake.set()
            elif len(claimed) == 1:
                await self._failed_attempt(claimed[0], exc)
            else:
                # Something in one delivery failed the batch: gate them one by one, so only
                # that one fails (and is retried with its own backoff).
                log.warning("gating a batch failed (%s); gating its deliveries one by one", exc)
                for delivery in claimed:
                    await self._run_alone(delivery.delivery_id)

    async def _run_alone(self, delivery_id: str) -> None:
        # Not charged again: only the delivery that fails on its own is charged (below).
        again = await self._retrying(
            functools.partial(journal.claim, charge=False, claim=self._new_claim()),
            self.db,
            delivery_id,
        )
        if again is None:
            return
        try:
            await self._run_batch([again], charged=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not is_transient(exc):
                await self._failed_attempt(again, exc)

    async def _failed_attempt(self, delivery: StoredDelivery, exc: Exception) -> None:
        """A delivery that failed on its own: its backoff, or ``dead`` after the last try
        (nothing when its claim passed to another worker meanwhile)."""
        await self._retrying(
            decisions.fail_delivery,
            self.db,
            delivery.delivery_id,
            decisions.describe(exc),
            self.retry,
            self.clock(),
            delivery.held_by,
        )

    async def _run_batch(self, claimed: list[StoredDelivery], *, charged: bool = True) -> None:
        """Gate a claimed batch; on failure it is logged, re-queued, and the error raised
        (a store fault gives back the attempt the claim ``charged``).

        A batch whose every delivery passed to another worker is dropped (logged)."""
        ids = [d.delivery_id for d in claimed]
        holder = claimed[0].held_by if self.claim_as is not None else None
        task: asyncio.Task[object] = asyncio.create_task(self._gate(claimed, holder))
        self._in_flight[task] = (ids, holder)
        try:
            # Shielded: stopping the pool must not cut a batch in half; stop() decides
            # whether it finishes or goes back to the queue.
            await asyncio.shield(task)
            self.processed += len(ids)
        except asyncio.CancelledError:
            # Always re-raise: a worker that swallowed stop()'s cancel (because its batch had
            # just finished) would wait for work forever and hang the shutdown.
            if task.done() and not task.cancelled() and task.exception() is None:
                self.processed += len(ids)
            raise
        except ClaimLost:
            self.lost += len(ids)
        except Exception as exc:
            log.exception("gating %d deliveries failed; they go back to the queue", len(ids))
            await self._requeue(ids, holder, uncharge=charged and is_transient(exc))
            raise
        finally:
            if task.done():
                self._in_flight.pop(task, None)
                for delivery_id in ids:
                    self._claimed.pop(delivery_id, None)

    async def _gate(self, claimed: list[StoredDelivery], holder: str | None) -> object:
        """The batch gated, its claim (if any) renewed meanwhile."""
        if holder is None or self.claim_as is None:
            return await self.process_batch(claimed)
        ids = [d.delivery_id for d in claimed]
        term_s = self.claim_as[1]

        async def renew() -> bool:
            now = self.clock()
            claim = DeliveryClaim(holder, now, now + term_s)
            lost = await self._store(journal.renew_claims, self.db, ids, claim)
            return len(lost) < len(ids)  # some of the batch is still this claim's

        return await holding(
            self.process_batch(claimed),
            renew,
            term_s / 3,
            what=f"{len(ids)} deliveries ({holder})",
            sleep=self.sleep,
        )


def _this_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None  # only ever called from a worker's task
    return task
