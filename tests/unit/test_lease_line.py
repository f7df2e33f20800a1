"""The line of workers waiting for a lease: who is next, who has left, in arrival order."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.core import lease_line
from reviewbot.core import leases as core
from reviewbot.core.lease_line import Waiter
from reviewbot.core.leases import (
    AcquireRequest,
    Granted,
    LeaseClaim,
    LeaseDetails,
    LeaseTarget,
    Role,
)

T = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
HEAD = "a" * 40
TTL = 10.0
TIMING = core.Timing(line_ttl_s=TTL)


def waiter(worker: str, seq: int, seen_at: float = 0.0) -> Waiter:
    return Waiter(T, worker, seq, HEAD, None, joined_at=seen_at, seen_at=seen_at)


def granted(worker: str, now: float) -> core.Lease:
    result = core.acquire(None, 0, AcquireRequest(T, worker, HEAD), now, TIMING)
    assert isinstance(result, Granted)
    return result.lease


def test_the_line_is_in_arrival_order_and_positions_count_from_one() -> None:
    line = lease_line.view(
        [waiter("c", 3), waiter("a", 1), waiter("b", 2)], {"a": 0, "b": 0, "c": 0}, 1.0, TTL
    )
    assert [w.worker for w in line.live] == ["a", "b", "c"]
    assert (line.position("a"), line.position("c"), line.position("z")) == (1, 3, None)


def test_a_held_target_has_no_successor_a_free_one_goes_to_the_first() -> None:
    line = lease_line.view([waiter("b", 2), waiter("a", 1)], {"a": 0, "b": 0}, 1.0, TTL)
    holder = granted("h", 0.0)
    assert lease_line.successor(holder, line, 1.0) is None
    first = lease_line.successor(None, line, 1.0)
    assert first is not None and first.worker == "a"
    released = core.release(holder, LeaseClaim(T, "h", holder.epoch), 2.0)
    assert isinstance(released, Granted)
    first = lease_line.successor(released.lease, line, 2.0)
    assert first is not None and first.worker == "a"
    # a lapsed holder is no holder: the line moves
    first = lease_line.successor(holder, line, holder.expires_at)
    assert first is not None and first.worker == "a"


def test_a_waiter_silent_for_the_line_term_has_left_its_worker_heartbeat_counts() -> None:
    a, b, c = waiter("a", 1, seen_at=0.0), waiter("b", 2, seen_at=0.0), waiter("c", 3, 5.0)
    # a: its worker heartbeated at 8, so it is heard from; b: silent since 0; c: polled at 5
    line = lease_line.view([a, b, c], {"a": 8.0, "b": 0.0, "c": 0.0}, TTL, TTL)
    assert [w.worker for w in line.live] == ["a", "c"]
    assert [w.worker for w in line.stale] == ["b"]
    # just inside the term is still live
    assert not lease_line.is_stale(c, None, 5.0 + TTL - 0.001, TTL)
    assert lease_line.is_stale(c, None, 5.0 + TTL, TTL)


def test_a_waiter_whose_worker_record_is_gone_has_left() -> None:
    line = lease_line.view([waiter("a", 1, 9.0)], {}, 10.0, TTL)
    assert line.live == () and [w.worker for w in line.stale] == ["a"]


def test_a_new_waiter_joins_behind_everyone_and_the_grant_carries_its_request() -> None:
    assert lease_line.next_seq([]) == 1
    assert lease_line.next_seq([waiter("a", 4), waiter("b", 2)]) == 5
    details = LeaseDetails("main", "b" * 40, "s-1", "#7", "waiting for CI")
    w = replace(waiter("a", 1), ttl_s=30.0, details=details)
    result = core.acquire(None, 6, w.request(), 1.0, TIMING)
    assert isinstance(result, Granted)
    lease = result.lease
    assert (lease.holder, lease.epoch, lease.ttl_s, lease.details) == ("a", 7, 30.0, details)


def test_lease_details_are_checked() -> None:
    with pytest.raises(ValueError, match="target_sha"):
        LeaseDetails(target_sha="abc")
    with pytest.raises(ValueError, match="blocker"):
        LeaseDetails(blocker="x" * 201)
    with pytest.raises(ValueError, match="issue"):
        LeaseDetails(issue="a\nb")
    assert LeaseDetails(target_branch="main").words() == "branch=main"


def test_a_wait_is_bounded_and_never_shortened() -> None:
    assert core.wait_term(TIMING, 0) == 0
    assert core.wait_term(TIMING, TIMING.max_wait_s) == TIMING.max_wait_s
    for bad in (-1.0, TIMING.max_wait_s + 0.001, float("inf"), float("nan"), 1e300):
        with pytest.raises(ValueError, match="wait_s"):
            core.wait_term(TIMING, bad)


# --- arrival order under any interleaving ---------------------------------------------------

WORKERS = ("w0", "w1", "w2", "w3", "w4")
# An action: a worker asks (joins the line, or is heard from), the holder releases, or
# the clock moves on (a long step makes the holder and the silent waiters lapse).
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.sampled_from(WORKERS)),
        st.tuples(st.just("release"), st.just("")),
        st.tuples(st.just("tick"), st.sampled_from([0.5, 3.0, 16.0])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ACTIONS)
def test_grants_follow_arrival_order_for_any_interleaving(
    actions: list[tuple[str, object]],
) -> None:
    """The store's acquire and release, over the core decisions alone: every grant from the
    line goes to the live waiter that joined first, and asking again never moves a waiter
    forward."""
    now = 0.0
    current: core.Lease | None = None
    waiters: dict[str, Waiter] = {}
    heard: dict[str, float] = {}
    epoch = 0
    order: list[str] = []  # the arrival order of the live line, as the model keeps it

    def settle() -> None:
        nonlocal current, epoch
        line = lease_line.view(list(waiters.values()), heard, now, TTL)
        for gone in line.stale:
            del waiters[gone.worker]
            order.remove(gone.worker)
        nxt = lease_line.successor(current, line, now)
        if nxt is None:
            return
        assert nxt.worker == order[0], "the grant skipped someone who came first"
        result = core.acquire(current, epoch, nxt.request(), now, TIMING)
        assert isinstance(result, Granted)
        current, epoch = result.lease, result.lease.epoch
        del waiters[nxt.worker]
        order.pop(0)

    for kind, arg in actions:
        if kind == "tick":
            assert isinstance(arg, float)
            now += arg
        elif kind == "release":
            if current is not None and current.live(now):
                result = core.release(current, current.claim, now)
                assert isinstance(result, Granted)
                current = result.lease
        else:
            worker = str(arg)
            heard[worker] = now
            holds = current is not None and current.live(now) and current.holder == worker
            if not holds:
                mine = waiters.get(worker)
                seq = mine.seq if mine else lease_line.next_seq(list(waiters.values()))
                joined = mine.joined_at if mine else now
                waiters[worker] = Waiter(T, worker, seq, HEAD, None, joined, now)
                if mine is None:
                    order.append(worker)
        settle()
        assert [w.worker for w in sorted(waiters.values(), key=lambda w: w.seq)] == order
