"""The merge queue's pure core: admission, keys, trains, cars, failures and landing."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.core.merge import PrFacts
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
)
from reviewbot.core.queue import (
    ROOT_KEY,
    SERIAL_KEY,
    KeyRules,
    LeaveEvent,
    admit,
    entry_keys,
    leave_reason,
)
from reviewbot.core.queue_cars import (
    BaseMoved,
    BuildCar,
    CancelCar,
    Car,
    CarBuilt,
    CarFailed,
    CarLimits,
    CarPassed,
    CarStatus,
    Eject,
    Enqueued,
    FastForward,
    LandingFacts,
    Left,
    batch_size,
    decide_landing,
    plan_cars,
)
from reviewbot.core.queue_train import TrainState, land, plan, split, step
from reviewbot.core.reasons import ReasonCode

HEAD = "a" * 40
OTHER = "b" * 40
PULL = PullRequestSnapshot(
    forge="gitea",
    owner="acme",
    name="api",
    number=7,
    state="open",
    merged=False,
    draft=False,
    head_sha=HEAD,
    base_ref="main",
    head_ref="feature",
    author="alice",
    mergeable=True,
)
FACTS = PrFacts(
    PULL,
    HEAD,
    (Review(1, "bob", ReviewState.APPROVED, HEAD),),
    RequiredChecks(("ci/test",)),
    (CheckResult("ci/test", CheckState.SUCCESS),),
    None,
)
FF = LandingFacts(base_is_ancestor_of_tested=True)


# Admission


def test_an_approved_green_open_pr_at_the_expected_head_is_admitted() -> None:
    assert admit(FACTS, (), expect_head_sha=HEAD).admitted
    assert admit(FACTS, ()).admitted  # no expectation given: the live head is judged


def test_a_head_other_than_the_expected_one_is_refused_head_moved() -> None:
    decision = admit(FACTS, (), expect_head_sha=OTHER)
    assert not decision.admitted
    assert decision.codes == (ReasonCode.HEAD_MOVED,)


def test_admission_refuses_with_every_merge_blocker() -> None:
    facts = replace(
        FACTS,
        pull=replace(PULL, draft=True),
        reviews=(
            Review(1, "alice", ReviewState.APPROVED, HEAD),
            Review(2, "carol", ReviewState.CHANGES_REQUESTED, HEAD),
        ),
        results=(CheckResult("ci/test", CheckState.FAILURE),),
    )
    codes = admit(facts, ()).codes
    assert set(codes) == {
        ReasonCode.NOT_MERGEABLE,  # a draft
        ReasonCode.NOT_APPROVED,  # only the author's own approval
        ReasonCode.CHANGES_REQUESTED,
        ReasonCode.CHECKS_NOT_GREEN,
    }


def test_an_approval_at_an_older_head_does_not_admit() -> None:
    facts = replace(FACTS, reviews=(Review(1, "bob", ReviewState.APPROVED, OTHER),))
    assert admit(facts, ()).codes == (ReasonCode.NOT_APPROVED,)


def test_each_leave_event_has_its_reason_code() -> None:
    assert leave_reason(LeaveEvent.PUSH) is ReasonCode.HEAD_MOVED
    assert leave_reason(LeaveEvent.CHANGES_REQUESTED) is ReasonCode.CHANGES_REQUESTED
    assert leave_reason(LeaveEvent.CLOSE) is ReasonCode.PR_CLOSED
    assert leave_reason(LeaveEvent.UNAPPROVAL) is ReasonCode.NOT_APPROVED


# Keys

RULES = KeyRules(
    groups=(("src/api/*", "api"), ("src/*", "core")),
    serial_paths=("poetry.lock", "CHANGELOG*"),
)


def test_keys_use_the_first_matching_group_else_the_top_level_directory() -> None:
    assert entry_keys(["src/api/views.py"], RULES) == {"api"}
    assert entry_keys(["src/db.py"], RULES) == {"core"}
    assert entry_keys(["docs/queue.md", "README.md"], RULES) == {"docs", ROOT_KEY}


def test_serial_paths_map_to_the_serial_key() -> None:
    assert entry_keys(["poetry.lock", "docs/a.md"], RULES) == {SERIAL_KEY, "docs"}
    assert entry_keys(["CHANGELOG.md"], RULES) == {SERIAL_KEY}


# Cars


def test_batch_size_grows_with_the_backlog_within_bounds() -> None:
    limits = CarLimits(per_train=4, global_budget=16, batch_max=5)
    assert [batch_size(n, limits) for n in (0, 1, 4, 5, 8, 9, 40)] == [1, 1, 1, 2, 2, 3, 5]


def test_each_car_sits_on_the_cars_ahead() -> None:
    limits = CarLimits(per_train=3, global_budget=10, batch_max=8)
    line = (Car(1, (10,)),)
    cars = plan_cars([11, 12, 13, 14], line, limits, in_flight_everywhere=1, next_id=2)
    assert [(c.id, c.batch, c.ahead) for c in cars] == [
        (2, (11, 12), (10,)),
        (3, (13, 14), (10, 11, 12)),
    ]


def test_a_car_built_into_the_last_free_slot_takes_a_batch_covering_the_backlog() -> None:
    limits = CarLimits(per_train=4, global_budget=16, batch_max=8)
    line = tuple(Car(i, (i,)) for i in range(1, 4))  # three cars in flight, one slot free
    (car,) = plan_cars([10, 11, 12, 13, 14, 15], line, limits, in_flight_everywhere=3, next_id=4)
    assert car.batch == (10, 11, 12, 13, 14, 15)
    assert batch_size(6, limits, slots=1) == 6 and batch_size(6, limits) == 2


def test_cars_in_flight_are_bounded_per_train_and_by_the_global_budget() -> None:
    limits = CarLimits(per_train=3, global_budget=4, batch_max=1)
    assert len(plan_cars(list(range(10)), (), limits, 0, 1)) == 3
    assert len(plan_cars(list(range(10)), (), limits, 3, 1)) == 1
    assert plan_cars(list(range(10)), (), limits, 4, 1) == ()


# Failures


def failed_line(batch: tuple[int, ...], behind: tuple[int, ...] = ()) -> TrainState:
    """A train whose first car holds ``batch`` and, if given, a second car ``behind``."""
    limits = CarLimits(per_train=2, global_budget=8, batch_max=len(batch))
    state = TrainState(waiting=batch + behind)
    state, _ = plan(state, replace(limits, per_train=1), 0)
    state, _ = plan(state, limits, state.in_flight)
    return state


def test_a_failed_batch_splits_into_parallel_halves_and_cars_behind_are_rebuilt() -> None:
    state = failed_line((1, 2, 3, 4), behind=(5,))
    assert [c.batch for c in state.line] == [(1, 2, 3, 4), (5,)]
    state, actions = step(state, CarFailed(1, "ci/test"))
    assert CancelCar(2) in actions
    built = [a.car for a in actions if isinstance(a, BuildCar)]
    assert [(c.batch, c.ahead, c.split_of) for c in built] == [((1, 2), (), 1), ((3, 4), (), 1)]
    assert state.line == () and state.waiting == (5,)  # rebuilt without the failed batch


def test_a_single_entry_that_fails_alone_is_ejected_with_evidence() -> None:
    state = failed_line((7,))
    state, actions = step(state, CarFailed(1, "ci/test", timed_out=True))
    (eject,) = actions
    assert isinstance(eject, Eject)
    assert eject.number == 7 and eject.code is ReasonCode.QUEUE_CULPRIT
    assert eject.evidence.failure is ReasonCode.CAR_TIMED_OUT
    assert (eject.evidence.check, eject.evidence.batch) == ("ci/test", (7,))
    assert 7 in state.gone and state.waiting == ()


def test_a_batch_that_fails_while_its_halves_pass_is_retried_once_then_ejected() -> None:
    state = failed_line((1, 2))
    state, _ = step(state, CarFailed(1, "ci/test"))
    state, _ = step(state, CarPassed(2))
    state, actions = step(state, CarPassed(3))
    assert actions == () and state.waiting == (1, 2) and state.strikes == {1, 2}
    state, _ = plan(state, CarLimits(per_train=1, batch_max=2), 0)
    car = state.line[0]
    state, _ = step(state, CarFailed(car.id, "ci/test"))
    state, _ = step(state, CarPassed(car.id + 1))
    state, actions = step(state, CarPassed(car.id + 2))
    assert {(a.number, a.code) for a in actions if isinstance(a, Eject)} == {
        (1, ReasonCode.QUEUE_FLAKY),
        (2, ReasonCode.QUEUE_FLAKY),
    }
    assert state.waiting == () and state.gone == {1, 2}


@given(st.lists(st.integers(), min_size=2, max_size=20))
def test_the_union_of_a_split_is_the_failed_batch(batch: list[int]) -> None:
    left, right = split(tuple(batch))
    assert left and right and left + right == tuple(batch)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 7))
def test_bisection_of_eight_finds_the_one_culprit_in_three_rounds(culprit: int) -> None:
    batch = tuple(range(8))
    state = failed_line(batch)
    state, actions = step(state, CarFailed(1, "ci/test"))
    ejected: list[Eject] = []
    rounds = 0
    while not ejected:
        rounds += 1
        assert rounds <= 3
        cars = [a.car for a in actions if isinstance(a, BuildCar)]
        assert cars
        answers: list[Eject | BuildCar | CancelCar | FastForward] = []
        for car in cars:  # every half runs in parallel; the culprit's half fails
            event = CarFailed(car.id, "ci/test") if culprit in car.batch else CarPassed(car.id)
            state, more = step(state, event)
            answers += more
        ejected = [a for a in answers if isinstance(a, Eject)]
        actions = tuple(answers)
    assert rounds == 3
    assert [(e.number, e.code) for e in ejected] == [(culprit, ReasonCode.QUEUE_CULPRIT)]
    assert sorted(state.waiting) == [n for n in batch if n != culprit]
    assert state.splits == () and state.bisections == ()


def test_an_entry_that_leaves_cancels_its_car_and_those_behind() -> None:
    state = failed_line((1,), behind=(2,))
    state, actions = step(state, Left(1, leave_reason(LeaveEvent.PUSH)))
    assert actions == (CancelCar(1), CancelCar(2))
    assert state.waiting == (2,) and state.line == ()


# Landing


def green(car: Car, sha: str) -> Car:
    return replace(car, tested_sha=sha, status=CarStatus.GREEN)


def test_only_the_first_green_fast_forward_car_lands_at_its_tested_sha() -> None:
    first, second = green(Car(1, (1,)), "t1"), green(Car(2, (2,), (1,)), "t2")
    line = (first, second)
    assert decide_landing(line, 1, FF).sha == "t1"
    refused = decide_landing(line, 2, FF).refusal
    assert refused is not None and refused.code is ReasonCode.NOT_FIRST_CAR
    testing = replace(first, status=CarStatus.TESTING)
    refused = decide_landing((testing, second), 1, FF).refusal
    assert refused is not None and refused.code is ReasonCode.CAR_NOT_GREEN
    refused = decide_landing(line, 1, LandingFacts(True, frozen=True)).refusal
    assert refused is not None and refused.code is ReasonCode.QUEUE_FROZEN
    refused = decide_landing(line, 1, LandingFacts(False)).refusal
    assert refused is not None and refused.code is ReasonCode.BASE_MOVED


def test_a_moved_base_rebuilds_every_car_of_the_line() -> None:
    state = failed_line((1,), behind=(2,))
    state, _ = step(state, CarBuilt(1, "t1"))
    state, _ = step(state, CarPassed(1))
    state, actions = land(state, 1, LandingFacts(False))
    assert actions == (CancelCar(1), CancelCar(2))
    assert state.line == () and state.waiting == (1, 2)


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["enqueue", "plan", "built", "pass", "fail", "land", "leave", "base", "green"]
        ),
        st.integers(0, 9),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_a_car_lands_only_first_as_a_fast_forward_at_its_tested_sha(
    ops: list[tuple[str, int, bool]],
) -> None:
    state = TrainState()
    limits = CarLimits(per_train=3, global_budget=5, batch_max=3)
    merged: list[int] = []
    for op, n, flag in ops:
        car_ids = [c.id for c in state.line + state.splits]
        car_id = car_ids[n % len(car_ids)] if car_ids else 0
        if op == "land" and state.line and n % 3 == 0:
            car_id = state.line[0].id  # often the one that may land
        if op == "enqueue":
            if n not in merged:  # admission refuses a merged PR
                state, actions = step(state, Enqueued(n, priority=flag))
        elif op == "plan":
            state, actions = plan(state, limits, state.in_flight)
        elif op == "green":  # a car of the line built and passed, so landings get tried
            pick = state.line[n % len(state.line)].id if state.line else 0
            state, _ = step(state, CarBuilt(pick, f"sha{pick}"))
            state, actions = step(state, CarPassed(pick))
        elif op == "built":
            state, actions = step(state, CarBuilt(car_id, f"sha{car_id}"))
        elif op == "pass":
            state, actions = step(state, CarPassed(car_id))
        elif op == "fail":
            state, actions = step(state, CarFailed(car_id, "ci/test", timed_out=flag))
        elif op == "leave":
            state, actions = step(state, Left(n, ReasonCode.HEAD_MOVED))
        elif op == "base":
            state, actions = step(state, BaseMoved())
        else:
            before = state.line
            state, actions = land(state, car_id, LandingFacts(base_is_ancestor_of_tested=flag))
            for action in actions:
                if isinstance(action, FastForward):
                    assert flag and before[0].id == car_id
                    assert before[0].status is CarStatus.GREEN
                    assert action.sha == before[0].tested_sha == f"sha{car_id}"
                    assert action.merged == before[0].batch
                    merged += action.merged
        # an entry is never in two places, and nothing merges twice
        placed = list(state.waiting) + [x for c in state.line + state.splits for x in c.batch]
        placed += [x for b in state.bisections for x in b.held]
        assert len(placed) == len(set(placed))
        assert not set(state.waiting) & state.gone
        # every car on the line sits exactly on the cars ahead of it
        for ahead, car in zip(state.line, state.line[1:], strict=False):
            assert car.ahead == ahead.entries
        assert {c.split_of for c in state.splits} <= {b.car_id for b in state.bisections}
        assert len(merged) == len(set(merged))
        assert not set(placed) & set(merged)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(list(CarStatus)), min_size=1, max_size=5),
    st.integers(0, 5),
    st.booleans(),
    st.booleans(),
)
def test_a_landing_decision_lands_only_the_first_green_fast_forward_car(
    statuses: list[CarStatus], pick: int, ancestor: bool, frozen: bool
) -> None:
    line = tuple(
        Car(i + 1, (i,), tuple(range(i)), f"t{i + 1}", status) for i, status in enumerate(statuses)
    )
    car_id = pick + 1  # may name no car at all
    landing = decide_landing(line, car_id, LandingFacts(ancestor, frozen))
    allowed = car_id == 1 and statuses[0] is CarStatus.GREEN and ancestor and not frozen
    assert landing.lands is allowed
    assert (landing.refusal is None) is allowed
    if landing.lands:
        assert landing.sha == line[0].tested_sha


def test_a_failure_ahead_cancels_the_bisection_of_a_car_behind_it() -> None:
    state = TrainState(line=(Car(1, (1,)), Car(2, (2, 3), (1,))), next_id=3)
    state, _ = step(state, CarFailed(2, "ci/test"))  # the car behind fails first
    assert [(c.batch, c.ahead) for c in state.splits] == [((2,), (1,)), ((3,), (1,))]
    state, actions = step(state, CarFailed(1, "ci/lint"))  # its halves sat on entry 1
    assert CancelCar(3) in actions and CancelCar(4) in actions
    assert [a.number for a in actions if isinstance(a, Eject)] == [1]
    assert state.splits == () and state.bisections == ()
    assert state.waiting == (2, 3)  # they wait again, to be rebuilt on the base alone


def test_enqueue_keeps_order_puts_a_hotfix_first_and_takes_a_leaver_back() -> None:
    state = TrainState()
    for event in (Enqueued(1), Enqueued(2), Enqueued(3, priority=True), Enqueued(1)):
        state, actions = step(state, event)
        assert actions == ()
    assert state.waiting == (3, 1, 2)
    state, _ = step(state, Left(2, ReasonCode.HEAD_MOVED))
    assert state.waiting == (3, 1) and 2 in state.gone
    state, _ = step(state, Enqueued(2))  # admitted again at its new head
    assert state.waiting == (3, 1, 2) and 2 not in state.gone


def test_a_car_lands_untested_on_a_moved_base_only_where_allowed_and_disjoint() -> None:
    from reviewbot.core.queue_cars import may_land_rebased

    assert may_land_rebased({"docs"}, {"lib"}, allowed=True)
    assert not may_land_rebased({"docs"}, {"lib"}, allowed=False)  # the default: retested
    assert not may_land_rebased({"docs", "lib"}, {"lib"}, allowed=True)
    assert not may_land_rebased({"docs"}, {SERIAL_KEY}, allowed=True)
    assert not may_land_rebased({SERIAL_KEY}, {"lib"}, allowed=True)
    assert not may_land_rebased({"docs"}, set(), allowed=True)  # nothing known landed
