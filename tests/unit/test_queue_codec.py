"""A train's machine state survives the store: what a restarted replica reads back is the
state it wrote, bisections, strikes and all, so the train resumes where it stopped."""

from __future__ import annotations

import json

from reviewbot.core.queue_cars import CarBuilt, CarFailed, CarLimits, CarPassed, Enqueued
from reviewbot.core.queue_train import TrainState, plan, step
from reviewbot.runtime.queue.codec import state_back, state_json


def test_a_train_in_the_middle_of_a_bisection_round_trips() -> None:
    state = TrainState()
    for number in (7, 8, 9, 10):
        state, _ = step(state, Enqueued(number, priority=number == 9))
    state, _ = plan(state, CarLimits(per_train=1, batch_max=8), 0)
    (car,) = state.line
    state, _ = step(state, CarBuilt(car.id, "a" * 40))
    state, _ = step(state, CarFailed(car.id, "ci/test"))  # bisected into two halves
    half = state.splits[0]
    state, _ = step(state, CarBuilt(half.id, "b" * 40))
    state, _ = step(state, CarPassed(half.id))
    assert state.bisections and state.splits

    stored = json.loads(json.dumps(state_json(state)))  # as the store keeps it
    assert state_back(stored) == state


def test_an_empty_train_round_trips() -> None:
    assert state_back(state_json(TrainState())) == TrainState()
