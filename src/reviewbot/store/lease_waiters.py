"""The lines of workers waiting for a lease in the store (table ``lease_waiters``, 0021).

Rows are read and written by :class:`reviewbot.store.leases.LeaseStore` inside the write
transaction of the target they belong to, under that target's lock, so two replicas never
hand out the same arrival number or grant the same waiter twice. The order and the
staleness rules are :mod:`reviewbot.core.lease_line`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from reviewbot.core.lease_line import Waiter, next_seq
from reviewbot.core.leases import (
    DETAIL_FIELDS,
    NO_DETAILS,
    AcquireRequest,
    LeaseDetails,
    LeaseTarget,
)
from reviewbot.store.database import Row, Tx

_TARGET_WHERE = "forge = ? AND repo = ? AND number = ? AND role = ?"


def _key(target: LeaseTarget) -> tuple[str, str, int, str]:
    return (target.forge, target.repo, target.number, target.role.value)


def details_of(row: Row) -> LeaseDetails:
    """The declared details of a ``leases``, ``lease_history`` or ``lease_waiters`` row."""
    values = [row[name] for name in DETAIL_FIELDS]
    if not any(v is not None for v in values):
        return NO_DETAILS  # most claims declare nothing: nothing to build or check
    return LeaseDetails(*values)


def details_params(details: LeaseDetails) -> tuple[str | None, ...]:
    d = details
    return (d.target_branch, d.target_sha, d.session_id, d.issue, d.blocker)


def _waiter(row: Row, target: LeaseTarget) -> Waiter:
    # Written out rather than through ``row_as``, and with the ``target`` the rows were
    # picked by rather than one rebuilt (and re-checked) for each row: every acquire in line
    # and every release reads the whole line, and this was most of their cost.
    return Waiter(
        target,
        row["worker"],
        row["seq"],
        row["head_sha"],
        row["ttl_s"],
        row["joined_at"],
        row["seen_at"],
        details_of(row),
    )


def for_target(tx: Tx, target: LeaseTarget) -> list[tuple[Waiter, float | None]]:
    """The target's waiters in arrival order, each with its worker's last heartbeat
    (``None``: the worker's record is gone)."""
    rows = tx.all(
        "SELECT l.*, w.heartbeat_at AS worker_heartbeat_at FROM lease_waiters AS l"
        " LEFT JOIN workers AS w ON w.identity = l.worker"
        " WHERE l.forge = ? AND l.repo = ? AND l.number = ? AND l.role = ? ORDER BY l.seq",
        _key(target),
    )
    return [(_waiter(r, target), r["worker_heartbeat_at"]) for r in rows]


def join(tx: Tx, request: AcquireRequest, now: float, line: Sequence[Waiter]) -> Waiter:
    """Put the requester in line (at the back) or, when it is in line already, keep its
    place and record what it asks for now and that it was heard from; its row."""
    mine = next((w for w in line if w.worker == request.worker), None)
    seq = mine.seq if mine is not None else next_seq(line)
    joined = mine.joined_at if mine is not None else now
    tx.execute(
        "INSERT INTO lease_waiters (forge, repo, number, role, worker, seq, head_sha, ttl_s,"
        " joined_at, seen_at, target_branch, target_sha, session_id, issue, blocker)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (forge, repo, number, role, worker) DO UPDATE SET"
        " head_sha = excluded.head_sha, ttl_s = excluded.ttl_s, seen_at = excluded.seen_at,"
        " target_branch = excluded.target_branch, target_sha = excluded.target_sha,"
        " session_id = excluded.session_id, issue = excluded.issue, blocker = excluded.blocker",
        (
            *_key(request.target),
            request.worker,
            seq,
            request.head_sha,
            request.ttl_s,
            joined,
            now,
            *details_params(request.details),
        ),
    )
    r = request
    return Waiter(r.target, r.worker, seq, r.head_sha, r.ttl_s, joined, now, r.details)


def remove(tx: Tx, target: LeaseTarget, workers: Iterable[str]) -> int:
    """Take ``workers`` out of the target's line; how many were in it."""
    names = list(workers)
    if not names:
        return 0
    marks = ", ".join("?" for _ in names)
    return tx.execute(
        f"DELETE FROM lease_waiters WHERE {_TARGET_WHERE} AND worker IN ({marks})",
        (*_key(target), *names),
    ).rowcount


def remove_workers(tx: Tx, workers: Sequence[str]) -> None:
    """Take ``workers`` out of every line (their records are being deleted)."""
    if workers:
        marks = ", ".join("?" for _ in workers)
        tx.execute(f"DELETE FROM lease_waiters WHERE worker IN ({marks})", list(workers))
