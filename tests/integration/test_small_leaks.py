"""Small leaks, each against a real server over HTTP: a binary value in a DB-tool answer
(once a 500 over REST and a JSON-RPC error over MCP)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from tests.integration.mcp_support import mcp_http, ok
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.test_db_tool_boundary import add_migration, rw_session, tool

BLOB = bytes(range(256))  # not UTF-8, and every byte value once


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    settings = make_settings(tmp_path / "data")
    async with running_server(settings, forges={}, run_workers=False) as srv:
        add_migration(
            srv,
            "site_files.sql",
            "CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY AUTOINCREMENT, data BLOB);",
        )
        status, body = await tool(srv, rw_session(srv), "apply_workflow_db_migration",
                                  {"file": "site_files.sql"})  # fmt: skip
        assert status == 200, body
        yield srv


# -- binary values ----------------------------------------------------------------------------


def as_bytes(value: Any) -> bytes:
    assert isinstance(value, dict) and set(value) == {"$bytes"}, value
    return base64.b64decode(value["$bytes"], validate=True)


async def test_a_binary_value_is_encoded_on_every_route(
    server: Running, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = server.token("db:read,db:write")
    insert = "INSERT INTO files (data) VALUES (x'00ff') RETURNING data"
    status, body = await tool(server, token, "mutate_workflow_db", {"sql": insert})
    assert status == 200, body
    assert as_bytes(body["result"]["rows"][0][0]) == b"\x00\xff"
    sql = f"SELECT x'{BLOB.hex()}' AS data, 'text' AS t, 7 AS n, NULL AS z"

    status, body = await tool(server, token, "query_workflow_db", {"sql": sql})
    assert status == 200, body
    data, text, number, null = body["result"]["rows"][0]
    assert (as_bytes(data), text, number, null) == (BLOB, "text", 7, None)

    async with mcp_http(server.base, token) as client:
        answer = ok(await client.call_tool("query_workflow_db", {"sql": sql}))
    assert as_bytes(answer["result"]["rows"][0][0]) == BLOB

    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(server.service.settings.data_dir))
    assert main(["db", "query", sql, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert as_bytes(printed["rows"][0][0]) == BLOB
