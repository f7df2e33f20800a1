"""The lease audit trail: what happened to each claim, by whom, and why.

Every grant, release, expiry, takeover and supersession of a lease is one
:class:`HistoryEntry`; a renewal (a heartbeat, or an acquire by the holder) is not a new
entry but the ``renewed_at`` of the entry of the grant it renews, so a claim held for days
by a chatty worker is still a handful of entries. The store writes them in the same
transaction as the lease change they describe, so the trail and the lease table never
disagree. An expiry happens by the
clock, not by a call, so it is written when a later call first sees it (an acquire, the
holder's next call, a sweep); until then :func:`with_unrecorded_lapses` adds it to a
reading, marked ``recorded: false``.

Release reasons a caller may declare are :data:`CALLER_RELEASE_REASONS`; the others are the
bot's own words for what it did (``merged``, ``head-moved``, ``reviewed``...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.core.leases import NO_DETAILS, Lease, LeaseDetails, LeaseTarget, Phase


class LeaseEvent(StrEnum):
    GRANTED = "granted"  # a new epoch on a free, released, expired or superseded target
    TAKEOVER = "takeover"  # a new epoch over another worker's lapsed claim
    # The same claim, its expiry pushed ahead: only in trails written before renewals became
    # the grant entry's ``renewed_at`` (and for a renewed claim whose grant was pruned).
    RENEWED = "renewed"
    RELEASED = "released"  # ended by a call, with a reason
    EXPIRED = "expired"  # lapsed: no heartbeat of the claim, or of its worker
    SUPERSEDED = "superseded"  # the PR's head moved away from the claim's pin


class EndReason(StrEnum):
    """Why a claim ended (``reason`` of a released, expired or superseded entry)."""

    MANUAL_RELEASE = "manual-release"  # the holder released it (default of the API, CLI)
    ABANDONED = "abandoned"  # the holder gave up without finishing
    FINISHED = "finished"  # the holder finished what it claimed the lease for
    MERGED = "merged"  # the bot's merger merged the PR under it
    HEAD_MOVED = "head-moved"  # the PR's head moved away from the pin
    REVIEWED = "reviewed"  # the bot's reviewer recorded (or skipped) its verdict
    HEARTBEAT_LAPSED = "heartbeat-lapsed"  # the claim's own term ran out
    WORKER_LAPSED = "worker-heartbeat-lapsed"  # its worker stopped heartbeating
    SUPERSEDED = "superseded"  # another claim replaced it


# What a caller may say when it releases its own lease; the rest describe the bot's acts.
CALLER_RELEASE_REASONS = frozenset(
    {EndReason.MANUAL_RELEASE, EndReason.ABANDONED, EndReason.FINISHED}
)


@dataclass(frozen=True)
class HistoryEntry:
    target: LeaseTarget
    event: LeaseEvent
    holder: str
    epoch: int
    head_sha: str
    at: float
    expires_at: float | None = None
    reason: str = ""
    actor: str = ""  # the token or session (or "reviewbot", "cli") that made the call
    previous_holder: str | None = None  # a takeover's former holder
    recorded: bool = True  # False: a lapse seen by the clock, not yet written
    renewed_at: float | None = None  # a grant's last renewal (then expires_at is its term)
    details: LeaseDetails = NO_DETAILS  # what the claim is for, as its holder declared it

    def to_json(self) -> dict[str, Any]:
        t = self.target
        return {
            "forge": t.forge,
            "repo": t.repo,
            "number": t.number,
            "role": t.role.value,
            "event": self.event.value,
            "holder": self.holder,
            "epoch": self.epoch,
            "head_sha": self.head_sha,
            "at": iso(self.at),
            "expires_at": None if self.expires_at is None else iso(self.expires_at),
            "reason": self.reason,
            "actor": self.actor,
            "previous_holder": self.previous_holder,
            "recorded": self.recorded,
            "renewed_at": None if self.renewed_at is None else iso(self.renewed_at),
            **self.details.to_json(),
        }

    def line(self) -> str:
        """One line for ``reviewbot lease history`` and ``explain``."""
        who = f"{self.holder} (epoch {self.epoch}, head {self.head_sha[:12]})"
        text = f"{iso(self.at)}  {self.target.role.value:8}  {self.event.value:10}  {who}"
        if self.previous_holder:
            text += f" from {self.previous_holder}"
        if self.renewed_at is not None:
            text += f"  renewed {iso(self.renewed_at)}"
        if self.details.any():
            text += f"  {self.details.words()}"
        if self.reason:
            text += f"  reason={self.reason}"
        if self.actor:
            text += f"  by {self.actor}"
        if not self.recorded:
            text += "  (seen by the clock, not yet recorded)"
        return text


def ended(entry: HistoryEntry) -> bool:
    return entry.event in (LeaseEvent.RELEASED, LeaseEvent.EXPIRED, LeaseEvent.SUPERSEDED)


def lapse_reason(lease: Lease, own_expiry: float) -> EndReason:
    """Whose heartbeat stopped: the claim's own, or its worker's (which came first)."""
    return EndReason.WORKER_LAPSED if lease.expires_at < own_expiry else EndReason.HEARTBEAT_LAPSED


def last_renewal(lease: Lease, actor: str) -> HistoryEntry | None:
    """The renewal the grant's entry of ``lease``'s claim shows once the claim ends: its last
    heartbeat and the term that gave (``None``: never renewed). Heartbeats write only the
    lease, so this is copied onto the grant's entry when the claim ends."""
    if lease.heartbeat_at <= lease.acquired_at:
        return None
    last = lease.heartbeat_at
    return HistoryEntry(
        lease.target,
        LeaseEvent.RENEWED,
        lease.holder,
        lease.epoch,
        lease.head_sha,
        last,
        expires_at=last + lease.ttl_s,
        actor=actor,
        details=lease.details,
    )


def with_live_renewal(
    entry: HistoryEntry, renewed_at: float | None, ttl_s: float | None
) -> HistoryEntry:
    """A grant's ``entry`` as a reader sees it while its claim's lease row says it was last
    renewed at ``renewed_at`` for ``ttl_s``: that renewal, when it is later than the entry's."""
    if renewed_at is None or ttl_s is None or renewed_at <= entry.at:
        return entry
    if entry.renewed_at is not None and entry.renewed_at >= renewed_at:
        return entry
    return replace(entry, renewed_at=renewed_at, expires_at=renewed_at + ttl_s)


def lapse_entry(lease: Lease, reason: EndReason, actor: str) -> HistoryEntry:
    """The ``expired`` entry of a claim that lapsed at ``lease.expires_at``."""
    return HistoryEntry(
        target=lease.target,
        event=LeaseEvent.EXPIRED,
        holder=lease.holder,
        epoch=lease.epoch,
        head_sha=lease.head_sha,
        at=lease.expires_at,
        expires_at=lease.expires_at,
        reason=reason.value,
        actor=actor,
    )


def with_unrecorded_lapses(
    entries: Sequence[HistoryEntry],
    current: Iterable[tuple[Lease, float]],
    now: float,
) -> list[HistoryEntry]:
    """``entries`` plus an ``expired`` entry for each current claim that lapsed by ``now``
    but has no ending entry yet; ``current`` pairs each lease (its expiry already brought
    forward to its worker's lapse) with its own stored expiry."""
    closed = {(e.target, e.epoch) for e in entries if ended(e)}
    extra: list[HistoryEntry] = []
    for lease, own_expiry in current:
        if lease.phase is not Phase.CLAIMED or now < lease.expires_at:
            continue
        if (lease.target, lease.epoch) in closed:
            continue
        entry = lapse_entry(lease, lapse_reason(lease, own_expiry), "clock")
        extra.append(replace(entry, recorded=False))
    return sorted([*entries, *extra], key=lambda e: e.at)


@dataclass(frozen=True)
class LeaseHistory:
    """The answer to "who held this PR's leases and what happened to them"."""

    pr: str  # FORGE:OWNER/REPO#N
    entries: tuple[HistoryEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"pr": self.pr, "history": [e.to_json() for e in self.entries]}

    def lines(self) -> list[str]:
        return [e.line() for e in self.entries] or ["no lease history"]
