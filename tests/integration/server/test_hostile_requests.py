"""Hostile request bodies against a real server over HTTP: each is a caller's mistake, refused
with its reason code (400), never a ``500`` with a traceback in the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.server_support import WAIT_S, Running, make_settings, running_server

DEEP_LIST = b"[" * 5000  # 5 KB, within every route's byte limit; past the decoder's depth
DEEP_OBJECT = b'{"arguments": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3001


# Every route that reads a JSON body with the one body reader, or the tools route's own.
NESTED = [
    ("/api/v1/workers", DEEP_LIST, "invalid_request"),
    ("/api/v1/workers/heartbeat", DEEP_LIST, "invalid_request"),
    ("/api/v1/leases/acquire", DEEP_LIST, "invalid_request"),
    ("/api/v1/leases/release", DEEP_LIST, "invalid_request"),
    ("/api/v1/merges", DEEP_LIST, "invalid_request"),
    ("/api/v1/queue/enqueue", DEEP_LIST, "invalid_request"),
    ("/api/v1/queue/dequeue", DEEP_LIST, "invalid_request"),
    ("/api/v1/queue/predict", DEEP_LIST, "invalid_request"),
    ("/api/v1/tools/query_workflow_db", DEEP_LIST, "invalid_body"),
    ("/api/v1/tools/query_workflow_db", DEEP_OBJECT, "invalid_body"),
]


async def test_deeply_nested_json_is_refused_not_a_server_failure(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    token = server.token("read,lease,merge,db:read,db:write")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for path, body, code in NESTED:
        status, answer = await server.post(path, body, headers)
        assert (status, answer["error"]) == (400, code), (path, answer)
        assert "nested too deeply" in answer["detail"] or "recursion" in answer["detail"]
    assert "Traceback" not in caplog.text


# Every route that reads a body after checking a token, with a token of the scope it needs.
TOKEN_ROUTES = [
    ("/webhooks/crew", "review"),
    ("/api/v1/reviews", "review"),
    ("/api/v1/workers", "lease"),
    ("/api/v1/leases/acquire", "lease"),
    ("/api/v1/merges", "merge"),
    ("/api/v1/queue/enqueue", "merge"),
    ("/api/v1/queue/predict", "read"),
    ("/api/v1/tools/query_workflow_db", "db:read"),
]


async def test_a_body_that_never_ends_is_cut_off_on_every_token_route(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", body_read_timeout_s=0.5)
    async with running_server(settings, forges={}) as server:
        host, port = server.base.removeprefix("http://").rsplit(":", 1)
        for path, scope in TOKEN_ROUTES:
            token = server.token(scope)
            reader, writer = await asyncio.open_connection(host, int(port))
            # A holder of any token opens the body and never sends the rest.
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {token}\r\n"
                'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n'.encode()
            )
            await writer.drain()
            try:
                head = await asyncio.wait_for(reader.readline(), WAIT_S)
            finally:
                writer.close()
            assert b" 408 " in head, (path, head)


async def test_a_database_password_in_the_url_query_is_never_shown(
    tmp_path: Path, postgres_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # libpq takes the password from the query as well as from the user part.
    password = "pg-query-password-4f1d"
    url = f"{postgres_store_url}{'&' if '?' in postgres_store_url else '?'}password={password}"
    settings = make_settings(tmp_path / "data", database_url=url)
    async with running_server(settings, forges={}) as server:
        status, body = await server.get("/api/v1/runtime", server.token("read"))
        assert status == 200, body
        assert "password=<secret>" in body["config"]["database_url"]
        for path in ("/healthz", "/readyz", "/api/v1/runtime"):
            async with server.http.get(
                server.base + path, headers={"Authorization": f"Bearer {server.token('read')}"}
            ) as resp:
                assert password not in await resp.text(), path
    assert password not in caplog.text


async def test_mcp_answers_only_post(server: Running) -> None:
    # A stateless server has no stream to GET and no session to DELETE: each is answered at
    # once, never held open.
    token = server.token("read")
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    for method in ("GET", "DELETE", "PUT"):
        async with asyncio.timeout(WAIT_S):
            async with server.http.request(method, server.base + "/mcp", headers=headers) as resp:
                assert resp.status == 405, method
                assert (await resp.json())["error"] == "method_not_allowed"
