"""The DB tools against a real server over HTTP: the bot's own state stays out of reach.

Every attack here was once answered 200: a ``db:write`` token changing ``leases.holder`` or
forging a row of ``api_tokens``, a ``db:read`` token reading token hashes, a repository-bound
token reading every repository, a migration dropping ``api_tokens``. Each test asserts the
refusal names what was refused and that nothing changed. Every test runs on both stores.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.tools import SESSIONS
from reviewbot.store.tokens import hash_token
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.migrations import migration_log, table_exists
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.tools_support import (
    add_migration,
    call,
    hold_a_lease,
    paths_of,
    rw_session,
    session,
    tool,
)

FORGED = "rbt_forged-token-of-my-choice"
RUNAWAY = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c"
TIMEOUT_S = 1.5  # the server's per-statement limit in these tests


@pytest.fixture
async def server(workflow_paths: WorkflowPaths) -> AsyncIterator[Running]:
    settings = make_settings(
        workflow_paths.data_dir,
        database_url=workflow_paths.database_url,
        query_timeout_s=TIMEOUT_S,
    )
    async with running_server(settings, forges={}, run_workers=False) as running:
        add_migration(running, "site_notes.sql", "CREATE TABLE IF NOT EXISTS notes (body TEXT);")
        status, body = await tool(running, rw_session(running), "apply_workflow_db_migration",
                                  {"file": "site_notes.sql"})  # fmt: skip
        assert status == 200, body
        yield running


def in_dialect(store_kind: str, sql: str) -> str:
    """``sql`` with SQLite's ``[name]`` quoting as PostgreSQL's ``"name"`` there."""
    return sql.replace("[", '"').replace("]", '"') if store_kind == "postgresql" else sql


def token_rows(srv: Running) -> list[tuple[Any, ...]]:
    with srv.db.read() as tx:
        return [tuple(r) for r in tx.all("SELECT * FROM api_tokens ORDER BY id")]


# -- mutate cannot touch the bot's tables -----------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        ("UPDATE leases SET holder = 'mallory'", "leases"),
        ('UPDATE "LEASES" SET epoch = epoch + 1', "LEASES"),
        ("DELETE FROM lease_epochs", "lease_epochs"),
        ("UPDATE [Leases] SET holder = (WITH x AS (SELECT 'm') SELECT * FROM x)", "Leases"),
        ("DELETE FROM workers", "workers"),
        ("DELETE FROM review_outbox", "review_outbox"),
        ("DELETE FROM schema_migration_log", "schema_migration_log"),
    ],
)
async def test_a_db_write_token_cannot_change_leases_or_the_bot_state(
    server: Running, store_kind: str, sql: str, table: str
) -> None:
    lease_token, lease = await hold_a_lease(server)
    writer = server.token("db:write")
    sql = in_dialect(store_kind, sql)
    status, body = await tool(server, writer, "mutate_workflow_db", {"sql": sql})
    assert status in (400, 403), body
    assert table.lower() in body["detail"].lower(), body
    status, leases = await call(server, "GET", "/api/v1/leases", lease_token)
    assert status == 200
    (now,) = leases["leases"]
    assert (now["holder"], now["epoch"], now["phase"]) == (
        lease["holder"],
        lease["epoch"],
        "claimed",
    )
    # The writer's own workflow tables stay fully usable.
    status, body = await tool(server, writer, "mutate_workflow_db",
                              {"sql": "INSERT INTO notes (body) VALUES ('ok')"})  # fmt: skip
    assert (status, body["result"]["rowcount"]) == (200, 1)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO api_tokens (name, token_hash, prefix, scopes, created_at) "
        "VALUES ('forged', ?, 'rbt_forg', 'db:write,read,lease,merge', '2026-01-01')",
        'INSERT INTO "Api_Tokens" (name, token_hash, prefix, scopes, created_at) '
        "SELECT 'forged', ?, 'rbt_forg', 'read', '2026-01-01'",
        "UPDATE api_tokens SET token_hash = ?",
    ],
)
async def test_a_db_write_token_cannot_forge_a_token(server: Running, sql: str) -> None:
    writer = server.token("db:write", name="writer")
    before = token_rows(server)
    status, body = await tool(
        server, writer, "mutate_workflow_db", {"sql": sql, "params": [hash_token(FORGED)]}
    )
    assert (status, body["error"]) == (403, "protected_table"), body
    assert "api_tokens" in body["detail"].lower()
    assert token_rows(server) == before
    status, body = await call(server, "GET", "/api/v1/decisions", FORGED)
    assert (status, body["error"]) == (401, "unauthorized")
    # The writer's token is unchanged and still works.
    status, _ = await tool(server, writer, "query_workflow_db", {"sql": "SELECT 1"})
    assert status == 200


# -- nothing reads the token hashes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "sql"),
    [
        ("query_workflow_db", "SELECT token_hash FROM api_tokens"),
        ("query_workflow_db", "SELECT count(*) FROM api_tokens"),
        ("query_workflow_db", 'SELECT * FROM (SELECT * FROM "API_TOKENS") AS t'),
        ("query_workflow_db", "WITH t AS (SELECT name FROM [api_tokens]) SELECT * FROM t"),
        ("query_workflow_db", "SELECT 1 WHERE EXISTS (SELECT 1 FROM api_tokens)"),
        ("mutate_workflow_db", "INSERT INTO notes (body) SELECT token_hash FROM api_tokens"),
    ],
)
async def test_no_token_reads_the_token_table(
    server: Running, store_kind: str, name: str, sql: str
) -> None:
    token = server.token("db:write")
    status, body = await tool(server, token, name, {"sql": in_dialect(store_kind, sql)})
    assert (status, body["error"]) == (403, "protected_table"), body
    assert "api_tokens" in body["detail"].lower()
    with server.db.read() as tx:
        assert tx.one("SELECT count(*) FROM notes")[0] == 0  # type: ignore[index]
    # The rest of the bot's state is readable by an unbound db:read token.
    reader = server.token("db:read")
    status, body = await tool(server, reader, "query_workflow_db",
                              {"sql": "SELECT count(*) FROM leases"})  # fmt: skip
    assert (status, body["result"]["rows"]) == (200, [[0]])


# -- a repository-bound token gets no DB tools ---------------------------------------------------


async def test_a_repository_bound_token_cannot_call_the_db_tools(server: Running) -> None:
    bound = server.token("db:read,db:write,read", name="bound", repo="gitea:acme/api")
    for name, sql in (
        ("query_workflow_db", "SELECT * FROM pr_gate_decisions"),
        ("query_workflow_db", "SELECT * FROM notes"),
        ("mutate_workflow_db", "DELETE FROM notes"),
    ):
        status, body = await tool(server, bound, name, {"sql": sql})
        assert (status, body["error"]) == (403, "repo_not_allowed"), body
        assert "gitea:acme/api" in body["detail"] and "'bound'" in body["detail"]
    # The REST read keeps working, with the binding applied.
    assert (await call(server, "GET", "/api/v1/decisions", bound))[0] == 200
    status, body = await call(server, "GET", "/api/v1/decisions?forge=gitea&repo=acme/other", bound)
    assert (status, body["error"]) == (403, "repo_not_allowed")


# -- migrations through the tools route --------------------------------------------------------


async def test_a_read_write_session_applies_a_migration_recorded_as_the_applier(
    server: Running,
) -> None:
    sessions = server.app[SESSIONS]
    run = sessions.open_run(
        "run-migrate", db_access=DBAccess.READ_WRITE, tools=run_tools(paths_of(server), sessions)
    )
    step = sessions.open_child(run.id, "agent")
    add_migration(server, "site_tags.sql", "CREATE TABLE IF NOT EXISTS tags (name TEXT);")
    token = sessions.issue_token(step.id, ttl_s=600)
    status, body = await tool(
        server, token, "apply_workflow_db_migration", {"file": "site_tags.sql"}
    )
    assert status == 200, body
    assert body["result"]["applied_by"] == "session:run-migrate/agent"
    assert migration_log(server.db)[-1]["applied_by"] == "session:run-migrate/agent"
    status, body = await tool(server, token, "mutate_workflow_db",
                              {"sql": "INSERT INTO tags (name) VALUES ('x')"})  # fmt: skip
    assert status == 200, body

    reader = session(server, DBAccess.READ)
    status, body = await tool(server, reader, "apply_workflow_db_migration",
                              {"file": "site_tags.sql"})  # fmt: skip
    assert (status, body["error"]) == (403, "permission_denied")
    assert "read-write" in body["detail"]


@pytest.mark.parametrize(
    ("name", "sql", "error", "named"),
    [
        ("site_drop.sql", "DROP TABLE IF EXISTS api_tokens;", "protected_table", "api_tokens"),
        ("site_alter.sql", "ALTER TABLE leases ADD COLUMN note TEXT;", "protected_table", "leases"),
        ("site_rename.sql", 'ALTER TABLE "Workers" RENAME TO w;', "protected_table", "Workers"),
        ("site_idx.sql", "CREATE INDEX IF NOT EXISTS i ON leases (holder);", "protected_table",
         "leases"),
        ("site_didx.sql", "DROP INDEX IF EXISTS review_decisions_by_pr;", "protected_table",
         "review_decisions_by_pr"),
        ("site_fk.sql", "CREATE TABLE IF NOT EXISTS pin (w TEXT REFERENCES workers (identity));",
         "protected_table", "workers"),
        ("site_two.sql", "CREATE TABLE IF NOT EXISTS ok (a);\nDROP TABLE IF EXISTS merged_pulls;",
         "protected_table", "merged_pulls"),
        ("0003_leases.sql", "CREATE TABLE IF NOT EXISTS ok (a);", "migration_refused",
         "0003_leases.sql"),
        ("0099_next.sql", "CREATE TABLE IF NOT EXISTS ok (a);", "migration_refused",
         "NNNN_name.sql"),
    ],
)  # fmt: skip
async def test_a_migration_touching_the_bot_schema_is_refused_before_anything_runs(
    server: Running, name: str, sql: str, error: str, named: str
) -> None:
    reader = server.token("read")
    ledger = migration_log(server.db)
    if name != "0003_leases.sql":  # that one is the shipped file, installed at start
        add_migration(server, name, sql)
    status, body = await tool(server, rw_session(server), "apply_workflow_db_migration",
                              {"file": name})  # fmt: skip
    assert (status, body["error"]) == (403 if error == "protected_table" else 400, error), body
    assert named in body["detail"]
    assert migration_log(server.db) == ledger  # no ledger row
    with server.db.read() as tx:
        assert not table_exists(tx, "ok")
    # Authenticated calls still work: the token table is intact.
    assert (await call(server, "GET", "/api/v1/decisions", reader))[0] == 200


# -- every registered tool is reachable ----------------------------------------------------------

TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "query_workflow_db": {"sql": "SELECT count(*) FROM notes"},
    "mutate_workflow_db": {"sql": "INSERT INTO notes (body) VALUES ('reached')"},
    "apply_workflow_db_migration": {"file": "site_notes.sql"},
    "record_finding": {"path": "a.py", "line": 1, "message": "m", "severity": "info"},
}


async def test_every_registered_tool_is_reachable_from_some_session_and_entry_path(
    server: Running,
) -> None:
    sessions = server.app[SESSIONS]
    registered = {t.name for t in run_tools(paths_of(server), sessions)}
    assert registered == set(TOOL_ARGUMENTS), "give every new tool its arguments here"

    run = sessions.open_run(
        "run-all", db_access=DBAccess.READ_WRITE, tools=run_tools(paths_of(server), sessions)
    )
    step = sessions.open_child(run.id, "reviewer-1")
    callers = {
        "run session": sessions.issue_token(run.id, ttl_s=600),
        "step session": sessions.issue_token(step.id, ttl_s=600),
        "db:write API token": server.token("db:write"),
    }
    reached: dict[str, list[str]] = {name: [] for name in registered}
    for name in sorted(registered):
        for who, token in callers.items():
            status, body = await tool(server, token, name, TOOL_ARGUMENTS[name])
            if status == 200:
                reached[name].append(who)
            else:
                assert body["error"] in ("not_session_owner", "permission_denied"), body
    assert all(reached.values()), reached


# -- bounded queries -------------------------------------------------------------------------------


async def test_runaway_queries_end_with_query_timeout_while_the_server_stays_responsive(
    server: Running,
) -> None:
    reader = server.token("db:read")
    lease_token, _ = await hold_a_lease(server)

    started = time.monotonic()
    runaways = [
        asyncio.create_task(tool(server, reader, "query_workflow_db", {"sql": RUNAWAY}))
        for _ in range(8)
    ]
    await asyncio.sleep(0.2)  # every worker of the tools' executor is busy now
    answered = 0
    while not all(t.done() for t in runaways):
        for method, path, token in (
            ("GET", "/healthz", None),
            ("GET", "/api/v1/leases", lease_token),
        ):
            t0 = time.monotonic()
            status, _ = await call(server, method, path, token)
            assert status == 200
            assert time.monotonic() - t0 < TIMEOUT_S, f"{path} waited behind the runaways"
            answered += 1
        await asyncio.sleep(0.05)
    assert answered >= 4  # they answered while the runaways ran, not after
    for task in runaways:
        status, body = task.result()
        assert (status, body["error"]) == (422, "query_timeout"), body
        assert f"{TIMEOUT_S:g} s" in body["detail"]
    # Eight statements of TIMEOUT_S each on a small executor: they queued, and all ended.
    assert time.monotonic() - started >= 2 * TIMEOUT_S


async def test_a_runaway_mutation_is_cancelled_and_rolled_back(server: Running) -> None:
    writer = server.token("db:write")
    sql = (
        "INSERT INTO notes (body) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
        "FROM c) SELECT 'row ' || i FROM c WHERE i % 2 = 0 OR i > 0"
    )
    status, body = await tool(server, writer, "mutate_workflow_db", {"sql": sql})
    assert (status, body["error"]) == (422, "query_timeout"), body
    with server.db.read() as tx:
        assert tx.one("SELECT count(*) FROM notes")[0] == 0  # type: ignore[index]


OVERSIZED = {
    "sqlite": [
        "SELECT zeroblob(5 * 1024 * 1024)",
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT 900) "
        "SELECT i, printf('%.10000c', 'x') FROM c",
    ],
    "postgresql": [
        "SELECT repeat('x', 5 * 1024 * 1024)",
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 900) "
        "SELECT i, repeat('x', 10000) FROM c",
    ],
}


@pytest.mark.parametrize("which", [0, 1])
async def test_an_oversized_answer_is_refused_as_query_too_large(
    server: Running, store_kind: str, which: int
) -> None:
    sql = OVERSIZED[store_kind][which]
    status, body = await tool(server, server.token("db:read"), "query_workflow_db", {"sql": sql})
    assert (status, body["error"]) == (422, "query_too_large"), body
