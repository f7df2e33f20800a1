"""The merge queue's store on both dialects: entries, cars, trains and events, written only
under the branch's live merge lane, so a replica that lost the lane writes nothing."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from reviewbot.core.reasons import ReasonCode
from reviewbot.store import lanes
from reviewbot.store.database import Database
from reviewbot.store.lanes import LaneHold
from reviewbot.store.queue import (
    CarState,
    EntryState,
    EventKind,
    QueueFenced,
    QueueRef,
    QueueStore,
)
from tests.support.clock import T0, FakeClock

HEAD = "a" * 40
TESTED = "b" * 40
QUEUE = QueueRef("github", "Acme/API", "main")


def _hold(db: Database, clock: FakeClock, holder: str = "replica-1") -> LaneHold:
    got = lanes.try_acquire(db, QUEUE.lane, holder, 30.0, clock())
    assert isinstance(got, LaneHold)
    return got


def test_a_queue_round_trips_entries_cars_trains_and_events(db: Database) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    hold = _hold(db, clock)
    with store.fenced(QUEUE, hold) as w:
        w.enqueue(7, HEAD, ["src", "docs"], "t7")
        w.enqueue(8, HEAD, ["lib"], "t8", priority=True)
        w.event(EventKind.ENQUEUED, "admitted at its head", number=7, sha=HEAD)
        car = w.add_car("t7", 1, [7], [], "reviewbot/queue/main/1")
        w.save_train("t7", ["src", "docs"], {"waiting": [], "next_id": 2})
    with store.fenced(QUEUE, hold) as w:
        w.update_car(car, CarState.GREEN, base_sha=HEAD, tested_sha=TESTED)
        w.end_entry(7, EntryState.MERGED, None)
        w.event(EventKind.LANDED, "fast-forwarded", number=7, car=car, sha=TESTED)
    # Any casing of the repository reads the same queue.
    assert [e.number for e in store.entries("github", "acme/api", "main")] == [8]
    every = store.entries("github", "ACME/api", state=None)
    assert [(e.number, e.state, e.keys) for e in every] == [
        (7, "merged", ("docs", "src")),
        (8, "queued", ("lib",)),
    ]
    assert store.entry_of("github", "acme/api", 8) is not None
    assert store.entry_of("github", "acme/api", 7) is None
    (green,) = store.cars("github", "acme/api", "main", "t7")
    assert (green.batch, green.tested_sha, green.status, green.epoch) == (
        (7,),
        TESTED,
        "green",
        hold.token,
    )
    assert store.car_on_branch("github", "acme/api", "reviewbot/queue/main/1") == green
    (train,) = store.trains("github", "acme/api", "main")
    assert train.state == {"waiting": [], "next_id": 2}
    kinds = [(e.kind, e.sha) for e in store.events_of_pull("github", "acme/api", 7)]
    assert kinds == [("enqueued", HEAD), ("landed", TESTED)]
    assert [q.base for q in store.queues()] == ["main"]


def test_a_replica_that_lost_the_lane_writes_nothing(db: Database) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    stale = _hold(db, clock, "replica-1")
    clock.advance(31.0)  # its term lapsed; another replica takes the lane over
    live = _hold(db, clock, "replica-2")
    assert live.token > stale.token
    with pytest.raises(QueueFenced) as refused, store.fenced(QUEUE, stale) as w:
        w.enqueue(7, HEAD, ["src"], "t7")
    assert refused.value.code == ReasonCode.LEASE_NOT_HELD.value
    assert store.entries("github", "acme/api", "main", state=None) == []
    with store.fenced(QUEUE, live) as w:
        w.enqueue(7, HEAD, ["src"], "t7")
        w.event(EventKind.LEFT, "pushed", number=7, code=ReasonCode.HEAD_MOVED)
    (entry,) = store.entries("github", "acme/api", "main")
    assert entry.epoch == live.token
    (event,) = store.events_of_pull("github", "acme/api", 7)
    assert (event.code, event.epoch) == ("head_moved", live.token)


def test_another_branchs_lane_does_not_fence_this_queue(db: Database) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    other = QueueRef("github", "acme/api", "release")
    got = lanes.try_acquire(db, other.lane, "replica-1", 30.0, clock())
    assert isinstance(got, LaneHold)
    with pytest.raises(QueueFenced), store.fenced(QUEUE, got):
        pass


def test_a_pr_has_one_queued_entry_at_a_time(db: Database) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    hold = _hold(db, clock)
    with store.fenced(QUEUE, hold) as w:
        w.enqueue(7, HEAD, ["src"], "t7")
    with (
        pytest.raises((sqlite3.IntegrityError, psycopg.errors.IntegrityError)),
        store.fenced(QUEUE, hold) as w,
    ):
        w.enqueue(7, HEAD, ["src"], "t7")
    with store.fenced(QUEUE, hold) as w:
        assert w.end_entry(7, EntryState.LEFT, ReasonCode.PR_CLOSED)
        w.enqueue(7, TESTED, ["src"], "t7")  # admitted again after it left
    assert [e.state for e in store.entries("github", "acme/api", state=None)] == [
        "left",
        "queued",
    ]


def test_a_pr_counts_as_landed_by_its_latest_entry(db: Database) -> None:
    """A PR that landed, was admitted again at new commits and then ejected has not landed
    those commits: a car built on them must not take it for landed."""
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    hold = _hold(db, clock)
    with store.fenced(QUEUE, hold) as w:
        w.enqueue(7, HEAD, ["src"], "t7")
        w.enqueue(8, HEAD, ["lib"], "t8")
    with store.fenced(QUEUE, hold) as w:
        w.end_entry(7, EntryState.MERGED, None)
        w.end_entry(8, EntryState.MERGED, None)
    assert store.landed_numbers("github", "acme/api", "main") == {7, 8}
    with store.fenced(QUEUE, hold) as w:
        w.enqueue(7, TESTED, ["src"], "t7")  # the PR stayed open; new commits, admitted again
    assert store.landed_numbers("github", "ACME/api", "main") == {8}
    with store.fenced(QUEUE, hold) as w:
        w.end_entry(7, EntryState.EJECTED, ReasonCode.QUEUE_CULPRIT)
    assert store.landed_numbers("github", "acme/api", "main") == {8}
    assert store.landed_numbers("github", "acme/api", "develop") == set()


def test_finished_durations_are_the_newest_answered_cars_from_push_to_answer(
    db: Database,
) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    hold = lanes.try_acquire(db, QUEUE.lane, "replica-1", 7200.0, clock())
    assert isinstance(hold, LaneHold)
    for minutes, status in ((10, CarState.GREEN), (20, CarState.FAILED), (30, CarState.LANDED)):
        with store.fenced(QUEUE, hold) as w:
            car = w.add_car("t1", minutes, [minutes], [], f"reviewbot/queue/main/1-{minutes}")
        clock.advance(minutes * 60)
        with store.fenced(QUEUE, hold) as w:
            w.update_car(car, status, base_sha=HEAD, tested_sha=TESTED)
    with store.fenced(QUEUE, hold) as w:  # still testing, and cancelled: no answer
        testing = w.add_car("t1", 40, [40], [], "reviewbot/queue/main/1-40")
        w.update_car(testing, CarState.TESTING, base_sha=HEAD, tested_sha=TESTED)
        w.add_car("t1", 41, [41], [], "reviewbot/queue/main/1-41")
    assert store.finished_durations("github", "ACME/api", "main", limit=5) == [600, 1200, 1800]
    assert store.finished_durations("github", "acme/api", "main", limit=2) == [1200, 1800]
    assert store.finished_durations("github", "acme/api", "release", limit=5) == []


def test_pause_and_drain_are_stored_per_base_under_the_lane(db: Database) -> None:
    clock = FakeClock(T0)
    store = QueueStore(db, clock)
    assert store.control("github", "acme/api", "main").paused is False  # no row: running
    stale = _hold(db, clock, "replica-1")
    clock.advance(31.0)
    live = _hold(db, clock, "replica-2")
    with pytest.raises(QueueFenced), store.fenced(QUEUE, stale) as w:
        w.set_control(True, False, "token stale")
    assert store.controls("github", "acme/api") == {}
    with store.fenced(QUEUE, live) as w:
        w.set_control(True, False, "token ops")
    with store.fenced(QUEUE, live) as w:
        w.set_control(False, True, "token ops2")
    got = store.control("github", "ACME/Api", "main")
    assert (got.paused, got.draining, got.set_by, got.set_at) == (
        False,
        True,
        "token ops2",
        clock(),
    )
    assert list(store.controls("github", "acme/api")) == ["main"]
    assert store.control("github", "acme/api", "release").draining is False
    car = 1
    with store.fenced(QUEUE, live) as w:
        w.event(EventKind.HELD, "held", number=7, car=car, code=ReasonCode.QUEUE_FROZEN)
    assert store.held_recorded(QUEUE, car, ReasonCode.QUEUE_FROZEN)
    assert not store.held_recorded(QUEUE, car, ReasonCode.QUEUE_OUTSIDE_WINDOW)
