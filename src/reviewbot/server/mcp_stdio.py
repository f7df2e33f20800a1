"""The MCP tools over stdin and stdout, for a local client (``reviewbot mcp --stdio``).

The same tools and checks as ``/mcp``: the process's token (``REVIEWBOT_TOKEN`` or
``--token``) is checked before anything is served, and again at every call, so a token
revoked while the client runs stops working at its next call. The process runs the journal,
the gate workers, the review pipeline and the merger, like ``reviewbot serve`` without its
HTTP face (``run_workers=False``: only the journal and the merger, as ``serve --no-workers``).

Unlike ``serve``, its workers run no recovery at start: a client starts this process
whenever it likes, often while a ``serve`` (or another stdio process) is gating deliveries
of the same store, and a delivery in ``processing`` carries no owner, so one abandoned by a
crash cannot be told from one a live process is gating. Resetting them all to ``queued``
would gate the live ones a second time. So the process only claims queued deliveries (a
claim is atomic) and leaves ``processing`` ones to their holder; what a crash left behind
is taken up by the next ``serve`` start, or by ``mcp --stdio --resume`` when the operator
knows no other process works on the store.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from reviewbot.config import Settings
from reviewbot.core.errors import Refused
from reviewbot.runtime.reviewers.sessions import SESSION_TOKEN_PREFIX
from reviewbot.server.auth import check_token
from reviewbot.server.mcp_http import authenticate_caller
from reviewbot.server.mcp_registry import Caller
from reviewbot.server.mcp_server import build_server
from reviewbot.server.mcp_tools import TOOLS
from reviewbot.server.tools_socket import service_tools_sockets
from reviewbot.service import Parts, Service, build_service

STDIO_PARTS = Parts.JOURNAL | Parts.WORKERS | Parts.REVIEW | Parts.DRAIN | Parts.MERGE


async def check_stdio_token(service: Service, token: str | None) -> Caller:
    """The caller of this process, or the refusal to print before serving anything."""
    if token is not None and token.startswith(SESSION_TOKEN_PREFIX):
        raise Refused(
            "a session token is known only to the server that started its run: "
            "call POST /mcp there",
            code="unauthorized",
        )
    return await authenticate_caller(service, token, entry="mcp-stdio")


def stdio_server_for(service: Service, token: str) -> Server[Any]:
    """The MCP server of a stdio process: the token is checked again at every call."""
    db = service.db
    assert db is not None

    async def caller_of(_ctx: ServerRequestContext[Any, Any]) -> Caller:
        return Caller("mcp-stdio", token=await check_token(db, token, None))

    return build_server(TOOLS, service, caller_of)


async def serve_stdio(
    settings: Settings, token: str | None, *, run_workers: bool = True, resume: bool = False
) -> None:
    parts = STDIO_PARTS if run_workers else Parts.JOURNAL | Parts.MERGE
    service = build_service(
        settings,
        parts=parts,
        client="reviewbot-mcp",
        resume_deliveries=resume,
        tools_endpoint=service_tools_sockets,  # each review run's own tools socket
    )
    async with service:
        await check_stdio_token(service, token)
        assert token is not None
        server = stdio_server_for(service, token)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
