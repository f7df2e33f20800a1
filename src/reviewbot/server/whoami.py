"""``GET /api/v1/whoami``: the calling token as the store holds it now.

Any active token may ask (no scope is needed): its name, id, prefix, scopes and repository
binding (``repo``, ``null`` for every repository), read from the store at this request, so a
token rescoped a moment ago answers its new scopes and a revoked one is ``401
unauthorized``. It takes no argument: a caller can only ever learn about its own token. The
``whoami`` MCP tool and ``reviewbot whoami`` answer the same JSON.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from reviewbot.core.errors import Refused
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import bearer, check_token
from reviewbot.store.tokens import TokenInfo

ROUTE = "/api/v1/whoami"


class Identity(BaseModel):
    """The calling token as the store holds it now (the ``whoami`` tool's output)."""

    model_config = ConfigDict(extra="allow")

    id: int
    name: str
    prefix: str
    scopes: list[str]
    repo: str | None
    created_at: str
    revoked_at: str | None


class NoArgs(BaseModel):
    """``whoami`` takes no arguments."""

    model_config = ConfigDict(extra="forbid")


def whoami(info: TokenInfo) -> dict[str, Any]:
    """What a token is told about itself (never its hash, never another token)."""
    return info.to_json()


def add_routes(app: web.Application) -> None:
    app.router.add_get(ROUTE, api_whoami)


async def api_whoami(request: web.Request) -> web.Response:
    if request.query:
        raise Refused(
            f"whoami takes no parameters (got {', '.join(sorted(request.query))[:200]}): it "
            "answers the token that calls",
            code="invalid_request",
        )
    token = bearer(request)
    if token is None:
        raise Refused("send Authorization: Bearer <token>", code="unauthorized")
    db = request.app[SERVICE].db
    assert db is not None
    return web.json_response(whoami(await check_token(db, token, None)))
