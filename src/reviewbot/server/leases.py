"""The worker, lease and merge API (``/api/v1/workers``, ``/leases``, ``/merges``).

Every call needs a bearer token with the scope the table in ``docs/leases.md`` names
(``lease``, ``read`` or ``merge``); a token bound to one repository may act only on that
repository. A refused lease also names ``holder`` and ``expires_at`` (the store's refusal
carries them; ``server/errors.py`` answers it), never the holder's epoch.

A worker identity belongs to the token that registered it: every call in a worker's name
(its heartbeat, lease acquire, heartbeat and release, and merges) from another token is
refused ``not_worker_owner`` before anything is read or written. The bot's own names
(``reviewbot``, ``reviewbot.*``) cannot be registered here.
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.leases import Role
from reviewbot.server import actions
from reviewbot.server.actions import LeaseQuery
from reviewbot.server.app_keys import SERVICE, Handler
from reviewbot.server.auth import authenticate
from reviewbot.server.body import read_model
from reviewbot.server.lease_bodies import (
    AcquireBody,
    ClaimBody,
    LineBody,
    MergeBody,
    WorkerBody,
    WorkerHeartbeatBody,
)
from reviewbot.server.reads import query_number, query_repo


def routes() -> list[tuple[str, str, Handler]]:
    """The lease and merge API: (method, path, handler)."""
    return [
        ("POST", "/api/v1/workers", api_register_worker),
        ("POST", "/api/v1/workers/heartbeat", api_worker_heartbeat),
        ("POST", "/api/v1/leases/acquire", api_acquire),
        ("POST", "/api/v1/leases/heartbeat", api_heartbeat),
        ("POST", "/api/v1/leases/release", api_release),
        ("POST", "/api/v1/leases/leave", api_leave),
        ("GET", "/api/v1/leases", api_list_leases),
        ("POST", "/api/v1/merges", api_merge),
    ]


# Each route authenticates (the scope and the caller's rate limit are checked before the
# body is read), reads its body and answers what the shared action in ``actions.py``
# returns: the MCP tools call the same.


async def api_register_worker(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, WorkerBody)
    answer = await actions.register_worker(request.app[SERVICE], info, body)
    return web.json_response(answer, status=201)


async def api_worker_heartbeat(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, WorkerHeartbeatBody)
    return web.json_response(await actions.worker_heartbeat(request.app[SERVICE], info, body))


async def api_acquire(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, AcquireBody)
    return web.json_response(await actions.acquire_lease(request.app[SERVICE], info, body))


async def _transition(request: web.Request, release: bool) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, ClaimBody)
    service = request.app[SERVICE]
    return web.json_response(await actions.transition_lease(service, info, body, release=release))


async def api_heartbeat(request: web.Request) -> web.Response:
    return await _transition(request, release=False)


async def api_release(request: web.Request) -> web.Response:
    return await _transition(request, release=True)


async def api_leave(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, LineBody)
    return web.json_response(await actions.leave_line(request.app[SERVICE], info, body))


async def api_list_leases(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    q = request.query
    role: Role | None = None
    if q.get("role"):
        try:
            role = Role(q["role"])
        except ValueError:
            raise Refused("role must be reviewer or merger", code="invalid_request") from None
    query = LeaseQuery.model_construct(
        forge=q.get("forge") or None,
        repo=query_repo(q.get("repo")),
        number=query_number(q.get("number") or None),
        role=role,
        live=q.get("live", "") in ("1", "true", "yes"),
    )
    return web.json_response(await actions.list_leases(request.app[SERVICE], info, query))


async def api_merge(request: web.Request) -> web.Response:
    info = await authenticate(request, "merge")
    body = await read_model(request, MergeBody)
    return web.json_response(await actions.merge_pr(request.app[SERVICE], info, body))
