"""Worker identities in the store (table ``workers``): who may hold leases, who registered
them, and when each was last heard from.

A worker's sign of life also ends the claims it let lapse; that part is the lease store's
(:meth:`reviewbot.store.leases.LeaseStore.worker_heartbeat`), which records it with
:meth:`WorkerStore.touch` in the same transaction.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from reviewbot.core import errors
from reviewbot.core import leases as core
from reviewbot.core.clock import Clock
from reviewbot.core.leases import (
    DEFAULT_TIMING,
    LeaseTiming,
    WorkerOwner,
    WorkerRecord,
    WorkerStatus,
)
from reviewbot.store import lease_waiters
from reviewbot.store.database import Database, OnDatabase, Tx, row_as, skip_locked

log = logging.getLogger(__name__)

_MAX_TEXT = 200


class LeaseStoreError(errors.Refused):
    """A refused lease or worker call; ``code`` is the API's error code."""

    code = "lease_error"


class WorkerExists(LeaseStoreError):
    code = "worker_exists"


class UnknownWorker(LeaseStoreError):
    """No record of this identity: it is ``unproven`` and may not hold leases."""

    code = "worker_unproven"


class NotWorkerOwner(LeaseStoreError):
    """A caller acted in the name of a worker another caller registered."""

    code = "not_worker_owner"


def _short_text(field: str, value: str) -> str:
    if not value or len(value) > _MAX_TEXT or any(ord(c) < 32 for c in value):
        raise ValueError(f"{field} must be 1-{_MAX_TEXT} printable characters")
    return value


class WorkerStore(OnDatabase):
    """Registered worker identities. Clock and randomness are injectable."""

    def __init__(
        self,
        db: Database,
        timing: LeaseTiming = DEFAULT_TIMING,
        *,
        clock: Clock = time.time,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.db = db
        self.timing = timing
        self.clock = clock
        self.random_bytes = random_bytes

    def register(
        self,
        name: str,
        *,
        client: str,
        session_id: str,
        role: str,
        identity: str | None = None,
        owner: WorkerOwner | None = None,
    ) -> WorkerRecord:
        """Register a new identity (minted here unless given); an existing one is refused.

        ``owner`` is the caller that registered it (``None``: the bot or its command line);
        only that caller may act in the identity's name (:meth:`check_owner`).
        """
        owner = owner or WorkerOwner()
        _short_text("client", client)
        _short_text("session_id", session_id)
        _short_text("role", role)
        now = self.clock()
        if identity is None:
            identity = core.mint_worker_identity(
                name,
                client=client,
                session_id=session_id,
                now_ns=int(now * 1e9),
                nonce=self.random_bytes(16),
            )
        elif core.parse_worker_identity(identity) != core.check_worker_name(name):
            raise ValueError(f"identity {identity!r} does not start with the name {name!r}")
        record = WorkerRecord(identity, name, client, session_id, role, now, now)
        with self.db.write() as tx:
            if self.heartbeat_at(tx, identity) is not None:
                raise WorkerExists(f"worker identity {identity} already exists; mint a new one")
            tx.execute(
                "INSERT INTO workers (identity, name, client, session_id, role, registered_at,"
                " heartbeat_at, owner_token_id, owner_session) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (identity, name, client, session_id, role, now, now, owner.token_id, owner.session),
            )
        return record

    def get(self, identity: str) -> WorkerRecord | None:
        with self.db.read() as tx:
            return self.get_in(tx, identity)

    @staticmethod
    def get_in(tx: Tx, identity: str) -> WorkerRecord | None:
        """The record of ``identity`` inside an open transaction."""
        row = tx.one("SELECT * FROM workers WHERE identity = ?", (identity,))
        return None if row is None else row_as(WorkerRecord, row)

    def check_owner(self, identity: str, caller: WorkerOwner) -> None:
        """Raise :class:`NotWorkerOwner` unless ``caller`` registered ``identity``.

        An identity nobody registered passes: the call itself then refuses it as unproven
        or not held. The owner never changes after registration, so checking it before the
        call's own transaction leaves no gap.
        """
        owner = self.owner(identity)
        if owner is None or owner.same_as(caller):
            return
        log.warning(
            "refused: %s acted in the name of worker %s, which belongs to %s",
            caller,
            identity,
            owner,
        )
        raise NotWorkerOwner(
            f"worker {identity} was registered by another caller; register a worker of your own",
            worker_identity=identity,
        )

    def owner(self, identity: str) -> WorkerOwner | None:
        """Who registered ``identity``; ``None`` when nobody did."""
        with self.db.read() as tx:
            row = tx.one(
                "SELECT w.owner_token_id, w.owner_session, t.name AS owner_name FROM workers AS w"
                " LEFT JOIN api_tokens AS t ON t.id = w.owner_token_id WHERE w.identity = ?",
                (identity,),
            )
        if row is None:
            return None
        return WorkerOwner(row["owner_token_id"], row["owner_session"], row["owner_name"] or "")

    def status(self, identity: str) -> WorkerStatus:
        return core.worker_status(self.get(identity), self.clock(), self.timing)

    @staticmethod
    def heartbeat_at(tx: Tx, identity: str) -> float | None:
        """When ``identity`` was last heard from (``None``: nobody registered it)."""
        row = tx.one("SELECT heartbeat_at FROM workers WHERE identity = ?", (identity,))
        return None if row is None else float(row[0])

    @staticmethod
    def touch(tx: Tx, identity: str, now: float) -> None:
        """Record a sign of life of ``identity`` at ``now``, inside a write transaction."""
        tx.execute("UPDATE workers SET heartbeat_at = ? WHERE identity = ?", (now, identity))


def prune_workers(db: Database, before: float, *, limit: int) -> int:
    """Delete up to ``limit`` workers that an API token registered and that were last heard
    from before ``before``; the number deleted.

    A worker silent for longer than one lease term holds no live claim (its claims lapsed
    with it), so none is cut short. A call in its name afterwards finds no worker
    (``worker_unproven``), as for any identity nobody registered. The bot's own workers and
    those of the command line (no owning token) are kept: they grow with restarts, not with
    calls."""
    with db.write(serialized=False) as tx:
        rows = tx.all(
            "SELECT identity FROM workers WHERE owner_token_id IS NOT NULL AND heartbeat_at < ?"
            f" LIMIT ?{skip_locked(tx)}",
            (before, limit),
        )
        ids = [str(r["identity"]) for r in rows]
        if ids:
            marks = ", ".join("?" for _ in ids)
            tx.execute(f"DELETE FROM workers WHERE identity IN ({marks})", ids)
            lease_waiters.remove_workers(tx, ids)  # and from every line they waited in
    return len(ids)
