"""Fixtures of the simulator's git tests: a git-backed simulator on loopback, a webhook
receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from reviewbot.sim import ManualClock, SimServer, Simulator
from tests.integration.sim.git_support import Hooks


@pytest.fixture
async def gsim() -> AsyncIterator[Simulator]:
    simulator = Simulator(clock=ManualClock(), git=True)
    simulator.version = "1.26.0"  # Gitea with the branch update (go-gitea/gitea#35951)
    yield simulator
    await simulator.settle()
    simulator.close()


@pytest.fixture
async def gserver(gsim: Simulator) -> AsyncIterator[SimServer]:
    async with SimServer(gsim) as server:
        yield server


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    box = Hooks()

    async def hook(request: web.Request) -> web.Response:
        box.received.append((dict(request.headers), await request.json()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    box.url = f"http://127.0.0.1:{port}/hook"
    yield box
    await runner.cleanup()
