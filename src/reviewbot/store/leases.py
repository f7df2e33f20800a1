"""Leases and their fencing in the store: one write transaction per call.

On PostgreSQL, where replicas share the database, a grant, heartbeat, release or
supersession holds the target's own lock (an advisory lock named by the target) for its
transaction instead of the store-wide write lock: two replicas granting the same target
queue one behind the other, so each reads the epoch the other wrote and epochs stay strictly
increasing; grants of other targets do not wait.

The rules are in :mod:`reviewbot.core.leases`; this module reads the current row, asks the
core, and writes what it answers, all inside one write transaction, so two callers can never
both see a target free. Its collaborators act inside that same transaction: the worker
identities (:mod:`reviewbot.store.workers`), the epoch high-water marks a grant raises
(:mod:`reviewbot.store.epochs`, where epochs are never reused) and the audit trail
(:mod:`reviewbot.store.lease_history`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reviewbot.core import lease_line
from reviewbot.core import leases as core
from reviewbot.core.clock import Clock, iso
from reviewbot.core.lease_history import (
    EndReason,
    HistoryEntry,
    LeaseEvent,
    lapse_entry,
    lapse_reason,
    with_unrecorded_lapses,
)
from reviewbot.core.lease_line import LineView, ordinal
from reviewbot.core.leases import (
    DEFAULT_TIMING,
    NO_DETAILS,
    AcquireRequest,
    Granted,
    GrantKind,
    Lease,
    LeaseClaim,
    LeaseDetails,
    LeaseTarget,
    LeaseTiming,
    Phase,
    Refused,
    Role,
    WorkerRecord,
    refusal_view,
)
from reviewbot.core.models import repo_key
from reviewbot.core.reasons import ReasonCode
from reviewbot.store import lease_history, lease_waiters
from reviewbot.store.database import (
    SQLITE,
    Database,
    OnDatabase,
    Params,
    Row,
    SQLiteDatabase,
    Tx,
)
from reviewbot.store.epochs import EpochStore, target_name
from reviewbot.store.lease_waiters import details_of, details_params
from reviewbot.store.line_bells import Bell, LineBells
from reviewbot.store.workers import LeaseStoreError, UnknownWorker, WorkerStore

if TYPE_CHECKING:
    from reviewbot.observe import Telemetry

log = logging.getLogger(__name__)

_TARGET_WHERE = "forge = ? AND repo = ? AND number = ? AND role = ?"
TARGET_LOCKS = 0x52424C53  # the advisory-lock space of lease targets ("RBLS")
# The actor of a grant made from the line on behalf of its first waiter (after a release,
# or when another call found the holder lapsed).
LINE_ACTOR = "line"


class LeaseRefused(LeaseStoreError):
    def __init__(self, refusal: Refused) -> None:
        view = refusal_view(refusal)
        extra = {k: v for k, v in view.items() if k not in ("error", "detail")}
        super().__init__(refusal.detail, code=refusal.code.value, **extra)
        self.refusal = refusal

    @property
    def holder(self) -> str | None:
        return self.refusal.holder

    @property
    def expires_at(self) -> float | None:
        return self.refusal.expires_at


class GuardedWriteError(LeaseStoreError):
    """A write under a lease changed a number of rows other than one; it was rolled back."""

    code = "guarded_write_failed"


def _key(target: LeaseTarget) -> tuple[str, str, int, str]:
    return (target.forge, target.repo, target.number, target.role.value)


def _lock_targets(tx: Tx, *targets: LeaseTarget) -> None:
    """Hold the targets' locks until the transaction ends (in one order: no deadlock)."""
    if tx.dialect == SQLITE:
        return  # BEGIN IMMEDIATE holds the database write lock already
    for name in sorted({target_name(t) for t in targets}):
        tx.lock_text(name, space=TARGET_LOCKS)


def _lease(row: Row, target: LeaseTarget | None = None) -> Lease:
    """The lease of a ``leases`` row (``target``: the row's target, when the caller knows it,
    so it is not parsed and checked again). Written out rather than through ``row_as``:
    every lease call reads one, a heartbeat little else."""
    return Lease(
        target or LeaseTarget(row["forge"], row["repo"], row["number"], Role(row["role"])),
        row["holder"],
        row["epoch"],
        row["head_sha"],
        Phase(row["phase"]),
        row["ttl_s"],
        row["acquired_at"],
        row["heartbeat_at"],
        row["expires_at"],
        details_of(row),
    )


@dataclass(frozen=True)
class LineStatus:
    """Where a worker stands for a target: granted (its live lease), waiting (its place,
    1 = next), or neither; and how many live waiters the line has."""

    granted: Lease | None
    position: int | None
    waiting: int
    free: bool  # nobody holds the target live: the next acquire or settle grants it


@dataclass(frozen=True)
class _Grant:
    """A grant one transaction made, for telemetry once it committed."""

    lease: Lease
    kind: GrantKind
    previous: Lease | None


class LeaseStore(OnDatabase):
    """Leases over the workflow database, granted to the workers of :attr:`workers`."""

    def __init__(
        self,
        db: Database,
        workers: WorkerStore,
        epochs: EpochStore,
        *,
        telemetry: Telemetry | None = None,
        history_days: float | None = None,
    ) -> None:
        """``telemetry`` hears of every grant, takeover, expiry, release and refusal.
        ``history_days``: every grant deletes a bounded number of ``lease_history`` rows
        whose last activity is older than that (``None``: the trail is kept whole)."""
        self.db = db
        self.workers = workers
        self.epochs = epochs
        self.telemetry = telemetry
        self.history_days = history_days
        # A grant the line makes rings its waiter's bell (SQLite: one machine's processes).
        self.bells = LineBells(str(db.path.resolve())) if isinstance(db, SQLiteDatabase) else None
        # The targets that had a line at this process's last look: their transactions wait
        # for the write lock at the store's gate, so a turn passes as soon as the writer
        # before is done (a target nobody waits for keeps SQLite's own wait, which serves
        # writers of many targets better).
        self._lined: set[LeaseTarget] = set()
        # One clock and one term for a worker's liveness and for its claims.
        self.timing = workers.timing
        self.clock = workers.clock

    @classmethod
    def open(
        cls,
        db: Database,
        timing: LeaseTiming = DEFAULT_TIMING,
        *,
        clock: Clock = time.time,
        random_bytes: Callable[[int], bytes] = os.urandom,
        ledger_path: Path | None = None,
        telemetry: Telemetry | None = None,
        history_days: float | None = None,
    ) -> LeaseStore:
        """The lease store with its own worker and epoch stores (``ledger_path``: the epoch
        ledger file; by default the one beside a SQLite database)."""
        return cls(
            db,
            WorkerStore(db, timing, clock=clock, random_bytes=random_bytes),
            EpochStore(db, ledger_path=ledger_path),
            telemetry=telemetry,
            history_days=history_days,
        )

    def close(self) -> None:
        self.epochs.close()
        if self.bells is not None:
            self.bells.close()

    # --- signs of life --------------------------------------------------------------------------

    def worker_heartbeat(self, identity: str) -> WorkerRecord:
        """A worker's sign of life: the claims it let lapse stay ended, then it is live."""
        now = self.clock()
        with self.db.write() as tx:
            self._touch_worker(tx, identity, now)
            record = self.workers.get_in(tx, identity)
        if record is None:
            raise UnknownWorker(f"no worker {identity} is registered (unproven)")
        return record

    def _touch_worker(self, tx: Tx, identity: str, now: float, heard: float | None = None) -> None:
        """Record a sign of life of ``identity``, inside a write transaction (``heard``: its
        last heartbeat, when the caller read it already).

        A worker that was silent for a lease term lost its claims when it fell silent; a
        new sign of life must not revive them, so they are ended first: their expiry is
        brought forward to the lapse and an ``expired`` row is written.
        """
        if heard is None:
            heard = self.workers.heartbeat_at(tx, identity)
        if heard is None:
            return
        if now >= core.worker_lapse_at(heard, self.timing):
            for held in tx.all(
                "SELECT * FROM leases WHERE holder = ? AND phase = 'claimed'", (identity,)
            ):
                stored = _lease(held)
                seen = core.with_worker_liveness(stored, heard, self.timing)
                if seen.expires_at < stored.expires_at:
                    tx.execute(
                        f"UPDATE leases SET expires_at = ? WHERE {_TARGET_WHERE} AND epoch = ?",
                        (seen.expires_at, *_key(seen.target), seen.epoch),
                    )
                self._record_lapse(tx, seen, stored.expires_at)
        self.workers.touch(tx, identity, now)

    def _record_lapse(self, tx: Tx, seen: Lease, own_expiry: float) -> None:
        """Write the ``expired`` row of a lapsed claim, once."""
        if seen.phase is not core.Phase.CLAIMED:
            return
        if lease_history.has_end(tx, seen.target, seen.epoch):
            return
        reason = lapse_reason(seen, own_expiry)
        lease_history.end(tx, seen, lapse_entry(seen, reason, "clock"))

    # --- leases ---------------------------------------------------------------------------------

    def acquire(
        self,
        target: LeaseTarget,
        worker: str,
        head_sha: str,
        *,
        ttl_s: float | None = None,
        actor: str = "reviewbot",
        details: LeaseDetails = NO_DETAILS,
        wait: bool = False,
    ) -> Lease:
        """Grant or renew the lease, or raise :class:`LeaseRefused` (``lease_held``).

        While others wait in the target's line, a free target goes to the first of them
        (:mod:`reviewbot.core.lease_line`), never to a caller further back or not in line.
        ``wait``: a refused caller joins the line (or, in it, keeps its place and is heard
        from), and the refusal names its ``position``. Without it the caller never joins:
        a held target (or one just granted to the first waiter) is refused at once."""
        request = AcquireRequest(target, worker, head_sha, ttl_s, details)
        core.check_full_sha(head_sha)
        core.lease_term(self.timing, ttl_s)  # a malformed request never joins a line
        grants: list[_Grant] = []
        refusal: Refused | None = None
        lease: Lease | None = None
        with self.db.write(serialized=False, poll_lock=True, hot=target in self._lined) as tx:
            _lock_targets(tx, target)
            now = self.clock()
            heard = self.workers.heartbeat_at(tx, worker)
            if heard is None:
                raise UnknownWorker(
                    f"no worker {worker} is registered (unproven); register it first"
                )
            # First the caller's own lapse, if any: its old claims stay ended.
            self._touch_worker(tx, worker, now, heard)
            stored, current = self._held_in(tx, target)
            live = current is not None and current.live(now)
            holds = live and current is not None and current.holder == worker
            queued = wait and not holds
            line: LineView | None = None
            if queued or not live:  # a live claim leaves the line as it is
                rows = lease_waiters.for_target(tx, target)
                if queued:  # the caller was heard from just now
                    me = lease_waiters.join(tx, request, now, [w for w, _ in rows])
                    rows = [*((w, at) for w, at in rows if w.worker != worker), (me, now)]
                line = self._settle_in(
                    tx, target, now, actor, grants, caller=worker, rows=rows, seen=(stored, current)
                )
                self._note_line(target, line)
            if queued:
                assert line is not None
                mine = [g.lease for g in grants if g.lease.holder == worker]
                if mine:
                    lease = mine[0]
                else:
                    holder = grants[-1].lease if grants else current
                    assert holder is not None
                    refusal = self._waiting(target, worker, line, holder)
            else:
                lease, refusal = self._acquire_in(
                    tx, request, now, actor, grants, (stored, current)
                )
                if refusal is not None and not grants:
                    # Nothing changed: roll back, not even the caller's liveness moves.
                    self._refused(target, worker, refusal)
                    raise LeaseRefused(refusal)
        self._tell(grants, now, caller=worker)
        if refusal is not None:
            self._refused(target, worker, refusal)
            raise LeaseRefused(refusal)
        assert lease is not None
        return lease

    def _acquire_in(
        self,
        tx: Tx,
        request: AcquireRequest,
        now: float,
        actor: str,
        grants: list[_Grant],
        seen: tuple[Lease | None, Lease | None],
    ) -> tuple[Lease | None, Refused | None]:
        """The plain acquire of a caller not waiting in line, inside its transaction
        (``seen``: the target's stored row and that row with its holder's liveness)."""
        target = request.target
        stored, current = seen
        if grants:  # the line was granted the target just now
            stored, current = self._held_in(tx, target)
        high_water = self.epochs.high_water(tx, target)
        result = core.acquire(current, high_water, request, now, self.timing)
        if isinstance(result, Refused):
            return None, result
        self._grant(tx, stored, current, result, now, actor, grants)
        return result.lease, None

    def _grant(
        self,
        tx: Tx,
        stored: Lease | None,
        current: Lease | None,
        result: Granted,
        now: float,
        actor: str,
        grants: list[_Grant],
    ) -> None:
        """Persist a grant or renewal: the epoch mark, the row and its history."""
        lease = result.lease
        if result.kind is GrantKind.RENEWED:
            self._store_renewal(tx, lease)
        else:
            self.epochs.raise_to(tx, lease.target, lease.epoch)
            self._store(tx, lease, reset_writes=True)
        self._record_grant(tx, stored, current, result.kind, lease, now, actor)
        if result.kind is not GrantKind.RENEWED and self.history_days is not None:
            lease_history.prune(tx, now - self.history_days * 86400.0)
        grants.append(_Grant(lease, result.kind, current))

    def _settle_in(
        self,
        tx: Tx,
        target: LeaseTarget,
        now: float,
        actor: str,
        grants: list[_Grant],
        *,
        caller: str | None = None,
        rows: list[tuple[lease_line.Waiter, float | None]] | None = None,
        seen: tuple[Lease | None, Lease | None] | None = None,
    ) -> LineView:
        """Inside the target's transaction: drop the waiters that went silent and, when the
        target is free, grant it to the first live waiter (``actor`` when that is
        ``caller``, else :data:`LINE_ACTOR`). The line as it stands afterwards. ``rows`` and
        ``seen``: the line and the lease as the caller read them in this transaction."""
        if rows is None:
            rows = lease_waiters.for_target(tx, target)
        if not rows:
            return LineView((), ())
        heard = {w.worker: at for w, at in rows}
        line = lease_line.view([w for w, _ in rows], heard, now, self.timing.line_ttl_s)
        gone = [w.worker for w in line.stale]
        stored, current = seen if seen is not None else self._held_in(tx, target)
        granted: str | None = None
        waiter = lease_line.successor(current, line, now)
        while waiter is not None:
            try:
                result = core.acquire(
                    current, self.epochs.high_water(tx, target), waiter.request(), now, self.timing
                )
            except ValueError:  # it asked for a term the settings no longer allow
                gone.append(waiter.worker)
                line = line.without(waiter.worker)
                waiter = lease_line.successor(current, line, now)
                continue
            assert isinstance(result, Granted)
            who = actor if waiter.worker == caller else LINE_ACTOR
            self._grant(tx, stored, current, result, now, who, grants)
            granted = waiter.worker
            break
        lease_waiters.remove(tx, target, [*gone, *([granted] if granted else [])])
        return line if granted is None else line.without(granted)

    def _note_line(self, target: LeaseTarget, line: LineView) -> None:
        """Remember whether ``target`` has a line (its waiters after this transaction)."""
        if line.live:
            self._lined.add(target)
        else:
            self._lined.discard(target)

    @staticmethod
    def _waiting(target: LeaseTarget, worker: str, line: LineView, current: Lease) -> Refused:
        """The refusal of a caller that waits in line: the holder, and the caller's place."""
        position = line.position(worker)
        assert position is not None
        return Refused(
            ReasonCode.LEASE_HELD,
            f"{target} is held by {current.holder} until {iso(current.expires_at)};"
            f" you are {ordinal(position)} in line ({len(line.live)} waiting)",
            holder=current.holder,
            expires_at=current.expires_at,
            position=position,
        )

    def _tell(self, grants: list[_Grant], now: float, *, caller: str | None = None) -> None:
        """The grants a committed transaction made: each waiter granted the target hears its
        bell (not ``caller``, who has its answer), and telemetry hears of them all."""
        if self.bells is not None:
            for grant in grants:
                if grant.kind is not GrantKind.RENEWED and grant.lease.holder != caller:
                    self.bells.ring(grant.lease.target, grant.lease.holder)
        if self.telemetry is None:
            return
        for grant in grants:
            current = grant.previous
            lapsed = current is not None and current.phase_at(now) is Phase.EXPIRED
            if lapsed and grant.kind is not GrantKind.RENEWED:
                assert current is not None
                self.telemetry.lease_expired(current)
            previous = current.holder if current is not None else None
            self.telemetry.lease_granted(grant.lease, str(grant.kind), previous=previous)

    # --- the line -------------------------------------------------------------------------------

    def bell(self, target: LeaseTarget, worker: str) -> Bell | None:
        """A bell that rings when ``worker`` is granted ``target`` from its line: bind it
        before joining the line, wait on it between reads of :meth:`granted`, close it when
        done. ``None`` where there are no bells (PostgreSQL) or it cannot be bound: poll."""
        return None if self.bells is None else self.bells.bind(target, worker)

    def leave_line(self, target: LeaseTarget, worker: str) -> bool:
        """Take ``worker`` out of the target's line (it stopped waiting); whether it was in."""
        with self.db.write(serialized=False, poll_lock=True, hot=target in self._lined) as tx:
            _lock_targets(tx, target)
            return lease_waiters.remove(tx, target, [worker]) > 0

    def settle_line(self, target: LeaseTarget) -> Lease | None:
        """Grant the target to the first live waiter if it is free now (the holder released
        or lapsed); the lease granted, if any. Every acquire and release does this itself."""
        grants: list[_Grant] = []
        with self.db.write(serialized=False, poll_lock=True, hot=target in self._lined) as tx:
            _lock_targets(tx, target)
            now = self.clock()
            self._note_line(target, self._settle_in(tx, target, now, LINE_ACTOR, grants))
        self._tell(grants, now)
        return grants[0].lease if grants else None

    def granted(self, target: LeaseTarget, worker: str) -> Lease | None:
        """``worker``'s live lease of ``target``, if it holds one now (granted from the line
        or by its own acquire): one read, no write lock, cheap enough to poll."""
        with self.db.read() as tx:
            now = self.clock()
            row = tx.one(
                "SELECT l.*, w.heartbeat_at AS worker_heartbeat_at FROM leases AS l"
                " LEFT JOIN workers AS w ON w.identity = l.holder WHERE l.forge = ?"
                " AND l.repo = ? AND l.number = ? AND l.role = ? AND l.holder = ?"
                " AND l.phase = 'claimed' AND l.expires_at > ?",
                (*_key(target), worker, now),
            )
        if row is None:
            return None
        lease = core.with_worker_liveness(_lease(row), row["worker_heartbeat_at"], self.timing)
        return lease if lease.live(now) else None

    def line_status(self, target: LeaseTarget, worker: str) -> LineStatus:
        """Was ``worker`` granted ``target``, and if not, where is it in the line? A read:
        a free target is granted only by the next acquire, release or :meth:`settle_line`."""
        with self.db.read() as tx:
            now = self.clock()
            current = self.seen_in(tx, self.lease_in(tx, target))
            rows = lease_waiters.for_target(tx, target)
        heard = {w.worker: at for w, at in rows}
        line = lease_line.view([w for w, _ in rows], heard, now, self.timing.line_ttl_s)
        live = current is not None and current.live(now)
        held = live and current is not None and current.holder == worker
        return LineStatus(
            current if held else None, line.position(worker), len(line.live), free=not live
        )

    def _refused(self, target: LeaseTarget, worker: str, refusal: Refused) -> None:
        if self.telemetry is not None:
            self.telemetry.lease_refused(target, worker, str(refusal.code), refusal.detail)

    def _record_grant(
        self,
        tx: Tx,
        stored: Lease | None,
        current: Lease | None,
        kind: GrantKind,
        lease: Lease,
        now: float,
        actor: str,
    ) -> None:
        """The history rows of an acquire: the end of the claim it replaced, then itself (a
        renewal only updates the row of the grant it renews)."""
        if kind is GrantKind.RENEWED:
            lease_history.renew(tx, self._entry(lease, LeaseEvent.RENEWED, now, actor))
            return
        previous: str | None = None
        if stored is not None and current is not None:
            if current.live(now):  # the same worker moved its claim to another head
                ended = HistoryEntry(
                    current.target,
                    LeaseEvent.SUPERSEDED,
                    current.holder,
                    current.epoch,
                    current.head_sha,
                    now,
                    expires_at=now,
                    reason=EndReason.SUPERSEDED.value,
                    actor=actor,
                )
                lease_history.end(tx, current, ended)
            else:
                self._record_lapse(tx, current, stored.expires_at)
            if kind is GrantKind.TAKEOVER:
                previous = current.holder
        event = LeaseEvent.TAKEOVER if kind is GrantKind.TAKEOVER else LeaseEvent.GRANTED
        lease_history.append(tx, self._entry(lease, event, now, actor, previous_holder=previous))

    @staticmethod
    def _entry(
        lease: Lease,
        event: LeaseEvent,
        now: float,
        actor: str,
        *,
        reason: str = "",
        previous_holder: str | None = None,
    ) -> HistoryEntry:
        return HistoryEntry(
            lease.target,
            event,
            lease.holder,
            lease.epoch,
            lease.head_sha,
            now,
            expires_at=lease.expires_at,
            reason=reason,
            actor=actor,
            previous_holder=previous_holder,
            details=lease.details,
        )

    def heartbeat(self, claim: LeaseClaim, *, actor: str = "reviewbot") -> Lease:
        """Extend the live claim, or raise :class:`LeaseRefused` (superseded / not held).

        The live claim of a live worker is renewed by one conditional write (as
        :meth:`check_held` fences) and its worker's sign of life: a renewal costs what a
        renewal should. The trail reads the renewal from the lease row and copies it onto
        the grant's row when the claim ends (:mod:`reviewbot.store.lease_history`).
        Anything else (a lapsed claim or worker, a stale epoch) takes the full path, which
        explains the refusal."""
        with self.db.write(serialized=False, poll_lock=True) as tx:
            _lock_targets(tx, claim.target)
            now = self.clock()
            row = tx.one(
                f"UPDATE leases SET heartbeat_at = ?, expires_at = ? + ttl_s WHERE {_TARGET_WHERE}"
                " AND holder = ? AND epoch = ? AND phase = 'claimed' AND expires_at > ? AND"
                " NOT EXISTS (SELECT 1 FROM workers AS w WHERE w.identity = leases.holder"
                " AND w.heartbeat_at + ? <= ?) RETURNING *",
                (now, now, *_key(claim.target), claim.worker, claim.epoch, now,
                 self.timing.lease_s, now),
            )  # fmt: skip
            if row is not None:
                lease = _lease(row, claim.target)
                self.workers.touch(tx, claim.worker, now)
                return lease
        return self._transition(claim, core.heartbeat, LeaseEvent.RENEWED, "", actor)

    def release(
        self,
        claim: LeaseClaim,
        *,
        reason: EndReason = EndReason.MANUAL_RELEASE,
        actor: str = "reviewbot",
    ) -> Lease:
        """End the live claim now; the history row says why (``reason``) and who."""
        reason = EndReason(reason)
        lease = self._transition(claim, core.release, LeaseEvent.RELEASED, reason.value, actor)
        if self.telemetry is not None:
            self.telemetry.lease_released(lease)
        return lease

    def release_unless_ended(
        self,
        claim: LeaseClaim,
        *,
        reason: EndReason = EndReason.MANUAL_RELEASE,
        actor: str = "reviewbot",
    ) -> Lease | None:
        """:meth:`release`, for a holder whose claim another step may have ended already
        (the merger ends its lease with a successful merge): a claim its holder already
        released at this epoch is no refusal, and is neither counted nor logged as one
        (``None``). Any other refusal is raised as :meth:`release` raises it."""
        with self.db.read() as tx:
            stored = self.lease_in(tx, claim.target)
        if (
            stored is not None
            and (stored.epoch, stored.holder) == (claim.epoch, claim.worker)
            and stored.phase is Phase.RELEASED
        ):
            log.debug("lease %s epoch %d already released", claim.target, claim.epoch)
            return None
        return self.release(claim, reason=reason, actor=actor)

    def supersede_head(
        self, forge: str, repo: str, number: int, new_head: str, *, actor: str = "reviewbot"
    ) -> list[Lease]:
        """Supersede every claim on the PR pinned to a head other than ``new_head``."""
        repo = repo_key(repo)
        changed: list[Lease] = []
        with self.db.write(serialized=False, poll_lock=True) as tx:
            _lock_targets(tx, *(LeaseTarget(forge, repo, number, role) for role in Role))
            now = self.clock()
            rows = tx.all(
                "SELECT * FROM leases WHERE forge = ? AND repo = ? AND number = ?",
                (forge, repo, number),
            )
            for row in rows:
                stored = _lease(row)
                updated = core.supersede_head(stored, new_head, now)
                if updated is not None:
                    seen = self.seen_in(tx, stored)
                    if seen is not None and not seen.live(now):
                        self._record_lapse(tx, seen, stored.expires_at)  # it ended before
                    self._store(tx, updated)
                    if not lease_history.has_end(tx, updated.target, updated.epoch):
                        entry = self._entry(
                            updated,
                            LeaseEvent.SUPERSEDED,
                            now,
                            actor,
                            reason=f"{EndReason.HEAD_MOVED.value}: {new_head}",
                        )
                        lease_history.end(tx, updated, entry)
                    changed.append(updated)
        return changed

    def history(
        self,
        forge: str,
        repo: str,
        number: int,
        *,
        role: Role | None = None,
        limit: int = lease_history.DEFAULT_LIMIT,
    ) -> list[HistoryEntry]:
        """The audit trail of one PR's leases, oldest first; lapses the clock caused but no
        call recorded yet are included, marked ``recorded: false``."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            now = self.clock()
            entries = lease_history.for_pull(tx, forge, repo, number, role=role, limit=limit)
            current: list[tuple[Lease, float]] = []
            for row in tx.all(
                "SELECT * FROM leases WHERE forge = ? AND repo = ? AND number = ?",
                (forge, repo, number),
            ):
                stored = _lease(row)
                if role is None or stored.target.role is Role(role):
                    seen = self.seen_in(tx, stored)
                    assert seen is not None
                    current.append((seen, stored.expires_at))
        return with_unrecorded_lapses(entries, current, now)

    def get(self, target: LeaseTarget) -> Lease | None:
        """The target's lease as a reader sees it now (a lapsed claim shows ``expired``)."""
        with self.db.read() as tx:
            lease = self.seen_in(tx, self.lease_in(tx, target))
        return None if lease is None else self._as_seen(lease)

    def list_leases(
        self,
        *,
        forge: str | None = None,
        repo: str | None = None,
        number: int | None = None,
        role: Role | None = None,
        holder: str | None = None,
        live_only: bool = False,
    ) -> list[Lease]:
        """Leases matching every given filter, by target; phases as seen now."""
        repo = None if repo is None else repo_key(repo)
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("forge", forge),
            ("repo", repo),
            ("number", number),
            ("role", None if role is None else Role(role).value),
            ("holder", holder),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        now = self.clock()
        sql = (
            "SELECT l.*, w.heartbeat_at AS worker_heartbeat_at FROM leases AS l"
            " LEFT JOIN workers AS w ON w.identity = l.holder"
        )
        if where:
            sql += " WHERE " + " AND ".join(f"l.{w}" for w in where)
        sql += " ORDER BY l.forge, l.repo, l.number, l.role"
        with self.db.read() as tx:
            rows = tx.all(sql, params)
        seen = [
            self._as_seen(
                core.with_worker_liveness(_lease(row), row["worker_heartbeat_at"], self.timing),
                now,
            )
            for row in rows
        ]
        return [lease for lease in seen if not live_only or lease.live(now)]

    # --- fencing --------------------------------------------------------------------------------

    def check_held(self, tx: Tx, claim: LeaseClaim) -> None:
        """Inside a write transaction: raise :class:`LeaseRefused` unless ``claim`` is live.

        The check is itself a conditional write (``WHERE holder = ? AND epoch = ?``, still
        claimed, not expired) that must change exactly one row; it counts the writes made
        under the epoch.
        """
        now = self.clock()
        # Live by its own term and by its worker's heartbeat (a worker with no record left
        # is judged by the claim alone, as with_worker_liveness does).
        cur = tx.execute(
            f"UPDATE leases SET writes = writes + 1 WHERE {_TARGET_WHERE} AND holder = ?"
            " AND epoch = ? AND phase = 'claimed' AND expires_at > ? AND NOT EXISTS"
            " (SELECT 1 FROM workers AS w WHERE w.identity = leases.holder"
            " AND w.heartbeat_at + ? <= ?)",
            (*_key(claim.target), claim.worker, claim.epoch, now, self.timing.lease_s, now),
        )
        if cur.rowcount == 1:
            return
        refusal = core.check_fence(self.seen_in(tx, self.lease_in(tx, claim.target)), claim, now)
        raise LeaseRefused(
            refusal
            or Refused(ReasonCode.LEASE_NOT_HELD, f"{claim.worker} does not hold {claim.target}")
        )

    def fence(self, claim: LeaseClaim) -> Callable[[Tx], None]:
        """A fence for stores that take one: ``fence(tx)`` raises unless ``claim`` is live."""

        def _fence(tx: Tx) -> None:
            self.check_held(tx, claim)

        return _fence

    def guarded_write(self, tx: Tx, claim: LeaseClaim, sql: str, params: Params = ()) -> None:
        """Run ``sql`` under ``claim`` inside ``tx``: fenced, and it must change exactly one row.

        On any failure it raises, and the caller's transaction rolls back, so a superseded
        holder's write changes nothing.
        """
        self.check_held(tx, claim)
        changed = tx.execute(sql, params).rowcount
        if changed != 1:
            raise GuardedWriteError(
                f"a write under epoch {claim.epoch} of {claim.target} changed {changed} rows,"
                " not 1; rolled back"
            )

    def write_under(self, claim: LeaseClaim, sql: str, params: Params = ()) -> None:
        """:meth:`guarded_write` in a transaction of its own."""
        with self.db.write(hot=claim.target in self._lined) as tx:
            self.guarded_write(tx, claim, sql, params)

    @contextmanager
    def under(self, claim: LeaseClaim) -> Iterator[Tx]:
        """A write transaction that starts with the fence check; use for several writes."""
        with self.db.write(hot=claim.target in self._lined) as tx:
            self.check_held(tx, claim)
            yield tx

    # --- internals ------------------------------------------------------------------------------

    def _transition(
        self,
        claim: LeaseClaim,
        step: Callable[[Lease | None, LeaseClaim, float], Any],
        event: LeaseEvent,
        reason: str,
        actor: str,
    ) -> Lease:
        grants: list[_Grant] = []
        hot = claim.target in self._lined
        with self.db.write(serialized=False, poll_lock=True, hot=hot) as tx:
            _lock_targets(tx, claim.target)
            now = self.clock()
            # A refusal rolls this back: a refused call changes nothing, not even liveness.
            # The lease is read with its holder's heartbeat before the caller's sign of life:
            # a claim whose worker lapsed is judged lapsed (and refused) as it would be after.
            stored, heard = self._row_in(tx, claim.target)
            seen = None if stored is None else core.with_worker_liveness(stored, heard, self.timing)
            mine = stored is not None and stored.holder == claim.worker
            self._touch_worker(tx, claim.worker, now, heard if mine else None)
            result = step(seen, claim, now)
            if isinstance(result, Refused):
                self._refused(claim.target, claim.worker, result)
                raise LeaseRefused(result)
            assert isinstance(result, Granted)
            ended = result.lease
            if event is LeaseEvent.RENEWED:  # a heartbeat writes the lease row only
                self._store_renewal(tx, ended)
            else:
                lease_history.end(tx, ended, self._entry(ended, event, now, actor, reason=reason))
                # The target is free: the first in its line is granted it now. A grant
                # writes the whole row, so the ended claim's row is written only without one.
                line = self._settle_in(tx, claim.target, now, actor, grants, seen=(ended, ended))
                self._note_line(claim.target, line)
                if not grants:
                    self._store(tx, ended)
        self._tell(grants, now)
        return result.lease

    def seen_in(self, tx: Tx, lease: Lease | None) -> Lease | None:
        """``lease`` with its holder's liveness applied (see ``with_worker_liveness``)."""
        if lease is None:
            return None
        heard = self.workers.heartbeat_at(tx, lease.holder)
        return core.with_worker_liveness(lease, heard, self.timing)

    def _held_in(self, tx: Tx, target: LeaseTarget) -> tuple[Lease | None, Lease | None]:
        """The target's stored row and the same with its holder's liveness applied
        (:meth:`lease_in` and :meth:`seen_in` in one read)."""
        stored, heard = self._row_in(tx, target)
        if stored is None:
            return None, None
        return stored, core.with_worker_liveness(stored, heard, self.timing)

    @staticmethod
    def _row_in(tx: Tx, target: LeaseTarget) -> tuple[Lease | None, float | None]:
        """The target's stored row and its holder's last heartbeat, in one read."""
        row = tx.one(
            "SELECT l.*, w.heartbeat_at AS worker_heartbeat_at FROM leases AS l"
            " LEFT JOIN workers AS w ON w.identity = l.holder WHERE l.forge = ? AND l.repo = ?"
            " AND l.number = ? AND l.role = ?",
            _key(target),
        )
        if row is None:
            return None, None
        heard = row["worker_heartbeat_at"]
        return _lease(row, target), None if heard is None else float(heard)

    @staticmethod
    def _store_renewal(tx: Tx, lease: Lease) -> None:
        """Write a renewal of the live claim ``lease``: its new expiry (and term, details)."""
        tx.execute(
            "UPDATE leases SET ttl_s = ?, heartbeat_at = ?, expires_at = ?, target_branch = ?,"
            f" target_sha = ?, session_id = ?, issue = ?, blocker = ? WHERE {_TARGET_WHERE}"
            " AND epoch = ?",
            (
                lease.ttl_s,
                lease.heartbeat_at,
                lease.expires_at,
                *details_params(lease.details),
                *_key(lease.target),
                lease.epoch,
            ),
        )

    @staticmethod
    def lease_in(tx: Tx, target: LeaseTarget) -> Lease | None:
        """The stored row of ``target`` inside an open transaction (phase as stored)."""
        row = tx.one(f"SELECT * FROM leases WHERE {_TARGET_WHERE}", _key(target))
        return None if row is None else _lease(row, target)

    @staticmethod
    def _store(tx: Tx, lease: Lease, *, reset_writes: bool = False) -> None:
        tx.execute(
            "INSERT INTO leases (forge, repo, number, role, holder, epoch, head_sha, phase, ttl_s,"
            " acquired_at, heartbeat_at, expires_at, target_branch, target_sha, session_id,"
            " issue, blocker) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (forge, repo, number, role) DO UPDATE SET holder = excluded.holder,"
            " epoch = excluded.epoch, head_sha = excluded.head_sha, phase = excluded.phase,"
            " ttl_s = excluded.ttl_s, acquired_at = excluded.acquired_at,"
            " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,"
            " target_branch = excluded.target_branch, target_sha = excluded.target_sha,"
            " session_id = excluded.session_id, issue = excluded.issue,"
            " blocker = excluded.blocker" + (", writes = 0" if reset_writes else ""),
            (
                *_key(lease.target),
                lease.holder,
                lease.epoch,
                lease.head_sha,
                lease.phase.value,
                lease.ttl_s,
                lease.acquired_at,
                lease.heartbeat_at,
                lease.expires_at,
                *details_params(lease.details),
            ),
        )

    def _as_seen(self, lease: Lease, now: float | None = None) -> Lease:
        phase = lease.phase_at(self.clock() if now is None else now)
        return lease if phase is lease.phase else replace(lease, phase=phase)
