"""The clock tests set by hand: the simulator's :class:`ManualClock`, starting at ``T0``."""

from __future__ import annotations

from reviewbot.sim.clock import ManualClock

T0 = 1_800_000_000.0  # 2027-01-15: any fixed instant; tests move it on by hand


class FakeClock(ManualClock):
    def __init__(self, now: float = T0) -> None:
        super().__init__(now)
