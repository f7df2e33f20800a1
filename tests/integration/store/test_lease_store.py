from __future__ import annotations

import logging
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Phase, Role, WorkerStatus
from reviewbot.core.reasons import ReasonCode
from reviewbot.observe import Telemetry
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.epochs import RESERVED_EPOCHS, EpochLedger, default_ledger_path
from reviewbot.store.leases import GuardedWriteError, LeaseRefused, LeaseStore
from reviewbot.store.workers import UnknownWorker, WorkerExists
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.clock import FakeClock
from tests.support.store_fixtures import AUTO_ID

HEAD = "a" * 40
NEW_HEAD = "b" * 40
MERGER = LeaseTarget("github", "acme/api", 7, Role.MERGER)
REVIEWER = LeaseTarget("github", "acme/api", 7, Role.REVIEWER)
OTHER_PR = LeaseTarget("github", "acme/api", 8, Role.MERGER)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def paths(workflow_paths: WorkflowPaths) -> WorkflowPaths:
    """Each test runs on SQLite and on PostgreSQL (see tests/support/store_fixtures.py)."""
    return workflow_paths


@pytest.fixture
def sqlite_paths(tmp_path: Path) -> WorkflowPaths:
    """For what only SQLite has: the epoch ledger file, a database file to restore."""
    return WorkflowPaths(tmp_path / "data")


@pytest.fixture
def store(paths: WorkflowPaths, clock: FakeClock) -> Iterator[LeaseStore]:
    db = open_store(paths)
    s = LeaseStore.open(db, LeaseSettings(), clock=clock)
    with db.write() as tx:
        tx.execute(f"CREATE TABLE merges (id {AUTO_ID[db.dialect]}, pr INTEGER, epoch INTEGER)")
    yield s
    s.close()
    db.close()


def register(store: LeaseStore, name: str = "w") -> str:
    return store.workers.register(name, client="test", session_id="s1", role="merger").identity


# --- workers --------------------------------------------------------------------------------


def test_register_mints_a_unique_identity(store: LeaseStore) -> None:
    a = store.workers.register("bot", client="cli", session_id="s", role="merger")
    b = store.workers.register("bot", client="cli", session_id="s", role="merger")
    assert a.identity != b.identity
    assert a.identity.startswith("bot-20231114T221320Z-")
    assert store.workers.get(a.identity) == a


def test_registering_an_existing_identity_fails_closed(store: LeaseStore) -> None:
    ident = register(store)
    with pytest.raises(WorkerExists, match="already exists"):
        store.workers.register("w", client="other", session_id="s2", role="r", identity=ident)
    assert store.workers.get(ident) is not None and store.workers.get(ident).client == "test"  # type: ignore[union-attr]


def test_same_random_nonce_and_time_collide_and_are_refused(
    paths: WorkflowPaths, clock: FakeClock
) -> None:
    db = open_store(paths)
    s = LeaseStore.open(db, clock=clock, random_bytes=lambda n: b"\0" * n)
    register(s)
    with pytest.raises(WorkerExists):
        register(s)
    s.close()
    db.close()


def test_given_identity_must_match_the_name(store: LeaseStore) -> None:
    with pytest.raises(ValueError, match="does not start with"):
        store.workers.register(
            "w", client="c", session_id="s", role="r", identity="x-20240101T000000Z-0123456789ab"
        )
    with pytest.raises(ValueError, match="not a worker identity"):
        store.workers.register("w", client="c", session_id="s", role="r", identity="w-bad")
    with pytest.raises(ValueError, match="client"):
        store.workers.register("w", client="", session_id="s", role="r")


def test_worker_status_is_heartbeat_freshness(store: LeaseStore, clock: FakeClock) -> None:
    ident = register(store)
    assert store.workers.status(ident) is WorkerStatus.LIVE
    clock.advance(15)
    assert store.workers.status(ident) is WorkerStatus.STALE
    store.worker_heartbeat(ident)
    assert store.workers.status(ident) is WorkerStatus.LIVE
    assert store.workers.status("ghost-20240101T000000Z-0123456789ab") is WorkerStatus.UNPROVEN
    with pytest.raises(UnknownWorker, match="unproven"):
        store.worker_heartbeat("ghost-20240101T000000Z-0123456789ab")


def test_lease_calls_keep_the_worker_live(store: LeaseStore, clock: FakeClock) -> None:
    ident = register(store)
    clock.advance(14)
    lease = store.acquire(MERGER, ident, HEAD)
    clock.advance(14)
    store.heartbeat(lease.claim)
    clock.advance(14)
    assert store.workers.status(ident) is WorkerStatus.LIVE


def test_an_unregistered_identity_cannot_acquire(store: LeaseStore) -> None:
    with pytest.raises(UnknownWorker, match="register it first"):
        store.acquire(MERGER, "ghost-20240101T000000Z-0123456789ab", HEAD)
    assert store.list_leases() == []


# --- leases ---------------------------------------------------------------------------------


def test_acquire_refuse_renew_release(store: LeaseStore, clock: FakeClock) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    lease = store.acquire(MERGER, w1, HEAD)
    assert (lease.holder, lease.epoch, lease.phase) == (w1, 1, Phase.CLAIMED)

    with pytest.raises(LeaseRefused) as refused:
        store.acquire(MERGER, w2, HEAD)
    assert refused.value.code == "lease_held"
    assert (refused.value.holder, refused.value.expires_at) == (w1, clock.now + 15)

    clock.advance(5)
    again = store.acquire(MERGER, w1, HEAD)
    assert (again.epoch, again.expires_at) == (1, clock.now + 15)

    released = store.release(again.claim)
    assert released.phase is Phase.RELEASED
    assert store.acquire(MERGER, w2, HEAD).epoch == 2


def test_refusals_are_scoped_to_the_target(store: LeaseStore) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    store.acquire(MERGER, w1, HEAD)
    assert store.acquire(REVIEWER, w2, HEAD).epoch == 1
    assert store.acquire(OTHER_PR, w2, HEAD).epoch == 1


def test_takeover_after_expiry_supersedes_the_old_holder(
    store: LeaseStore, clock: FakeClock
) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    old = store.acquire(MERGER, w1, HEAD)
    clock.advance(15)
    new = store.acquire(MERGER, w2, HEAD)
    assert new.epoch == 2
    for call in (store.heartbeat, store.release):
        with pytest.raises(LeaseRefused) as refused:
            call(old.claim)
        assert refused.value.code == "superseded" and refused.value.holder == w2
    assert store.get(MERGER) == new


def test_lapsed_lease_is_listed_as_expired(store: LeaseStore, clock: FakeClock) -> None:
    w1 = register(store)
    store.acquire(MERGER, w1, HEAD)
    clock.advance(20)
    (lease,) = store.list_leases()
    assert lease.phase is Phase.EXPIRED
    with pytest.raises(LeaseRefused, match="expired"):
        store.heartbeat(lease.claim)


def test_supersede_head_ends_every_claim_on_the_old_head(store: LeaseStore) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    m = store.acquire(MERGER, w1, HEAD)
    store.acquire(REVIEWER, w2, HEAD)
    other = store.acquire(OTHER_PR, w1, HEAD)
    changed = store.supersede_head("github", "acme/api", 7, NEW_HEAD)
    assert sorted(lease.target.role for lease in changed) == [Role.MERGER, Role.REVIEWER]
    assert {lease.phase for lease in store.list_leases(number=7)} == {Phase.SUPERSEDED}
    assert store.get(OTHER_PR) == other
    with pytest.raises(LeaseRefused) as refused:
        store.heartbeat(m.claim)
    assert refused.value.code == "superseded"
    assert store.acquire(MERGER, w2, NEW_HEAD).epoch == 2
    assert store.supersede_head("github", "acme/api", 7, NEW_HEAD) == []


def test_list_filters(store: LeaseStore, clock: FakeClock) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    store.acquire(MERGER, w1, HEAD)
    store.acquire(REVIEWER, w2, HEAD, ttl_s=5)
    store.acquire(OTHER_PR, w2, HEAD)
    assert len(store.list_leases()) == 3
    assert [lease.target for lease in store.list_leases(number=7, role=Role.MERGER)] == [MERGER]
    assert {lease.target for lease in store.list_leases(holder=w2)} == {REVIEWER, OTHER_PR}
    assert store.list_leases(forge="gitea") == []
    clock.advance(6)
    assert {lease.target for lease in store.list_leases(live_only=True)} == {MERGER, OTHER_PR}


def test_bad_requests_are_refused_before_anything_is_written(store: LeaseStore) -> None:
    w1 = register(store)
    with pytest.raises(ValueError, match="ttl_s"):
        store.acquire(MERGER, w1, HEAD, ttl_s=0.5)
    with pytest.raises(ValueError, match="head_sha"):
        store.acquire(MERGER, w1, "main")
    assert store.list_leases() == []


# --- guarded writes -------------------------------------------------------------------------


def merges(store: LeaseStore) -> list[tuple[int, int]]:
    with store.db.read() as tx:
        return [(r["pr"], r["epoch"]) for r in tx.all("SELECT pr, epoch FROM merges ORDER BY id")]


def test_guarded_write_runs_only_under_the_live_claim(store: LeaseStore, clock: FakeClock) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    old = store.acquire(MERGER, w1, HEAD)
    store.write_under(old.claim, "INSERT INTO merges (pr, epoch) VALUES (?, ?)", (7, old.epoch))
    clock.advance(16)
    new = store.acquire(MERGER, w2, HEAD)
    with pytest.raises(LeaseRefused) as refused:
        store.write_under(old.claim, "INSERT INTO merges (pr, epoch) VALUES (?, ?)", (7, 1))
    assert refused.value.code == ReasonCode.SUPERSEDED.value
    store.write_under(new.claim, "INSERT INTO merges (pr, epoch) VALUES (?, ?)", (7, new.epoch))
    assert merges(store) == [(7, 1), (7, 2)]
    with store.db.read() as tx:
        row = tx.one("SELECT writes FROM leases WHERE number = 7 AND role = 'merger'")
    assert row is not None and row["writes"] == 1  # counted per epoch


def test_guarded_write_must_change_exactly_one_row(store: LeaseStore) -> None:
    w1 = register(store)
    lease = store.acquire(MERGER, w1, HEAD)
    with pytest.raises(GuardedWriteError, match="changed 0 rows"):
        store.write_under(lease.claim, "UPDATE merges SET epoch = 9 WHERE pr = ?", (99,))
    store.write_under(lease.claim, "INSERT INTO merges (pr, epoch) VALUES (7, 1)")
    store.write_under(lease.claim, "INSERT INTO merges (pr, epoch) VALUES (7, 1)")
    with pytest.raises(GuardedWriteError, match="changed 2 rows"):
        store.write_under(lease.claim, "UPDATE merges SET epoch = 5")
    assert merges(store) == [(7, 1), (7, 1)]  # the two-row update was rolled back


def test_fence_in_a_multi_write_transaction_rolls_back_everything(
    store: LeaseStore, clock: FakeClock
) -> None:
    w1 = register(store)
    lease = store.acquire(MERGER, w1, HEAD)
    fence = store.fence(lease.claim)
    clock.advance(15)
    with pytest.raises(LeaseRefused, match="expired"), store.db.write() as tx:
        tx.execute("INSERT INTO merges (pr, epoch) VALUES (7, 1)")
        fence(tx)
    with pytest.raises(LeaseRefused), store.under(lease.claim) as tx:
        tx.execute("INSERT INTO merges (pr, epoch) VALUES (7, 1)")
    assert merges(store) == []


def test_claim_of_another_holder_is_not_held(store: LeaseStore) -> None:
    w1, w2 = register(store, "one"), register(store, "two")
    lease = store.acquire(MERGER, w1, HEAD)
    with pytest.raises(LeaseRefused) as refused:
        store.write_under(
            LeaseClaim(MERGER, w2, lease.epoch), "INSERT INTO merges VALUES (1, 7, 1)"
        )
    assert refused.value.code == "lease_not_held"
    with pytest.raises(LeaseRefused) as refused:
        store.heartbeat(LeaseClaim(OTHER_PR, w1, 1))
    assert refused.value.code == "lease_not_held"


# --- epochs never go back -------------------------------------------------------------------


def cycle(store: LeaseStore, worker: str, target: LeaseTarget = MERGER) -> int:
    lease = store.acquire(target, worker, HEAD)
    store.release(lease.claim)
    return lease.epoch


def test_epochs_continue_after_rows_are_deleted(store: LeaseStore) -> None:
    w1 = register(store)
    assert [cycle(store, w1) for _ in range(3)] == [1, 2, 3]
    with store.db.write() as tx:
        tx.execute("DELETE FROM leases")
    assert cycle(store, w1) == 4
    if store.db.dialect != "sqlite":
        return  # the ledger file below is SQLite's (docs/scaling.md: restores on PostgreSQL)
    with store.db.write() as tx:
        tx.execute("DELETE FROM leases")
        tx.execute("DELETE FROM lease_epochs")
    assert cycle(store, w1) > 4  # the ledger beside the database remembers


def test_epochs_continue_when_the_ledger_file_is_lost(
    sqlite_paths: WorkflowPaths, clock: FakeClock
) -> None:
    db = open_store(sqlite_paths)
    assert isinstance(db, SQLiteDatabase)
    store = LeaseStore.open(db, clock=clock)
    w1 = register(store)
    assert [cycle(store, w1) for _ in range(3)] == [1, 2, 3]
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{default_ledger_path(db.path)}{suffix}").unlink(missing_ok=True)
    store = LeaseStore.open(db, clock=clock)
    with db.write() as tx:
        tx.execute("DELETE FROM leases")
    assert cycle(store, w1) == 4
    store.close()
    db.close()


@pytest.fixture
def sqlite_db(sqlite_paths: WorkflowPaths) -> Iterator[SQLiteDatabase]:
    db = open_store(sqlite_paths)
    assert isinstance(db, SQLiteDatabase)
    yield db
    db.close()


def test_grants_inside_a_reservation_write_the_ledger_file_once(
    sqlite_db: SQLiteDatabase, clock: FakeClock
) -> None:
    store = LeaseStore.open(sqlite_db, clock=clock)
    w1 = register(store)
    ledger = EpochLedger(default_ledger_path(sqlite_db.path))
    try:
        assert [cycle(store, w1) for _ in range(RESERVED_EPOCHS)] == list(
            range(1, RESERVED_EPOCHS + 1)
        )
        assert [e for _, e in ledger.marks()] == [RESERVED_EPOCHS]  # written once, ahead
        assert cycle(store, w1) == RESERVED_EPOCHS + 1  # past it: the next reservation
        assert [e for _, e in ledger.marks()] == [2 * RESERVED_EPOCHS]
    finally:
        ledger.close()
        store.close()


def test_processes_handing_a_target_round_share_the_ledger_file_s_reservation(
    sqlite_db: SQLiteDatabase, clock: FakeClock
) -> None:
    """Two processes (two stores) taking turns: after each one's first grant, which starts
    above the file, the next grants count on by one under whichever reservation is on file,
    and the file is written again only past it."""
    first = LeaseStore.open(sqlite_db, clock=clock)
    second = LeaseStore.open(sqlite_db, clock=clock)
    w1, w2 = register(first), register(second)
    ledger = EpochLedger(default_ledger_path(sqlite_db.path))
    try:
        assert cycle(first, w1) == 1
        opening = cycle(second, w2)  # its first grant: above the file's reservation
        assert opening == RESERVED_EPOCHS + 1
        turns = [cycle(first if i % 2 == 0 else second, w1 if i % 2 == 0 else w2)
                 for i in range(RESERVED_EPOCHS)]  # fmt: skip
        assert turns == list(range(opening + 1, opening + 1 + RESERVED_EPOCHS))
        # One reservation per process's first grant, then one more past the second's.
        assert [e for _, e in ledger.marks()] == [3 * RESERVED_EPOCHS]
    finally:
        ledger.close()
        second.close()
        first.close()


def test_a_process_whose_target_lost_its_row_meanwhile_grants_above_the_file(
    sqlite_db: SQLiteDatabase, clock: FakeClock
) -> None:
    """A repository's rename moves its epoch rows to the new name while the bot runs, and
    the old name may be taken again: a process that granted the old name's target before,
    while others granted after it, must not count on from its own last grant."""
    first = LeaseStore.open(sqlite_db, clock=clock)
    second = LeaseStore.open(sqlite_db, clock=clock)
    w1, w2 = register(first), register(second)
    try:
        mine = cycle(first, w1)
        theirs = [cycle(second, w2) for _ in range(5)]
        assert max(theirs) > mine
        with sqlite_db.write() as tx:  # as the rename leaves the old name
            tx.execute("DELETE FROM leases")
            tx.execute("DELETE FROM lease_epochs")
        assert cycle(first, w1) > max(theirs)
    finally:
        second.close()
        first.close()


def test_a_restarted_process_starts_above_a_reservation_a_crash_cut_short(
    sqlite_db: SQLiteDatabase, clock: FakeClock
) -> None:
    store = LeaseStore.open(sqlite_db, clock=clock)
    w1 = register(store)
    assert [cycle(store, w1) for _ in range(5)] == [1, 2, 3, 4, 5]
    store.close()
    # The crash lost the main database's last commits (written without a sync): the
    # grants of epochs 3 to 5 were handed out, but the database says 2.
    with sqlite_db.write() as tx:
        tx.execute("UPDATE leases SET epoch = 2")
        tx.execute("UPDATE lease_epochs SET epoch = 2")
        tx.execute("DELETE FROM lease_history WHERE epoch > 2")
    store = LeaseStore.open(sqlite_db, clock=clock)  # the process started again
    assert cycle(store, w1) > 5
    store.close()


def test_epochs_continue_after_restoring_an_older_backup(
    sqlite_paths: WorkflowPaths, clock: FakeClock, tmp_path: Path
) -> None:
    db = open_store(sqlite_paths)
    assert isinstance(db, SQLiteDatabase)
    store = LeaseStore.open(db, clock=clock)
    w1 = register(store)
    assert [cycle(store, w1) for _ in range(2)] == [1, 2]
    backup = tmp_path / "backup.sqlite"
    snapshot = sqlite3.connect(db.path)
    snapshot.execute("VACUUM INTO ?", (str(backup),))
    snapshot.close()
    held = store.acquire(MERGER, w1, HEAD)  # epoch 3: granted after the backup was taken
    assert [held.epoch, *[cycle(store, w1, OTHER_PR) for _ in range(2)]] == [3, 1, 2]
    store.close()
    db.close()

    _copy_db(backup, db.path)  # the operator restores the older file
    db = SQLiteDatabase(db.path)
    store = LeaseStore.open(db, clock=clock)
    (restored,) = store.list_leases(number=7)
    assert restored.epoch == 2  # the database went back in time ...
    clock.advance(60)
    w2 = register(store, "two")
    assert store.acquire(MERGER, w2, HEAD).epoch > 3  # ... the epochs did not
    assert cycle(store, w2, OTHER_PR) > 2
    with pytest.raises(LeaseRefused):  # the holder from before the restore is fenced out
        store.write_under(held.claim, "INSERT INTO merges (pr, epoch) VALUES (7, 3)")
    store.close()
    db.close()


def _copy_db(src: Path, dst: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(src, dst)


def test_store_reopens_with_migrations_already_applied(paths: WorkflowPaths) -> None:
    open_store(paths).close()
    db = open_store(paths)
    with db.read() as tx:
        n = tx.one("SELECT count(*) FROM schema_migration_log WHERE file_name LIKE '0003_%'")
    assert n is not None and n[0] == 1
    db.close()


# --- what an operator sees ------------------------------------------------------------------


def test_grants_refusals_expiries_and_takeovers_are_counted_and_logged(
    paths: WorkflowPaths, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reviewbot")
    telemetry = Telemetry()
    db = open_store(paths)
    leases = LeaseStore.open(db, LeaseSettings(), clock=clock, telemetry=telemetry)
    try:
        a, b = register(leases, "a"), register(leases, "b")
        held = leases.acquire(MERGER, a, HEAD)
        leases.acquire(MERGER, a, HEAD)  # a renewal: counted, not logged
        with pytest.raises(LeaseRefused):
            leases.acquire(MERGER, b, HEAD)
        clock.advance(LeaseSettings().lease_s + 1)
        taken = leases.acquire(MERGER, b, HEAD)
        leases.release(LeaseClaim(MERGER, b, taken.epoch))
        with pytest.raises(LeaseRefused):
            leases.release(LeaseClaim(MERGER, a, held.epoch))  # superseded long ago
    finally:
        leases.close()
        db.close()

    def count(name: str, **labels: str) -> float:
        return telemetry.registry.get_sample_value(name, labels) or 0.0

    assert count("reviewbot_lease_grants_total", role="merger", kind="granted") == 1
    assert count("reviewbot_lease_grants_total", role="merger", kind="renewed") == 1
    assert count("reviewbot_lease_grants_total", role="merger", kind="takeover") == 1
    assert count("reviewbot_lease_takeovers_total", role="merger") == 1
    assert count("reviewbot_lease_expiries_total", role="merger") == 1
    assert count("reviewbot_lease_releases_total", role="merger") == 1
    assert count("reviewbot_lease_refusals_total", role="merger", reason="lease_held") == 1
    assert (
        sum(
            count("reviewbot_lease_refusals_total", role="merger", reason=r)
            for r in ("superseded", "lease_not_held")
        )
        == 1
    )
    events = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
    said = [e["event"] for e in events]
    assert said == [
        "lease granted",
        "lease refused",
        "lease expired",
        "lease taken over",
        "lease released",
        "lease refused",
    ]
    takeover = events[3]
    assert takeover["previous_holder"] == a and takeover["worker"] == b
    assert takeover["epoch"] == held.epoch + 1 and "epoch" not in events[1]  # never a holder's
