"""The merge queue's cars: what to build next in a train, and when a car may land.

A car tests the base plus the cars ahead of it in its train plus its own batch of entries.
:func:`plan_cars` decides the next cars of one train; :func:`decide_landing` decides whether
a tested car may land. A car lands only as a fast-forward of the base to its tested commit,
so the merged SHA is always the tested SHA. Failures and bisection live in
:mod:`reviewbot.core.queue_train`; the events it takes and the actions it asks for are here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from reviewbot.core.merge import Refusal
from reviewbot.core.queue import SERIAL_KEY
from reviewbot.core.reasons import ReasonCode


class CarStatus(StrEnum):
    BUILDING = "building"  # asked for; the merge commit is not pushed yet
    TESTING = "testing"  # pushed at ``tested_sha``; CI runs
    GREEN = "green"  # CI passed at ``tested_sha``


@dataclass(frozen=True)
class Car:
    """One car: ``batch`` (PR numbers, in train order) on top of ``ahead`` (the entries of
    the cars ahead of it). ``split_of`` is the failed car this one halves (bisection), whose
    cars are off the train's line and never land."""

    id: int
    batch: tuple[int, ...]
    ahead: tuple[int, ...] = ()
    tested_sha: str | None = None
    status: CarStatus = CarStatus.BUILDING
    split_of: int | None = None

    @property
    def entries(self) -> tuple[int, ...]:
        """Every entry the car's commit contains: those ahead, then its batch."""
        return self.ahead + self.batch


@dataclass(frozen=True)
class CarLimits:
    """``per_train``: cars in flight in one train; ``global_budget``: cars in flight over
    every train (the CI budget); ``batch_max``: entries in one car."""

    per_train: int = 4
    global_budget: int = 16
    batch_max: int = 8

    def __post_init__(self) -> None:
        if min(self.per_train, self.global_budget, self.batch_max) < 1:
            raise ValueError("car limits must be at least 1")


def batch_size(backlog: int, limits: CarLimits, slots: int | None = None) -> int:
    """Entries per car for a backlog of waiting entries: enough that ``slots`` new cars
    (default: a whole train's, ``per_train``) cover the backlog (ceil(backlog / slots)), at
    least 1, at most batch_max."""
    cars = limits.per_train if slots is None else max(1, slots)
    return max(1, min(limits.batch_max, math.ceil(backlog / cars)))


def plan_cars(
    waiting: Sequence[int],
    line: Sequence[Car],
    limits: CarLimits,
    in_flight_everywhere: int,
    next_id: int,
) -> tuple[Car, ...]:
    """The next cars of one train: ``waiting`` are its entries in no car yet (train order),
    ``line`` its cars in flight in order, ``in_flight_everywhere`` the cars in flight over
    every train (this one's included). Each new car sits on the line's entries and the new
    cars before it; new cars are numbered from ``next_id``. Empty when a limit is reached."""
    slots = min(limits.per_train - len(line), limits.global_budget - in_flight_everywhere)
    size = batch_size(len(waiting), limits, slots)
    ahead = line[-1].entries if line else ()
    cars: list[Car] = []
    rest = tuple(waiting)
    while rest and len(cars) < slots:
        batch, rest = rest[:size], rest[size:]
        cars.append(Car(next_id + len(cars), batch, ahead))
        ahead = ahead + batch
    return tuple(cars)


@dataclass(frozen=True)
class LandingFacts:
    """What the caller read just before landing: whether the base's current commit is an
    ancestor of the car's tested commit (a fast-forward), and whether a freeze window holds."""

    base_is_ancestor_of_tested: bool
    frozen: bool = False


@dataclass(frozen=True)
class Landing:
    """Fast-forward the base to ``sha`` (the car's tested commit), or why not."""

    sha: str | None = None
    refusal: Refusal | None = None

    @property
    def lands(self) -> bool:
        return self.sha is not None


def decide_landing(line: Sequence[Car], car_id: int, facts: LandingFacts) -> Landing:
    """May car ``car_id`` of a train whose cars in flight are ``line`` land now? Only the
    first car, green at its tested commit, outside a freeze window, and a fast-forward of the
    base; a car whose base moved must be rebuilt (``base_moved``)."""
    car = next((c for c in line if c.id == car_id), None)
    if car is None or car.split_of is not None or line[0].id != car_id:
        return Landing(refusal=Refusal(ReasonCode.NOT_FIRST_CAR, f"car {car_id} is not first"))
    if car.status is not CarStatus.GREEN or car.tested_sha is None:
        return Landing(
            refusal=Refusal(ReasonCode.CAR_NOT_GREEN, f"car {car_id} is {car.status.value}")
        )
    if facts.frozen:
        return Landing(refusal=Refusal(ReasonCode.QUEUE_FROZEN, "a freeze window holds"))
    if not facts.base_is_ancestor_of_tested:
        return Landing(
            refusal=Refusal(
                ReasonCode.BASE_MOVED,
                f"the base is not an ancestor of {car.tested_sha}; rebuild the train's cars",
            )
        )
    return Landing(sha=car.tested_sha)


def may_land_rebased(car_keys: Iterable[str], landed_keys: Iterable[str], *, allowed: bool) -> bool:
    """When the base moved under a green car (another train landed), may the car land as a
    merge of the new base and its tested commit, without a new test? Only where the rules
    allow it, and only when nothing that landed since its base touches a key of the car's
    train (:data:`~reviewbot.core.queue.SERIAL_KEY` touches every key). Otherwise it is
    rebuilt on the new base and tested again (``base_moved``). A car landed this way is the
    one landing whose merged commit is not its tested commit; both are recorded."""
    car, landed = set(car_keys), set(landed_keys)
    if not allowed or not car or not landed:
        return False
    if SERIAL_KEY in car or SERIAL_KEY in landed:
        return False
    return not car & landed


# Events the runtime reports.
@dataclass(frozen=True)
class Enqueued:
    number: int
    priority: bool = False  # a hotfix waits at the head of the train


@dataclass(frozen=True)
class CarBuilt:
    car_id: int
    sha: str  # the commit pushed for the car; the one CI tests and the base may move to


@dataclass(frozen=True)
class CarPassed:
    car_id: int


@dataclass(frozen=True)
class CarFailed:
    car_id: int
    check: str  # the failing required check, or the one that timed out
    timed_out: bool = False


@dataclass(frozen=True)
class Left:
    number: int
    reason: ReasonCode  # see :func:`reviewbot.core.queue.leave_reason`


@dataclass(frozen=True)
class BaseMoved:
    """The base moved other than by a landing of this train: every car on the line is stale."""


Event = Enqueued | CarBuilt | CarPassed | CarFailed | Left | BaseMoved


# Actions for the runtime.
@dataclass(frozen=True)
class BuildCar:
    car: Car


@dataclass(frozen=True)
class CancelCar:
    car_id: int


@dataclass(frozen=True)
class Evidence:
    failure: ReasonCode  # checks_failed, or car_timed_out
    check: str
    car_id: int
    batch: tuple[int, ...]
    ahead: tuple[int, ...]


@dataclass(frozen=True)
class Eject:
    number: int
    code: ReasonCode  # queue_culprit or queue_flaky
    evidence: Evidence


@dataclass(frozen=True)
class FastForward:
    """Move the base to ``sha`` only as a fast-forward; ``merged`` are the PRs it lands."""

    sha: str
    merged: tuple[int, ...]


Action = BuildCar | CancelCar | Eject | FastForward
