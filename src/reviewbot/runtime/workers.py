"""The worker pool that drains the delivery journal.

Each worker takes a delivery id, claims it (``queued -> processing``) and hands it to the
processing function, which records its decisions and finishes it in one transaction. At
start, deliveries a crash left ``queued`` or ``processing`` are queued again. On stop, work
in flight gets a grace period; what does not finish in it is put back to ``queued`` for the
next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.journal import StoredDelivery

log = logging.getLogger(__name__)

ProcessFn = Callable[[StoredDelivery], Coroutine[Any, Any, object]]


class WorkerPool:
    def __init__(self, db: Database, process: ProcessFn, *, size: int = 4) -> None:
        self.db = db
        self.process = process
        self.size = size
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight: dict[str, asyncio.Task[object]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._pending = 0  # ids queued or in flight
        self.processed = 0

    async def start(self) -> int:
        """Resume unfinished deliveries and start the workers; returns how many were resumed."""
        resumed = await asyncio.to_thread(journal.resume_unfinished, self.db)
        self.submit(resumed)
        for n in range(self.size):
            self._tasks.append(asyncio.create_task(self._work(), name=f"gate-worker-{n}"))
        if resumed:
            log.info("resumed %d unfinished deliveries", len(resumed))
        return len(resumed)

    def submit(self, delivery_ids: Iterable[str]) -> None:
        for delivery_id in delivery_ids:
            self._pending += 1
            self._idle.clear()
            self._queue.put_nowait(delivery_id)

    async def wait_idle(self) -> None:
        """Until every submitted delivery has been handled (tests and one-shot commands)."""
        await self._idle.wait()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking work; let work in flight finish for ``grace_s``, then re-queue it."""
        for task in self._tasks:
            task.cancel()  # idle workers stop at once; busy ones are shielded below
        in_flight = list(self._in_flight.items())
        if in_flight:
            _, still = await asyncio.wait([t for _, t in in_flight], timeout=grace_s)
            for delivery_id, busy in in_flight:
                if busy in still:
                    busy.cancel()
                    with contextlib.suppress(BaseException):
                        await busy
                    await asyncio.to_thread(journal.requeue, self.db, delivery_id)
                    log.info("re-queued delivery %s at shutdown", delivery_id)
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()

    async def _work(self) -> None:
        while True:
            delivery_id = await self._queue.get()
            try:
                delivery = await asyncio.to_thread(journal.claim, self.db, delivery_id)
                if delivery is None:
                    continue  # finished already, or another process has it
                task: asyncio.Task[object] = asyncio.create_task(self.process(delivery))
                self._in_flight[delivery_id] = task
                try:
                    # Shielded: stopping the pool must not cut a delivery in half; stop()
                    # decides whether it finishes or goes back to the queue.
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    if not task.done():
                        raise
                except Exception:
                    log.exception("delivery %s failed unexpectedly", delivery_id)
                finally:
                    if task.done():
                        self._in_flight.pop(delivery_id, None)
                self.processed += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not claim delivery %s", delivery_id)
            finally:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()
