"""``GET /api/v1/capability?pr=FORGE:OWNER/REPO%23N&role=review|merge&worker=ID``.

May this caller review or merge this PR now, and if not, every reason at once (see
``docs/capability.md``). Scope ``read``; a token bound to another repository is refused
``403 repo_not_allowed`` before anything is read, so nothing about another repository's PR
leaks. The scopes the action itself needs (``review``; ``lease`` and ``merge``) are
reported as blockers, not refused: the answer is what the caller asked.
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.core.capability import Action
from reviewbot.core.errors import Refused
from reviewbot.core.leases import WorkerOwner
from reviewbot.runtime.capability import Caller, read_capability
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.history import bound_pr

_ACTIONS = {
    "review": Action.REVIEW,
    "reviewer": Action.REVIEW,
    "merge": Action.MERGE,
    "merger": Action.MERGE,
}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/capability", api_capability)


async def api_capability(request: web.Request) -> web.Response:
    info, pr = await bound_pr(request, "read")
    q = request.query
    action = _ACTIONS.get(q.get("role", ""))
    if action is None:
        raise Refused("role must be review or merge", code="invalid_request")
    worker = q.get("worker") or None
    if worker is not None and (len(worker) > 200 or not worker.isprintable()):
        raise Refused("worker: 1-200 printable characters", code="invalid_request")
    service = request.app[SERVICE]
    parts = service.merge
    if parts is None:
        raise Refused("this server does not run the lease API", code="not_found")
    answer = await read_capability(
        action=action,
        pr=pr,
        worker=worker,
        caller=Caller(frozenset(info.scopes), info.repo, WorkerOwner(info.id, None, info.name)),
        forges=service.forges,
        leases=parts.leases,
        settings=service.settings,
    )
    return web.json_response(answer.to_json())
