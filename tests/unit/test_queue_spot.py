"""A queued PR's spot: train, position, car and a rough time until it lands."""

from __future__ import annotations

from reviewbot.core.queue_spot import SpotCar, SpotEntry, queue_spot, typical_ci_s

ENTRIES = (
    SpotEntry(1, "1"),
    SpotEntry(2, "2"),
    SpotEntry(3, "1"),
    SpotEntry(4, "1", priority=True),
    SpotEntry(5, "1"),
    SpotEntry(6, "1"),
)
CARS = (
    SpotCar("1", 1, (4,), "green", 0.0),
    SpotCar("1", 2, (1, 3), "testing", 600.0),
    SpotCar("2", 1, (2,), "testing", 900.0),
)


def test_a_pr_in_a_car_lands_when_its_car_and_those_ahead_end() -> None:
    found = queue_spot(3, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=2)
    assert found is not None
    assert (found.train, found.position, found.of) == ("1", 3, 5)  # the hotfix 4 is first
    assert (found.car, found.car_status) == (2, "testing")
    assert found.eta_s == 800.0  # 1200 s of CI, 400 s done
    assert found.line() == "position 3 of 5 in train 1, car 2 (testing), about 13 min"


def test_a_green_first_car_lands_now() -> None:
    found = queue_spot(4, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=2)
    assert found is not None and found.position == 1 and found.eta_s == 0.0


def test_a_waiting_pr_waits_for_a_slot_then_a_round_per_train_of_cars_ahead() -> None:
    five = queue_spot(5, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=2)
    six = queue_spot(6, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=2)
    assert five is not None and six is not None
    assert five.car is None and five.line().startswith("position 4 of 5 in train 1, waiting")
    # both slots are taken: the green car frees one now, then one CI duration
    assert five.eta_s == 1200.0 and six.eta_s == 1200.0
    wide = queue_spot(6, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=1)
    assert wide is not None and wide.eta_s == 2400.0  # 5 is ahead of it, one car per round


def test_no_estimate_before_any_car_finished_and_none_for_a_pr_not_queued() -> None:
    found = queue_spot(3, ENTRIES, CARS, now=1000.0, ci_s=None, cars_per_train=2)
    assert found is not None and found.eta_s is None
    assert found.line() == "position 3 of 5 in train 1, car 2 (testing)"
    assert queue_spot(9, ENTRIES, CARS, now=1000.0, ci_s=1200.0, cars_per_train=2) is None


def test_the_typical_ci_duration_is_the_median_of_the_recent_cars() -> None:
    assert typical_ci_s([]) is None
    assert typical_ci_s([600.0, 1200.0, 900.0]) == 900.0
    assert typical_ci_s([10_000.0] * 5 + [60.0] * 20) == 60.0  # only the newest 20 count
