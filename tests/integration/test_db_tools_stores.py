"""The DB tools over HTTP on both stores: the bot's tables stay out of reach.

On SQLite the tools run confined (read-only connection, an authorizer on the bot's tables
and secrets). On PostgreSQL that confinement has no equivalent yet, so ``query`` and
``mutate`` refuse with ``unsupported_store`` instead of running; migrations keep the text
checks on both stores. Each test asserts that nothing changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.query import QueryUnsupported, query_workflow_db
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.test_db_tool_boundary import add_migration, rw_session, tool


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
    if store_kind == "postgresql":
        assert (status, body["error"]) == (501, "unsupported_store"), body
    elif "api_tokens" in arguments["sql"]:
        assert (status, body["error"]) == (403, "protected_table"), body
    else:
        assert status == 200, body  # reading leases is allowed on SQLite
    assert token_rows(server) == before


async def test_a_migration_cannot_drop_the_bots_tables(server: Running) -> None:
    add_migration(server, "site_evil.sql", "DROP TABLE IF EXISTS api_tokens;")
    before = token_rows(server)
    status, body = await tool(
        server, rw_session(server), "apply_workflow_db_migration", {"file": "site_evil.sql"}
    )
    assert (status, body["error"]) == (403, "protected_table"), body
    assert token_rows(server) == before


def test_query_refuses_on_postgresql_before_connecting(postgres_url: str, tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data", None, postgres_url)
    with pytest.raises(QueryUnsupported, match="PostgreSQL"):
        query_workflow_db("SELECT 1", paths=paths, access=DBAccess.READ)
