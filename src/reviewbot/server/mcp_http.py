"""``/mcp``: the MCP tools over streamable HTTP, in the same aiohttp server as the REST API.

The bearer token is checked first (an API token, or an external reviewer's session token),
so an unauthenticated request is answered 401 before any MCP processing; the body is then
read within a limit and a deadline and handed to the SDK's session manager through the
ASGI bridge (``asgi.py``), with the authenticated caller in the ASGI scope.

The manager runs **stateless**: every POST is a whole exchange, authenticated on its own,
and no MCP session lives in this process's memory, so any replica answers any request and a
revoked token stops working at its next request. ``Mcp-Session-Id`` is not used.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from reviewbot.core.errors import Refused
from reviewbot.runtime.reviewers.sessions import SESSION_TOKEN_PREFIX
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.asgi import call_asgi
from reviewbot.server.auth import bearer, check_token
from reviewbot.server.body import read_body
from reviewbot.server.mcp_registry import Caller
from reviewbot.server.mcp_server import build_server
from reviewbot.server.mcp_tools import TOOLS
from reviewbot.service import Service

MCP_ROUTE = "/mcp"
MAX_MCP_BODY_BYTES = 1024 * 1024  # a JSON-RPC message; every argument is bounded below this
CALLER_KEY = "reviewbot.caller"


class McpMount:
    """The session manager of one application: started with it, stopped with it."""

    def __init__(self, service: Service) -> None:
        server = build_server(TOOLS, service, _caller_of_request)
        self.manager = StreamableHTTPSessionManager(
            app=server, stateless=True, max_request_body_size=MAX_MCP_BODY_BYTES
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, _app: web.Application) -> None:
        # The manager's task group must be entered and left in one task: its own.
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(run(), name="mcp-session-manager")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            await self._task  # raises what stopped it

    async def stop(self, _app: web.Application) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        service = request.app[SERVICE]
        caller = await authenticate_caller(service, bearer(request), entry="mcp-http")
        body = await read_body(
            request, MAX_MCP_BODY_BYTES, timeout_s=service.settings.body_read_timeout_s
        )
        return await call_asgi(self.manager.handle_request, request, body, {CALLER_KEY: caller})


async def authenticate_caller(service: Service, token: str | None, *, entry: str) -> Caller:
    """The caller a bearer token names: an active API token (its scopes are checked per
    tool) or a live session token. Anything else is ``unauthorized``."""
    if token is None:
        raise Refused("send Authorization: Bearer <token>", code="unauthorized")
    if token.startswith(SESSION_TOKEN_PREFIX):
        assert service.tools is not None
        return Caller(entry, session=service.tools.authenticate(token))
    assert service.db is not None
    return Caller(entry, token=await check_token(service.db, token, None))


async def _caller_of_request(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    caller = getattr(request, "scope", {}).get(CALLER_KEY) if request is not None else None
    if not isinstance(caller, Caller):  # never reached through the route, which sets it
        raise Refused("the request carries no authenticated caller", code="unauthorized")
    return caller


def add_mcp_route(app: web.Application, service: Service) -> McpMount:
    mount = McpMount(service)
    # POST only: a stateless server offers no SSE stream to GET (the SDK would hold such a
    # request open, unanswered, for as long as the client waits) and keeps no session to
    # DELETE; anything else is answered 405 before the token is looked at.
    app.router.add_post(MCP_ROUTE, mount.handle)
    app.on_startup.append(mount.start)
    app.on_cleanup.append(mount.stop)
    return mount
