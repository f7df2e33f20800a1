"""The line of workers waiting for a lease: first come, first served, per target.

A worker that asks for a held target may join its line (``wait_s`` on acquire). The line is
kept in arrival order (``seq``, handed out under the target's lock); when the target is free
(released, lapsed, superseded or never granted), it goes to the first **live** waiter and
to nobody else, so a worker further back cannot jump the line by asking again, and a worker
not in line cannot take a free target while others wait.

A waiter stays in line while it is heard from: each acquire it repeats, and each sign of
life of its worker (a worker heartbeat, any lease call), counts; one that was silent for
``line_ttl_s`` has left, and so has one that said so (leave). Every decision here is a
plain function of the rows, the workers' last signs of life and the time; the store runs
them inside the target's write transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reviewbot.core.leases import NO_DETAILS, AcquireRequest, Lease, LeaseDetails, LeaseTarget


@dataclass(frozen=True)
class Waiter:
    """One worker in the line of one target, with what it asked for."""

    target: LeaseTarget
    worker: str
    seq: int  # arrival order within the target: lower came first
    head_sha: str
    ttl_s: float | None
    joined_at: float
    seen_at: float  # its last acquire while waiting
    details: LeaseDetails = NO_DETAILS

    def request(self) -> AcquireRequest:
        """The acquire this waiter asked for, as the grant will make it."""
        return AcquireRequest(self.target, self.worker, self.head_sha, self.ttl_s, self.details)


@dataclass(frozen=True)
class LineView:
    """The line as it stands: who is live, in arrival order, and who has left by silence."""

    live: tuple[Waiter, ...]
    stale: tuple[Waiter, ...]

    def position(self, worker: str) -> int | None:
        """1 for the first in line; ``None`` for a worker not (or no longer) in it."""
        for index, waiter in enumerate(self.live, start=1):
            if waiter.worker == worker:
                return index
        return None

    @property
    def first(self) -> Waiter | None:
        return self.live[0] if self.live else None

    def without(self, worker: str) -> LineView:
        """The line once ``worker`` left it (granted, or dropped)."""
        return LineView(tuple(w for w in self.live if w.worker != worker), self.stale)


def last_heard(waiter: Waiter, worker_heartbeat_at: float | None) -> float:
    """The waiter's last sign of life: its own last poll, or its worker's, whichever is later."""
    if worker_heartbeat_at is None:
        return waiter.seen_at
    return max(waiter.seen_at, worker_heartbeat_at)


def is_stale(
    waiter: Waiter, worker_heartbeat_at: float | None, now: float, line_ttl_s: float
) -> bool:
    """Whether the waiter went silent for ``line_ttl_s`` (then it has left the line)."""
    return now - last_heard(waiter, worker_heartbeat_at) >= line_ttl_s


def view(
    waiters: Sequence[Waiter],
    heard: Mapping[str, float | None],
    now: float,
    line_ttl_s: float,
) -> LineView:
    """The line of one target: ``waiters`` in any order, ``heard`` each worker's last
    heartbeat (a worker with no record left the line with its record)."""
    live: list[Waiter] = []
    stale: list[Waiter] = []
    for waiter in sorted(waiters, key=lambda w: w.seq):
        gone = waiter.worker not in heard or heard[waiter.worker] is None
        if gone or is_stale(waiter, heard.get(waiter.worker), now, line_ttl_s):
            stale.append(waiter)
        else:
            live.append(waiter)
    return LineView(tuple(live), tuple(stale))


def successor(current: Lease | None, line: LineView, now: float) -> Waiter | None:
    """Who is granted the target now: the first live waiter, when the target is free.

    ``current`` is the target's lease with its holder's liveness applied; while it is live
    nobody is granted (the holder keeps it until it releases or lapses)."""
    if current is not None and current.live(now):
        return None
    return line.first


def next_seq(waiters: Sequence[Waiter]) -> int:
    """The arrival number of a worker joining the line now (after every waiter in it)."""
    return max((w.seq for w in waiters), default=0) + 1


def ordinal(position: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``... for messages."""
    if 10 <= position % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(position % 10, "th")
    return f"{position}{suffix}"
