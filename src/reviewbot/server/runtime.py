"""``GET /api/v1/runtime``: what is running, and whether it is what is on disk.

Scope ``read``. The answer (see ``docs/capability.md``): version and commit, schema version
and last migration, the configuration's hash (and the configuration itself, secrets shown as
``<secret>``; not to a token bound to one repository, as it names every repository), start
time, the sandbox state, and whether the code or the configuration on disk differs from
the running one (``restart_needed`` and its ``reasons``). The ``runtime`` MCP tool calls the
same :func:`read_actions.runtime`.
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.server import read_actions
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/runtime", api_runtime)


async def api_runtime(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    return web.json_response(await read_actions.runtime(request.app[SERVICE], info))
