"""The lease audit trail in the store (table ``lease_history``, migrations 0014 and 0018).

Rows are written by :class:`reviewbot.store.leases.LeaseStore` inside the transaction of
the lease change they describe; this module writes, renews, prunes and reads them. The trail
grows by grants, releases, expiries and takeovers only. A heartbeat writes the lease row and
nothing here: while the claim lives, its last renewal is the lease row's ``heartbeat_at``,
which every reading joins onto the grant's row; when the claim ends (:func:`end`) it is
copied there, before a later grant replaces the lease row. An acquire by the holder, which
may change what the claim declares, updates the grant's row at once (:func:`renew`).
:func:`prune` deletes the rows whose last activity is older than the retention, oldest
first, a bounded number per call, and never the grant of a claim renewed since.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reviewbot.core.lease_history import (
    HistoryEntry,
    LeaseEvent,
    last_renewal,
    with_live_renewal,
)
from reviewbot.core.leases import Lease, LeaseTarget, Role
from reviewbot.core.models import repo_key
from reviewbot.store.database import Row, Tx, row_as, skip_locked
from reviewbot.store.lease_waiters import details_of, details_params

# A PR held for days by chatty workers still answers in one page.
DEFAULT_LIMIT = 500
# Rows one prune deletes at most: a grant adds at most two (the end of the claim it
# replaces, and itself), so pruning at every grant keeps ahead of the growth.
PRUNE_BATCH = 100
_EPOCH_WHERE = "forge = ? AND repo = ? AND number = ? AND role = ? AND epoch = ?"
# The lease row of a history row ``h``'s claim, when ``h`` is that claim's grant.
_LIVE_GRANT = (
    "l.forge = h.forge AND l.repo = h.repo AND l.number = h.number AND l.role = h.role"
    " AND l.epoch = h.epoch AND l.holder = h.holder"
    " AND h.event IN ('granted', 'takeover', 'renewed')"
)
# Rows ``h`` with the last renewal of a live claim: ``live_renewed_at``, ``live_ttl_s``.
_WITH_LIVE = (
    "SELECT h.*, l.heartbeat_at AS live_renewed_at, l.ttl_s AS live_ttl_s FROM ({rows}) AS h"
    f" LEFT JOIN leases AS l ON {_LIVE_GRANT}"
)


def append(tx: Tx, entry: HistoryEntry) -> None:
    t = entry.target
    tx.execute(
        "INSERT INTO lease_history (forge, repo, number, role, event, holder, epoch, head_sha,"
        " at, expires_at, reason, actor, previous_holder, renewed_at, target_branch, target_sha,"
        " session_id, issue, blocker) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " ?, ?)",
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
            entry.renewed_at,
            *details_params(entry.details),
        ),
    )


def renew(tx: Tx, entry: HistoryEntry) -> None:
    """Record a renewal of the claim ``entry`` names (its ``at`` the renewal, its
    ``expires_at`` the new term) on the row of the grant it renews; only when that row is
    gone (pruned, or written before the trail existed) is the renewal a row of its own,
    once, and later renewals update that one."""
    t = entry.target
    key = (t.forge, t.repo, t.number, t.role.value, entry.epoch)
    changed = tx.execute(
        "UPDATE lease_history SET renewed_at = ?, expires_at = ?, target_branch = ?,"
        " target_sha = ?, session_id = ?, issue = ?, blocker = ? WHERE id = (SELECT id FROM"
        f" lease_history WHERE {_EPOCH_WHERE} AND event IN ('granted', 'takeover', 'renewed')"
        " ORDER BY CASE WHEN event = 'renewed' THEN 1 ELSE 0 END, id DESC LIMIT 1)",
        (entry.at, entry.expires_at, *details_params(entry.details), *key),
    ).rowcount
    if changed == 0:
        append(tx, replace(entry, renewed_at=entry.at))


def end(tx: Tx, lease: Lease, entry: HistoryEntry) -> None:
    """Append ``entry``, the end of ``lease``'s claim, after copying the claim's last
    renewal (kept on the lease row by heartbeats) onto its grant's row."""
    renewal = last_renewal(lease, entry.actor)
    if renewal is not None:
        renew(tx, renewal)
    append(tx, entry)


def prune(tx: Tx, before: float, *, limit: int = PRUNE_BATCH) -> int:
    """Delete up to ``limit`` rows whose last activity (their time, or their grant's last
    renewal) is older than ``before``, oldest first; the number deleted."""
    rows = tx.all(
        "SELECT id FROM lease_history AS h WHERE at < ? AND (renewed_at IS NULL OR renewed_at < ?)"
        f" AND NOT EXISTS (SELECT 1 FROM leases AS l WHERE {_LIVE_GRANT} AND l.heartbeat_at >= ?)"
        f" ORDER BY at LIMIT ?{skip_locked(tx)}",
        (before, before, before, limit),
    )
    if not rows:
        return 0
    ids = [int(r["id"]) for r in rows]
    marks = ", ".join("?" for _ in ids)
    return tx.execute(f"DELETE FROM lease_history WHERE id IN ({marks})", ids).rowcount


def has_end(tx: Tx, target: LeaseTarget, epoch: int) -> bool:
    """Whether the claim ``epoch`` of ``target`` already has its ending row."""
    row = tx.one(
        "SELECT 1 FROM lease_history WHERE forge = ? AND repo = ? AND number = ? AND role = ?"
        " AND epoch = ? AND event IN ('released', 'expired', 'superseded') LIMIT 1",
        (target.forge, target.repo, target.number, target.role.value, epoch),
    )
    return row is not None


def _entry(row: Row) -> HistoryEntry:
    """The entry of a row read through ``_WITH_LIVE``: a grant renewed since its row was
    last written shows that renewal and the term it gave."""
    entry = row_as(
        HistoryEntry,
        row,
        target=lambda r: LeaseTarget(r["forge"], r["repo"], r["number"], Role(r["role"])),
        event=lambda r: LeaseEvent(r["event"]),
        details=details_of,
    )
    return with_live_renewal(entry, row["live_renewed_at"], row["live_ttl_s"])


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
    newest = f"SELECT * FROM lease_history WHERE {where} ORDER BY id DESC LIMIT ?"
    rows = tx.all(_WITH_LIVE.format(rows=newest) + " ORDER BY h.id", (*params, limit))
    return [_entry(r) for r in rows]


def recent(tx: Tx, where: str, params: list[Any], limit: int) -> list[HistoryEntry]:
    """The newest ``limit`` rows matching ``where`` (an SQL condition), newest first."""
    newest = f"SELECT * FROM lease_history WHERE {where} ORDER BY id DESC LIMIT ?"
    rows = tx.all(_WITH_LIVE.format(rows=newest) + " ORDER BY h.id DESC", [*params, limit])
    return [_entry(r) for r in rows]
