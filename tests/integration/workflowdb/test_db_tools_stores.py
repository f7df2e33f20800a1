"""The DB tools over HTTP on both stores: the same contract, the bot's tables out of reach.

On SQLite the tools run confined by a read-only connection and an authorizer; on PostgreSQL
by PostgreSQL's own parser and a database role (:mod:`reviewbot.workflowdb.pgtools`).
Each test asserts that nothing changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.tools_support import add_migration, rw_session, tool


@pytest.fixture
async def server(workflow_paths: WorkflowPaths) -> AsyncIterator[Running]:
    settings = make_settings(workflow_paths.data_dir, database_url=workflow_paths.database_url)
    async with running_server(settings, forges={}, run_workers=False) as running:
        running.token("lease", name="victim")
        yield running


def token_rows(srv: Running) -> list[tuple[Any, ...]]:
    with srv.db.read() as tx:
        return [tuple(r) for r in tx.all("SELECT id, name, token_hash FROM api_tokens")]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("query_workflow_db", {"sql": "SELECT token_hash FROM api_tokens"}),
        ("query_workflow_db", {"sql": "SELECT * FROM leases"}),
        ("mutate_workflow_db", {"sql": "DELETE FROM api_tokens"}),
        ("mutate_workflow_db", {"sql": "UPDATE api_tokens SET scopes = 'merge'"}),
    ],
)
async def test_query_and_mutate_never_reach_the_bots_tables(
    server: Running, store_kind: str, name: str, arguments: dict[str, Any]
) -> None:
    before = token_rows(server)
    status, body = await tool(server, rw_session(server), name, arguments)
    if "api_tokens" in arguments["sql"]:
        assert (status, body["error"]) == (403, "protected_table"), body
    else:
        assert status == 200, body  # reading leases is allowed on both stores
    assert token_rows(server) == before


async def test_a_migration_cannot_drop_the_bots_tables(server: Running) -> None:
    add_migration(server, "site_evil.sql", "DROP TABLE IF EXISTS api_tokens;")
    before = token_rows(server)
    status, body = await tool(
        server, rw_session(server), "apply_workflow_db_migration", {"file": "site_evil.sql"}
    )
    assert (status, body["error"]) == (403, "protected_table"), body
    assert token_rows(server) == before


async def test_a_session_migrates_writes_and_reads_back_its_own_table(server: Running) -> None:
    session = rw_session(server)
    add_migration(
        server, "site_tasks.sql", "CREATE TABLE IF NOT EXISTS tasks (name TEXT NOT NULL, n INT);"
    )
    status, body = await tool(
        server, session, "apply_workflow_db_migration", {"file": "site_tasks.sql"}
    )
    assert status == 200, body
    sql = "INSERT INTO tasks (name, n) VALUES (?, ?), (?, ?)"
    status, body = await tool(
        server, session, "mutate_workflow_db", {"sql": sql, "params": ["a", 1, "b", 2]}
    )
    assert (status, body["result"]["rowcount"]) == (200, 2), body
    status, body = await tool(
        server, session, "query_workflow_db", {"sql": "SELECT name, n FROM tasks ORDER BY n"}
    )
    assert (status, body["result"]["rows"]) == (200, [["a", 1], ["b", 2]]), body
    for name, sql in (
        ("mutate_workflow_db", "DELETE FROM leases"),
        ("mutate_workflow_db", "INSERT INTO tasks (name) SELECT token_hash FROM api_tokens"),
        ("query_workflow_db", "SELECT * FROM api_tokens"),
    ):
        status, body = await tool(server, session, name, {"sql": sql})
        assert (status, body["error"]) == (403, "protected_table"), (sql, body)
