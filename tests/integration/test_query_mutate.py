"""Reading and changing rows through the query and mutate routes, on real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from reviewbot.store.database import SQLiteDatabase
from reviewbot.workflowdb.access import AccessDenied, DBAccess
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.migrations import apply_workflow_db_migration
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.query import (
    QueryFailed,
    QueryRefused,
    mutate_workflow_db,
    query_workflow_db,
)

RW = DBAccess.READ_WRITE


@pytest.fixture
def paths(tmp_path: Path) -> WorkflowPaths:
    paths = WorkflowPaths(tmp_path / "data")
    open_store(paths).close()
    (paths.migrations_dir / "site_0100_notes.sql").write_text(
        "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL, n INT);"
    )
    apply_workflow_db_migration("site_0100_notes.sql", paths=paths, access=RW, applied_by="test")
    conn = sqlite3.connect(paths.db_file)
    conn.executemany("INSERT INTO notes (body, n) VALUES (?, ?)", [("a", 1), ("b;c", 2), ("d", 3)])
    conn.commit()
    conn.close()
    return paths


def query(paths: WorkflowPaths, sql: str, params: tuple[Any, ...] = (), **kw: Any) -> Any:
    kw.setdefault("access", DBAccess.READ)
    return query_workflow_db(sql, params, paths=paths, **kw)


def mutate(paths: WorkflowPaths, sql: str, params: tuple[Any, ...] = (), **kw: Any) -> Any:
    kw.setdefault("access", RW)
    return mutate_workflow_db(sql, params, paths=paths, **kw)


def bodies(paths: WorkflowPaths) -> list[str]:
    conn = sqlite3.connect(paths.db_file)
    try:
        return [r[0] for r in conn.execute("SELECT body FROM notes ORDER BY id")]
    finally:
        conn.close()


# --- query ----------------------------------------------------------------------------------


def test_select_with_parameters(paths: WorkflowPaths) -> None:
    result = query(paths, "SELECT id, body FROM notes WHERE n >= ? ORDER BY id", (2,))
    assert result.columns == ["id", "body"]
    assert result.rows == [[2, "b;c"], [3, "d"]]
    assert result.rowcount == 2 and not result.truncated


def test_with_and_explain_and_trailing_comment(paths: WorkflowPaths) -> None:
    cte = query(paths, "WITH big AS (SELECT * FROM notes WHERE n > 1) SELECT count(*) FROM big;")
    assert cte.rows == [[2]]
    plan = query(paths, "EXPLAIN QUERY PLAN SELECT * FROM notes WHERE id = 1 -- why")
    assert plan.rowcount >= 1
    assert query(paths, "select replace(body, ';', '') from notes where id = 2").rows == [["bc"]]


def test_describe_table(paths: WorkflowPaths) -> None:
    result = query(paths, "describe notes")
    assert result.columns[:2] == ["name", "type"]
    assert [r[0] for r in result.rows] == ["id", "body", "n"]
    assert result.rows[1][:3] == ["body", "TEXT", 1]
    assert query(paths, 'DESCRIBE "schema_migration_log";').rowcount == 7


def test_describe_unknown_table_is_refused(paths: WorkflowPaths) -> None:
    with pytest.raises(QueryRefused, match="no table or view named nope"):
        query(paths, "describe nope")
    with pytest.raises(QueryRefused, match="describe TABLE"):
        query(paths, "describe notes extra")


def test_rows_are_limited(paths: WorkflowPaths) -> None:
    result = query(paths, "SELECT id FROM notes ORDER BY id", max_rows=2)
    assert result.rows == [[1], [2]] and result.truncated


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            "WITH x AS (SELECT 1) INSERT INTO notes (body) SELECT 'x' FROM x",
            "INSERT is not allowed",
        ),
        ("WITH x AS (SELECT 1) DELETE FROM notes", "DELETE is not allowed"),
        ("WITH x AS (SELECT 1) UPDATE notes SET body = 'x'", "UPDATE is not allowed"),
        ("WITH x AS (SELECT 1) REPLACE INTO notes (id, body) VALUES (1, 'x')", "REPLACE"),
        ("EXPLAIN DELETE FROM notes", "DELETE is not allowed"),
        ("SELECT 1; DELETE FROM notes", "exactly one statement"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("DELETE FROM notes", "DELETE is not allowed"),
        ("INSERT INTO notes (body) VALUES ('x')", "INSERT is not allowed"),
        ("PRAGMA table_info(notes)", "PRAGMA is not allowed"),
        ("-- a comment first\npragma writable_schema = 1", "PRAGMA is not allowed"),
        ("ATTACH 'other.sqlite' AS o", "ATTACH is not allowed"),
        ("CREATE TABLE x (a)", "CREATE is not allowed"),
        ("VACUUM", "VACUUM is not allowed"),
        ("SELECT 'unterminated", "unterminated string"),
        ("", "found 0"),
    ],
)
def test_query_refusals(paths: WorkflowPaths, sql: str, problem: str) -> None:
    with pytest.raises(QueryRefused, match=problem):
        query(paths, sql)
    assert bodies(paths) == ["a", "b;c", "d"]


def test_engine_refuses_what_the_text_check_lets_through(paths: WorkflowPaths) -> None:
    # Table-valued pragmas read like a SELECT; the read-only authorizer still says no.
    with pytest.raises(QueryFailed, match="not authorized"):
        query(paths, "SELECT * FROM pragma_table_info('notes')")


def test_read_only_store_refuses_writes(paths: WorkflowPaths) -> None:
    db = SQLiteDatabase(paths.db_file, read_only=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"), db.read() as tx:
            tx.execute("DELETE FROM notes")
    finally:
        db.close()
    assert bodies(paths) == ["a", "b;c", "d"]


def test_query_reads_while_a_writer_holds_the_lock(paths: WorkflowPaths) -> None:
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


def test_query_without_a_database(tmp_path: Path) -> None:
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
    ("sql", "problem"),
    [
        ("CREATE TABLE IF NOT EXISTS x (a)", "CREATE is not allowed"),
        ("DROP TABLE notes", "DROP is not allowed"),
        ("ALTER TABLE notes ADD COLUMN z", "ALTER is not allowed"),
        ("PRAGMA foreign_keys = OFF", "PRAGMA is not allowed"),
        ("/* x */ pragma foreign_keys = OFF", "PRAGMA is not allowed"),
        ("ATTACH 'x.sqlite' AS x", "ATTACH is not allowed"),
        ("DETACH x", "DETACH is not allowed"),
        ("VACUUM", "VACUUM is not allowed"),
        ("REINDEX", "REINDEX is not allowed"),
        ("SELECT * FROM notes", "SELECT is not allowed"),
        ("WITH x AS (SELECT 1) DELETE FROM notes", "WITH is not allowed"),
        ("DELETE FROM notes; DROP TABLE notes", "exactly one statement"),
        ("DELETE FROM notes WHERE id = 1; DELETE FROM notes", "exactly one statement"),
        ("BEGIN", "BEGIN is not allowed"),
        ("INSERT INTO notes (body) VALUES ('x'); COMMIT", "exactly one statement"),
        ("DELETE FROM schema_migration_log", "migration ledger"),
        ("UPDATE \"schema_migration_log\" SET applied_by = 'me'", "migration ledger"),
        ("DELETE FROM sqlite_master", "schema table"),
    ],
)
def test_mutate_refusals(paths: WorkflowPaths, sql: str, problem: str) -> None:
    with pytest.raises(QueryRefused, match=problem):
        mutate(paths, sql)
    assert bodies(paths) == ["a", "b;c", "d"]


def test_string_values_may_mention_anything(paths: WorkflowPaths) -> None:
    sql = "INSERT INTO notes (body) VALUES ('DROP TABLE schema_migration_log; PRAGMA x')"
    assert mutate(paths, sql).rowcount == 1
    assert bodies(paths)[-1] == "DROP TABLE schema_migration_log; PRAGMA x"


def test_engine_refuses_pragma_functions_in_a_mutation(paths: WorkflowPaths) -> None:
    with pytest.raises(QueryFailed, match="not authorized"):
        mutate(paths, "INSERT INTO notes (body) SELECT name FROM pragma_table_info('notes')")
    assert bodies(paths) == ["a", "b;c", "d"]


def test_failing_mutation_changes_nothing(paths: WorkflowPaths) -> None:
    with pytest.raises(QueryFailed, match="NOT NULL constraint failed"):
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
