"""``GET /api/v1/leases/history?pr=FORGE:OWNER/REPO%23N``: a PR's lease audit trail.

Scope ``read``; a token bound to one repository reads only that repository's trail (any
casing, or a renamed repository's old name, is the same repository). The ``lease_history``
MCP tool calls the same :func:`read_actions.lease_history`.
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.server import read_actions
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate
from reviewbot.server.body import as_model
from reviewbot.server.reads import query_number


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/leases/history", api_lease_history)


def query_pr(request: web.Request) -> str:
    """The PR a read names: ``pr=FORGE:OWNER/REPO#N``, or ``forge``, ``repo`` and ``number``
    (parsed, with the token's binding, by :func:`read_actions.bound_pull`)."""
    q = request.query
    text = q.get("pr")
    if text is None:
        number = query_number(q.get("number") or None)
        if not q.get("forge") or not q.get("repo") or number is None:
            raise Refused("name the PR: pr=FORGE:OWNER/REPO#N", code="invalid_request")
        text = f"{q['forge']}:{q['repo']}#{number}"
    return text


async def api_lease_history(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    q = request.query
    query = as_model(
        read_actions.HistoryQuery,
        {
            "pr": query_pr(request),
            "role": q.get("role") or None,
            "limit": query_number(q.get("limit") or None) or 500,
        },
        whole="query",
    )
    return web.json_response(await read_actions.lease_history(request.app[SERVICE], info, query))
