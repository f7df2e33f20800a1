"""Three small leaks, each against a real server over HTTP: a binary value in a DB-tool
answer (once a 500 over REST and a JSON-RPC error over MCP), a repository-bound token
telling another repository's delivery from a missing one (403 against 404), and ``mutate``
rewriting SQLite's own tables (``UPDATE sqlite_sequence``)."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.workflowdb.protected import bot_schema
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.tools_support import add_migration, rw_session, tool

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


# -- another repository's delivery is a missing delivery -------------------------------------


async def request_review(srv: Running, token: str, repo: str) -> str:
    status, body = await srv.post(
        "/api/v1/reviews",
        json.dumps({"forge": "gitea", "repo": repo, "number": 3}).encode(),
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert status == 202, body
    return str(body["delivery_id"])


def missing(delivery_id: str) -> dict[str, Any]:
    return {"error": "not_found", "detail": f"no delivery {delivery_id!r}"}


async def test_a_bound_token_cannot_tell_another_repositorys_delivery_from_none(
    tmp_path: Path, server: Running
) -> None:
    # Gated deliveries (no forge is configured: each ends in an error decision naming its
    # repository), then deliveries no worker has gated yet (the fixture's server runs none).
    async with running_server(make_settings(tmp_path / "gated"), forges={}) as gated:
        anyone = gated.token("review")
        theirs = await request_review(gated, anyone, "acme/other")
        mine = await request_review(gated, anyone, "acme/api")
        for delivery_id, repo in ((theirs, "acme/other"), (mine, "acme/api")):
            assert [d.repo for d in await gated.decisions_of(delivery_id)] == [repo]
        await expect_only_own(gated, theirs, mine)
    anyone = server.token("review")
    theirs = await request_review(server, anyone, "acme/other")
    mine = await request_review(server, anyone, "acme/api")
    await expect_only_own(server, theirs, mine)


async def expect_only_own(srv: Running, theirs: str, mine: str) -> None:
    bound = srv.token("read", repo="gitea:ACME/api")
    for delivery_id in (theirs, "api:nobody"):
        status, body = await srv.get(f"/api/v1/deliveries/{delivery_id}", bound)
        assert (status, body) == (404, missing(delivery_id)), delivery_id
    status, body = await srv.get(f"/api/v1/deliveries/{mine}", bound)
    assert (status, body["delivery_id"]) == (200, mine), body
    # A token bound to no repository sees every delivery.
    status, _ = await srv.get(f"/api/v1/deliveries/{theirs}", srv.token("read"))
    assert status == 200
    async with mcp_http(srv.base, bound) as client:
        for delivery_id in (theirs, "api:nobody"):
            result = await client.call_tool("explain", {"delivery_id": delivery_id})
            assert refused(result) == ("not_found", f"no delivery {delivery_id!r}")
        ok(await client.call_tool("explain", {"delivery_id": mine}))


# -- mutate never writes SQLite's own tables, nor the bot's ------------------------------------


def sequences(srv: Running) -> dict[str, int]:
    """The AUTOINCREMENT counters, but the audit of tool calls (each call adds a row)."""
    with srv.db.read() as tx:
        rows = tx.all("SELECT name, seq FROM sqlite_sequence WHERE name <> 'session_tool_calls'")
    return {r["name"]: r["seq"] for r in rows}


def stats(srv: Running) -> list[tuple[Any, ...]]:
    with srv.db.read() as tx:
        return [tuple(r) for r in tx.all("SELECT * FROM sqlite_stat1 ORDER BY tbl, idx")]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE sqlite_sequence SET seq = 0",
        "UPDATE \"SQLITE_SEQUENCE\" SET seq = 0 WHERE name = 'pr_gate_decisions'",
        "DELETE FROM main.sqlite_sequence",
        "INSERT INTO sqlite_sequence (name, seq) VALUES ('files', 99)",
        "INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('files', NULL, '1')",
    ],
)
async def test_mutate_refuses_sqlite_internal_tables(server: Running, sql: str) -> None:
    with sqlite3.connect(server.db.path) as conn:
        conn.execute("ANALYZE")  # SQLite's statistics table, sqlite_stat1, exists from now
    writer = server.token("db:write")
    status, body = await tool(server, writer, "mutate_workflow_db",
                              {"sql": "INSERT INTO files (data) VALUES (x'01')"})  # fmt: skip
    assert status == 200, body
    before = sequences(server), stats(server)
    status, body = await tool(server, writer, "mutate_workflow_db", {"sql": sql})
    assert status in (400, 403), body
    if status == 403:
        assert body["error"] == "protected_table" and "sqlite_" in body["detail"].lower()
    assert (sequences(server), stats(server)) == before
    # The writer's own AUTOINCREMENT table still counts on.
    insert = "INSERT INTO files (data) VALUES (x'02') RETURNING id"
    status, body = await tool(server, writer, "mutate_workflow_db", {"sql": insert})
    assert status == 200 and body["result"]["rows"] == [[2]], body


async def test_mutate_refuses_every_bot_table(server: Running) -> None:
    tables = sorted(bot_schema().tables | {"sqlite_sequence"})
    assert {"lease_history", "lanes", "workers", "deliveries"} <= set(tables)
    for n, table in enumerate(tables):
        if n % 25 == 0:  # a token's burst of tools calls is 30: a fresh one before it runs out
            writer = server.token("db:write")
        status, body = await tool(server, writer, "mutate_workflow_db",
                                  {"sql": f"DELETE FROM {table}"})  # fmt: skip
        assert status in (400, 403), (table, body)
        assert table in body["detail"], (table, body)


async def test_one_mutation_cannot_fill_the_disk_the_bots_state_is_on(server: Running) -> None:
    token = server.token("db:read,db:write")
    flood = (
        "INSERT INTO files (data) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
        "FROM n WHERE i < 100) SELECT zeroblob(4000000) FROM n"
    )
    status, body = await tool(server, token, "mutate_workflow_db", {"sql": flood})
    assert (status, body["error"]) == (422, "query_too_large"), body
    assert "grow the database" in body["detail"]
    status, body = await tool(
        server, token, "query_workflow_db", {"sql": "SELECT count(*) FROM files"}
    )
    assert status == 200 and body["result"]["rows"] == [[0]], body
    # A mutation of ordinary size still goes through.
    small = "INSERT INTO files (data) VALUES (zeroblob(1000000))"
    status, body = await tool(server, token, "mutate_workflow_db", {"sql": small})
    assert status == 200 and body["result"]["rowcount"] == 1, body


async def test_an_infinite_float_is_still_json(server: Running) -> None:
    token = server.token("db:read")
    sql = "SELECT 1e999 AS up, -1e999 AS down, 0.5 AS half"
    async with server.http.post(
        f"{server.base}/api/v1/tools/query_workflow_db",
        json={"arguments": {"sql": sql}},
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        text = await resp.text()
    assert resp.status == 200, text

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    body = json.loads(text, parse_constant=refuse)
    assert body["result"]["rows"] == [[{"$float": "inf"}, {"$float": "-inf"}, 0.5]]


async def test_text_that_is_not_utf8_never_makes_a_table_unreadable(server: Running) -> None:
    token = server.token("db:read,db:write")
    sql = "INSERT INTO files (data) VALUES (CAST(x'ff' AS TEXT)), ('plain')"
    status, body = await tool(server, token, "mutate_workflow_db", {"sql": sql})
    assert status == 200, body
    sql = "SELECT data FROM files ORDER BY id"
    status, body = await tool(server, token, "query_workflow_db", {"sql": sql})
    assert status == 200, body
    assert body["result"]["rows"] == [[{"$bytes": "/w=="}], ["plain"]]
