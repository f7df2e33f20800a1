"""Keeping a claim while its work runs: the one renewal loop of deliveries and review jobs.

A claim lasts a term. Work that may outlast it (a gate reading a slow forge through its
retries, an external reviewer running for minutes) runs beside a renewer that extends the
claim every ``every_s`` (a third of the term), so no other claimer takes the work over
while it is being done. When a renewal finds the claim gone (its term lapsed, say while the
process was stalled, and another claimer took the work), the work is cancelled and
:class:`ClaimLost` raised: the work is the other claimer's now. The result is fenced where
it is written as well, since the claim can be lost between two renewals.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from reviewbot.runtime.background import cancel_and_wait
from reviewbot.store.claims import ClaimLost

log = logging.getLogger(__name__)
T = TypeVar("T")

# Renews the claim; False when it is no longer held.
Renew = Callable[[], Awaitable[bool]]
Sleep = Callable[[float], Awaitable[None]]

__all__ = ["ClaimLost", "Renew", "Sleep", "holding"]


async def holding(
    work: Awaitable[T],
    renew: Renew,
    every_s: float,
    *,
    what: str,
    sleep: Sleep = asyncio.sleep,
) -> T:
    """Run ``work`` while renewing its claim every ``every_s``; its result.

    Raises :class:`ClaimLost` (the work cancelled) when a renewal finds the claim taken
    over. A renewal that fails (the store is unavailable) is logged and tried again at the
    next turn: the claim may still be held, and the write of the result is fenced anyway.
    Cancelling the caller cancels both.
    """
    task = asyncio.ensure_future(work)
    lost = False

    async def keep() -> None:
        nonlocal lost
        while True:
            await sleep(every_s)
            try:
                held = await renew()
            except Exception as exc:
                log.warning("could not renew the claim on %s (%s); trying again", what, exc)
                continue
            if not held:
                lost = True
                log.warning("lost the claim on %s to another worker; dropping its work", what)
                task.cancel()
                return

    renewer = asyncio.create_task(keep())
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if lost and (current is None or current.cancelling() == 0):
            raise ClaimLost(f"the claim on {what} passed to another worker") from None
        raise
    finally:
        await cancel_and_wait(renewer)
