"""An answer that costs far more than the call asking for it: computed once at a time.

A forge probe spends the bot's rate limit; the runtime report hashes every source file and
reads the configuration again. Whoever may ask (``/readyz`` needs no token; ``read`` is the
lowest scope) must not turn asking into that cost: through :class:`Reused`, callers arriving
while the answer is being computed share that computation, and with ``ttl_s`` the answer is
reused for that long after it was made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from reviewbot.core.clock import Clock

T = TypeVar("T")


class Reused(Generic[T]):
    """Per key: at most one computation running, joined by every caller that arrives while
    it runs; its answer reused for ``ttl_s`` of ``clock`` (0: only by those callers)."""

    def __init__(self, clock: Clock, ttl_s: float = 0.0) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._last: dict[str, tuple[float, T]] = {}
        self._running: dict[str, asyncio.Task[T]] = {}

    async def get(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        task = self._running.get(key)
        if task is None:
            last = self._last.get(key)
            if last is not None and 0 <= self._clock() - last[0] < self._ttl_s:
                return last[1]
            task = asyncio.ensure_future(self._run(key, compute))
            self._running[key] = task
        # A caller that goes away does not cancel the computation the others wait for.
        return await asyncio.shield(task)

    async def _run(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        try:
            value = await compute()
            self._last[key] = (self._clock(), value)
            return value
        finally:
            del self._running[key]
