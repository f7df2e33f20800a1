"""The lease line in the store, on SQLite and on PostgreSQL: what a waiter (or a notifier
acting for it) reads, and the rows the line leaves behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseDetails, LeaseTarget, Role, WorkerOwner
from reviewbot.store.leases import LINE_ACTOR, LeaseRefused, LeaseStore
from reviewbot.store.workers import prune_workers
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.clock import FakeClock

HEAD = "a" * 40
T = LeaseTarget("github", "acme/api", 7, Role.MERGER)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def store(workflow_paths: WorkflowPaths, clock: FakeClock) -> Iterator[LeaseStore]:
    db = open_store(workflow_paths)
    s = LeaseStore.open(db, LeaseSettings(), clock=clock)
    yield s
    s.close()
    db.close()


def register(store: LeaseStore, name: str) -> str:
    return store.workers.register(name, client="test", session_id="s1", role="merger").identity


def wait(store: LeaseStore, worker: str, **extra: object) -> int:
    with pytest.raises(LeaseRefused) as refused:
        store.acquire(T, worker, HEAD, wait=True, **extra)  # type: ignore[arg-type]
    position = refused.value.refusal.position
    assert position is not None
    return position


def test_granted_and_line_status_tell_a_waiter_where_it_stands(store: LeaseStore) -> None:
    a, b, c = register(store, "a"), register(store, "b"), register(store, "c")
    held = store.acquire(T, a, HEAD)
    assert (wait(store, b), wait(store, c)) == (1, 2)
    status = store.line_status(T, c)
    assert (status.granted, status.position, status.waiting, status.free) == (None, 2, 2, False)
    assert store.granted(T, b) is None

    store.release(held.claim)  # the release grants B
    lease = store.granted(T, b)
    assert lease is not None and (lease.holder, lease.epoch) == (b, held.epoch + 1)
    status = store.line_status(T, b)
    assert status.granted == lease and status.position is None
    assert store.line_status(T, c).position == 1
    assert store.history("github", "acme/api", 7)[-1].actor == LINE_ACTOR


def test_settle_line_grants_the_first_waiter_once_the_holder_lapsed(
    store: LeaseStore, clock: FakeClock
) -> None:
    a, b = register(store, "a"), register(store, "b")
    store.acquire(T, a, HEAD)
    wait(store, b, details=LeaseDetails(issue="#9"))
    assert store.settle_line(T) is None  # A still holds it
    clock.advance(9)
    store.worker_heartbeat(b)
    clock.advance(7)  # A lapsed; B heard from 7 s ago
    status = store.line_status(T, b)
    assert status.free and status.granted is None and status.position == 1
    lease = store.settle_line(T)
    assert lease is not None and lease.holder == b and lease.details.issue == "#9"
    seen = store.granted(T, b)  # as live as its worker: B was last heard from at +9
    assert seen is not None and (seen.holder, seen.epoch) == (b, lease.epoch)
    assert seen.expires_at == clock() - 7 + LeaseSettings().lease_s


def test_a_pruned_worker_leaves_every_line(store: LeaseStore, clock: FakeClock) -> None:
    a = register(store, "a")
    store.acquire(T, a, HEAD, ttl_s=600)
    # Workers an API token registered are pruned when silent; the line goes with them.
    ghost = store.workers.register(
        "ghost", client="t", session_id="s", role="merger", owner=WorkerOwner(1, None, "t")
    ).identity
    wait(store, ghost)
    clock.advance(3600)
    assert prune_workers(store.db, clock() - 60, limit=10) == 1
    with store.db.read() as tx:
        left = tx.one("SELECT count(*) FROM lease_waiters")
    assert left is not None and left[0] == 0
