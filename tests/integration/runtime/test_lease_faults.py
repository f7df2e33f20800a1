"""Fault tests for leases, after the ones lock services run on themselves.

(a) A holder pauses past its expiry (a stop-the-world pause, a suspended VM), another worker
    takes over and merges, the first one resumes and carries on: with fencing, every write
    of the first changes nothing and exactly one merge happens; without fencing, the
    history checker catches the double merge.
(b) Eight OS processes run acquire / act / release cycles on one SQLite file and record
    what they did: no "database is locked", epochs strictly increase, at most one holder
    acts per epoch; after restoring a backup older than all of that, epochs still increase.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.store.database import SQLiteDatabase, Tx
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.clock import FakeClock

HEAD = "c0ffee" * 6 + "0000"
TARGET = LeaseTarget("github", "acme/api", 5, Role.MERGER)
MERGES_TABLE = (
    "CREATE TABLE IF NOT EXISTS merges (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " number INTEGER NOT NULL, holder TEXT NOT NULL, epoch INTEGER NOT NULL)"
)
VERDICT_TABLE = (
    "CREATE TABLE IF NOT EXISTS verdicts (number INTEGER PRIMARY KEY, verdict TEXT NOT NULL,"
    " holder TEXT, epoch INTEGER)"
)


def fresh_db(paths: WorkflowPaths) -> SQLiteDatabase:
    db = open_store(paths)
    with db.write() as tx:
        tx.execute(MERGES_TABLE)
        tx.execute(VERDICT_TABLE)
        tx.execute("INSERT INTO verdicts (number, verdict) VALUES (5, 'approve')")
    return db


# --- the history checker -------------------------------------------------------------------


def double_actions(db: SQLiteDatabase) -> list[str]:
    """Every violation in the merge history: a PR merged twice, or epochs going backwards."""
    with db.read() as tx:
        rows = tx.all("SELECT number, holder, epoch FROM merges ORDER BY id")
    problems: list[str] = []
    merged_by: dict[int, tuple[str, int]] = {}
    for number, holder, epoch in rows:
        if number in merged_by:
            first = merged_by[number]
            problems.append(
                f"PR {number} merged twice: by {first[0]} (epoch {first[1]}) and by {holder}"
                f" (epoch {epoch})"
            )
            if epoch < first[1]:
                problems.append(f"PR {number}: epoch {epoch} acted after epoch {first[1]}")
        else:
            merged_by[number] = (holder, epoch)
    return problems


# --- (a) a paused holder resumes after a takeover ---------------------------------------------

Merge = Callable[[LeaseStore, LeaseClaim], None]


def fenced_merge(store: LeaseStore, claim: LeaseClaim) -> None:
    """The real path: the merge record and the verdict update both go through the fence."""
    with store.db.write() as tx:
        store.guarded_write(
            tx,
            claim,
            "INSERT INTO merges (number, holder, epoch) VALUES (?, ?, ?)",
            (claim.target.number, claim.worker, claim.epoch),
        )
        store.guarded_write(
            tx,
            claim,
            "UPDATE verdicts SET verdict = 'merged', holder = ?, epoch = ? WHERE number = ?",
            (claim.worker, claim.epoch, claim.target.number),
        )


def unfenced_merge(store: LeaseStore, claim: LeaseClaim) -> None:
    """The same writes with the fencing check switched off."""
    with store.db.write() as tx:
        _unfenced(tx, claim)


def _unfenced(tx: Tx, claim: LeaseClaim) -> None:
    tx.execute(
        "INSERT INTO merges (number, holder, epoch) VALUES (?, ?, ?)",
        (claim.target.number, claim.worker, claim.epoch),
    )
    tx.execute(
        "UPDATE verdicts SET verdict = 'merged', holder = ?, epoch = ? WHERE number = ?",
        (claim.worker, claim.epoch, claim.target.number),
    )


def snapshot(db: SQLiteDatabase) -> list[Any]:
    with db.read() as tx:
        return [
            [tuple(r) for r in tx.all(f"SELECT * FROM {table} ORDER BY 1")]
            for table in ("merges", "verdicts", "leases")
        ]


@dataclass
class PauseOutcome:
    first_refusals: list[str]
    first_changed_anything: bool
    problems: list[str]


def paused_holder_scenario(paths: WorkflowPaths, merge: Merge) -> PauseOutcome:
    """Two workers, each with its own connection, sharing one (fake) clock."""
    clock = FakeClock(1_750_000_000.0)
    db = fresh_db(paths)
    first = LeaseStore.open(SQLiteDatabase(db.path), clock=clock)
    second = LeaseStore.open(SQLiteDatabase(db.path), clock=clock)
    try:
        w1 = first.workers.register("first", client="t", session_id="1", role="merger")
        w2 = second.workers.register("second", client="t", session_id="2", role="merger")
        lease1 = first.acquire(TARGET, w1.identity, HEAD)
        first.heartbeat(lease1.claim)  # it verified the PR and is about to merge ...

        clock.now += 60  # ... when it stops dead for a minute (GC pause, suspended VM)

        lease2 = second.acquire(TARGET, w2.identity, HEAD)
        assert lease2.epoch > lease1.epoch
        merge(second, lease2.claim)

        # The first worker wakes up and carries on from where it stopped.
        before = snapshot(db)
        refusals: list[str] = []
        for step in (
            lambda: merge(first, lease1.claim),
            lambda: first.heartbeat(lease1.claim),
            lambda: first.release(lease1.claim),
        ):
            try:
                step()
            except LeaseRefused as exc:
                refusals.append(exc.code)
        changed = snapshot(db) != before
        return PauseOutcome(refusals, changed, double_actions(db))
    finally:
        for store in (first, second):
            store.db.close()
            store.close()
        db.close()


def test_paused_holder_is_fenced_out_and_one_merge_happens(tmp_path: Path) -> None:
    outcome = paused_holder_scenario(WorkflowPaths(tmp_path / "data"), fenced_merge)
    assert outcome.first_refusals == ["superseded", "superseded", "superseded"]
    assert not outcome.first_changed_anything
    assert outcome.problems == []


def test_without_fencing_the_checker_catches_the_double_merge(tmp_path: Path) -> None:
    outcome = paused_holder_scenario(WorkflowPaths(tmp_path / "data"), unfenced_merge)
    assert outcome.first_changed_anything
    assert len(outcome.problems) == 2
    assert outcome.problems[0].startswith("PR 5 merged twice")
    assert "epoch 1 acted after epoch 2" in outcome.problems[1]


def test_paused_holder_with_a_real_clock_and_threads(tmp_path: Path) -> None:
    """The same with a real pause: the holder's thread sleeps past a short lease."""
    timing = LeaseSettings(lease_s=0.4, renew_s=0.3, retry_s=0.1)
    db = fresh_db(WorkflowPaths(tmp_path / "data"))
    store = LeaseStore.open(db, timing)
    w1 = store.workers.register("first", client="t", session_id="1", role="merger").identity
    w2 = store.workers.register("second", client="t", session_id="2", role="merger").identity
    taken_over = threading.Event()
    results: dict[str, object] = {}

    lease = store.acquire(TARGET, w1, HEAD)

    def first_worker() -> None:
        taken_over.wait(timeout=30)  # "paused" until the lease lapsed and was taken over
        try:
            fenced_merge(store, lease.claim)
            results["first"] = "merged"
        except LeaseRefused as exc:
            results["first"] = exc.code

    thread = threading.Thread(target=first_worker)
    thread.start()
    while True:
        try:
            lease2 = store.acquire(TARGET, w2, HEAD)
            break
        except LeaseRefused:
            time.sleep(0.05)
    fenced_merge(store, lease2.claim)
    taken_over.set()
    thread.join(timeout=30)
    assert results == {"first": "superseded"}
    assert double_actions(db) == []
    with db.read() as tx:
        merges = tx.all("SELECT holder, epoch FROM merges")
    assert [tuple(r) for r in merges] == [(w2, 2)]
    store.close()
    db.close()


# --- (b) eight processes on one file ------------------------------------------------------------

PROCESSES = 8
CYCLES = 300


def cycle_worker(db_path: str, index: int, cycles: int, out: str, start: Any) -> None:
    """One OS process: acquire, act (a guarded write), release, ``cycles`` times."""
    db = SQLiteDatabase(Path(db_path))
    store = LeaseStore.open(db)
    identity = store.workers.register(
        f"proc{index}", client="fault-test", session_id=str(index), role="merger"
    ).identity
    epochs: list[int] = []
    refused = locked = 0
    start.wait()
    while len(epochs) < cycles:
        try:
            lease = store.acquire(TARGET, identity, HEAD, ttl_s=60)
        except LeaseRefused:
            refused += 1
            # Retry soon, but leave the write lock to the holder, which needs it twice more.
            time.sleep(random.uniform(0.001, 0.003))
            continue
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            locked += 1
            continue
        try:
            store.write_under(
                lease.claim,
                "INSERT INTO acts (holder, epoch) VALUES (?, ?)",
                (identity, lease.epoch),
            )
            store.release(lease.claim)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            locked += 1
        epochs.append(lease.epoch)
    Path(out).write_text(
        json.dumps({"identity": identity, "epochs": epochs, "refused": refused, "locked": locked})
    )
    store.close()
    db.close()


@pytest.fixture
def shared_db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    db = open_store(WorkflowPaths(tmp_path / "data"))
    with db.write() as tx:
        tx.execute(
            "CREATE TABLE acts (id INTEGER PRIMARY KEY AUTOINCREMENT, holder TEXT, epoch INTEGER)"
        )
    yield db
    db.close()


@pytest.mark.slow
def test_eight_processes_share_one_target_without_lock_errors(
    shared_db: SQLiteDatabase, tmp_path: Path
) -> None:
    db = shared_db
    backup = tmp_path / "before.sqlite"
    conn = sqlite3.connect(db.path)
    conn.execute("VACUUM INTO ?", (str(backup),))
    conn.close()

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    outs = [tmp_path / f"proc{i}.json" for i in range(PROCESSES)]
    procs = [
        ctx.Process(target=cycle_worker, args=(str(db.path), i, CYCLES, str(outs[i]), start))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    reports = [json.loads(out.read_text()) for out in outs]
    assert sum(r["locked"] for r in reports) == 0
    for r in reports:
        assert len(r["epochs"]) == CYCLES
        assert r["epochs"] == sorted(set(r["epochs"]))  # each process: strictly increasing

    with db.read() as tx:
        acts = [(r["holder"], r["epoch"]) for r in tx.all("SELECT * FROM acts ORDER BY id")]
    assert len(acts) == PROCESSES * CYCLES
    epochs = [epoch for _, epoch in acts]
    assert all(a < b for a, b in itertools.pairwise(epochs))  # one act per epoch
    granted = {e: r["identity"] for r in reports for e in r["epochs"]}
    assert len(granted) == PROCESSES * CYCLES  # no epoch handed out twice
    assert all(granted[epoch] == holder for holder, epoch in acts)

    # The operator restores the backup taken before all of this: epochs keep increasing.
    db.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db.path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, db.path)
    restored = SQLiteDatabase(db.path)
    store = LeaseStore.open(restored)
    with restored.read() as tx:
        assert tx.one("SELECT count(*) FROM leases")[0] == 0  # type: ignore[index]
    worker = store.workers.register("late", client="t", session_id="x", role="merger")
    assert store.acquire(TARGET, worker.identity, HEAD).epoch > max(epochs)
    store.close()
    restored.close()
