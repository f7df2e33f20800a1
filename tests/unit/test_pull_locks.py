"""PullLocks: one lock per PR, kept only while someone holds or waits on it."""

from __future__ import annotations

import asyncio

from reviewbot.runtime.pull_locks import PullLocks


async def test_an_entry_lives_while_held_or_awaited_and_goes_after() -> None:
    locks = PullLocks()
    order: list[str] = []
    holding = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with locks.hold("github", "acme/api", 1):
            order.append("first")
            holding.set()
            await release.wait()

    async def second() -> None:
        async with locks.hold("github", "acme/api", 1):
            order.append("second")

    one = asyncio.create_task(first())
    await holding.wait()
    two = asyncio.create_task(second())
    await asyncio.sleep(0)  # the second one now waits on the same lock
    assert len(locks) == 1 and order == ["first"]
    release.set()
    await asyncio.gather(one, two)
    assert order == ["first", "second"]
    assert len(locks) == 0


async def test_many_pulls_leave_an_empty_table() -> None:
    locks = PullLocks()

    async def use(number: int) -> None:
        async with locks.hold("github", "acme/api", number):
            await asyncio.sleep(0)

    await asyncio.gather(*(use(n) for n in range(50)))
    assert len(locks) == 0


async def test_an_error_inside_releases_the_entry() -> None:
    locks = PullLocks()
    try:
        async with locks.hold("github", "acme/api", 1):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert len(locks) == 0
