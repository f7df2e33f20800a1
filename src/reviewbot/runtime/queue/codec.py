"""A train's machine state as JSON, for the store (``queue_trains.state``) and back."""

from __future__ import annotations

from typing import Any

from reviewbot.core.queue_cars import Car, CarStatus
from reviewbot.core.queue_train import Bisection, TrainState


def _car(car: Car) -> dict[str, Any]:
    return {
        "id": car.id,
        "batch": list(car.batch),
        "ahead": list(car.ahead),
        "tested_sha": car.tested_sha,
        "status": car.status.value,
        "split_of": car.split_of,
    }


def _car_back(data: dict[str, Any]) -> Car:
    return Car(
        id=int(data["id"]),
        batch=tuple(int(n) for n in data["batch"]),
        ahead=tuple(int(n) for n in data["ahead"]),
        tested_sha=data.get("tested_sha"),
        status=CarStatus(data["status"]),
        split_of=data.get("split_of"),
    )


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in values)


def state_json(state: TrainState) -> dict[str, Any]:
    return {
        "waiting": list(state.waiting),
        "line": [_car(c) for c in state.line],
        "splits": [_car(c) for c in state.splits],
        "bisections": [
            {
                "car_id": b.car_id,
                "batch": list(b.batch),
                "ahead": list(b.ahead),
                "check": b.check,
                "halves": list(b.halves),
                "passed": list(b.passed),
                "failed": list(b.failed),
                "held": list(b.held),
            }
            for b in state.bisections
        ],
        "strikes": sorted(state.strikes),
        "gone": sorted(state.gone),
        "next_id": state.next_id,
    }


def state_back(data: dict[str, Any]) -> TrainState:
    halves: list[tuple[int, int]] = [
        (int(b["halves"][0]), int(b["halves"][1])) for b in data.get("bisections", ())
    ]
    return TrainState(
        waiting=_ints(data.get("waiting", ())),
        line=tuple(_car_back(c) for c in data.get("line", ())),
        splits=tuple(_car_back(c) for c in data.get("splits", ())),
        bisections=tuple(
            Bisection(
                car_id=int(b["car_id"]),
                batch=_ints(b["batch"]),
                ahead=_ints(b["ahead"]),
                check=str(b["check"]),
                halves=pair,
                passed=_ints(b["passed"]),
                failed=_ints(b["failed"]),
                held=_ints(b["held"]),
            )
            for b, pair in zip(data.get("bisections", ()), halves, strict=True)
        ),
        strikes=frozenset(_ints(data.get("strikes", ()))),
        gone=frozenset(_ints(data.get("gone", ()))),
        next_id=int(data.get("next_id", 1)),
    )
