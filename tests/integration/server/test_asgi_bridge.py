"""The aiohttp-to-ASGI bridge the MCP route stands on, with small ASGI applications over
real loopback HTTP: the request reaches the application whole, and the answer streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reviewbot.server.asgi import ASGIApp, Message, Receive, Scope, Send, call_asgi
from reviewbot.server.body import read_body
from reviewbot.server.errors import errors_middleware

WAIT_S = 10.0


def mounted(app: ASGIApp, limit: int = 1024) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await read_body(request, limit, timeout_s=1.0)
        return await call_asgi(app, request, body, {"reviewbot.caller": "someone"})

    web_app = web.Application(middlewares=[errors_middleware()])
    web_app.router.add_route("*", "/asgi", handle)
    return web_app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[ASGIApp], Any]]:
    servers: list[TestServer] = []

    async def start(app: ASGIApp) -> str:
        server = TestServer(mounted(app), host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}/asgi"

    yield start
    for server in servers:
        await server.close()


async def test_the_request_reaches_the_application_whole(serve: Any) -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen["scope"] = scope
        seen["message"] = await receive()
        await send(
            {"type": "http.response.start", "status": 201, "headers": [(b"x-answer", b"42")]}
        )
        await send({"type": "http.response.body", "body": b"done"})

    url = await serve(app)
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "?q=1", data=b'{"a": 1}', headers={"Authorization": "Bearer t"}) as resp,
    ):
        assert (resp.status, resp.headers["x-answer"], await resp.read()) == (201, "42", b"done")
    scope = seen["scope"]
    assert (scope["type"], scope["method"], scope["path"], scope["query_string"]) == (
        "http",
        "POST",
        "/asgi",
        b"q=1",
    )
    assert (b"authorization", b"Bearer t") in scope["headers"]
    assert scope["reviewbot.caller"] == "someone"
    assert seen["message"] == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}


async def test_an_answer_streams_event_by_event(serve: Any) -> None:
    first_read = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        # Held until the client has the first event: a bridge that buffered would hang here.
        await asyncio.wait_for(first_read.wait(), WAIT_S)
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})

    url = await serve(app)
    async with aiohttp.ClientSession() as http, http.post(url, data=b"{}") as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT_S)
        assert first == b"data: one\n\n"
        first_read.set()
        assert await asyncio.wait_for(resp.content.read(), WAIT_S) == b"data: two\n\n"


async def test_after_the_body_the_application_hears_the_end_of_the_exchange(serve: Any) -> None:
    messages: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        messages.append(await receive())
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        messages.append(await asyncio.wait_for(receive(), WAIT_S))

    url = await serve(app)
    async with aiohttp.ClientSession() as http, http.post(url, data=b"x") as resp:
        assert resp.status == 202 and await resp.read() == b""
    assert [m["type"] for m in messages] == ["http.request", "http.disconnect"]


async def test_a_body_over_the_limit_never_reaches_the_application(serve: Any) -> None:
    called: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        called.append(scope)

    url = await serve(app)
    async with aiohttp.ClientSession() as http, http.post(url, data=b"x" * 5000) as resp:
        assert resp.status == 413 and (await resp.json())["error"] == "body_too_large"
    assert called == []
