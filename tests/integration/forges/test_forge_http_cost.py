"""What a forge request costs the bot besides the exchange itself.

Over real HTTP to the forge simulator: a request through the forge HTTP policy searches no
module on ``sys.path``. httpcore imports the optional ``sniffio`` for every lock and event
of a request; where it is not installed, each failed import used to search every path
entry again, about half of the CPU of a request.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import httpx

from reviewbot.forges.http import ForgeHttp
from reviewbot.sim import SimServer, Simulator

REPO = "acme/api"


class Searches:
    """A finder first on ``sys.meta_path`` that only notes the modules searched for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        self.names.append(fullname)
        return None


async def test_a_forge_request_searches_no_module() -> None:
    sim = Simulator()
    token = sim.add_user("github", "reviewbot", bot=True)
    sim.create_repo("github", REPO)
    async with SimServer(sim) as server, httpx.AsyncClient() as client:
        http = ForgeHttp(client)
        url = f"{server.github_api_url}/repos/{REPO}"
        headers = {"authorization": f"token {token}"}
        await http.send("repos/get", "GET", url, headers=headers)  # a connection is open
        searches = Searches()
        sys.meta_path.insert(0, searches)
        try:
            for _ in range(3):
                result = await http.send("repos/get", "GET", url, headers=headers)
                assert result.status == 200
        finally:
            sys.meta_path.remove(searches)
    assert searches.names == []
