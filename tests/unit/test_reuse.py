"""Reused: callers that arrive while an answer is computed share it; ``ttl_s`` reuses it."""

from __future__ import annotations

import asyncio

import pytest

from reviewbot.runtime.reuse import Reused


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_callers_share_one_computation_and_a_failure_is_not_kept() -> None:
    clock = Clock()
    reused: Reused[int] = Reused(clock)
    gate = asyncio.Event()
    calls: list[int] = []

    async def compute() -> int:
        calls.append(1)
        await gate.wait()
        return len(calls)

    waiting = [asyncio.create_task(reused.get("k", compute)) for _ in range(5)]
    await asyncio.sleep(0)
    waiting[0].cancel()  # one caller leaving does not cancel the others' answer
    gate.set()
    assert await asyncio.gather(*waiting[1:]) == [1, 1, 1, 1]
    assert await reused.get("k", compute) == 2  # ttl 0: a later caller computes again

    async def broken() -> int:
        raise RuntimeError("forge down")

    with pytest.raises(RuntimeError):
        await reused.get("k", broken)
    assert await reused.get("k", compute) == 3


async def test_an_answer_is_reused_for_its_ttl() -> None:
    clock = Clock()
    reused: Reused[float] = Reused(clock, ttl_s=10.0)

    async def compute() -> float:
        return clock.now

    assert await reused.get("k", compute) == 100.0
    clock.now = 109.0
    assert await reused.get("k", compute) == 100.0
    clock.now = 110.0
    assert await reused.get("k", compute) == 110.0
    clock.now = 50.0  # a clock that went back: never trusted as fresh
    assert await reused.get("k", compute) == 50.0
