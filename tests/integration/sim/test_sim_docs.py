"""docs/simulator.md: every ``/_sim`` route has an example, and the examples work as written.

The ``curl`` lines of the page run in order against a real simulator, ``$SIM`` being its
address, ``$BOT`` a receiver standing in for the bot, ``$APP_ID`` the id the ``apps``
example answered and ``$INSTALLATION_ID`` the ``installations`` one; each must succeed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from reviewbot.sim import SimServer, Simulator
from reviewbot.sim.control import POST_ACTIONS
from tests.integration.curl_support import curl
from tests.support.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "simulator.md"


def examples() -> list[str]:
    """The ``curl`` lines of the page's ``sh`` blocks, after its reference section starts."""
    text = PAGE.read_text()
    reference = text[text.index("## An empty simulator") :]
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", reference, re.S):
        lines += [line for line in block.splitlines() if line.startswith("curl ")]
    return lines


def test_every_control_route_has_an_example() -> None:
    lines = examples()
    for action in POST_ACTIONS:
        assert any(f"-X POST $SIM/_sim/{action} " in line for line in lines), action
    for route in ("$SIM/_sim", "$SIM/_sim/pulls/", "$SIM/_sim/deliveries", "$SIM/_sim/requests"):
        assert any(f"curl -s {route}" in line or f'"{route}' in line for line in lines), route
    for route in ("requests", "faults"):
        assert any(f"-X DELETE $SIM/_sim/{route}" in line for line in lines), route


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in for the bot's webhook endpoints: answers 202, keeps the event names."""
    events: list[str] = []

    async def take(request: web.Request) -> web.Response:
        await request.read()
        events.append(request.headers.get("X-GitHub-Event", ""))
        return web.json_response({"status": "queued"}, status=202)

    app = web.Application()
    app.router.add_post("/webhooks/{forge}", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", events
    finally:
        await runner.cleanup()


async def test_the_examples_work_as_written(receiver: tuple[str, list[str]]) -> None:
    bot, events = receiver
    values = {"$BOT": bot}
    async with SimServer(Simulator()) as server, aiohttp.ClientSession() as http:
        values["$SIM"] = server.base_url
        for line in examples():
            command = line
            for name, value in values.items():
                command = command.replace(name, value)
            assert "$" not in command, f"an unknown variable in {line!r}"
            status, answer = await curl(http, command)
            assert 200 <= status < 300, (line, status, answer)
            if "/_sim/deliver " in line:
                assert (answer["status"], answer["error"]) == (202, None), (line, answer)
            if "/_sim/apps " in line:
                values["$APP_ID"] = str(answer["app_id"])
            if "/_sim/installations " in line:
                values["$INSTALLATION_ID"] = str(answer["installation_id"])
    # one delivery per deliver example reached the stand-in and was answered 202
    assert len(events) == sum("/_sim/deliver " in line for line in examples()) == 6
