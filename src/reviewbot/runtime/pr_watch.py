"""Watching a pull request for a lease holder or waiter: snapshots read from the store, the
changes told by the pure :func:`reviewbot.core.pr_watch.pr_events`.

Nothing here asks the forge: the facts are the ones the bot already recorded from webhooks
and its own work (the head its deliveries carried, its verdict's failing checks, the
mergeability a pull-request event reported or a merge attempt was refused for, the live
leases), so any replica answers a watcher from the shared store. The time a snapshot is
taken at, which lease expiries are compared with, is the injected clock's; only the bounded
wait between two looks is the event loop's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from reviewbot.core.clock import Clock
from reviewbot.core.leases import Lease
from reviewbot.core.pr_watch import HeldLease, PrEvent, PrSnapshot, Subscriber, pr_events
from reviewbot.ingress.pull_facts import event_mergeable
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.leases import LeaseStore
from reviewbot.store.pr_facts import recorded_pull

POLL_S = 0.2  # between two looks at the store while nothing changed
MAX_WAIT_S = 60.0  # the longest a watcher is held: REST and MCP cap wait_s here

OnEvent = Callable[[PrEvent], Awaitable[None]]


def read_snapshot(
    db: Database, leases: LeaseStore, clock: Clock, forge: str, repo: str, number: int
) -> PrSnapshot:
    """The PR now, as the store records it (blocking: run it on the store's executor)."""
    at = clock()
    pull = recorded_pull(db, forge, repo, number)
    mergeable: bool | None = False if pull.merge_refused else None
    for delivery_id in pull.recent_deliveries if pull.head_sha is not None else ():
        if mergeable is not None:
            break
        stored = journal.get_delivery(db, delivery_id)
        if stored is not None and pull.head_sha is not None:
            mergeable = event_mergeable(stored.body, pull.head_sha)
    live: list[Lease] = leases.list_leases(forge=forge, repo=repo, number=number, live_only=True)
    held = tuple(
        HeldLease(lease.target.role.value, lease.holder, lease.epoch, lease.expires_at)
        for lease in live
        if lease.live(at)
    )
    return PrSnapshot(at, pull.head_sha, pull.failing, mergeable, held)


async def watch(
    db: Database,
    leases: LeaseStore,
    clock: Clock,
    target: tuple[str, str, int],
    sub: Subscriber,
    before: PrSnapshot,
    *,
    wait_s: float,
    on_event: OnEvent | None = None,
    keep_alive: Callable[[], Awaitable[object]] | None = None,
    keep_alive_s: float = 5.0,
) -> tuple[list[PrEvent], PrSnapshot]:
    """Look at the PR until something ``sub`` is told about changed since ``before``, or
    ``wait_s`` (at most :data:`MAX_WAIT_S`) passed; every event is handed to ``on_event`` as
    it is found. ``keep_alive`` runs at the start and every ``keep_alive_s`` while waiting (a
    watching worker is alive: it keeps its place in a lease's line). Answers the events and
    the last snapshot (the next call's ``before``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(wait_s, 0.0), MAX_WAIT_S)
    forge, repo, number = target
    kept_at: float | None = None
    while True:
        if keep_alive is not None and (kept_at is None or loop.time() - kept_at >= keep_alive_s):
            kept_at = loop.time()
            await keep_alive()
        after = await db.run(read_snapshot, db, leases, clock, forge, repo, number)
        events = pr_events(before, after, sub)
        if events or loop.time() >= deadline:
            for event in events:
                if on_event is not None:
                    await on_event(event)
            return events, after
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))
