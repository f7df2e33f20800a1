"""Waiting in a lease's line for a bounded time (``acquire`` with ``wait_s``).

The line itself is the store's (:meth:`reviewbot.store.leases.LeaseStore.acquire` with
``wait``): one acquire puts the caller in line, or keeps its place and records that it was
heard from. Between two such acquires this only reads whether the caller was granted the
target (:meth:`~reviewbot.store.leases.LeaseStore.granted`, no write lock), every
``poll_s``; it asks again every ``refresh_s`` (so a holder that lapsed is replaced and the
caller stays heard from) and once more when the wait is over, so a refusal names the
caller's place as it stands then. On SQLite the grant also rings the caller's bell
(:mod:`reviewbot.store.line_bells`), so it is read at once rather than at the next poll.
The wait is measured on ``monotonic`` (the caller's real time); who is stale is the
store's clock's business.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from reviewbot.core.leases import NO_DETAILS, Lease, LeaseDetails, LeaseTarget, wait_term
from reviewbot.runtime.claims import Sleep
from reviewbot.store.leases import LeaseRefused, LeaseStore

POLL_S = 0.05  # how often a waiting call reads whether it was granted
REFRESH_S = 1.0  # at most this long between two acquires of a waiting call


async def acquire_lease(
    leases: LeaseStore,
    target: LeaseTarget,
    worker: str,
    head_sha: str,
    *,
    wait_s: float | None,
    ttl_s: float | None = None,
    actor: str = "reviewbot",
    details: LeaseDetails = NO_DETAILS,
) -> Lease:
    """An acquire as a caller asks for it: plain (``wait_s`` ``None``: a held target is
    refused at once, the line untouched) or waiting in line up to ``wait_s`` seconds, which
    must be within ``leases.max_wait_s`` (``ValueError`` otherwise)."""
    if wait_s is None:
        return await leases.run(
            lambda: leases.acquire(
                target, worker, head_sha, ttl_s=ttl_s, actor=actor, details=details
            )
        )
    return await acquire_waiting(
        leases,
        target,
        worker,
        head_sha,
        wait_s=wait_term(leases.timing, wait_s),
        ttl_s=ttl_s,
        actor=actor,
        details=details,
    )


async def acquire_waiting(
    leases: LeaseStore,
    target: LeaseTarget,
    worker: str,
    head_sha: str,
    *,
    wait_s: float,
    ttl_s: float | None = None,
    actor: str = "reviewbot",
    details: LeaseDetails = NO_DETAILS,
    poll_s: float = POLL_S,
    refresh_s: float = REFRESH_S,
    sleep: Sleep = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> Lease:
    """The lease once ``worker`` is granted it, waiting in line up to ``wait_s`` seconds;
    :class:`LeaseRefused` (``lease_held``, with the caller's ``position``) when the wait
    ends first. ``wait_s`` 0: join the line (or keep one's place) and answer at once."""
    deadline = monotonic() + wait_s
    refresh_s = min(refresh_s, leases.timing.line_ttl_s / 3)

    acquire = functools.partial(
        leases.acquire, target, worker, head_sha, ttl_s=ttl_s, actor=actor, details=details
    )
    # Bound before the caller joins the line, so no grant can come before it listens.
    bell = leases.bell(target, worker) if sleep is asyncio.sleep else None
    try:
        while True:
            try:
                return await leases.run(acquire, wait=True)
            except LeaseRefused:
                if monotonic() >= deadline:
                    raise
            asked = monotonic()
            while monotonic() < min(deadline, asked + refresh_s):
                pause = max(0.0, min(poll_s, deadline - monotonic()))
                if bell is None:
                    await sleep(pause)
                else:  # the grant rings at once; the poll stays for a ring that was lost
                    await bell.wait_async(pause)
                granted = await leases.run(leases.granted, target, worker)
                if granted is not None:
                    return granted
    finally:
        if bell is not None:
            bell.close()
