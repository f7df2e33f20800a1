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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
        self._room = asyncio.Condition()

    @asynccontextmanager
    async def reserve(self, size: int) -> AsyncIterator[None]:
        size = max(size, 1)
        async with self._room:
            try:
                await asyncio.wait_for(
                    self._room.wait_for(lambda: self.in_use + size <= self.limit), self.wait_s
                )
            except TimeoutError:
                raise Refused(
                    "the server is reading as many unverified bodies as it buffers at once; "
                    "try again shortly",
                    code="server_busy",
                    retry_after_s=RETRY_AFTER_S,
                ) from None
            self.in_use += size
            self.peak = max(self.peak, self.in_use)
        try:
            yield
        finally:
            async with self._room:
                self.in_use -= size
                self._room.notify_all()
