"""The epoch ledger: the highest lease epoch ever granted per target, which no grant goes below.

**Epochs are never reused, not even after a restore.** An epoch is a fencing token: outside
systems (a merge script, an audit log) may compare it, and a holder that paused can come
back with it. Three places remember the highest epoch granted for a target:

1. the ``leases`` row itself (gone when an operator deletes rows);
2. the ``lease_epochs`` table in the same database (outlives deleted rows, but a restore of
   a backup taken before the last grant lowers it together with everything else);
3. the *ledger file*, a small SQLite file beside the database
   (``<db name>.lease-epochs.sqlite``). Restoring ``db.sqlite`` from a backup (the
   migration snapshots, a copy of the file) leaves it alone.

The file holds a *reservation*, as PostgreSQL's sequences log values ahead: a process's
first grant of a target takes ``max(row, table, file) + 1``, above every epoch anybody may
have granted (even one whose main transaction a crash lost, or that a restore took out of
the table), and writes that epoch plus :data:`RESERVED_EPOCHS` - 1 to the file, durably
(``synchronous=FULL``) and committed, *before* the main transaction commits and the grant is
returned. A restore happens with every process stopped (docs: operations), so from that
first grant on, while the process runs, the table holds every grant of the target, whichever
process made it: the process's next grants take ``max(row, table) + 1`` and write the file
nothing while the file's reservation (its own or another process's) covers them; only an
epoch past it writes a new one (that fsync was the slow tail of every acquire, and of every
handover between two processes while each trusted only its own reservation). A table found
below the process's own last grant has lost the target's row (a rename moves a repository's
rows to its new name, and the old name may be taken again): that grant goes above the file
once more. So epochs strictly increase, with gaps (at each process's first grant, and after
a restart), which are harmless: epochs only need to increase.

The file is only written while the main database's write lock is held, so its writers are
serialised in the same order as the grants and the lock order (database, then file) never
inverts. If the file is lost, the table still holds the mark; only losing both at once
(restoring the whole ``db/`` folder from an old copy) can lower it, and the documented
restore procedure keeps the file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path, PurePosixPath

from reviewbot.core.leases import LeaseTarget
from reviewbot.core.sandbox import ledger_file
from reviewbot.store.database import (
    BUSY_TIMEOUT_MS,
    Database,
    SQLiteDatabase,
    ThreadConnections,
    Tx,
)

_TARGET_WHERE = "forge = ? AND repo = ? AND number = ? AND role = ?"
# Epochs one durable write of the ledger file reserves for this process (see above).
RESERVED_EPOCHS = 256
# Targets whose reservation a process remembers; past that it forgets them all (their next
# grants start above the file again: a gap, nothing else).
REMEMBERED_TARGETS = 10_000
# The larger of the stored and the new epoch (SQLite's two-argument max() is not portable).
_LARGER_EPOCH = (
    "CASE WHEN excluded.epoch > lease_epochs.epoch THEN excluded.epoch ELSE lease_epochs.epoch END"
)


def target_name(target: LeaseTarget) -> str:
    """The target as one text: the ledger file's key and the name of its lock."""
    return f"{target.forge}:{target.repo}#{target.number}/{target.role.value}"


def default_ledger_path(db_path: Path) -> Path:
    # One naming rule, shared with the sandbox that keeps the ledger from reviewers.
    return Path(ledger_file(PurePosixPath(db_path)))


class EpochLedger:
    """The per-target epoch high-water mark kept in a file outside the main database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conns = ThreadConnections(self._connect)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        # Every grant is on disk before it is handed out.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS lease_epochs (target TEXT PRIMARY KEY,"
            " epoch INTEGER NOT NULL)"
        )
        return conn

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def high_water(self, target: LeaseTarget) -> int:
        row = (
            self._conn()
            .execute("SELECT epoch FROM lease_epochs WHERE target = ?", (target_name(target),))
            .fetchone()
        )
        return int(row[0]) if row else 0

    def raise_to(self, target: LeaseTarget, epoch: int) -> None:
        """Record ``epoch`` (never lowering the mark) and commit it durably."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO lease_epochs (target, epoch) VALUES (?, ?) ON CONFLICT (target)"
                " DO UPDATE SET epoch = max(epoch, excluded.epoch)",
                (target_name(target), epoch),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def marks(self) -> list[tuple[str, int]]:
        """Every target's mark, as ``(target name, epoch)`` (for ``db export``)."""
        rows = self._conn().execute("SELECT target, epoch FROM lease_epochs").fetchall()
        return [(str(name), int(epoch)) for name, epoch in rows]

    def close(self) -> None:
        self._conns.close()


class EpochStore:
    """The high-water marks a grant reads and raises, inside the grant's own transaction:
    the ``lease_epochs`` table and, where there is one, the ledger file."""

    def __init__(self, db: Database, *, ledger_path: Path | None = None) -> None:
        # SQLite: the ledger file beside the database. PostgreSQL has no file of its own on
        # this machine, and replicas on other machines could not share one: the high-water
        # mark is the lease_epochs table, read and raised under the target's lock (see
        # docs/scaling.md on restores).
        if ledger_path is None and isinstance(db, SQLiteDatabase):
            ledger_path = default_ledger_path(db.path)
        self.ledger = None if ledger_path is None else EpochLedger(ledger_path)
        # Per target: (the last epoch this process granted, the highest reservation in the
        # ledger file it knows of). Read and written only under the database's write lock.
        self._reserved: dict[LeaseTarget, tuple[int, int]] = {}

    def high_water(self, tx: Tx, target: LeaseTarget) -> int:
        """The epoch the next grant of ``target`` must exceed: the highest ever granted, or
        (once this process has granted the target) the highest granted by anybody in the
        table or by this process (0: none)."""
        row = tx.one(f"SELECT epoch FROM lease_epochs WHERE {_TARGET_WHERE}", _key(target))
        stored = int(row[0]) if row else 0
        if self.ledger is None:
            return stored
        mine = self._reserved.get(target)
        if mine is not None and stored >= mine[0]:
            # This process granted the target above the file since it started, and no
            # restore happens while it runs: the table holds every grant since. A table
            # below this process's own last grant lost the target's row (a repository's
            # rename moves it to the new name): the file decides again.
            return stored
        return max(stored, self.ledger.high_water(target), 0 if mine is None else mine[0])

    def raise_to(self, tx: Tx, target: LeaseTarget, epoch: int) -> None:
        """Record a grant of ``epoch`` in ``tx`` (a write transaction holding the target's
        lock, ``epoch`` above :meth:`high_water` in it), never lowering a mark."""
        if self.ledger is not None:
            mine = self._reserved.get(target)
            ceiling = 0 if mine is None else mine[1]
            if epoch > ceiling and mine is not None:
                # Past what this process knew of: another process may have reserved further.
                ceiling = self.ledger.high_water(target)
            if epoch > ceiling:
                # Durable outside this database before anyone can see the grant.
                ceiling = epoch + RESERVED_EPOCHS - 1
                self.ledger.raise_to(target, ceiling)
            if mine is None and len(self._reserved) >= REMEMBERED_TARGETS:
                self._reserved.clear()
            self._reserved[target] = (epoch, ceiling)
        tx.execute(
            "INSERT INTO lease_epochs (forge, repo, number, role, epoch)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (forge, repo, number, role)"
            f" DO UPDATE SET epoch = {_LARGER_EPOCH}",
            (*_key(target), epoch),
        )

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()


def _key(target: LeaseTarget) -> tuple[str, str, int, str]:
    return (target.forge, target.repo, target.number, target.role.value)
