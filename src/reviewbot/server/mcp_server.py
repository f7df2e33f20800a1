"""One MCP server over the tool registry: ``tools/list`` and ``tools/call`` for a caller.

``/mcp`` (``mcp_http.py``) and ``reviewbot mcp --stdio`` (``mcp_stdio.py``) build it with
their own way of saying who calls; everything else is the same.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from reviewbot import __version__
from reviewbot.core.errors import ReviewbotError
from reviewbot.server.mcp_registry import (
    SESSION_TOOLS,
    Caller,
    Notify,
    Registry,
    ToolEnv,
    call_tool,
    visible_tools,
)
from reviewbot.server.mcp_schema import tool_schema
from reviewbot.service import Service

log = logging.getLogger(__name__)


def tool_result(payload: dict[str, Any]) -> types.CallToolResult:
    """A tool's answer: its JSON as structured content (matching the tool's output schema)
    and as text, for clients that read only text."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(payload, indent=1, sort_keys=True))],
        structured_content=payload,
    )


def error_result(exc: ReviewbotError) -> types.CallToolResult:
    """A refusal as every MCP client reads it: ``isError`` with the code and detail as text
    (``CODE: detail``), then the whole error body as JSON text. It carries no structured
    content: a client checks a result's structured content against the tool's output
    schema, and an error body would fail that check and hide the refusal behind a schema
    error."""
    body = exc.to_json()
    return types.CallToolResult(
        content=[
            types.TextContent(text=f"{body['error']}: {body['detail']}"),
            types.TextContent(text=json.dumps(body, indent=1, sort_keys=True)),
        ],
        is_error=True,
    )


CallerOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[Caller]]


def progress_notifier(ctx: ServerRequestContext[Any, Any]) -> Notify | None:
    """Sends a JSON object as a progress notification on this call's own stream (its
    ``message``), when the client asked for progress (a ``progressToken``); the streamable
    HTTP transport carries it on the POST's event stream, stdio on the pipe."""
    meta: Any = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    sent = 0

    async def notify(data: dict[str, Any]) -> None:
        nonlocal sent
        sent += 1
        note = types.ProgressNotification(
            params=types.ProgressNotificationParams(
                progress_token=token, progress=sent, message=json.dumps(data, sort_keys=True)
            )
        )
        await ctx.session.send_notification(note, related_request_id=ctx.request_id)

    return notify


def build_server(registry: Registry, service: Service, caller_of: CallerOf) -> Server[Any]:
    """One low-level MCP server over ``registry``; ``caller_of`` says who makes a request
    (from the HTTP request the route authenticated, or the token of a stdio process)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            caller = await caller_of(ctx)
        except ReviewbotError as exc:  # a token revoked since the process started (stdio)
            raise MCPError(INVALID_REQUEST, f"{exc.code}: {exc.detail}", exc.to_json()) from None
        return types.ListToolsResult(tools=visible_tools(registry, service, caller))

    async def on_call(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller: Caller | None = None
        try:
            caller = await caller_of(ctx)
            env = ToolEnv(service, caller, notify=progress_notifier(ctx))
            payload = await call_tool(registry, env, params.name, params.arguments)
        except ReviewbotError as exc:
            who = caller.name if caller is not None else "unauthenticated"
            session = caller.session if caller is not None else None
            log.warning(
                "mcp call refused: tool=%s caller=%s owner=%s parent=%s code=%s detail=%s",
                params.name[:100],
                who,
                # A session's tools are owned by its run; a token's call by the token.
                session.run_id if session is not None else who,
                (session.parent_id if session is not None else None) or "-",
                exc.code,
                exc.detail,
            )
            return error_result(exc)
        except Exception:  # answered like the HTTP face answers it: named, never the trace
            log.exception("mcp call failed: tool=%s", params.name[:100])
            failed = ReviewbotError("the server failed; see its log", code="internal_error")
            return error_result(failed)
        log.info("mcp call: tool=%s caller=%s entry=%s", params.name, caller.name, caller.entry)
        return tool_result(payload)

    def input_schema(name: str) -> dict[str, Any] | None:
        tool = registry.get(name)
        if tool is not None:
            return tool_schema(tool.input, tool.example)
        return tool_schema(SESSION_TOOLS[name][0], None) if name in SESSION_TOOLS else None

    return Server(
        "reviewbot",
        version=__version__,
        instructions="Review and merge pull requests at a pinned head. Register a worker, "
        "acquire a lease, heartbeat it, merge at the head you were approved at, release.",
        on_list_tools=list_tools,
        on_call_tool=on_call,
        get_tool_input_schema=input_schema,
    )
