"""Where a PR stands in its merge queue, and roughly when it lands: for the faces.

The PR state comment, the status page and the status answers show a queued PR's *spot*: its
train, its position among the train's queued entries (priority entries first, then in
admission order), the car holding it and that car's status, and an estimate of the time
until it lands. The estimate is rough by design: it assumes every car passes and takes the
queue's typical CI duration (:func:`typical_ci_s`, the median of its recently finished cars).

- In a car: what is left of that car's CI, or of a car ahead of it in its train if one ends
  later (a car lands only after the cars ahead).
- Waiting: one CI duration per round of ``cars_per_train`` cars ahead of it, after the first
  of the train's cars in flight ends when every slot is taken.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Recently finished cars that make the typical CI duration.
RECENT_CARS = 20


@dataclass(frozen=True)
class SpotEntry:
    """A queued entry: its PR, its train and whether it is a priority entry."""

    number: int
    train: str
    priority: bool = False


@dataclass(frozen=True)
class SpotCar:
    """A car in flight: its train, id, the PRs it adds, status and when it was pushed."""

    train: str
    car: int
    batch: tuple[int, ...]
    status: str  # building, testing, green
    started_at: float


@dataclass(frozen=True)
class QueueSpot:
    number: int
    train: str
    position: int  # 1-based among the train's queued entries
    of: int
    car: int | None  # the car whose batch holds it; None while it waits
    car_status: str | None
    eta_s: float | None  # None without a typical CI duration

    def line(self) -> str:
        """One line for people: ``position 2 of 5 in train 3, car 4 (testing), about 12 min``."""
        text = f"position {self.position} of {self.of} in train {self.train}"
        text += f", car {self.car} ({self.car_status})" if self.car is not None else ", waiting"
        if self.eta_s is not None:
            text += f", about {max(1, round(self.eta_s / 60))} min"
        return text


def typical_ci_s(durations: Sequence[float]) -> float | None:
    """The median of the newest :data:`RECENT_CARS` finished cars' CI durations (seconds,
    oldest first); None when no car has finished yet."""
    recent = [d for d in durations[-RECENT_CARS:] if d >= 0]
    return statistics.median(recent) if recent else None


def queue_spot(
    number: int,
    entries: Sequence[SpotEntry],
    cars: Sequence[SpotCar],
    *,
    now: float,
    ci_s: float | None,
    cars_per_train: int,
) -> QueueSpot | None:
    """The spot of ``number`` among the queued ``entries`` (admission order) and the cars in
    flight (oldest first); None when it is not queued."""
    mine = next((e for e in entries if e.number == number), None)
    if mine is None:
        return None
    train = [e for e in entries if e.train == mine.train]
    order = [e for e in train if e.priority] + [e for e in train if not e.priority]
    position = next(i for i, e in enumerate(order) if e.number == number) + 1
    line = [c for c in cars if c.train == mine.train]
    car = next((c for c in line if number in c.batch), None)

    def left(c: SpotCar) -> float:
        if c.status == "green" or ci_s is None:
            return 0.0
        return max(0.0, ci_s - (now - c.started_at))

    eta: float | None = None
    if car is not None:
        ahead = line[: line.index(car) + 1]
        eta = max(left(c) for c in ahead) if ci_s is not None else None
    elif ci_s is not None:
        in_cars = {n for c in line for n in c.batch}
        waiting_ahead = sum(1 for e in order[: position - 1] if e.number not in in_cars)
        slots = max(1, cars_per_train)
        first_slot = min((left(c) for c in line), default=0.0) if len(line) >= slots else 0.0
        eta = first_slot + ci_s * (1 + waiting_ahead // slots)
    return QueueSpot(
        number,
        mine.train,
        position,
        len(order),
        car.car if car else None,
        car.status if car else None,
        eta,
    )
