"""The delivery journal: every accepted delivery is committed durably before it is acknowledged.

Acknowledgement speed comes from group commit: one writer thread owns a connection with
``synchronous=FULL`` and writes every delivery waiting at that moment in one transaction, so
one fsync covers a whole batch. Each caller waits for the commit of the batch that holds its
delivery, never for a later one. A second delivery with an id already stored is reported as a
duplicate (``ON CONFLICT DO NOTHING``), also inside one batch.

Each delivery of a batch is written inside its own savepoint: one whose values cannot be
stored (a header with a byte that is not UTF-8) is refused alone, with
:class:`UnwritableDelivery`, and its batch-mates commit.

The rest of the module moves deliveries through their states
(``queued -> processing -> done | failed | dead``) for the worker pool and reads them back.
A delivery whose decisions could not be recorded goes back to ``queued`` with a
``next_attempt_at`` and is not claimed before then; after its last attempt it is ``dead``.

Several processes on one PostgreSQL database claim with a :class:`DeliveryClaim`: the rows
are picked ``FOR UPDATE SKIP LOCKED`` (two claimers never get the same delivery, and never
wait for each other), marked with the claimer and a term, and a delivery whose claimer died
is taken up by anyone once the term lapsed. The claimer renews its term while it works
(:func:`renew_claims`), and its results are written only while the row still names it
(:func:`still_held`, taken inside the transaction that records them): a claimer whose term
lapsed and was taken over writes nothing. On PostgreSQL the group-commit writer writes
each batch in one transaction on the store's pool (:class:`GroupCommitJournal` ``database``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reviewbot.core.clock import iso, iso_or_none
from reviewbot.core.errors import Refused
from reviewbot.store.database import (
    Database,
    Row,
    Tx,
    begin_immediate,
    connect_sqlite,
    is_row_fault,
    opt_float,
    row_as,
    skip_locked,
)
from reviewbot.store.postgres import PgTx

QUEUED = "queued"
PROCESSING = "processing"
DONE = "done"
FAILED = "failed"
DEAD = "dead"
STATUSES = (QUEUED, PROCESSING, DONE, FAILED, DEAD)


class UnwritableDelivery(Refused):
    """A delivery whose values the store cannot hold; nothing of it was written."""

    code = "invalid_request"


_INSERT = (
    "INSERT INTO deliveries "
    "(delivery_id, source, forge, event, headers, received_at, status) "
    "VALUES (?, ?, ?, ?, ?, ?, 'queued') ON CONFLICT DO NOTHING"
)
_INSERT_BODY = (
    "INSERT INTO delivery_bodies (delivery_id, body) VALUES (?, ?)"
    " ON CONFLICT (delivery_id) DO UPDATE SET body = excluded.body"
)
_SELECT = (
    "SELECT d.*, b.body FROM deliveries d "
    "LEFT JOIN delivery_bodies b ON b.delivery_id = d.delivery_id"
)


@dataclass(frozen=True)
class NewDelivery:
    """A delivery as it arrived: raw body, the headers that matter, where and when."""

    delivery_id: str
    source: str  # github, gitea, crew, api, file
    body: bytes
    received_at: float  # seconds since the epoch
    forge: str | None = None
    event: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def params(self) -> tuple[Any, ...]:
        return (
            self.delivery_id,
            self.source,
            self.forge,
            self.event,
            json.dumps(dict(self.headers), sort_keys=True),
            self.received_at,
        )


def _insert(conn: sqlite3.Connection | Tx, delivery: NewDelivery) -> bool:
    """Insert one delivery; ``False`` (and nothing written) when its id is stored already."""
    if conn.execute(_INSERT, delivery.params()).rowcount != 1:
        return False
    conn.execute(_INSERT_BODY, (delivery.delivery_id, delivery.body))
    return True


@dataclass(frozen=True)
class StoredDelivery:
    delivery_id: str
    source: str
    forge: str | None
    event: str | None
    headers: dict[str, str]
    body: bytes
    received_at: float
    status: str
    attempts: int
    error: str | None
    finished_at: float | None
    claimed_by: str | None = None  # the last claim on it (replicas), if any

    @classmethod
    def from_row(cls, row: Row) -> StoredDelivery:
        return row_as(
            cls,
            row,
            headers=lambda r: json.loads(r["headers"] or "{}"),
            body=lambda r: bytes(r["body"] or b""),
            received_at=lambda r: float(r["received_at"]),
            finished_at=lambda r: opt_float(r["finished_at"]),
        )

    @property
    def held_by(self) -> str | None:
        """The claim it is being gated under: its result is written only while that claim
        holds it. ``None`` when it is not being gated under a claim (a replay of a finished
        delivery, say, or one process per store)."""
        return self.claimed_by if self.status == PROCESSING else None


@dataclass(frozen=True)
class DeliveryClaim:
    """Who claims deliveries, at what time, and until when. ``worker`` names one claim (one
    batch of one process), so a result is fenced against every other claim, this process's
    own later ones included."""

    worker: str
    now: float
    until: float


# About SQLite's own automatic checkpoint (1000 pages of 4 KiB).
CHECKPOINT_BYTES = 4 * 1024 * 1024

_Waiter = tuple[NewDelivery, "asyncio.Future[bool] | None", "threading.Event | None", list[Any]]
_STOP = object()


class GroupCommitJournal:
    """Durable appends with group commit; safe to call from many coroutines at once.

    ``append`` answers ``True`` for a new delivery and ``False`` for an id already stored;
    either way the answer is given only after the batch holding the delivery committed with
    ``synchronous=FULL``. ``on_commit`` (if set) is called on the event loop with the ids
    that were new in each batch, so workers can start on them without polling.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_batch: int = 1024,
        checkpoints: bool = True,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        on_commit: Callable[[list[str]], None] | None = None,
        database: Database | None = None,
    ) -> None:
        self.path = path
        # A server database (PostgreSQL): batches go through its pool, not an SQLite file.
        self.database = database
        self.max_batch = max_batch
        # The WAL is never checkpointed inside a commit (copying pages back into the
        # database and syncing it there would hold up that batch's acknowledgements).
        # True: the writer checkpoints after every ``checkpoint_bytes`` committed, once the
        # batch is answered; False: another connection (the workers') does.
        self.checkpoints = checkpoints
        self.checkpoint_bytes = checkpoint_bytes
        self._unchecked_bytes = 0  # committed since the last checkpoint
        self.on_commit = on_commit
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self.batches = 0  # committed transactions, for metrics
        self.checkpointed = 0  # checkpoints the writer ran
        self.appended = 0
        # Appends waiting for their commit, and when the last one arrived (event loop side):
        # the worker pool defers to the acknowledgement path while it is busy.
        self.waiting = 0
        self.last_append_at = 0.0

    def start(self) -> GroupCommitJournal:
        if self._thread is None:
            if self.database is None:
                conn = connect_sqlite(self.path)
                conn.execute("PRAGMA synchronous = FULL")
                # The writer waits for the write lock itself (see _begin), in small steps:
                # the engine's busy handler sleeps in steps of up to 100 ms, too coarse for
                # a 202.
                conn.execute("PRAGMA busy_timeout = 0")
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                self._conn = conn
            self._thread = threading.Thread(target=self._run, name="delivery-journal", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Commit everything already appended, then stop the writer."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join()
        self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def append(self, delivery: NewDelivery) -> bool:
        if self._thread is None:
            raise RuntimeError("journal is not started")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self.waiting += 1
        self.last_append_at = time.monotonic()
        self._queue.put((delivery, fut, None, [loop]))
        try:
            return await asyncio.shield(fut)
        finally:
            self.waiting -= 1

    def busy(self, quiet_s: float = 0.010) -> bool:
        """Deliveries are waiting for a commit, or one arrived within ``quiet_s``."""
        return self.waiting > 0 or time.monotonic() - self.last_append_at < quiet_s

    def append_blocking(self, delivery: NewDelivery) -> bool:
        """The same for code without an event loop (command-line steps)."""
        if self._thread is None:
            raise RuntimeError("journal is not started")
        done = threading.Event()
        box: list[Any] = [None]
        self._queue.put((delivery, None, done, box))
        done.wait()
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return bool(result)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            batch: list[_Waiter] = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            self._write_batch(batch)

    def _commit(self, batch: Sequence[_Waiter]) -> list[bool | BaseException]:
        """Write the batch in one transaction; each delivery's answer."""
        if self.database is not None:
            # Inserts that skip a stored id need no store-wide lock: only row locks.
            deliveries = [d for d, *_ in batch]
            with self.database.write(durable=True, serialized=False) as tx:
                assert isinstance(tx, PgTx)
                try:
                    with tx.conn.transaction():  # a savepoint: a row fault undoes the try
                        return _insert_pipelined(tx, deliveries)
                except Exception as exc:
                    if not is_row_fault(exc):
                        raise
                # One delivery cannot be stored: each alone, so only that one is refused.
                return [_insert_alone(tx, d) for d in deliveries]
        assert self._conn is not None
        conn = self._conn
        deliveries = [d for d, *_ in batch]
        try:
            # The usual batch: plain inserts, without a savepoint per delivery (three more
            # statements each, on the acknowledgement path).
            return _in_transaction(conn, lambda: [_insert(conn, d) for d in deliveries])
        except Exception as exc:
            if not is_row_fault(exc):
                raise
        # One delivery cannot be stored: each alone, so only that one is refused.
        return _in_transaction(conn, lambda: [_insert_alone(conn, d) for d in deliveries])

    def _write_batch(self, batch: Sequence[_Waiter]) -> None:
        results: list[bool | BaseException]
        try:
            results = self._commit(batch)
            self.batches += 1
            self.appended += sum(1 for r in results if r is True)
            self._unchecked_bytes += sum(len(d.body) for d, *_ in batch)
        except Exception as exc:  # the whole batch failed: every waiter hears why
            results = [exc] * len(batch)
        new_ids = [d.delivery_id for (d, *_), r in zip(batch, results, strict=True) if r is True]
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], Any]]] = {}
        for (_, fut, event, box), result in zip(batch, results, strict=True):
            if fut is not None:
                by_loop.setdefault(box[0], []).append((fut, result))
            elif event is not None:
                box[0] = result
                event.set()
        for loop, waiters in by_loop.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._resolve, waiters, new_ids)
        self._checkpoint_when_due()

    def _checkpoint_when_due(self) -> None:
        """After a batch is answered: copy the WAL back into the database once enough was
        committed. Between two commits of this writer the checkpoint can finish, so the
        next commit starts the WAL from its beginning again (a WAL that keeps growing makes
        every commit's sync dearer). Requests arriving meanwhile join the next batch."""
        if not self.checkpoints or self._conn is None:
            return
        if self._unchecked_bytes < self.checkpoint_bytes:
            return
        self._unchecked_bytes = 0
        # A failed pass (busy, I/O) leaves the pages in the WAL for the next one.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.checkpointed += 1

    def _resolve(self, waiters: list[tuple[asyncio.Future[bool], Any]], new_ids: list[str]) -> None:
        for fut, result in waiters:
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(bool(result))
        if new_ids and self.on_commit is not None:
            self.on_commit(new_ids)


def _insert_pipelined(tx: PgTx, deliveries: Sequence[NewDelivery]) -> list[bool | BaseException]:
    """PostgreSQL: the whole batch in two round trips rather than four per delivery. A
    repeated id (stored already, or earlier in the batch) returns no row: a duplicate."""
    rows = tx.returning_many(f"{_INSERT} RETURNING delivery_id", [d.params() for d in deliveries])
    new = [row is not None for row in rows]
    bodies = [(d.delivery_id, d.body) for d, fresh in zip(deliveries, new, strict=True) if fresh]
    tx.returning_many(f"{_INSERT_BODY} RETURNING delivery_id", bodies)
    return list(new)


def _insert_alone(conn: sqlite3.Connection | Tx, delivery: NewDelivery) -> bool | BaseException:
    """:func:`_insert` in a savepoint: a row fault refuses this delivery only."""
    conn.execute("SAVEPOINT delivery")
    try:
        new: bool | BaseException = _insert(conn, delivery)
    except Exception as exc:
        conn.execute("ROLLBACK TO delivery")
        if not is_row_fault(exc):
            raise
        text = f"{type(exc).__name__}: {exc}".encode("utf-8", "backslashreplace").decode()
        new = UnwritableDelivery(f"the delivery cannot be stored: {text}")
    finally:
        conn.execute("RELEASE delivery")
    return new


def _in_transaction(
    conn: sqlite3.Connection, write: Callable[[], list[bool | BaseException]]
) -> list[bool | BaseException]:
    """``write()`` in one transaction, committed, or rolled back when it raises."""
    _begin(conn)
    try:
        results = write()
    except BaseException:
        if conn.in_transaction:  # an I/O error may have rolled it back already
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return results


LOCK_WAIT_S = 10.0  # as long as the store's busy timeout
LOCK_STEP_S = 0.0002


def _begin(conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE``, retrying every 0.2 ms while another connection writes."""
    begin_immediate(conn, wait_s=LOCK_WAIT_S, step_s=LOCK_STEP_S)


class CommitWatch:
    """Has any other connection committed to the store since the last look?

    SQLite's ``PRAGMA data_version`` changes when another connection (of this process or
    another) commits; reading it costs no I/O beyond the WAL index. The first look says yes.
    Used from one thread at a time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None

    def changed(self) -> bool:
        if self._conn is None:
            self._conn = connect_sqlite(self.path)
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        changed, self._seen = version != self._seen, version
        return changed

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# --- delivery states (worker side) -------------------------------------------------------


def get_delivery(db: Database, delivery_id: str) -> StoredDelivery | None:
    with db.read() as tx:
        row = tx.one(f"{_SELECT} WHERE d.delivery_id = ?", (delivery_id,))
    return None if row is None else StoredDelivery.from_row(row)


def insert_delivery(db: Database, delivery: NewDelivery) -> bool:
    """One durable insert outside the group-commit writer (command-line use)."""
    with db.write(durable=True) as tx:
        return _insert(tx, delivery)


def resume_unfinished(db: Database, *, lapsed_at: float | None = None) -> list[str]:
    """At start: work left ``processing`` by a crash goes back to ``queued``; all queued ids.

    ``lapsed_at`` (replicas): only the deliveries whose claim lapsed by then go back; the
    others are being gated by a live process."""
    with db.write() as tx:
        if lapsed_at is None:
            tx.execute("UPDATE deliveries SET status = 'queued' WHERE status = 'processing'")
        else:
            tx.execute(
                "UPDATE deliveries SET status = 'queued', claimed_by = NULL"
                " WHERE status = 'processing' AND claim_until <= ?",
                (lapsed_at,),
            )
        rows = tx.all(
            "SELECT delivery_id FROM deliveries WHERE status = 'queued' "
            "ORDER BY received_at, delivery_id"
        )
    return [r["delivery_id"] for r in rows]


def claim(
    db: Database,
    delivery_id: str,
    *,
    charge: bool = True,
    claim: DeliveryClaim | None = None,
) -> StoredDelivery | None:
    """``queued -> processing``; ``None`` when another worker has it or it is finished.

    ``charge=False`` takes it up again without counting an attempt: a delivery re-gated
    alone after its batch failed was already charged when the batch was claimed. With
    ``claim`` it is marked as that claim's until ``claim.until``.
    """
    claimed = "" if claim is None else ", claimed_by = ?, claim_until = ?"
    with db.write() as tx:
        cur = tx.execute(
            f"UPDATE deliveries SET status = 'processing', attempts = attempts + ?{claimed}"
            " WHERE delivery_id = ? AND status = 'queued'",
            (
                1 if charge else 0,
                *(() if claim is None else (claim.worker, claim.until)),
                delivery_id,
            ),
        )
        if cur.rowcount != 1:
            return None
        row = tx.one(f"{_SELECT} WHERE d.delivery_id = ?", (delivery_id,))
    return None if row is None else StoredDelivery.from_row(row)


def claim_batch(
    db: Database, limit: int, now: float | None = None, *, claim: DeliveryClaim | None = None
) -> list[StoredDelivery]:
    """The oldest ``limit`` queued deliveries that are due at ``now`` (``None``: all),
    moved to ``processing`` in one transaction.

    With ``claim`` they are marked as its worker's until ``claim.until``, and deliveries
    left ``processing`` by a claimer whose term lapsed at ``claim.now`` are taken too."""
    lapsed = "" if claim is None else " OR (status = 'processing' AND claim_until <= ?)"
    claimed: tuple[object, ...] = () if claim is None else (claim.worker, claim.until)
    with db.write(serialized=False) as tx:
        ids = tx.all(
            "UPDATE deliveries SET status = 'processing', attempts = attempts + 1"
            + ("" if claim is None else ", claimed_by = ?, claim_until = ?")
            + " WHERE delivery_id IN (SELECT delivery_id FROM deliveries WHERE"
            " (status = 'queued' AND (next_attempt_at IS NULL OR CAST(? AS TEXT) IS NULL"
            f" OR next_attempt_at <= ?)){lapsed}"
            f" ORDER BY received_at, delivery_id LIMIT ?{skip_locked(tx)}) RETURNING delivery_id",
            (*claimed, now, now, *(() if claim is None else (claim.now,)), limit),
        )
    if not ids:
        return []
    # The bodies are read after the commit: the write lock is held as briefly as possible.
    marks = ", ".join("?" * len(ids))
    with db.read() as tx:
        rows = tx.all(
            f"{_SELECT} WHERE d.delivery_id IN ({marks}) ORDER BY d.received_at, d.delivery_id",
            [r["delivery_id"] for r in ids],
        )
    # Named by this claim, not by the row: it may be re-claimed by the time it is read.
    worker = None if claim is None else claim.worker
    return [replace(StoredDelivery.from_row(r), claimed_by=worker) for r in rows]


def requeue(
    db: Database,
    delivery_ids: Sequence[str],
    *,
    holder: str | None = None,
    uncharge: bool = False,
) -> None:
    """Work that was claimed but not finished goes back to ``queued``. With ``holder`` only
    what that claim still holds: a delivery another claimer took over is its to finish.
    ``uncharge``: the claim's attempt is given back (the store failed, not the delivery, so
    an outage does not use up the attempts a delivery has for faults of its own)."""
    mine = "" if holder is None else " AND claimed_by = ?"
    back = ", attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END" if uncharge else ""
    with db.write() as tx:
        for delivery_id in delivery_ids:
            tx.execute(
                f"UPDATE deliveries SET status = 'queued'{back} "
                f"WHERE delivery_id = ? AND status = 'processing'{mine}",
                (delivery_id, *(() if holder is None else (holder,))),
            )


def renew_claims(db: Database, delivery_ids: Sequence[str], claim: DeliveryClaim) -> list[str]:
    """Extend ``claim`` to ``claim.until`` on those of ``delivery_ids`` it still has in
    ``processing``; the ids it lost: claimed by another since (its term lapsed and another
    claimer took them over), or put back by a replica that started. A delivery this claim
    finished or re-queued itself is not lost, and needs no renewal."""
    if not delivery_ids:
        return []
    marks = ", ".join("?" * len(delivery_ids))
    with db.write(serialized=False) as tx:
        tx.execute(
            "UPDATE deliveries SET claim_until = ? WHERE status = 'processing'"
            f" AND claimed_by = ? AND delivery_id IN ({marks})",
            (claim.until, claim.worker, *delivery_ids),
        )
        rows = tx.all(
            f"SELECT delivery_id FROM deliveries WHERE delivery_id IN ({marks})"
            " AND (claimed_by IS NULL OR claimed_by <> ?)",
            (*delivery_ids, claim.worker),
        )
    return sorted(r["delivery_id"] for r in rows)


def still_held(tx: Tx, delivery_id: str, holder: str) -> bool:
    """Inside the transaction that records a result: does ``holder`` still hold the delivery?

    The check is an update, so on PostgreSQL it locks the row until the commit: a claimer
    taking over a lapsed claim skips a locked row, and cannot slip in between the check and
    the write it guards."""
    cur = tx.execute(
        "UPDATE deliveries SET claimed_by = claimed_by"
        " WHERE delivery_id = ? AND status = 'processing' AND claimed_by = ?",
        (delivery_id, holder),
    )
    return bool(cur.rowcount == 1)


def next_attempt_at(db: Database) -> float | None:
    """When the earliest queued delivery waiting out a backoff is due, if any is."""
    with db.read() as tx:
        row = tx.one(
            "SELECT MIN(next_attempt_at) AS due FROM deliveries "
            "WHERE status = 'queued' AND next_attempt_at IS NOT NULL"
        )
    return None if row is None or row["due"] is None else float(row["due"])


def oldest_queued(db: Database) -> float | None:
    """When the oldest delivery still waiting to be gated was received, if any is."""
    with db.read() as tx:
        row = tx.one(
            "SELECT MIN(received_at) AS oldest FROM deliveries "
            "WHERE status IN ('queued', 'processing')"
        )
    return None if row is None or row["oldest"] is None else float(row["oldest"])


def probe_write(db: Database, at: float) -> None:
    """A real write (and commit) that fails as the store's writes would: disk full, I/O."""
    with db.write() as tx:
        tx.execute(
            "INSERT INTO health_probe (id, probed_at) VALUES (1, ?)"
            " ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
            (at,),
        )


def finish(db: Database, delivery_id: str, *, ok: bool, error: str | None, at: float) -> None:
    with db.write() as tx:
        tx.execute(
            "UPDATE deliveries SET status = ?, error = ?, finished_at = ? WHERE delivery_id = ?",
            (DONE if ok else FAILED, error, at, delivery_id),
        )


def count_by_status(db: Database) -> dict[str, int]:
    with db.read() as tx:
        rows = tx.all("SELECT status, COUNT(*) AS n FROM deliveries GROUP BY status")
    counts = dict.fromkeys(STATUSES, 0)
    counts.update({r["status"]: int(r["n"]) for r in rows})
    return counts


def delivery_json(stored: StoredDelivery, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A delivery and its decisions as the API and ``reviewbot explain --json`` show them."""
    return {
        "delivery_id": stored.delivery_id,
        "source": stored.source,
        "forge": stored.forge,
        "event": stored.event,
        "status": stored.status,
        "received_at": iso(stored.received_at, timespec="microseconds"),
        "finished_at": iso_or_none(stored.finished_at, timespec="microseconds"),
        "attempts": stored.attempts,
        "error": stored.error,
        "decisions": rows,
    }


# The states a delivery ends in: only those are pruned.
ENDED = (DONE, FAILED, DEAD)


def prune_ended(db: Database, before: float, *, limit: int) -> int:
    """Delete up to ``limit`` deliveries that ended (done, failed or dead) and were received
    before ``before``, oldest first, with what was kept for each: the body, the gate's
    decisions, the semantic key it claimed and its finished review jobs. A delivery whose
    review job is still queued is kept. The number deleted.

    The review decisions (what the bot judged and posted) are kept: they belong to the PR,
    not to the delivery."""
    ended = ", ".join(f"'{s}'" for s in ENDED)
    with db.write(serialized=False) as tx:
        rows = tx.all(
            f"SELECT delivery_id FROM deliveries AS d WHERE d.status IN ({ended})"
            " AND d.received_at < ? AND NOT EXISTS (SELECT 1 FROM pr_gate_decisions AS g"
            " JOIN review_jobs AS j ON j.decision_id = g.id"
            " WHERE g.delivery_id = d.delivery_id AND j.status = 'queued')"
            f" ORDER BY d.received_at LIMIT ?{skip_locked(tx)}",
            (before, limit),
        )
        ids = [str(r["delivery_id"]) for r in rows]
        if not ids:
            return 0
        marks = ", ".join("?" for _ in ids)
        decided = f"SELECT {{}} FROM pr_gate_decisions WHERE delivery_id IN ({marks})"
        tx.execute(f"DELETE FROM review_jobs WHERE decision_id IN ({decided.format('id')})", ids)
        tx.execute(
            "DELETE FROM delivery_semantic_keys WHERE semantic_key IN"
            f" ({decided.format('semantic_key')}) AND delivery_id IN ({marks})",
            [*ids, *ids],
        )
        tx.execute(f"DELETE FROM pr_gate_decisions WHERE delivery_id IN ({marks})", ids)
        tx.execute(f"DELETE FROM delivery_bodies WHERE delivery_id IN ({marks})", ids)
        tx.execute(f"DELETE FROM deliveries WHERE delivery_id IN ({marks})", ids)
    return len(ids)
