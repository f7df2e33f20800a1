"""``POST /api/v1/tools/{name}``: a session (or an API token with ``db:*``) calls a tool.

The caller is a session token (``REVIEWBOT_SESSION_TOKEN`` of an external reviewer) or, with
``api_tokens``, a bearer API token; the call resolves through
:class:`reviewbot.runtime.reviewers.tools.ToolDispatcher`, never a global table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from reviewbot.core.errors import Refused, ReviewbotError
from reviewbot.runtime.reviewers.sessions import SESSION_TOKEN_PREFIX, Session, SessionManager
from reviewbot.runtime.reviewers.tools import (
    DB_TOOLS,
    ApiTokenCallers,
    ToolDispatcher,
    ToolOutcome,
    ToolRequest,
    run_tools,
)
from reviewbot.server.auth import bearer
from reviewbot.server.body import read_body
from reviewbot.server.errors import error_response
from reviewbot.server.quota import session_caller, token_caller
from reviewbot.store.database import Database
from reviewbot.store.tokens import TokenInfo
from reviewbot.workflowdb.access import AccessDenied, DBAccess

TOOLS_ROUTE = "/api/v1/tools/{name}"
MAX_TOOL_BODY_BYTES = 1024 * 1024
MAX_TOOL_NAME_CHARS = 100

SESSIONS = web.AppKey("reviewbot.sessions", SessionManager)

Handler = Callable[[web.Request], Awaitable[web.Response]]
# Admits one call of an authenticated caller (its name: a token's or a session's), or raises
# the refusal (the server's rate limits, server/quota.py).
Admit = Callable[[str], None]


async def _api_token(api_tokens: ApiTokenCallers, token: str) -> tuple[TokenInfo, DBAccess]:
    """The token and the DB access its scopes give it, or a refusal."""
    info = await api_tokens.lookup(token)
    if info is None:
        raise Refused("unknown token", code="unauthorized")
    if not info.active:
        raise Refused(f"token {info.name!r} was revoked", code="unauthorized")
    return info, token_access_of(api_tokens, info)


def token_access_of(api_tokens: ApiTokenCallers, info: TokenInfo) -> DBAccess:
    """The DB access an API token's scopes give it; a repository-bound token is refused."""
    try:
        return api_tokens.access_of(info)
    except AccessDenied as exc:  # bound to a repository: the tools cannot keep that
        raise Refused(str(exc), code="repo_not_allowed") from None


async def call_as_token(
    dispatcher: ToolDispatcher,
    api_tokens: ApiTokenCallers,
    info: TokenInfo,
    access: DBAccess,
    name: str,
    arguments: Mapping[str, Any],
) -> ToolOutcome:
    """A tool call made with an API token: a session of its own, opened for this one call
    with only the workflow-DB tools registered, and ended right after. It never reaches a
    run's registry, so any other name is refused as not owned."""
    sessions = dispatcher.sessions
    caller = sessions.open_run(
        f"token:{info.name}:{uuid.uuid4().hex[:12]}",
        db_access=access,
        tools=[
            t
            for t in run_tools(api_tokens.paths, sessions, api_tokens.limits)
            if t.name in DB_TOOLS
        ],
    )
    try:
        return await dispatcher.call(caller, name, arguments)
    finally:
        sessions.end(caller.id)


def tool_handler(
    dispatcher: ToolDispatcher,
    *,
    api_tokens: ApiTokenCallers | None = None,
    max_body_bytes: int = MAX_TOOL_BODY_BYTES,
    admit: Admit | None = None,
    run_id: str | None = None,
    read_timeout_s: float | None = None,
) -> Handler:
    """The route's handler; ``admit`` sees every authenticated caller before its body is
    read. With ``run_id`` (a run's own socket, :mod:`reviewbot.server.tools_socket`) only
    the sessions of that run are callers: any other token is unknown there.
    ``read_timeout_s``: the body's read deadline (default: the server's setting)."""

    async def handle(request: web.Request) -> web.Response:
        # Answered here too, for an application without the server's middleware (tests).
        try:
            return await _handle(request)
        except ReviewbotError as exc:
            return error_response(exc, request.path)

    async def _handle(request: web.Request) -> web.Response:
        token = bearer(request)
        api_token: TokenInfo | None = None
        token_access = DBAccess.NONE
        caller: Session | None = None
        if token is not None and token.startswith(SESSION_TOKEN_PREFIX):
            caller = dispatcher.authenticate(token)
            if run_id is not None and caller.run_id != run_id:
                raise Refused(
                    f"this socket serves the sessions of run {run_id!r} only",
                    code="invalid_session_token",
                )
        elif token is not None and api_tokens is not None:
            api_token, token_access = await _api_token(api_tokens, token)
        else:
            raise Refused(
                "send Authorization: Bearer <session token> (REVIEWBOT_SESSION_TOKEN)"
                + (" or an API token with db:read / db:write" if api_tokens else ""),
                code="unauthorized",
            )
        if admit is not None:
            admit(token_caller(api_token) if api_token is not None else caller_name(caller))
        # Any name: one that no registry holds is refused as not owned, like every other.
        name = request.match_info["name"][:MAX_TOOL_NAME_CHARS]
        try:
            raw = await read_body(
                request, max_body_bytes, code="too_large", timeout_s=read_timeout_s
            )
        except (ValueError, ConnectionError) as exc:
            raise Refused(f"cannot read the body: {exc}", code="bad_body") from None
        try:
            body = ToolRequest.model_validate(json.loads(raw or b"{}"))
        except (ValueError, ValidationError, RecursionError) as exc:  # also nested too deeply
            text = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise Refused(
                f'expected {{"arguments": {{...}}}}: {text}', code="invalid_body"
            ) from None
        if api_token is not None:
            assert api_tokens is not None
            outcome = await call_as_token(
                dispatcher, api_tokens, api_token, token_access, name, body.arguments
            )
        else:
            assert caller is not None
            outcome = await dispatcher.call(caller, name, body.arguments)
        return web.json_response(outcome.to_json())

    return handle


def caller_name(session: Session | None) -> str:
    assert session is not None
    return session_caller(session.id)


def register_tool_routes(
    app: web.Application,
    *,
    sessions: SessionManager | None = None,
    audit: Callable[[], Database | None] | None = None,
    api_tokens: ApiTokenCallers | None = None,
    max_body_bytes: int = MAX_TOOL_BODY_BYTES,
) -> SessionManager:
    """Add the tools route to ``app``, answering for ``sessions``.

    The manager (a new one when not given) is also stored as ``app[SESSIONS]``: the code
    that starts runs in this server must open them in that same manager, or their tokens
    would be unknown here. With ``api_tokens``, bearer API tokens may call the workflow-DB
    tools too (see :class:`ApiTokenCallers`).
    """
    manager = sessions if sessions is not None else SessionManager()
    app[SESSIONS] = manager
    dispatcher = ToolDispatcher(manager, audit=audit)
    handler = tool_handler(dispatcher, api_tokens=api_tokens, max_body_bytes=max_body_bytes)
    app.router.add_post(TOOLS_ROUTE, handler)
    return manager
