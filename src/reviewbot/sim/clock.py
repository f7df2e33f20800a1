"""Time for the simulator: a callable returning epoch seconds, injectable so tests control it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from reviewbot.core.clock import Clock

__all__ = ["Clock", "ManualClock", "forge_time", "system_clock"]


def system_clock() -> float:
    return time.time()


class ManualClock:
    """A clock that only moves when told to (``advance``), for expiry tests."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def forge_time(epoch: float) -> str:
    """``2026-01-01T00:00:00Z``: the timestamp format both forges' JSON uses."""
    return datetime.fromtimestamp(int(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
