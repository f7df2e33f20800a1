"""One train of the merge queue as a state machine: ``(state, event) -> (state, actions)``.

The runtime performs the actions (build a car, cancel one, eject an entry, fast-forward the
base) and reports what happened as events; nothing here reads a clock or a forge.

- :func:`plan` fills the train's free slots with new cars
  (:func:`~reviewbot.core.queue_cars.plan_cars`).
- :func:`step` applies one event. A failed car leaves the line with every car behind it (they
  are cancelled and their entries wait again, first, so they are rebuilt without the failed
  batch). A failed batch of more than one entry is split into halves tested in parallel on
  the same cars ahead (bisection); a car of one entry that fails is its culprit, ejected with
  the failing check and the car's composition. When both halves of a failed batch pass, the
  failure is a suspected flake: its entries wait again once (a strike each) and are ejected
  ``queue_flaky`` when that happens a second time. A timeout is a failure whose evidence says
  ``car_timed_out``.
- :func:`land` lands the first car when :func:`~reviewbot.core.queue_cars.decide_landing`
  allows it: the base moves to exactly the car's tested commit.

Entries that were ejected, left or landed are remembered in ``gone`` and wait again only when
enqueued anew. The events and actions are in :mod:`reviewbot.core.queue_cars`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from reviewbot.core.queue_cars import (
    Action,
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
    Event,
    Evidence,
    FastForward,
    LandingFacts,
    Left,
    decide_landing,
    plan_cars,
)
from reviewbot.core.reasons import ReasonCode


@dataclass(frozen=True)
class Bisection:
    """A failed car's batch under test in two halves (the cars ``halves``); ``held`` are the
    entries of halves that passed, kept until the other half answers."""

    car_id: int
    batch: tuple[int, ...]
    ahead: tuple[int, ...]
    check: str
    halves: tuple[int, int]
    passed: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    held: tuple[int, ...] = ()


@dataclass(frozen=True)
class TrainState:
    waiting: tuple[int, ...] = ()  # in no car yet, in train order
    line: tuple[Car, ...] = ()  # cars that may land, in order
    splits: tuple[Car, ...] = ()  # bisection cars; they never land
    bisections: tuple[Bisection, ...] = ()
    strikes: frozenset[int] = frozenset()  # retried once as a suspected flake
    gone: frozenset[int] = frozenset()  # ejected, left or merged
    next_id: int = 1

    @property
    def in_flight(self) -> int:
        return len(self.line) + len(self.splits)


def _first(state: TrainState, numbers: Iterable[int]) -> TrainState:
    """``numbers`` wait again at the head of the train, once each, unless gone."""
    back = tuple(dict.fromkeys(n for n in numbers if n not in state.gone))
    rest = tuple(n for n in state.waiting if n not in back)
    return replace(state, waiting=back + rest)


def _cut_line(state: TrainState, index: int) -> tuple[TrainState, list[Action]]:
    """Take the line's cars from ``index`` on off the line; those behind ``index`` are
    cancelled and their batches wait again, first (the caller handles the car at ``index``)."""
    behind = state.line[index + 1 :]
    removed = {n for car in state.line[index:] for n in car.batch}
    state = replace(state, line=state.line[:index])
    state = _first(state, (n for car in behind for n in car.batch))
    state, dropped = _drop_stale(state, removed)
    return state, [*(CancelCar(car.id) for car in behind), *dropped]


def _drop_stale(state: TrainState, removed: set[int]) -> tuple[TrainState, list[Action]]:
    """Bisections whose cars sit on an entry taken off the line test commits that will never
    land: their cars are cancelled and their entries wait again, first."""
    stale = {b.car_id for b in state.bisections if removed & set(b.ahead)}
    if not stale:
        return state, []
    cancelled = [c for c in state.splits if c.split_of in stale]
    back = [n for b in state.bisections if b.car_id in stale for n in b.batch]
    state = replace(
        state,
        splits=tuple(c for c in state.splits if c.split_of not in stale),
        bisections=tuple(b for b in state.bisections if b.car_id not in stale),
    )
    return _first(state, back), [CancelCar(c.id) for c in cancelled]


def _rebuild_from(state: TrainState, index: int) -> tuple[TrainState, tuple[Action, ...]]:
    """Cancel the line's cars from ``index`` on; their entries wait again, first, in order."""
    car = state.line[index]
    state, actions = _cut_line(state, index)
    state = _first(state, car.batch + state.waiting)
    return state, (CancelCar(car.id), *actions)


def plan(
    state: TrainState, limits: CarLimits, in_flight_everywhere: int
) -> tuple[TrainState, tuple[Action, ...]]:
    """Fill free slots with new cars on the line (see :func:`plan_cars`)."""
    cars = plan_cars(state.waiting, state.line, limits, in_flight_everywhere, state.next_id)
    taken = {n for car in cars for n in car.batch}
    state = replace(
        state,
        waiting=tuple(n for n in state.waiting if n not in taken),
        line=state.line + cars,
        next_id=state.next_id + len(cars),
    )
    return state, tuple(BuildCar(car) for car in cars)


def queued(state: TrainState) -> set[int]:
    """Every entry the train holds: waiting, in a car, or held by a bisection."""
    cars = state.line + state.splits
    held = (n for b in state.bisections for n in b.held)
    return {*state.waiting, *(n for c in cars for n in c.batch), *held}


def _car(state: TrainState, car_id: int) -> Car | None:
    return next((c for c in state.line + state.splits if c.id == car_id), None)


def _with_car(state: TrainState, car: Car) -> TrainState:
    return replace(
        state,
        line=tuple(car if c.id == car.id else c for c in state.line),
        splits=tuple(car if c.id == car.id else c for c in state.splits),
    )


def step(state: TrainState, event: Event) -> tuple[TrainState, tuple[Action, ...]]:
    """Apply one event; unknown cars (already cancelled) change nothing."""
    if isinstance(event, Enqueued):
        # An entry still in some car is taken back once that car has answered.
        if event.number in queued(state):
            return state, ()
        # A PR that left or was ejected may come back (admitted again at its new head).
        state = replace(
            state, gone=state.gone - {event.number}, strikes=state.strikes - {event.number}
        )
        waiting = (
            (event.number, *state.waiting) if event.priority else (*state.waiting, event.number)
        )
        return replace(state, waiting=waiting), ()
    if isinstance(event, Left):
        return _leave(state, event.number)
    if isinstance(event, BaseMoved):
        return _rebuild_from(state, 0) if state.line else (state, ())
    car = _car(state, event.car_id)
    if car is None:
        return state, ()
    if isinstance(event, CarBuilt):
        return _with_car(state, replace(car, tested_sha=event.sha, status=CarStatus.TESTING)), ()
    if isinstance(event, CarPassed):
        if car.split_of is None:
            return _with_car(state, replace(car, status=CarStatus.GREEN)), ()
        state = replace(state, splits=tuple(c for c in state.splits if c.id != car.id))
        return _half_answered(state, car, passed=True)
    return _failed(state, car, event)


def _leave(state: TrainState, number: int) -> tuple[TrainState, tuple[Action, ...]]:
    """``number`` leaves: cars on the line containing it are cancelled from the first one."""
    state = replace(
        state, gone=state.gone | {number}, waiting=tuple(n for n in state.waiting if n != number)
    )
    index = next((i for i, c in enumerate(state.line) if number in c.entries), None)
    if index is None:
        return state, ()
    return _rebuild_from(state, index)


def _failed(state: TrainState, car: Car, event: CarFailed) -> tuple[TrainState, tuple[Action, ...]]:
    """A car failed: eject its lone entry, or bisect its batch; a line car takes the cars
    behind it off the line, a half reports to its bisection."""
    actions: list[Action] = []
    if car.split_of is None:
        index = state.line.index(car)
        state, actions = _cut_line(state, index)
    else:
        state = replace(state, splits=tuple(c for c in state.splits if c.id != car.id))
    failure = ReasonCode.CAR_TIMED_OUT if event.timed_out else ReasonCode.CHECKS_FAILED
    evidence = Evidence(failure, event.check, car.id, car.batch, car.ahead)
    batch = tuple(n for n in car.batch if n not in state.gone)
    if len(batch) == 1:
        actions.append(Eject(batch[0], ReasonCode.QUEUE_CULPRIT, evidence))
        state = replace(state, gone=state.gone | {batch[0]})
    elif batch:
        left, right = split(batch)
        halves = (
            Car(state.next_id, left, car.ahead, split_of=car.id),
            Car(state.next_id + 1, right, car.ahead, split_of=car.id),
        )
        record = Bisection(car.id, batch, car.ahead, event.check, (halves[0].id, halves[1].id))
        state = replace(
            state,
            splits=state.splits + halves,
            bisections=(*state.bisections, record),
            next_id=state.next_id + 2,
        )
        actions += [BuildCar(h) for h in halves]
    if car.split_of is not None:
        state, more = _half_answered(state, car, passed=False)
        actions += more
    return state, tuple(actions)


def split(batch: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two halves of a failed batch of at least two entries, in order (the first one larger
    when the size is odd); together they are exactly the batch."""
    if len(batch) < 2:
        raise ValueError("only a batch of two or more entries splits")
    middle = (len(batch) + 1) // 2
    return batch[:middle], batch[middle:]


def _half_answered(
    state: TrainState, half: Car, *, passed: bool
) -> tuple[TrainState, tuple[Action, ...]]:
    """Record a half's answer in its bisection; settle the bisection once both answered."""
    record = next((b for b in state.bisections if half.id in b.halves), None)
    if record is None:
        return state, ()
    if passed:
        record = replace(record, passed=(*record.passed, half.id), held=record.held + half.batch)
    else:
        record = replace(record, failed=(*record.failed, half.id))
    others = tuple(b for b in state.bisections if b.car_id != record.car_id)
    if len(record.passed) + len(record.failed) < 2:
        return replace(state, bisections=(*others, record)), ()
    state = replace(state, bisections=others)
    if record.failed:
        return _first(state, record.held + state.waiting), ()
    # Each half passed alone: the batch's failure is a suspected flake.
    actions: list[Action] = []
    evidence = Evidence(
        ReasonCode.CHECKS_FAILED, record.check, record.car_id, record.batch, record.ahead
    )
    again = [n for n in record.batch if n not in state.strikes]
    for number in record.batch:
        if number in state.strikes and number not in state.gone:
            actions.append(Eject(number, ReasonCode.QUEUE_FLAKY, evidence))
            state = replace(state, gone=state.gone | {number})
    state = replace(state, strikes=state.strikes | set(again))
    return _first(state, (*again, *state.waiting)), tuple(actions)


def land(
    state: TrainState, car_id: int, facts: LandingFacts
) -> tuple[TrainState, tuple[Action, ...]]:
    """Land car ``car_id`` when :func:`decide_landing` allows it: the base fast-forwards to
    exactly its tested commit and its batch is merged. Otherwise nothing changes, except
    that a moved base makes every car on the line stale (they are rebuilt)."""
    landing = decide_landing(state.line, car_id, facts)
    if landing.sha is None:
        if landing.refusal is not None and landing.refusal.code is ReasonCode.BASE_MOVED:
            return step(state, BaseMoved())
        return state, ()
    car = state.line[0]
    state = replace(state, line=state.line[1:], gone=state.gone | set(car.batch))
    return state, (FastForward(landing.sha, car.batch),)


def release(state: TrainState, numbers: Iterable[int]) -> TrainState:
    """``numbers`` move on from this train (they passed here; the landing line takes them,
    :mod:`reviewbot.core.queue_board`): they no longer wait, nor are held by a bisection, and
    are gone from the train. Cars already built with them are left alone."""
    out = set(numbers)
    return replace(
        state,
        waiting=tuple(n for n in state.waiting if n not in out),
        bisections=tuple(
            replace(b, held=tuple(n for n in b.held if n not in out)) for b in state.bisections
        ),
        gone=state.gone | out,
    )
