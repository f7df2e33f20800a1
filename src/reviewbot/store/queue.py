"""The merge queue's state in the workflow database (migration 0020).

Four tables per (forge, repository, base branch): the entries (one row per admission, the
head pinned at admission, the keys it touches, its train, state and strikes), the cars
(composition, queue branch, the tested commit, status), each train's machine state
(:class:`reviewbot.core.queue_train.TrainState` as JSON, so a restarted replica resumes it)
and an append-only event log with reason codes; and (migration 0023) each queue's hand-set
state, paused or draining (:class:`QueueControl`).

**Every write is fenced by the branch's merge lane** (``merge:<forge>:<repo>:<base>``, the
lane automerge holds to merge into that branch: :mod:`reviewbot.store.lanes`): the writer
presents its :class:`~reviewbot.store.lanes.LaneHold`, and the transaction begins with a
conditional update of that lane's row (same holder, same token, term not lapsed) that must
change exactly one row. A replica that lost the lane (its term lapsed, another was granted
it) fails with :class:`QueueFenced` and its transaction writes nothing; the token it held is
recorded as ``epoch`` on every row it writes. On PostgreSQL the update locks the lane's row,
so a takeover waits for the fenced transaction to end.

Reads take no fence: :meth:`QueueStore.entries`, :meth:`QueueStore.cars`,
:meth:`QueueStore.events_of_pull` and :meth:`QueueStore.events` serve the faces (status,
explain, the state comment) as well as the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reviewbot.core import errors
from reviewbot.core.clock import iso_or_none
from reviewbot.core.models import repo_key
from reviewbot.core.reasons import ReasonCode
from reviewbot.store.database import Database, OnDatabase, Row, Tx, row_as, rows_as
from reviewbot.store.lanes import LaneHold

_MAX_DETAIL = 2000


def queue_lane(forge: str, repo: str, base: str) -> str:
    """The lane that fences a branch's queue: the same lane merges into the branch take."""
    return ":".join(("merge", forge, repo_key(repo), base))


class EntryState(StrEnum):
    QUEUED = "queued"
    MERGED = "merged"
    LEFT = "left"
    EJECTED = "ejected"


class CarState(StrEnum):
    BUILDING = "building"
    TESTING = "testing"
    GREEN = "green"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LANDED = "landed"
    PASSED = "passed"  # a half of a failed batch that passed: done, it never lands


LIVE_CAR_STATES = (CarState.BUILDING, CarState.TESTING, CarState.GREEN)


class EventKind(StrEnum):
    ENQUEUED = "enqueued"
    REFUSED = "refused"  # admission refused (expected head moved, a merge blocker)
    LEFT = "left"
    CAR_BUILT = "car_built"
    CAR_PASSED = "car_passed"
    CAR_FAILED = "car_failed"
    CAR_TIMED_OUT = "car_timed_out"
    CAR_CANCELLED = "car_cancelled"
    EJECTED = "ejected"
    PROMOTED = "promoted"  # passed its train: joins the landing line
    LANDED = "landed"
    MERGED = "merged"  # a PR of a landed car marked merged on the forge
    NOT_MARKED = "not_marked"  # landed, but the forge refused to mark the PR merged
    HELD = "held"  # a green car's landing held (freeze, outside a merge window, paused)
    CONTROL = "control"  # the queue was paused, resumed, set draining or not


class QueueFenced(errors.Refused):
    """The writer does not hold the branch's merge lane (any more): nothing was written."""

    code = ReasonCode.LEASE_NOT_HELD.value


@dataclass(frozen=True)
class QueueEntry:
    id: int
    forge: str
    repo: str
    base: str
    number: int
    head_sha: str
    keys: tuple[str, ...]
    priority: bool
    state: str
    reason: str | None
    strikes: int
    train: str
    enqueued_at: float
    updated_at: float
    epoch: int

    @classmethod
    def from_row(cls, row: Row) -> QueueEntry:
        return row_as(
            cls,
            row,
            keys=lambda r: tuple(json.loads(r["keys"])),
            priority=lambda r: bool(r["priority"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "base": self.base,
            "head_sha": self.head_sha,
            "keys": list(self.keys),
            "priority": self.priority,
            "state": self.state,
            "reason": self.reason,
            "strikes": self.strikes,
            "train": self.train,
            "enqueued_at": self.enqueued_at,
        }


@dataclass(frozen=True)
class QueueCar:
    id: int
    forge: str
    repo: str
    base: str
    train: str
    car: int
    batch: tuple[int, ...]
    ahead: tuple[int, ...]
    split_of: int | None
    branch: str
    base_sha: str | None
    tested_sha: str | None
    status: str
    check_name: str | None
    check_url: str | None
    created_at: float
    updated_at: float
    epoch: int

    @classmethod
    def from_row(cls, row: Row) -> QueueCar:
        return row_as(
            cls,
            row,
            batch=lambda r: tuple(int(n) for n in json.loads(r["batch"])),
            ahead=lambda r: tuple(int(n) for n in json.loads(r["ahead"])),
        )

    @property
    def live(self) -> bool:
        return self.status in LIVE_CAR_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "train": self.train,
            "car": self.car,
            "batch": list(self.batch),
            "ahead": list(self.ahead),
            "split_of": self.split_of,
            "branch": self.branch,
            "base_sha": self.base_sha,
            "tested_sha": self.tested_sha,
            "status": self.status,
            "check": self.check_name,
            "check_url": self.check_url,
        }


@dataclass(frozen=True)
class QueueEvent:
    id: int
    forge: str
    repo: str
    base: str
    number: int | None
    car: int | None
    kind: str
    code: str | None
    detail: str
    sha: str | None
    evidence: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    at: float = 0.0

    @classmethod
    def from_row(cls, row: Row) -> QueueEvent:
        return row_as(cls, row, evidence=lambda r: json.loads(r["evidence"] or "{}"))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "base": self.base,
            "number": self.number,
            "car": self.car,
            "kind": self.kind,
            "code": self.code,
            "detail": self.detail,
            "sha": self.sha,
            "evidence": self.evidence,
            "epoch": self.epoch,
            "at": self.at,
        }


@dataclass(frozen=True)
class QueueControl:
    """A queue's hand-set state (migration 0023); no row reads as neither."""

    paused: bool = False
    draining: bool = False
    set_by: str = ""
    set_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "draining": self.draining,
            "set_by": self.set_by or None,
            "set_at": iso_or_none(self.set_at),
        }


@dataclass(frozen=True)
class TrainRecord:
    train: str
    keys: tuple[str, ...]
    state: dict[str, Any]
    epoch: int


@dataclass(frozen=True)
class QueueRef:
    """One queue: a base branch of a repository on a forge."""

    forge: str
    repo: str
    base: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "repo", repo_key(self.repo))

    @property
    def lane(self) -> str:
        return queue_lane(self.forge, self.repo, self.base)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.forge, self.repo, self.base)


class QueueWriter:
    """Writes inside one fenced transaction (see :meth:`QueueStore.fenced`)."""

    def __init__(self, tx: Tx, queue: QueueRef, epoch: int, now: float) -> None:
        self.tx = tx
        self.queue = queue
        self.epoch = epoch
        self.now = now

    def enqueue(
        self,
        number: int,
        head_sha: str,
        keys: Sequence[str],
        train: str,
        *,
        priority: bool = False,
    ) -> int:
        """A new queued entry (a PR has one queued entry at a time: the store refuses a
        second with an integrity error, so check :meth:`QueueStore.entry_of` first)."""
        row = self.tx.one(
            "INSERT INTO queue_entries (forge, repo, base, number, head_sha, keys, priority,"
            " state, strikes, train, enqueued_at, updated_at, epoch)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?) RETURNING id",
            (
                *self.queue.key,
                number,
                head_sha,
                json.dumps(sorted(keys)),
                int(priority),
                EntryState.QUEUED.value,
                train,
                self.now,
                self.now,
                self.epoch,
            ),
        )
        assert row is not None
        return int(row["id"])

    def end_entry(self, number: int, state: EntryState, reason: ReasonCode | None) -> bool:
        """The queued entry of PR ``number`` ends (merged, left, ejected); False if none."""
        cur = self.tx.execute(
            "UPDATE queue_entries SET state = ?, reason = ?, updated_at = ?, epoch = ?"
            " WHERE forge = ? AND repo = ? AND base = ? AND number = ? AND state = ?",
            (
                state.value,
                None if reason is None else reason.value,
                self.now,
                self.epoch,
                *self.queue.key,
                number,
                EntryState.QUEUED.value,
            ),
        )
        return bool(cur.rowcount)

    def update_entry(
        self, number: int, *, train: str | None = None, strikes: int | None = None
    ) -> None:
        sets = ["updated_at = ?", "epoch = ?"]
        params: list[Any] = [self.now, self.epoch]
        if train is not None:
            sets.append("train = ?")
            params.append(train)
        if strikes is not None:
            sets.append("strikes = ?")
            params.append(strikes)
        self.tx.execute(
            f"UPDATE queue_entries SET {', '.join(sets)} WHERE forge = ? AND repo = ?"
            " AND base = ? AND number = ? AND state = ?",
            (*params, *self.queue.key, number, EntryState.QUEUED.value),
        )

    def add_car(
        self,
        train: str,
        car: int,
        batch: Sequence[int],
        ahead: Sequence[int],
        branch: str,
        *,
        split_of: int | None = None,
    ) -> int:
        row = self.tx.one(
            "INSERT INTO queue_cars (forge, repo, base, train, car, batch, ahead, split_of,"
            " branch, status, created_at, updated_at, epoch)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                *self.queue.key,
                train,
                car,
                json.dumps(list(batch)),
                json.dumps(list(ahead)),
                split_of,
                branch,
                CarState.BUILDING.value,
                self.now,
                self.now,
                self.epoch,
            ),
        )
        assert row is not None
        return int(row["id"])

    def update_car(
        self,
        car_id: int,
        status: CarState,
        *,
        base_sha: str | None = None,
        tested_sha: str | None = None,
        check_name: str | None = None,
        check_url: str | None = None,
    ) -> None:
        sets = ["status = ?", "updated_at = ?", "epoch = ?"]
        params: list[Any] = [status.value, self.now, self.epoch]
        for column, value in (
            ("base_sha", base_sha),
            ("tested_sha", tested_sha),
            ("check_name", check_name),
            ("check_url", check_url),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        self.tx.execute(
            f"UPDATE queue_cars SET {', '.join(sets)} WHERE id = ? AND forge = ? AND repo = ?"
            " AND base = ?",
            (*params, car_id, *self.queue.key),
        )

    def save_train(self, train: str, keys: Sequence[str], state: dict[str, Any]) -> None:
        self.tx.execute(
            "INSERT INTO queue_trains (forge, repo, base, train, keys, state, updated_at, epoch)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (forge, repo, base, train) DO UPDATE"
            " SET keys = excluded.keys, state = excluded.state,"
            " updated_at = excluded.updated_at, epoch = excluded.epoch",
            (
                *self.queue.key,
                train,
                json.dumps(sorted(keys)),
                json.dumps(state, sort_keys=True),
                self.now,
                self.epoch,
            ),
        )

    def drop_train(self, train: str) -> None:
        self.tx.execute(
            "DELETE FROM queue_trains WHERE forge = ? AND repo = ? AND base = ? AND train = ?",
            (*self.queue.key, train),
        )

    def set_control(self, paused: bool, draining: bool, set_by: str) -> None:
        self.tx.execute(
            "INSERT INTO queue_controls (forge, repo, base, paused, draining, set_by, set_at,"
            " epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (forge, repo, base) DO UPDATE"
            " SET paused = excluded.paused, draining = excluded.draining,"
            " set_by = excluded.set_by, set_at = excluded.set_at, epoch = excluded.epoch",
            (*self.queue.key, int(paused), int(draining), set_by[:200], self.now, self.epoch),
        )

    def event(
        self,
        kind: EventKind,
        detail: str,
        *,
        number: int | None = None,
        car: int | None = None,
        code: ReasonCode | None = None,
        sha: str | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        self.tx.execute(
            "INSERT INTO queue_events (forge, repo, base, number, car, kind, code, detail, sha,"
            " evidence, epoch, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                *self.queue.key,
                number,
                car,
                kind.value,
                None if code is None else code.value,
                detail[:_MAX_DETAIL],
                sha,
                None if evidence is None else json.dumps(evidence, sort_keys=True),
                self.epoch,
                self.now,
            ),
        )


class QueueStore(OnDatabase):
    """The merge queues of every repository. ``clock`` returns seconds since the epoch."""

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self.db = db
        self.clock = clock

    # -- fenced writes -----------------------------------------------------------------------

    @contextmanager
    def fenced(self, queue: QueueRef, hold: LaneHold) -> Iterator[QueueWriter]:
        """One write transaction under ``hold``, the queue's merge lane: it starts by
        checking the hold is the live one and raises :class:`QueueFenced` (writing
        nothing) when it is not."""
        if hold.name != queue.lane:
            raise QueueFenced(f"the lane {hold.name} does not fence the queue {queue.lane}")
        now = self.clock()
        with self.db.write() as tx:
            cur = tx.execute(
                "UPDATE lanes SET expires_at = expires_at WHERE name = ? AND holder = ?"
                " AND token = ? AND expires_at > ?",
                (hold.name, hold.holder, hold.token, now),
            )
            if cur.rowcount != 1:
                raise QueueFenced(
                    f"{hold.holder} no longer holds the lane {hold.name} with token {hold.token}",
                    lane=hold.name,
                )
            yield QueueWriter(tx, queue, hold.token, now)

    # -- reads -------------------------------------------------------------------------------

    def entries(
        self,
        forge: str,
        repo: str,
        base: str | None = None,
        *,
        state: EntryState | None = EntryState.QUEUED,
    ) -> list[QueueEntry]:
        """The entries of a repository (of one base branch), in admission order; by default
        only those still queued (``state=None``: every entry ever admitted)."""
        sql = "SELECT * FROM queue_entries WHERE forge = ? AND repo = ?"
        params: list[Any] = [forge, repo_key(repo)]
        if base is not None:
            sql += " AND base = ?"
            params.append(base)
        if state is not None:
            sql += " AND state = ?"
            params.append(state.value)
        with self.db.read() as tx:
            rows = tx.all(sql + " ORDER BY id", params)
        return [QueueEntry.from_row(r) for r in rows]

    def landed_numbers(self, forge: str, repo: str, base: str) -> set[int]:
        """The PRs whose latest entry in this queue landed. A PR that landed and was admitted
        again (a forge that could not mark it merged, new commits pushed) counts by its new
        entry: once that entry is ejected, its commits have not landed."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT e.number FROM queue_entries AS e WHERE e.forge = ? AND e.repo = ?"
                " AND e.base = ? AND e.state = ? AND NOT EXISTS (SELECT 1 FROM queue_entries"
                " AS later WHERE later.forge = e.forge AND later.repo = e.repo"
                " AND later.base = e.base AND later.number = e.number AND later.id > e.id)",
                (forge, repo_key(repo), base, EntryState.MERGED.value),
            )
        return {int(r[0]) for r in rows}

    def entry_of(self, forge: str, repo: str, number: int) -> QueueEntry | None:
        """The queued entry of a PR, if it is in a queue."""
        with self.db.read() as tx:
            row = tx.one(
                "SELECT * FROM queue_entries WHERE forge = ? AND repo = ? AND number = ?"
                " AND state = ?",
                (forge, repo_key(repo), number, EntryState.QUEUED.value),
            )
        return None if row is None else QueueEntry.from_row(row)

    def cars(
        self,
        forge: str,
        repo: str,
        base: str,
        train: str | None = None,
        *,
        live_only: bool = True,
    ) -> list[QueueCar]:
        """The cars of a queue (of one train), oldest first; by default only those in
        flight (building, testing, green)."""
        sql = "SELECT * FROM queue_cars WHERE forge = ? AND repo = ? AND base = ?"
        params: list[Any] = [forge, repo_key(repo), base]
        if train is not None:
            sql += " AND train = ?"
            params.append(train)
        if live_only:
            sql += f" AND status IN ({', '.join('?' * len(LIVE_CAR_STATES))})"
            params += [s.value for s in LIVE_CAR_STATES]
        with self.db.read() as tx:
            rows = tx.all(sql + " ORDER BY id", params)
        return [QueueCar.from_row(r) for r in rows]

    def car(self, car_id: int) -> QueueCar | None:
        with self.db.read() as tx:
            row = tx.one("SELECT * FROM queue_cars WHERE id = ?", (car_id,))
        return None if row is None else QueueCar.from_row(row)

    def car_on_branch(self, forge: str, repo: str, branch: str) -> QueueCar | None:
        """The newest car pushed to ``branch`` (a commit event on a queue branch names it)."""
        with self.db.read() as tx:
            row = tx.one(
                "SELECT * FROM queue_cars WHERE forge = ? AND repo = ? AND branch = ?"
                " ORDER BY id DESC LIMIT 1",
                (forge, repo_key(repo), branch),
            )
        return None if row is None else QueueCar.from_row(row)

    def trains(self, forge: str, repo: str, base: str) -> list[TrainRecord]:
        """Each train's machine state, in the order the trains were formed."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT train, keys, state, epoch FROM queue_trains WHERE forge = ? AND repo = ?"
                " AND base = ? ORDER BY train",
                (forge, repo_key(repo), base),
            )
        return [
            TrainRecord(
                str(r["train"]),
                tuple(json.loads(r["keys"])),
                json.loads(r["state"]),
                int(r["epoch"]),
            )
            for r in rows
        ]

    def queues(self) -> list[QueueRef]:
        """Every queue with a queued entry or a car in flight (the reconcile sweep's list)."""
        live = ", ".join("?" * len(LIVE_CAR_STATES))
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT DISTINCT forge, repo, base FROM queue_entries WHERE state = ?"
                " UNION SELECT DISTINCT forge, repo, base FROM queue_cars"
                f" WHERE status IN ({live}) ORDER BY forge, repo, base",
                (EntryState.QUEUED.value, *(s.value for s in LIVE_CAR_STATES)),
            )
        return [QueueRef(str(r["forge"]), str(r["repo"]), str(r["base"])) for r in rows]

    def finished_durations(self, forge: str, repo: str, base: str, *, limit: int) -> list[float]:
        """How long the newest ``limit`` cars whose CI answered took, from push to answer
        (seconds, oldest first): what the faces estimate a car's CI time from."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT created_at, updated_at FROM queue_cars WHERE forge = ? AND repo = ?"
                " AND base = ? AND tested_sha IS NOT NULL AND status IN (?, ?, ?, ?, ?)"
                " ORDER BY id DESC LIMIT ?",
                (
                    forge,
                    repo_key(repo),
                    base,
                    CarState.GREEN.value,
                    CarState.LANDED.value,
                    CarState.PASSED.value,
                    CarState.FAILED.value,
                    CarState.TIMED_OUT.value,
                    max(1, limit),
                ),
            )
        return [float(r["updated_at"]) - float(r["created_at"]) for r in reversed(rows)]

    def events_of_pull(self, forge: str, repo: str, number: int) -> list[QueueEvent]:
        """Every queue event of a PR, oldest first."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM queue_events WHERE forge = ? AND repo = ? AND number = ?"
                " ORDER BY id",
                (forge, repo_key(repo), number),
            )
        return rows_as(QueueEvent, rows, evidence=lambda r: json.loads(r["evidence"] or "{}"))

    def control(self, forge: str, repo: str, base: str) -> QueueControl:
        """The hand-set state of a queue (neither paused nor draining without a row)."""
        with self.db.read() as tx:
            row = tx.one(
                "SELECT paused, draining, set_by, set_at FROM queue_controls"
                " WHERE forge = ? AND repo = ? AND base = ?",
                (forge, repo_key(repo), base),
            )
        if row is None:
            return QueueControl()
        return QueueControl(
            bool(row["paused"]), bool(row["draining"]), str(row["set_by"]), float(row["set_at"])
        )

    def controls(self, forge: str, repo: str) -> dict[str, QueueControl]:
        """The hand-set state of every queue of a repository that has one, by base."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT base, paused, draining, set_by, set_at FROM queue_controls"
                " WHERE forge = ? AND repo = ? ORDER BY base",
                (forge, repo_key(repo)),
            )
        return {
            str(r["base"]): QueueControl(
                bool(r["paused"]), bool(r["draining"]), str(r["set_by"]), float(r["set_at"])
            )
            for r in rows
        }

    def held_recorded(self, queue: QueueRef, car: int, code: ReasonCode) -> bool:
        """Whether car row ``car``'s landing was recorded as held with ``code`` already."""
        with self.db.read() as tx:
            row = tx.one(
                "SELECT 1 AS found FROM queue_events WHERE forge = ? AND repo = ? AND base = ?"
                " AND car = ? AND kind = ? AND code = ?",
                (*queue.key, car, EventKind.HELD.value, code.value),
            )
        return row is not None

    def events(self, forge: str, repo: str, base: str, *, limit: int = 200) -> list[QueueEvent]:
        """The newest ``limit`` events of a queue, oldest first."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM queue_events WHERE forge = ? AND repo = ? AND base = ?"
                " ORDER BY id DESC LIMIT ?",
                (forge, repo_key(repo), base, max(1, min(limit, 10_000))),
            )
        return [QueueEvent.from_row(r) for r in reversed(rows)]
