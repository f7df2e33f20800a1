"""Holding a named lane (:mod:`reviewbot.store.lanes`) while async work runs.

``async with lanes.hold(name, wait_s=...) as lane`` takes the lane in this process first (an
``asyncio.Lock`` per name, so the process's own waiters do not poll the store), then in the
store, polling until ``wait_s`` has passed; ``lane.held`` says whether it was granted. While
held, the lane is renewed every third of its term; a renewal that finds the lane gone (its
term lapsed while the store could not be reached, or another process was granted it) marks
it ``lost`` and logs it, and :meth:`Lanes.confirm` renews it on demand right before an
action that must not overlap another holder's (a merge call). Leaving the block releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from reviewbot.core.clock import Clock
from reviewbot.runtime.background import cancel_and_wait
from reviewbot.store import lanes as store
from reviewbot.store.database import Database
from reviewbot.store.lanes import LaneBusy, LaneHold

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting process asks the store again


def lane_name(kind: str, *parts: str) -> str:
    """``kind:part:part...``: e.g. ``merge:github:acme/api:main``."""
    return ":".join((kind, *parts))


@dataclass
class Lane:
    """One attempt at a lane: granted (``hold``) or not (``busy`` names who had it)."""

    name: str
    hold: LaneHold | None = None
    busy: LaneBusy | None = None
    lost: bool = False

    @property
    def held(self) -> bool:
        return self.hold is not None and not self.lost

    @property
    def busy_with(self) -> str:
        """Who held the lane when it was not granted, for a log line or a report."""
        return self.busy.holder if self.busy is not None else "another holder"


class Lanes:
    """This process's lanes on the store; ``holder`` names the process to the others."""

    def __init__(
        self,
        db: Database,
        holder: str,
        *,
        term_s: float,
        clock: Clock = time.time,
        poll_s: float = POLL_S,
    ) -> None:
        self.db = db
        self.holder = holder
        self.term_s = term_s
        self.clock = clock
        self.poll_s = poll_s
        self._local: dict[str, asyncio.Lock] = {}
        self._closing = asyncio.Event()

    def close(self) -> None:
        """The process is stopping: waits for a lane held elsewhere end now, not granted."""
        self._closing.set()

    @contextlib.asynccontextmanager
    async def hold(self, name: str, *, wait_s: float = 0.0) -> AsyncIterator[Lane]:
        """The lane ``name``, waited for up to ``wait_s`` seconds (0: asked once)."""
        lane = Lane(name)
        local = self._local.setdefault(name, asyncio.Lock())
        deadline = asyncio.get_running_loop().time() + wait_s
        if not await self._local_turn(local, deadline if wait_s > 0 else None):
            lane.busy = LaneBusy(name, self.holder, 0, 0.0)  # this process has it
            yield lane
            return
        renewing: asyncio.Task[None] | None = None
        try:
            await self._acquire(lane, deadline)
            if lane.hold is not None:
                renewing = asyncio.create_task(self._renew(lane), name=f"lane {name}")
            yield lane
        finally:
            await cancel_and_wait(renewing)
            try:
                if lane.hold is not None and not lane.lost:
                    await self.db.run(store.release, self.db, lane.hold)
            except Exception:  # it lapses by itself at the end of its term
                log.warning("releasing the lane %s failed", name, exc_info=True)
            finally:
                # After the store's release: this process's next caller finds the lane free.
                local.release()

    @staticmethod
    async def _local_turn(local: asyncio.Lock, deadline: float | None) -> bool:
        """This process's turn at the lane, by ``deadline`` (None: only if free now)."""
        if deadline is None:
            if local.locked():
                return False
            await local.acquire()  # free: returns at once
            return True
        try:
            async with asyncio.timeout_at(deadline):
                await local.acquire()
        except TimeoutError:
            return False
        return True

    async def _acquire(self, lane: Lane, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            got = await self.db.run(
                store.try_acquire, self.db, lane.name, self.holder, self.term_s, self.clock()
            )
            if isinstance(got, LaneHold):
                lane.hold, lane.busy = got, None
                return
            lane.busy = got
            left = deadline - loop.time()
            if left <= 0 or self._closing.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), min(self.poll_s, left))

    async def confirm(self, lane: Lane) -> bool:
        """Renew the lane now: True while this process still holds it, for a full term
        from now; False (and ``lost``) when it lapsed or was granted to another."""
        if not lane.held:
            return False
        assert lane.hold is not None
        try:
            renewed = await self.db.run(store.renew, self.db, lane.hold, self.term_s, self.clock())
        except Exception:
            log.warning("renewing the lane %s failed", lane.name, exc_info=True)
            # Unconfirmed is not held: whoever must not overlap another holder stops here.
            if self.clock() >= lane.hold.expires_at:
                self._lose(lane)
            return False
        if renewed is None:
            self._lose(lane)
            return False
        lane.hold = renewed
        return True

    def _lose(self, lane: Lane) -> None:
        if not lane.lost:
            lane.lost = True
            log.warning(
                "lost the lane %s (its term lapsed or another process was granted it)",
                lane.name,
            )

    async def _renew(self, lane: Lane) -> None:
        while lane.held:
            await asyncio.sleep(self.term_s / 3)
            await self.confirm(lane)
