"""The lease audit trail in the store (table ``lease_history``, migration 0014).

Rows are appended by :class:`reviewbot.store.leases.LeaseStore` inside the transaction of
the lease change they describe; this module writes and reads them.
"""

from __future__ import annotations

from typing import Any

from reviewbot.core.lease_history import HistoryEntry, LeaseEvent
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.core.models import repo_key
from reviewbot.store.database import Row, Tx

# A PR held for days by chatty workers still answers in one page.
DEFAULT_LIMIT = 500


def append(tx: Tx, entry: HistoryEntry) -> None:
    t = entry.target
    tx.execute(
        "INSERT INTO lease_history (forge, repo, number, role, event, holder, epoch, head_sha,"
        " at, expires_at, reason, actor, previous_holder)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            t.forge,
            t.repo,
            t.number,
            t.role.value,
            entry.event.value,
            entry.holder,
            entry.epoch,
            entry.head_sha,
            entry.at,
            entry.expires_at,
            entry.reason,
            entry.actor,
            entry.previous_holder,
        ),
    )


def has_end(tx: Tx, target: LeaseTarget, epoch: int) -> bool:
    """Whether the claim ``epoch`` of ``target`` already has its ending row."""
    row = tx.one(
        "SELECT 1 FROM lease_history WHERE forge = ? AND repo = ? AND number = ? AND role = ?"
        " AND epoch = ? AND event IN ('released', 'expired', 'superseded') LIMIT 1",
        (target.forge, target.repo, target.number, target.role.value, epoch),
    )
    return row is not None


def _entry(row: Row) -> HistoryEntry:
    return HistoryEntry(
        target=LeaseTarget(row["forge"], row["repo"], row["number"], Role(row["role"])),
        event=LeaseEvent(row["event"]),
        holder=row["holder"],
        epoch=row["epoch"],
        head_sha=row["head_sha"],
        at=row["at"],
        expires_at=row["expires_at"],
        reason=row["reason"],
        actor=row["actor"],
        previous_holder=row["previous_holder"],
    )


def for_pull(
    tx: Tx,
    forge: str,
    repo: str,
    number: int,
    *,
    role: Role | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[HistoryEntry]:
    """The newest ``limit`` rows of one PR, oldest first."""
    where = "forge = ? AND repo = ? AND number = ?"
    params: list[Any] = [forge, repo_key(repo), number]
    if role is not None:
        where += " AND role = ?"
        params.append(Role(role).value)
    rows = tx.all(
        # PostgreSQL needs the derived table named.
        f"SELECT * FROM (SELECT * FROM lease_history WHERE {where} ORDER BY id DESC LIMIT ?)"
        " AS recent ORDER BY id",
        (*params, limit),
    )
    return [_entry(r) for r in rows]
