"""Background loops of the runtime: a step repeated at an interval, and a stop that waits.

A loop that runs for the life of the process must outlive a failing step (the forge or the
store may be down for a while), and its stop must wait until the task has really ended, so
that what it touches can be closed right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any


async def repeat(
    step: Callable[[], Awaitable[object]], interval_s: float, log: logging.Logger, failed: str
) -> None:
    """Run ``step`` every ``interval_s`` seconds until cancelled; a step that raises is
    logged on ``log`` as ``failed`` and the next one runs on time."""
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(failed)
        await asyncio.sleep(interval_s)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if there is one) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
