"""An aiohttp request handed to an ASGI application, and its answer streamed back.

The MCP SDK's HTTP transport is an ASGI application; the server is aiohttp. Rather than run
a second web server, one aiohttp route calls the ASGI application with a scope built from
the request. The body is read first, within the route's limit and deadline (the one body
reader, ``body.py``), so the application never reads an unbounded stream; the answer is
streamed as the application sends it (an SSE stream arrives event by event).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_scope(request: web.Request, extra: dict[str, Any] | None = None) -> Scope:
    """The ASGI HTTP scope of ``request``; ``extra`` adds keys the application reads."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "root_path": "",
        "query_string": request.query_string.encode("latin-1"),
        # The bytes as received: a header value may hold UTF-8 (or any byte), which the
        # decoded text could not be encoded back to latin-1 from.
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
    }
    scope.update(extra or {})
    return scope


async def call_asgi(
    app: ASGIApp, request: web.Request, body: bytes, extra: dict[str, Any] | None = None
) -> web.StreamResponse:
    """Run ``app`` for ``request`` (whose ``body`` was already read) and stream its answer."""
    done = asyncio.Event()
    sent_body = False
    response: web.StreamResponse | None = None
    started: Message | None = None

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the body was whole: the next event is the end of the exchange
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response, started
        kind = message["type"]
        if kind == "http.response.start":
            started = message
            return
        if kind != "http.response.body":
            return
        if response is None:
            response = await _prepare(request, started)
        chunk = message.get("body", b"")
        if chunk:
            await response.write(chunk)
        if not message.get("more_body", False):
            await response.write_eof()
            done.set()

    try:
        await app(asgi_scope(request, extra), receive, send)
    finally:
        done.set()
    if response is None:  # the application answered without a body
        response = await _prepare(request, started)
        await response.write_eof()
    return response


async def _prepare(request: web.Request, started: Message | None) -> web.StreamResponse:
    if started is None:
        raise RuntimeError("the ASGI application sent a body before its status")
    response = web.StreamResponse(status=int(started["status"]))
    for name, value in started.get("headers", []):
        key = name.decode("latin-1")
        if key.lower() in ("content-length", "transfer-encoding", "connection"):
            continue  # aiohttp frames the body itself
        response.headers.add(key, value.decode("latin-1"))
    await response.prepare(request)
    return response
