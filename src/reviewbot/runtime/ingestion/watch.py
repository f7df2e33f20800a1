"""Wake the worker pool for deliveries another process journalled.

In one ``serve --role all`` process the journal wakes the workers itself after each commit.
A ``serve --role work`` process shares its store with ``--role ingest`` processes whose
commits it does not see, so it looks every ``interval_s`` whether any other connection has
committed (SQLite's ``PRAGMA data_version``, one cheap read on a connection of its own) and
wakes the pool when one has: the workers then claim what is queued, as after a local commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from reviewbot.runtime.background import cancel_and_wait
from reviewbot.store.database import StoreExecutor
from reviewbot.store.journal import CommitWatch

log = logging.getLogger(__name__)

INTERVAL_S = 0.05  # the most a delivery journalled elsewhere waits before it is claimed


class JournalWatch:
    def __init__(self, path: Path, wake: Callable[[], None], *, interval_s: float = INTERVAL_S):
        self.wake = wake
        self.interval_s = interval_s
        self._commits = CommitWatch(path)
        # One thread: the connection whose data_version is read is always the same one.
        self._executor = StoreExecutor(1, name="journal-watch")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> JournalWatch:
        self._task = asyncio.create_task(self._run(), name="journal-watch")
        return self

    async def _run(self) -> None:
        while True:
            try:
                if await self._executor.run(self._commits.changed):
                    self.wake()
            except Exception as exc:  # a store error: look again at the next tick
                log.warning("could not look for new deliveries (%s)", exc)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)
        self._commits.close()
