"""Fixtures the integration tests share; a test file defines its own only where it differs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import World, bot_world
from tests.integration.server_support import Running, make_settings, running_server


@pytest.fixture
async def world(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> AsyncIterator[World]:
    """The bot serving on loopback against the simulator, with a merger's setup."""
    async with bot_world(tmp_path, sim, sim_server) as w:
        yield w


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    """The real server with no forge configured: the API, leases and the tools alone."""
    async with running_server(make_settings(tmp_path / "data"), forges={}) as running:
        yield running
