"""A queued PR's spot for the faces (the PR state comment, the status answers), read from the
queue's store: :func:`reviewbot.core.queue_spot.queue_spot` over its entries and cars in
flight, with the queue's typical CI duration from its recently finished cars."""

from __future__ import annotations

from reviewbot.config import QueueRules
from reviewbot.core.queue_spot import (
    RECENT_CARS,
    QueueSpot,
    SpotCar,
    SpotEntry,
    queue_spot,
    typical_ci_s,
)
from reviewbot.store.queue import QueueStore


def queue_spots(
    store: QueueStore, rules: QueueRules, forge: str, repo: str, base: str, now: float
) -> dict[int, QueueSpot]:
    """The spot of every PR queued on ``base``, by number."""
    entries = store.entries(forge, repo, base)
    cars = store.cars(forge, repo, base)
    durations = store.finished_durations(forge, repo, base, limit=RECENT_CARS)
    listed = [SpotEntry(e.number, e.train, e.priority) for e in entries]
    in_flight = [SpotCar(c.train, c.car, c.batch, c.status, c.created_at) for c in cars]
    ci_s = typical_ci_s(durations)
    spots = {
        e.number: queue_spot(
            e.number,
            listed,
            in_flight,
            now=now,
            ci_s=ci_s,
            cars_per_train=rules.cars_per_train,
        )
        for e in entries
    }
    return {number: spot for number, spot in spots.items() if spot is not None}


def queue_line(
    store: QueueStore, rules: QueueRules, forge: str, repo: str, number: int, now: float
) -> str:
    """``position 2 of 5 in train 3, car 4 (testing), about 12 min``; empty when not queued."""
    entry = store.entry_of(forge, repo, number)
    if entry is None:
        return ""
    spot = queue_spots(store, rules, forge, repo, entry.base, now).get(number)
    return spot.line() if spot is not None else ""
