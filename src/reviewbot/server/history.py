"""``GET /api/v1/leases/history?pr=FORGE:OWNER/REPO%23N``: a PR's lease audit trail.

Scope ``read``; a token bound to one repository reads only that repository's trail (any
casing, or a renamed repository's old name, is the same repository).
"""

from __future__ import annotations

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.leases import Role
from reviewbot.core.models import PullRef
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate, current_bound
from reviewbot.server.reads import query_number
from reviewbot.store.tokens import TokenInfo

_MAX_LIMIT = 5000


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/leases/history", api_lease_history)


def query_pr(request: web.Request) -> PullRef:
    """The PR a read names: ``pr=FORGE:OWNER/REPO#N``, or ``forge``, ``repo`` and ``number``."""
    q = request.query
    text = q.get("pr")
    if text is None:
        number = query_number(q.get("number") or None)
        if not q.get("forge") or not q.get("repo") or number is None:
            raise Refused("name the PR: pr=FORGE:OWNER/REPO#N", code="invalid_request")
        text = f"{q['forge']}:{q['repo']}#{number}"
    if len(text) > 300:
        raise Refused("pr: too long", code="invalid_request")
    try:
        return PullRef.parse(text)
    except ValueError as exc:
        raise Refused(f"pr: {exc}", code="invalid_request") from None


def query_role(text: str | None) -> Role | None:
    if not text:
        return None
    try:
        return Role(text)
    except ValueError:
        raise Refused("role must be reviewer or merger", code="invalid_request") from None


async def bound_pr(request: web.Request, scope: str) -> tuple[TokenInfo, PullRef]:
    """The token and the named PR (under its repository's current name), after the token's
    scope and repository binding were checked."""
    info = await authenticate(request, scope)
    pr = query_pr(request)
    db = request.app[SERVICE].db
    assert db is not None
    current = await current_bound(db, info, pr.forge, pr.full_name)
    owner, _, name = current.partition("/")
    return info, PullRef(pr.forge, owner, name, pr.number)


async def api_lease_history(request: web.Request) -> web.Response:
    _, pr = await bound_pr(request, "read")
    role = query_role(request.query.get("role"))
    limit = query_number(request.query.get("limit") or None) or 500
    parts = request.app[SERVICE].merge
    if parts is None:
        raise Refused("this server does not run the lease API", code="not_found")
    leases = parts.leases
    history = await leases.run(
        lambda: read_lease_history(leases, pr, role=role, limit=min(limit, _MAX_LIMIT))
    )
    return web.json_response(history.to_json())
