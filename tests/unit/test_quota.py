"""The token buckets of the rate limits, with the time passed in."""

from __future__ import annotations

import pytest

from reviewbot.core.quota import Rate, RouteClass, TokenBuckets, retry_after_s

LEASE = RouteClass.LEASE


def test_a_burst_then_the_rate() -> None:
    buckets = TokenBuckets({LEASE: Rate(0.5, 3)})
    assert [buckets.take("a", LEASE, 0.0) for _ in range(3)] == [None, None, None]
    assert buckets.take("a", LEASE, 0.0) == pytest.approx(2.0)
    assert buckets.take("a", LEASE, 1.0) == pytest.approx(1.0)  # refused: nothing taken
    assert buckets.take("a", LEASE, 2.0) is None
    assert buckets.take("a", LEASE, 2.0) == pytest.approx(2.0)
    assert buckets.take("a", LEASE, 1000.0) is None  # a long pause refills to the burst only
    assert [buckets.take("a", LEASE, 1000.0) for _ in range(3)][-1] == pytest.approx(2.0)


def test_callers_and_classes_have_their_own_buckets() -> None:
    buckets = TokenBuckets({LEASE: Rate(1.0, 1), RouteClass.MERGE: Rate(1.0, 1)})
    assert buckets.take("a", LEASE, 0.0) is None
    assert buckets.take("a", LEASE, 0.0) is not None
    assert buckets.take("b", LEASE, 0.0) is None
    assert buckets.take("a", RouteClass.MERGE, 0.0) is None
    assert buckets.take("a", RouteClass.REVIEW, 0.0) is None  # no rate: not limited


def test_a_clock_going_back_refills_nothing() -> None:
    buckets = TokenBuckets({LEASE: Rate(1.0, 1)})
    assert buckets.take("a", LEASE, 100.0) is None
    assert buckets.take("a", LEASE, 50.0) == pytest.approx(1.0)
    assert buckets.take("a", LEASE, 100.5) == pytest.approx(0.5)
    assert buckets.take("a", LEASE, 101.0) is None


def test_buckets_stay_bounded_in_number() -> None:
    buckets = TokenBuckets({LEASE: Rate(1.0, 2)}, max_buckets=100)
    for n in range(1000):
        assert buckets.take(f"caller-{n}", LEASE, float(n)) is None
    assert len(buckets) <= 100
    assert buckets.take("caller-999", LEASE, 999.0) is None  # its own, kept
    assert buckets.take("caller-999", LEASE, 999.0) == pytest.approx(1.0)


def test_rates_and_retry_after() -> None:
    with pytest.raises(ValueError):
        Rate(0.0, 1)
    with pytest.raises(ValueError):
        Rate(1.0, 0)
    assert [retry_after_s(w) for w in (0.01, 1.0, 1.01)] == [1, 1, 2]
