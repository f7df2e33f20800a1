"""What a lease holder or waiter is told about its pull request: changes between two snapshots.

A watcher (``runtime/pr_watch.py``) reads a :class:`PrSnapshot` of the PR from what the bot
has recorded (the head its deliveries carried, its latest verdict, the mergeability the
forge reported, the live leases) and hands two of them to :func:`pr_events`, which says what
changed that the subscriber cares about:

- ``head_moved``: the PR's head is no longer the one the subscriber last saw;
- ``checks_red``: a required check failed at the head (reported once per head);
- ``unmergeable``: the forge reports that the PR cannot be merged (once per head);
- ``lease_granted``: the subscriber's worker became the holder of the watched lease (the
  lease it waited for);
- ``lease_expiring``: the subscriber's lease lapses within ``warn_s`` (once per expiry: a
  heartbeat that pushes the expiry on re-arms it);
- ``lease_lost``: the subscriber held the lease and no longer does.

The first snapshot of a subscription is compared with :meth:`PrSnapshot.unknown`, so what
is already true when it starts (a grant that happened between a refused acquire and the
subscription, red checks, an unmergeable PR) is told at once. Snapshots carry their own
time, so the function needs no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HEAD_MOVED = "head_moved"
CHECKS_RED = "checks_red"
UNMERGEABLE = "unmergeable"
LEASE_GRANTED = "lease_granted"
LEASE_EXPIRING = "lease_expiring"
LEASE_LOST = "lease_lost"
EVENT_KINDS = (HEAD_MOVED, CHECKS_RED, UNMERGEABLE, LEASE_GRANTED, LEASE_EXPIRING, LEASE_LOST)


@dataclass(frozen=True)
class HeldLease:
    """A live lease of the PR: its role, holder, epoch and expiry (seconds since the epoch)."""

    role: str
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True)
class PrSnapshot:
    """What the bot knows of a PR at ``at``; ``None`` is "not known"."""

    at: float
    head_sha: str | None
    failing: tuple[str, ...] = ()  # required checks that failed at head_sha
    mergeable: bool | None = None  # at head_sha, as the forge last reported it
    leases: tuple[HeldLease, ...] = ()

    @classmethod
    def unknown(cls, head_sha: str | None = None) -> PrSnapshot:
        """Before a subscription's first look: nothing held, nothing known but maybe the
        head the subscriber works at."""
        return cls(at=0.0, head_sha=head_sha)

    def held_by(self, worker: str, role: str) -> HeldLease | None:
        for lease in self.leases:
            if lease.holder == worker and lease.role == role:
                return lease
        return None


@dataclass(frozen=True)
class Subscriber:
    """Who watches: a worker, the lease role it holds or waits for, and how long before its
    lease lapses it wants to be told."""

    worker: str
    role: str
    warn_s: float


@dataclass(frozen=True)
class PrEvent:
    kind: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind, "detail": self.detail, **self.data}


def _expiring(lease: HeldLease | None, at: float, warn_s: float) -> bool:
    return lease is not None and lease.expires_at - at <= warn_s


def pr_events(before: PrSnapshot, after: PrSnapshot, sub: Subscriber) -> list[PrEvent]:
    """What changed from ``before`` to ``after`` that ``sub`` is told, in a fixed order."""
    events: list[PrEvent] = []
    head = after.head_sha
    same_head = head == before.head_sha
    if before.head_sha is not None and head is not None and head != before.head_sha:
        events.append(
            PrEvent(
                HEAD_MOVED,
                f"the head moved from {before.head_sha[:12]} to {head[:12]}: work pinned to "
                "the old head (leases, approvals) no longer counts",
                {"old_head": before.head_sha, "new_head": head},
            )
        )
    if after.failing and not (same_head and before.failing):
        events.append(
            PrEvent(
                CHECKS_RED,
                f"required checks failed at {str(head)[:12]}: {', '.join(after.failing)}",
                {"head_sha": head, "failing": list(after.failing)},
            )
        )
    if after.mergeable is False and not (same_head and before.mergeable is False):
        events.append(
            PrEvent(
                UNMERGEABLE,
                f"the forge reports the PR cannot be merged at {str(head)[:12]} (a conflict "
                "with its base, or the base's rules)",
                {"head_sha": head},
            )
        )
    held_before = before.held_by(sub.worker, sub.role)
    held_after = after.held_by(sub.worker, sub.role)
    if held_after is not None and (held_before is None or held_before.epoch != held_after.epoch):
        events.append(
            PrEvent(
                LEASE_GRANTED,
                f"{sub.worker} now holds the {sub.role} lease (epoch {held_after.epoch})",
                {"role": sub.role, "epoch": held_after.epoch, "expires_at": held_after.expires_at},
            )
        )
    if held_before is not None and held_after is None:
        events.append(
            PrEvent(
                LEASE_LOST,
                f"{sub.worker} no longer holds the {sub.role} lease (epoch "
                f"{held_before.epoch}): released, expired or taken over",
                {"role": sub.role, "epoch": held_before.epoch},
            )
        )
    if _expiring(held_after, after.at, sub.warn_s):
        assert held_after is not None
        warned = (
            held_before is not None
            and held_before.expires_at == held_after.expires_at
            and _expiring(held_before, before.at, sub.warn_s)
        )
        if not warned:
            left = max(0.0, held_after.expires_at - after.at)
            events.append(
                PrEvent(
                    LEASE_EXPIRING,
                    f"the {sub.role} lease of {sub.worker} lapses in {left:.1f} s unless it "
                    "is heartbeated",
                    {
                        "role": sub.role,
                        "epoch": held_after.epoch,
                        "expires_at": held_after.expires_at,
                        "expires_in_s": round(left, 3),
                    },
                )
            )
    return events
