"""The change detection a lease holder or waiter is told from: a pure function over two
snapshots of a PR."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reviewbot.core.pr_watch import (
    CHECKS_RED,
    EVENT_KINDS,
    HEAD_MOVED,
    LEASE_EXPIRING,
    LEASE_GRANTED,
    LEASE_LOST,
    UNMERGEABLE,
    HeldLease,
    PrSnapshot,
    Subscriber,
    pr_events,
)

A, B = "a" * 40, "b" * 40
ME = Subscriber("agent-7-20260301T101500Z-3f9c0a1b2d4e", "merger", warn_s=5.0)


def kinds(before: PrSnapshot, after: PrSnapshot, sub: Subscriber = ME) -> list[str]:
    return [e.kind for e in pr_events(before, after, sub)]


def mine(epoch: int = 3, expires_at: float = 100.0) -> HeldLease:
    return HeldLease("merger", ME.worker, epoch, expires_at)


def test_nothing_changed_is_nothing_told() -> None:
    snap = PrSnapshot(10.0, A, leases=(mine(),))
    assert kinds(snap, PrSnapshot(11.0, A, leases=(mine(),))) == []


def test_a_moved_head_is_told_with_both_heads() -> None:
    (event,) = pr_events(PrSnapshot(10.0, A), PrSnapshot(11.0, B), ME)
    assert event.kind == HEAD_MOVED
    assert event.to_json()["old_head"] == A and event.to_json()["new_head"] == B
    # An unknown head before (a subscription that named none) moves nowhere.
    assert kinds(PrSnapshot.unknown(), PrSnapshot(11.0, B)) == []


def test_red_checks_and_unmergeable_are_told_once_per_head() -> None:
    red = PrSnapshot(11.0, A, failing=("ci/test",), mergeable=False)
    assert kinds(PrSnapshot(10.0, A), red) == [CHECKS_RED, UNMERGEABLE]
    assert kinds(red, PrSnapshot(12.0, A, failing=("ci/test",), mergeable=False)) == []
    # A new head that is red too is told again.
    again = PrSnapshot(13.0, B, failing=("ci/test",), mergeable=False)
    assert kinds(red, again) == [HEAD_MOVED, CHECKS_RED, UNMERGEABLE]


def test_the_grant_a_waiter_waited_for() -> None:
    other = HeldLease("merger", "agent-9", 2, 50.0)
    waiting = PrSnapshot(10.0, A, leases=(other,))
    granted = PrSnapshot(11.0, A, leases=(mine(epoch=3),))
    (event,) = pr_events(waiting, granted, ME)
    assert event.kind == LEASE_GRANTED and event.data["epoch"] == 3
    # Someone else's grant, or another role's, is not the subscriber's.
    assert kinds(waiting, PrSnapshot(11.0, A, leases=(HeldLease("merger", "x", 3, 60.0),))) == []
    reviewer = HeldLease("reviewer", ME.worker, 1, 60.0)
    assert kinds(waiting, PrSnapshot(11.0, A, leases=(reviewer,))) == []
    # A grant that came before the first look is told at once.
    assert kinds(PrSnapshot.unknown(A), granted) == [LEASE_GRANTED]
    # Taken over and granted again at a higher epoch is a new grant.
    assert kinds(granted, PrSnapshot(12.0, A, leases=(mine(epoch=5),))) == [LEASE_GRANTED]


def test_a_lapsing_lease_is_told_once_per_expiry_and_its_loss_once() -> None:
    held = PrSnapshot(90.0, A, leases=(mine(expires_at=100.0),))
    near = PrSnapshot(96.0, A, leases=(mine(expires_at=100.0),))
    (event,) = pr_events(held, near, ME)
    assert event.kind == LEASE_EXPIRING and event.data["expires_in_s"] == 4.0
    assert kinds(near, PrSnapshot(97.0, A, leases=(mine(expires_at=100.0),))) == []
    # A heartbeat pushed the expiry on: nothing to tell, then a new warning near the new one.
    beat = PrSnapshot(98.0, A, leases=(mine(expires_at=120.0),))
    assert kinds(near, beat) == []
    assert kinds(beat, PrSnapshot(116.0, A, leases=(mine(expires_at=120.0),))) == [LEASE_EXPIRING]
    assert kinds(near, PrSnapshot(101.0, A)) == [LEASE_LOST]


snapshots = st.builds(
    PrSnapshot,
    at=st.floats(0, 1000),
    head_sha=st.sampled_from([None, A, B]),
    failing=st.sampled_from([(), ("ci/test",)]),
    mergeable=st.sampled_from([None, True, False]),
    leases=st.lists(
        st.builds(
            HeldLease,
            role=st.sampled_from(["merger", "reviewer"]),
            holder=st.sampled_from([ME.worker, "agent-9"]),
            epoch=st.integers(1, 4),
            expires_at=st.floats(0, 1000),
        ),
        max_size=2,
    ).map(tuple),
)


@given(snapshots, snapshots)
def test_a_snapshot_compared_with_itself_tells_nothing_new(
    before: PrSnapshot, after: PrSnapshot
) -> None:
    told = kinds(before, after)
    assert all(k in EVENT_KINDS for k in told) and len(told) == len(set(told))
    # Looking again without any change tells nothing: every event is told once.
    assert kinds(after, after) == []
