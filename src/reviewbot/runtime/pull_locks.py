"""Per-PR locks inside one process, shared by the review and merge parts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class PullLocks:
    """One asyncio lock per PR: evaluation, posting and the state comment never interleave
    inside one process (the lease keeps other processes out). A PR's entry lives only while
    someone holds or waits on its lock, so the map does not grow with every PR ever seen."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str, int], tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        """The PRs whose lock someone holds or waits on."""
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, forge: str, repo: str, number: int) -> AsyncIterator[None]:
        key = (forge, repo, number)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
