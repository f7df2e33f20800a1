"""Reading and changing rows through the query and mutate routes, on both stores: a real
SQLite file and a PostgreSQL database (where the routes are confined by PostgreSQL's parser
and a database role; tests/integration/workflowdb/test_pg_db_tools.py has the attacks there)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reviewbot.store.database import SQLiteDatabase
from reviewbot.workflowdb.access import AccessDenied, DBAccess
from reviewbot.workflowdb.bootstrap import open_existing_store, open_store
from reviewbot.workflowdb.migrations import apply_workflow_db_migration
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import ProtectedTable
from reviewbot.workflowdb.query import (
    QueryFailed,
    QueryRefused,
    mutate_workflow_db,
    query_workflow_db,
)
from tests.support.store_fixtures import AUTO_ID, require_postgres, url_with_database

RW = DBAccess.READ_WRITE
SQLITE_ONLY = "SQLite's own mechanism; its PostgreSQL counterpart is in test_pg_db_tools.py"


NOTES = {
    kind: f"CREATE TABLE IF NOT EXISTS notes (id {AUTO_ID[kind]}, body TEXT NOT NULL, n INT);"
    for kind in AUTO_ID
}


@pytest.fixture
def paths(workflow_paths: WorkflowPaths, store_kind: str) -> WorkflowPaths:
    paths = workflow_paths
    open_store(paths).close()
    (paths.migrations_dir / "site_0100_notes.sql").write_text(NOTES[store_kind])
    apply_workflow_db_migration("site_0100_notes.sql", paths=paths, access=RW, applied_by="test")
    db = open_store(paths)
    try:
        with db.write() as tx:
            for body, n in [("a", 1), ("b;c", 2), ("d", 3)]:
                tx.execute("INSERT INTO notes (body, n) VALUES (?, ?)", (body, n))
    finally:
        db.close()
    return paths


def pg(store_kind: str) -> bool:
    return store_kind == "postgresql"


def query(paths: WorkflowPaths, sql: str, params: tuple[Any, ...] = (), **kw: Any) -> Any:
    kw.setdefault("access", DBAccess.READ)
    return query_workflow_db(sql, params, paths=paths, **kw)


def mutate(paths: WorkflowPaths, sql: str, params: tuple[Any, ...] = (), **kw: Any) -> Any:
    kw.setdefault("access", RW)
    return mutate_workflow_db(sql, params, paths=paths, **kw)


def bodies(paths: WorkflowPaths) -> list[str]:
    db = open_existing_store(paths)
    try:
        with db.read() as tx:
            return [r[0] for r in tx.all("SELECT body FROM notes ORDER BY id")]
    finally:
        db.close()


# --- query ----------------------------------------------------------------------------------


def test_select_with_parameters(paths: WorkflowPaths) -> None:
    result = query(paths, "SELECT id, body FROM notes WHERE n >= ? ORDER BY id", (2,))
    assert result.columns == ["id", "body"]
    assert result.rows == [[2, "b;c"], [3, "d"]]
    assert result.rowcount == 2 and not result.truncated


def test_with_and_explain_and_trailing_comment(paths: WorkflowPaths, store_kind: str) -> None:
    cte = query(paths, "WITH big AS (SELECT * FROM notes WHERE n > 1) SELECT count(*) FROM big;")
    assert cte.rows == [[2]]
    explain = "EXPLAIN" if pg(store_kind) else "EXPLAIN QUERY PLAN"
    plan = query(paths, f"{explain} SELECT * FROM notes WHERE id = 1 -- why")
    assert plan.rowcount >= 1
    assert query(paths, "select replace(body, ';', '') from notes where id = 2").rows == [["bc"]]


def test_describe_table(paths: WorkflowPaths) -> None:
    result = query(paths, "describe notes")
    assert result.columns[:2] == ["name", "type"]
    assert [r[0] for r in result.rows] == ["id", "body", "n"]
    assert [result.rows[1][0], result.rows[1][1].lower(), result.rows[1][2]] == ["body", "text", 1]
    assert query(paths, 'DESCRIBE "schema_migration_log";').rowcount == 7


def test_describe_unknown_table_is_refused(paths: WorkflowPaths) -> None:
    with pytest.raises(QueryRefused, match="no table or view named nope"):
        query(paths, "describe nope")
    with pytest.raises(QueryRefused, match="describe TABLE"):
        query(paths, "describe notes extra")


def test_rows_are_limited(paths: WorkflowPaths) -> None:
    result = query(paths, "SELECT id FROM notes ORDER BY id", max_rows=2)
    assert result.rows == [[1], [2]] and result.truncated


UNPARSED = "does not parse"


@pytest.mark.parametrize(
    ("sql", "problem", "pg_problem"),
    [
        (
            "WITH x AS (SELECT 1) INSERT INTO notes (body) SELECT 'x' FROM x",
            "INSERT is not allowed",
            None,
        ),
        ("WITH x AS (SELECT 1) DELETE FROM notes", "DELETE is not allowed", None),
        ("WITH x AS (SELECT 1) UPDATE notes SET body = 'x'", "UPDATE is not allowed", None),
        ("WITH x AS (SELECT 1) REPLACE INTO notes (id, body) VALUES (1, 'x')", "REPLACE",
         UNPARSED),
        ("EXPLAIN DELETE FROM notes", "DELETE is not allowed", "only of a SELECT"),
        ("SELECT 1; DELETE FROM notes", "exactly one statement", None),
        ("SELECT 1; SELECT 2", "exactly one statement", None),
        ("DELETE FROM notes", "DELETE is not allowed", None),
        ("INSERT INTO notes (body) VALUES ('x')", "INSERT is not allowed", None),
        ("PRAGMA table_info(notes)", "PRAGMA is not allowed", UNPARSED),
        ("-- a comment first\npragma writable_schema = 1", "PRAGMA is not allowed", UNPARSED),
        ("ATTACH 'other.sqlite' AS o", "ATTACH is not allowed", UNPARSED),
        ("CREATE TABLE x (a)", "CREATE is not allowed", UNPARSED),
        ("CREATE TABLE x (a int)", "CREATE is not allowed", None),
        ("VACUUM", "VACUUM is not allowed", None),
        ("SELECT 'unterminated", "unterminated", None),
        ("", "found 0", None),
    ],
)  # fmt: skip
def test_query_refusals(
    paths: WorkflowPaths, store_kind: str, sql: str, problem: str, pg_problem: str | None
) -> None:
    expected = pg_problem if pg(store_kind) and pg_problem is not None else problem
    with pytest.raises(QueryRefused, match=expected):
        query(paths, sql)
    assert bodies(paths) == ["a", "b;c", "d"]


def test_engine_refuses_what_the_text_check_lets_through(
    paths: WorkflowPaths, store_kind: str
) -> None:
    if pg(store_kind):
        pytest.skip(SQLITE_ONLY)
    # Table-valued pragmas read like a SELECT; the read-only authorizer still says no.
    with pytest.raises(QueryFailed, match="not authorized"):
        query(paths, "SELECT * FROM pragma_table_info('notes')")


def test_read_only_store_refuses_writes(paths: WorkflowPaths, store_kind: str) -> None:
    if pg(store_kind):
        pytest.skip(SQLITE_ONLY)
    db = SQLiteDatabase(paths.db_file, read_only=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"), db.read() as tx:
            tx.execute("DELETE FROM notes")
    finally:
        db.close()
    assert bodies(paths) == ["a", "b;c", "d"]


def test_query_reads_while_a_writer_holds_the_lock(paths: WorkflowPaths, store_kind: str) -> None:
    if pg(store_kind):
        assert paths.database_url is not None
        writer = psycopg.connect(paths.database_url)  # one open write transaction
        writer.execute("UPDATE notes SET n = n")
        try:
            assert query(paths, "SELECT count(*) FROM notes").rows == [[3]]
        finally:
            writer.rollback()
            writer.close()
        return
    conn = sqlite3.connect(paths.db_file, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert query(paths, "SELECT count(*) FROM notes").rows == [[3]]
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_query_needs_read_access(paths: WorkflowPaths) -> None:
    with pytest.raises(AccessDenied) as err:
        query(paths, "SELECT 1", access=DBAccess.NONE)
    assert str(err.value) == "requires read DB access; this process has none"


def test_query_without_a_database(tmp_path: Path, store_kind: str) -> None:
    if pg(store_kind):
        admin = require_postgres()
        gone = url_with_database(admin, "rb_test_no_such_database")
        with pytest.raises(QueryFailed, match="cannot reach PostgreSQL"):
            query(WorkflowPaths(tmp_path / "none", None, gone), "SELECT 1")
        return
    with pytest.raises(QueryFailed, match="no workflow database"):
        query(WorkflowPaths(tmp_path / "none"), "SELECT 1")
    assert not (tmp_path / "none").exists()


# --- mutate -----------------------------------------------------------------------------------


def test_insert_update_delete(paths: WorkflowPaths) -> None:
    inserted = mutate(paths, "INSERT INTO notes (body, n) VALUES (?, ?)", ("e", 5))
    assert inserted.rowcount == 1 and inserted.columns == [] and inserted.rows == []
    updated = mutate(paths, "UPDATE notes SET n = n + 10 WHERE n < ?", (3,))
    assert updated.rowcount == 2
    deleted = mutate(paths, "delete from notes where body = 'a'")
    assert deleted.rowcount == 1
    assert bodies(paths) == ["b;c", "d", "e"]


def test_returning(paths: WorkflowPaths) -> None:
    result = mutate(paths, "INSERT INTO notes (body) VALUES ('x'), ('y') RETURNING id, body")
    assert result.columns == ["id", "body"]
    assert result.rows == [[4, "x"], [5, "y"]]
    assert result.rowcount == 2
    gone = mutate(paths, "DELETE FROM notes WHERE id > 3 RETURNING body")
    assert gone.rows == [["x"], ["y"]] and gone.rowcount == 2


@pytest.mark.parametrize(
    ("sql", "problem", "pg_problem"),
    [
        ("CREATE TABLE IF NOT EXISTS x (a)", "CREATE is not allowed", UNPARSED),
        ("CREATE TABLE IF NOT EXISTS x (a int)", "CREATE is not allowed", None),
        ("DROP TABLE notes", "DROP is not allowed", None),
        ("ALTER TABLE notes ADD COLUMN z", "ALTER is not allowed", UNPARSED),
        ("ALTER TABLE notes ADD COLUMN z int", "ALTER is not allowed", "ALTER TABLE is not"),
        ("PRAGMA foreign_keys = OFF", "PRAGMA is not allowed", UNPARSED),
        ("/* x */ pragma foreign_keys = OFF", "PRAGMA is not allowed", UNPARSED),
        ("ATTACH 'x.sqlite' AS x", "ATTACH is not allowed", UNPARSED),
        ("DETACH x", "DETACH is not allowed", UNPARSED),
        ("VACUUM", "VACUUM is not allowed", None),
        ("REINDEX", "REINDEX is not allowed", UNPARSED),
        ("SELECT * FROM notes", "SELECT is not allowed", None),
        ("WITH x AS (SELECT 1) DELETE FROM notes", "WITH is not allowed", None),
        ("DELETE FROM notes; DROP TABLE notes", "exactly one statement", None),
        ("DELETE FROM notes WHERE id = 1; DELETE FROM notes", "exactly one statement", None),
        ("BEGIN", "BEGIN is not allowed", "transaction control is not allowed"),
        ("INSERT INTO notes (body) VALUES ('x'); COMMIT", "exactly one statement", None),
        ("DELETE FROM schema_migration_log", "migration ledger",
         "schema_migration_log is one of reviewbot's own"),
        ("UPDATE \"schema_migration_log\" SET applied_by = 'me'", "migration ledger",
         "schema_migration_log is one of reviewbot's own"),
        ("DELETE FROM sqlite_master", "schema table", "no table or view named sqlite_master"),
    ],
)  # fmt: skip
def test_mutate_refusals(
    paths: WorkflowPaths, store_kind: str, sql: str, problem: str, pg_problem: str | None
) -> None:
    expected = pg_problem if pg(store_kind) and pg_problem is not None else problem
    with pytest.raises((QueryRefused, ProtectedTable, QueryFailed), match=expected):
        mutate(paths, sql)
    assert bodies(paths) == ["a", "b;c", "d"]


def test_string_values_may_mention_anything(paths: WorkflowPaths) -> None:
    sql = "INSERT INTO notes (body) VALUES ('DROP TABLE schema_migration_log; PRAGMA x')"
    assert mutate(paths, sql).rowcount == 1
    assert bodies(paths)[-1] == "DROP TABLE schema_migration_log; PRAGMA x"


def test_engine_refuses_pragma_functions_in_a_mutation(
    paths: WorkflowPaths, store_kind: str
) -> None:
    if pg(store_kind):
        pytest.skip(SQLITE_ONLY)
    with pytest.raises(QueryFailed, match="not authorized"):
        mutate(paths, "INSERT INTO notes (body) SELECT name FROM pragma_table_info('notes')")
    assert bodies(paths) == ["a", "b;c", "d"]


def test_failing_mutation_changes_nothing(paths: WorkflowPaths) -> None:
    with pytest.raises(QueryFailed, match=r"(?i)not.null"):
        mutate(paths, "INSERT INTO notes (body) VALUES ('ok'), (NULL)")
    assert bodies(paths) == ["a", "b;c", "d"]


@pytest.mark.parametrize(("access", "held"), [(DBAccess.READ, "read"), (DBAccess.NONE, "none")])
def test_mutate_requires_read_write_access(
    paths: WorkflowPaths, access: DBAccess, held: str
) -> None:
    with pytest.raises(AccessDenied) as err:
        mutate(paths, "DELETE FROM notes", access=access)
    assert str(err.value) == f"requires read-write DB access; this process has {held}"
    assert bodies(paths) == ["a", "b;c", "d"]
