"""Pytest fixtures for the forge simulator: every request a test makes is checked against the
official API descriptions when the test ends, so neither the simulator nor a client can drift.

Use ``sim`` (a fresh :class:`Simulator`) and ``sim_server`` (it served over loopback HTTP). A test
that sends invalid requests on purpose marks itself ``@pytest.mark.sim_invalid_requests``: its
requests are then not validated, the simulator's answers still are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.support.openapi import ForgeSpecs


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sim_invalid_requests: the test sends invalid forge requests on purpose"
    )


@pytest.fixture(scope="session")
def forge_specs(reference_dir: Path) -> ForgeSpecs:
    return ForgeSpecs(reference_dir)


@pytest.fixture
def sim(request: pytest.FixtureRequest, forge_specs: ForgeSpecs) -> Iterator[Simulator]:
    simulator = Simulator()
    yield simulator
    simulator.close()
    check_requests = request.node.get_closest_marker("sim_invalid_requests") is None
    problems = forge_specs.check_records(simulator.requests, requests=check_requests)
    if problems:
        pytest.fail("requests/answers that break the API descriptions:\n" + "\n".join(problems))


@pytest.fixture
async def sim_server(sim: Simulator) -> AsyncIterator[SimServer]:
    async with SimServer(sim) as server:
        yield server
