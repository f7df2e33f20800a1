"""Every train of a queue and its landing line: promotion, landing, budget, freezes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.core.queue import SERIAL_KEY
from reviewbot.core.queue_board import (
    LANDING,
    Board,
    BoardLimits,
    Promote,
    Routed,
    enqueue,
    home_train,
    leave,
    on_car,
    settle,
)
from reviewbot.core.queue_cars import (
    BuildCar,
    CancelCar,
    CarBuilt,
    CarFailed,
    CarLimits,
    CarPassed,
    Eject,
    FastForward,
)
from reviewbot.core.queue_train import queued
from reviewbot.core.reasons import ReasonCode

LIMITS = BoardLimits(trains=CarLimits(2, 16, 1), landing=CarLimits(2, 16, 4), ci_budget=16)


def keys(*names: str) -> frozenset[str]:
    return frozenset(names)


def builds(actions: tuple[Routed, ...]) -> list[tuple[int, int, tuple[int, ...]]]:
    return [
        (r.train, r.action.car.id, r.action.car.entries)
        for r in actions
        if isinstance(r.action, BuildCar)
    ]


def never_ff(_: str) -> bool:
    return False


def always_ff(_: str) -> bool:
    return True


def passed(board: Board, train: int, car: int, sha: str) -> Board:
    board, _ = on_car(board, train, CarBuilt(car, sha))
    board, _ = on_car(board, train, CarPassed(car))
    return board


def two_green_trains() -> Board:
    """PR 1 (api) and PR 2 (web) in trains 1 and 2, each car green: t1, t2."""
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = enqueue(board, 2, keys("web"))
    board, _ = settle(board, LIMITS, never_ff)
    return passed(passed(board, 1, 1, "t1"), 2, 1, "t2")


def test_an_entry_starts_a_train_or_joins_the_one_sharing_most_of_its_keys() -> None:
    homes = {1: keys("api"), 2: keys("web", "docs")}
    assert home_train(homes, keys("cli")) is None
    assert home_train(homes, keys("api")) == 1
    assert home_train(homes, keys("api", "web", "docs")) == 2
    assert home_train(homes, keys("api", "web")) == 1  # a tie goes to the oldest train
    assert home_train(homes, keys(SERIAL_KEY, "api")) is None  # no serial train yet
    assert home_train({**homes, 3: keys(SERIAL_KEY)}, keys(SERIAL_KEY, "api")) == 3


def test_disjoint_entries_are_tested_in_parallel_trains_on_the_base() -> None:
    board = Board()
    for number, key in ((1, "api"), (2, "web"), (3, "api")):
        board, _ = enqueue(board, number, keys(key))
    board, actions = settle(board, LIMITS, never_ff)
    assert builds(actions) == [(1, 1, (1,)), (1, 2, (1, 3)), (2, 1, (2,))]
    assert board.train_of(3) == 1 and board.train_of(2) == 2


def test_a_passing_train_car_is_promoted_and_only_the_landing_line_lands() -> None:
    board = two_green_trains()
    # both tested commits are stale: neither lands directly, both join the landing line
    board, actions = settle(board, LIMITS, never_ff)
    promoted = [(r.train, r.action.merged) for r in actions if isinstance(r.action, Promote)]
    assert promoted == [(1, (1,)), (2, (2,))]
    assert not any(isinstance(r.action, FastForward) for r in actions)
    assert builds(actions) == [(LANDING, 1, (1,)), (LANDING, 2, (1, 2))]
    assert board.train_of(1) == LANDING and not board.trains  # empty trains are dropped
    board = passed(board, LANDING, 2, "L2")
    board, actions = settle(board, LIMITS, always_ff)
    assert actions == ()  # the second car waits for the first
    board = passed(board, LANDING, 1, "L1")
    board, actions = settle(board, LIMITS, always_ff)
    assert [r.action for r in actions] == [FastForward("L1", (1,)), FastForward("L2", (2,))]
    assert board.train_of(1) is None and board.train_of(2) is None


def test_a_train_car_lands_directly_when_nothing_else_waits_and_it_is_a_fast_forward() -> None:
    board = two_green_trains()
    # both look like fast-forwards of the base read before the call, but once train 1 landed
    # train 2's commit no longer is: it is promoted, not landed
    board, actions = settle(board, LIMITS, always_ff)
    assert [r.action for r in actions if isinstance(r.action, FastForward)] == [
        FastForward("t1", (1,))
    ]
    assert [r.action.merged for r in actions if isinstance(r.action, Promote)] == [(2,)]


def test_a_car_sitting_on_promoted_entries_does_not_land_directly() -> None:
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = enqueue(board, 2, keys("api"))
    board, _ = settle(board, LIMITS, never_ff)
    board = passed(board, 1, 1, "t1")
    board, _ = settle(board, LIMITS, never_ff)  # 1 promoted
    board, _ = on_car(board, LANDING, CarBuilt(1, "L1"))
    board, _ = on_car(board, LANDING, CarFailed(1, "ci/test"))  # 1 ejected from the landing
    assert board.train_of(1) is None
    board = passed(board, 1, 2, "t2")  # car 2 = base + 1 + 2
    board, actions = settle(board, LIMITS, always_ff)
    assert not any(isinstance(r.action, FastForward) for r in actions)  # it would land 1
    assert [r.action.merged for r in actions if isinstance(r.action, Promote)] == [(2,)]


def test_a_freeze_stops_landing_not_testing() -> None:
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = settle(board, LIMITS, always_ff, frozen=True)
    board = passed(board, 1, 1, "t1")
    board, actions = settle(board, LIMITS, always_ff, frozen=True)
    assert [type(r.action) for r in actions] == [Promote, BuildCar]
    board = passed(board, LANDING, 1, "L1")
    board, actions = settle(board, LIMITS, always_ff, frozen=True)
    assert actions == ()
    board, actions = settle(board, LIMITS, always_ff)
    assert [r.action for r in actions] == [FastForward("L1", (1,))]


def test_cars_in_flight_stay_within_the_ci_budget_landing_line_first() -> None:
    limits = BoardLimits(trains=CarLimits(4, 99, 1), landing=CarLimits(4, 99, 1), ci_budget=3)
    board = Board()
    for number in range(1, 5):
        board, _ = enqueue(board, number, keys(f"area{number}"))
    board, actions = settle(board, limits, never_ff)
    assert len(builds(actions)) == 3 and board.in_flight == 3
    board = passed(board, 1, 1, "t1")
    board, actions = settle(board, limits, never_ff)
    assert builds(actions) == [(LANDING, 1, (1,))]  # the freed slot goes to the landing line
    assert board.in_flight == 3


def test_an_entry_leaves_from_the_landing_line_and_its_car_is_cancelled() -> None:
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = settle(board, LIMITS, never_ff)
    board = passed(board, 1, 1, "t1")
    board, _ = settle(board, LIMITS, never_ff)
    board, actions = leave(board, 1, ReasonCode.HEAD_MOVED)
    assert actions == (Routed(LANDING, CancelCar(1)),)
    assert board.train_of(1) is None
    assert leave(board, 1, ReasonCode.HEAD_MOVED) == (board, ())


def test_a_culprit_is_ejected_in_its_train_before_reaching_the_landing_line() -> None:
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = settle(board, LIMITS, never_ff)
    board, _ = on_car(board, 1, CarBuilt(1, "t1"))
    board, actions = on_car(board, 1, CarFailed(1, "ci/test"))
    assert [(r.train, r.action.number) for r in actions if isinstance(r.action, Eject)] == [(1, 1)]
    board, actions = settle(board, LIMITS, never_ff)
    assert actions == () and not board.trains and board.in_flight == 0


def test_a_hotfix_goes_first_in_the_landing_line_too() -> None:
    board = Board()
    board, _ = enqueue(board, 1, keys("api"))
    board, _ = enqueue(board, 2, keys("web"), priority=True)
    board, _ = settle(board, BoardLimits(landing=CarLimits(1, 16, 1)), never_ff)
    board = passed(board, 1, 1, "t1")
    board = passed(board, 2, 1, "t2")
    limits = BoardLimits(landing=CarLimits(1, 16, 1))
    board, actions = settle(board, limits, never_ff)
    assert builds(actions) == [(LANDING, 1, (2,))]


def test_a_passing_half_of_a_failed_train_batch_is_promoted_without_a_retest() -> None:
    limits = BoardLimits(trains=CarLimits(1, 16, 4), landing=CarLimits(1, 16, 4), ci_budget=16)
    board = Board()
    for number in (1, 2, 3, 4):
        board, _ = enqueue(board, number, keys("api"))
    board, actions = settle(board, limits, never_ff)
    assert builds(actions) == [(1, 1, (1, 2, 3, 4))]
    board, _ = on_car(board, 1, CarBuilt(1, "t1"))
    board, actions = on_car(board, 1, CarFailed(1, "ci/test"))
    assert builds(actions) == [(1, 2, (1, 2)), (1, 3, (3, 4))]  # halves on the same base
    board, _ = on_car(board, 1, CarBuilt(2, "h2"))
    board, actions = on_car(board, 1, CarPassed(2))
    assert [r.action for r in actions] == [Promote(2, "h2", (1, 2))]
    assert board.train_of(1) == LANDING and board.train_of(3) == 1
    board, actions = settle(board, limits, never_ff)
    assert builds(actions) == [(LANDING, 1, (1, 2))]
    board, _ = on_car(board, 1, CarBuilt(3, "h3"))
    board, actions = on_car(board, 1, CarFailed(3, "ci/test"))  # the culprit is in 3, 4
    assert builds(actions) == [(1, 4, (3,)), (1, 5, (4,))]
    assert board.train_of(1) == LANDING  # not tested again in its train


OPS = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "settle", "built", "pass", "fail", "leave", "freeze"]),
        st.integers(0, 11),
        st.booleans(),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_only_green_tested_commits_land_and_no_entry_is_in_two_places(
    ops: list[tuple[str, int, bool]],
) -> None:
    limits = BoardLimits(CarLimits(2, 99, 2), CarLimits(2, 99, 3), ci_budget=5)
    board = Board()
    built: dict[tuple[int, int], str] = {}
    green: set[str] = set()
    merged: list[int] = []
    for op, n, flag in ops:
        lines = {LANDING: board.landing, **board.trains}
        cars = [(tid, c.id) for tid, t in lines.items() for c in t.line + t.splits]
        tid, car_id = cars[n % len(cars)] if cars else (LANDING, 0)
        actions: tuple[Routed, ...] = ()
        if op == "enqueue" and n not in merged:
            board, actions = enqueue(board, n, keys(f"area{n % 3}", f"area{n % 4}"))
        elif op in ("settle", "freeze"):
            answer = flag
            board, actions = settle(
                board, limits, lambda sha, answer=answer: answer, frozen=op == "freeze"
            )
        elif op == "built":
            sha = f"sha-{tid}-{car_id}-{len(built)}"
            built[(tid, car_id)] = sha
            board, actions = on_car(board, tid, CarBuilt(car_id, sha))
        elif op == "pass":
            sha = built.get((tid, car_id))
            if sha is not None:
                green.add(sha)
            board, actions = on_car(board, tid, CarPassed(car_id))
        elif op == "fail":
            board, actions = on_car(board, tid, CarFailed(car_id, "ci/test", timed_out=flag))
        elif op == "leave":
            board, actions = leave(board, n, ReasonCode.HEAD_MOVED)
        for routed in actions:
            if isinstance(routed.action, FastForward):
                # only a commit CI passed lands, and only when the caller said it is a
                # fast-forward and no freeze holds
                assert routed.action.sha in green and op == "settle" and flag
                merged += routed.action.merged
        assert len(merged) == len(set(merged))
        held: list[int] = []
        for state in (board.landing, *board.trains.values()):
            held += sorted(queued(state))
        assert len(held) == len(set(held))  # one place for each entry
        assert not set(held) & set(merged)
        assert board.in_flight <= limits.ci_budget
