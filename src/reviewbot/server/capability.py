"""``GET /api/v1/capability?pr=FORGE:OWNER/REPO%23N&role=review|merge&worker=ID``.

May this caller review or merge this PR now, and if not, every reason at once (see
``docs/capability.md``). Scope ``read``; a token bound to another repository is refused
``403 repo_not_allowed`` before anything is read, so nothing about another repository's PR
leaks. The scopes the action itself needs (``review``; ``lease`` and ``merge``) are
reported as blockers, not refused: the answer is what the caller asked. The
``resolve_capability`` MCP tool calls the same :func:`read_actions.capability`.
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.server import read_actions
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate
from reviewbot.server.body import as_model
from reviewbot.server.history import query_pr


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/capability", api_capability)


async def api_capability(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    q = request.query
    query = as_model(
        read_actions.CapabilityQuery,
        {"pr": query_pr(request), "role": q.get("role", ""), "worker": q.get("worker") or None},
        whole="query",
    )
    return web.json_response(await read_actions.capability(request.app[SERVICE], info, query))
