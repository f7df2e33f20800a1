"""A byte budget for request bodies that nobody has authenticated yet.

A forge webhook's signature covers its whole body, so the body must be buffered before the
signature can be checked: without a bound, anyone who can reach the port could make the
server hold ``max_body_bytes`` per open connection. Each such request reserves its declared
length (or ``max_body_bytes`` when it declares none) before reading a byte, and holds the
reservation until it is answered. A request that finds no room waits briefly, then is
refused ``server_busy`` with a retry hint; the reading itself has a deadline, so a body that
never ends cannot keep its share.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from reviewbot.core.errors import Refused

WAIT_S = 2.0  # how long a request waits for room before it is told to come back
RETRY_AFTER_S = 5


class BodyBudget:
    """Bytes reserved at once (``in_use``) and the most ever reserved (``peak``)."""

    def __init__(self, limit: int, *, wait_s: float = WAIT_S) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.in_use = 0
        self.peak = 0
        self._waiting = 0
        self._freed = asyncio.Event()

    def reserve(self, size: int) -> Reservation:
        """``async with budget.reserve(size):`` holds ``size`` bytes until the block ends."""
        return Reservation(self, max(size, 1))

    async def take(self, size: int) -> None:
        # The common case takes its share at once, without a lock or a timer (this is on
        # every acknowledgement); nobody overtakes a request that is already waiting.
        if self._waiting or self.in_use + size > self.limit:
            await self._wait_for_room(size)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def give(self, size: int) -> None:
        self.in_use -= size
        if self._waiting:
            self._freed.set()

    async def _wait_for_room(self, size: int) -> None:
        self._waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                while self.in_use + size > self.limit:
                    self._freed.clear()
                    await self._freed.wait()
        except TimeoutError:
            raise Refused(
                "the server is reading as many unverified bodies as it buffers at once; "
                "try again shortly",
                code="server_busy",
                retry_after_s=RETRY_AFTER_S,
            ) from None
        finally:
            self._waiting -= 1


class Reservation:
    """A share of a :class:`BodyBudget`; a plain class, not a generator-based context
    manager, because every acknowledgement enters and leaves one."""

    __slots__ = ("budget", "size")

    def __init__(self, budget: BodyBudget, size: int) -> None:
        self.budget = budget
        self.size = size

    async def __aenter__(self) -> None:
        await self.budget.take(self.size)

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.budget.give(self.size)
