"""The migration allow-list: what a migration file may say, and what counts as destructive."""

from __future__ import annotations

import pytest

from reviewbot.workflowdb.allowlist import StatementKind, StatementRejected, classify
from reviewbot.workflowdb.sqltext import split_statements


def kind_of(sql: str) -> StatementKind:
    (stmt,) = split_statements(sql)
    return classify(stmt).kind


@pytest.mark.parametrize(
    ("sql", "kind", "destructive"),
    [
        ("CREATE TABLE IF NOT EXISTS t (a INTEGER)", StatementKind.CREATE_TABLE, False),
        ('create table if not exists "odd name" (a)', StatementKind.CREATE_TABLE, False),
        ("CREATE TABLE IF NOT EXISTS t (a) STRICT", StatementKind.CREATE_TABLE, False),
        ("CREATE INDEX IF NOT EXISTS i ON t (a)", StatementKind.CREATE_INDEX, False),
        (
            "CREATE UNIQUE INDEX IF NOT EXISTS i ON t (a) WHERE a > 0",
            StatementKind.CREATE_INDEX,
            False,
        ),
        ("DROP TABLE IF EXISTS t", StatementKind.DROP_TABLE, True),
        ("drop index if exists [i]", StatementKind.DROP_INDEX, True),
        ("ALTER TABLE t RENAME TO u", StatementKind.RENAME_TABLE, True),
        ("ALTER TABLE t RENAME COLUMN a TO b", StatementKind.RENAME_COLUMN, True),
        ("ALTER TABLE t RENAME a TO b", StatementKind.RENAME_COLUMN, True),
        ("ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'x;y'", StatementKind.ADD_COLUMN, False),
        ("ALTER TABLE t ADD b INTEGER", StatementKind.ADD_COLUMN, False),
        ("ALTER TABLE t DROP COLUMN b", StatementKind.DROP_COLUMN, True),
        ("-- why\n/* x */ ALTER TABLE t DROP b", StatementKind.DROP_COLUMN, True),
    ],
)
def test_allowed_statements(sql: str, kind: StatementKind, destructive: bool) -> None:
    assert kind_of(sql) is kind
    assert kind.destructive is destructive


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("PRAGMA foreign_keys = OFF", "PRAGMA is not allowed"),
        ("pragma writable_schema = 1", "PRAGMA is not allowed"),
        ("  PrAgMa\n journal_mode = DELETE", "PRAGMA is not allowed"),
        ("/* CREATE TABLE IF NOT EXISTS */ PRAGMA x", "PRAGMA is not allowed"),
        ("ATTACH DATABASE 'other.db' AS o", "ATTACH is not allowed"),
        ("attach 'x' as y", "ATTACH is not allowed"),
        ("DETACH o", "DETACH is not allowed"),
        ("VACUUM", "VACUUM is not allowed"),
        ("VACUUM INTO 'copy.db'", "VACUUM is not allowed"),
        ("REINDEX", "REINDEX is not allowed"),
        ("ANALYZE", "ANALYZE is not allowed"),
        ("INSERT INTO t VALUES (1)", "INSERT is not allowed"),
        ("REPLACE INTO t VALUES (1)", "REPLACE is not allowed"),
        ("UPDATE t SET a = 1", "UPDATE is not allowed"),
        ("DELETE FROM t", "DELETE is not allowed"),
        ("SELECT 1", "SELECT is not allowed"),
        ("WITH x AS (SELECT 1) DELETE FROM t", "WITH is not allowed"),
        ("SAVEPOINT s", "SAVEPOINT is not allowed"),
        ("ROLLBACK", "ROLLBACK is not allowed"),
        ("CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1", "CREATE TRIGGER"),
        ("CREATE VIEW v AS SELECT 1", "CREATE VIEW"),
        ("CREATE TEMP TABLE IF NOT EXISTS t (a)", "CREATE TEMP"),
        ("CREATE VIRTUAL TABLE v USING fts5(a)", "CREATE VIRTUAL"),
        ("CREATE TABLE t (a)", "must say IF NOT EXISTS"),
        ("CREATE TABLE IF EXISTS t (a)", "must say IF NOT EXISTS"),
        ("CREATE TABLE IF NOT EXISTS t AS SELECT 1 AS a", "AS SELECT is not allowed"),
        ("CREATE INDEX i ON t (a)", "must say IF NOT EXISTS"),
        ("CREATE UNIQUE INDEX i ON t (a)", "must say IF NOT EXISTS"),
        ("DROP TABLE t", "must say IF EXISTS"),
        ("DROP VIEW IF EXISTS v", "DROP VIEW"),
        ("DROP TRIGGER IF EXISTS tr", "DROP TRIGGER"),
        ("DROP TABLE IF EXISTS t; ", None),  # fine: a trailing semicolon is not a statement
        ("DROP TABLE IF EXISTS t, u", "unexpected ','"),
        ("CREATE TABLE IF NOT EXISTS main.t (a)", "schema-qualified"),
        ("CREATE TABLE IF NOT EXISTS other.t (a)", "schema-qualified"),
        ("DROP TABLE IF EXISTS temp.t", "schema-qualified"),
        ("DROP TABLE IF EXISTS schema_migration_log", "migration ledger"),
        ('DROP TABLE IF EXISTS "SCHEMA_MIGRATION_LOG"', "migration ledger"),
        ("ALTER TABLE schema_migration_log ADD COLUMN x", "migration ledger"),
        ("ALTER TABLE t RENAME TO schema_migration_log", "migration ledger"),
        ("CREATE INDEX IF NOT EXISTS i ON schema_migration_log (id)", "migration ledger"),
        ("DROP TABLE IF EXISTS sqlite_master", "reserved for SQLite"),
        ('"PRAGMA" foreign_keys = OFF', "must start with a keyword"),
        ("'PRAGMA' x", "must start with a keyword"),
        ("ALTER TABLE t SET x", "ALTER TABLE allows only"),
        ("ALTER INDEX i RENAME TO j", "only ALTER TABLE"),
        ("ALTER TABLE t DROP COLUMN a, b", "unexpected ','"),
        ("BEGIN", "BEGIN is not allowed"),
    ],
)
def test_rejected_statements(sql: str, reason: str | None) -> None:
    (stmt,) = split_statements(sql)
    if reason is None:
        classify(stmt)
        return
    with pytest.raises(StatementRejected) as err:
        classify(stmt)
    message = str(err.value)
    assert reason in message
    assert message.startswith(f"statement 1 (line 1: {stmt.first_line})")


def test_error_names_number_and_first_line_of_a_later_statement() -> None:
    statements = split_statements(
        "CREATE TABLE IF NOT EXISTS t (a);\n-- switch it off\npragma foreign_keys\n  = OFF;"
    )
    classify(statements[0])
    with pytest.raises(StatementRejected) as err:
        classify(statements[1])
    assert str(err.value).startswith("statement 2 (line 3: pragma foreign_keys)")


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE deliveries SET received_at = 0",
        "update site_notes set body = 'x' where id = 1",
        'UPDATE "site_notes" SET body = NULL',
    ],
)
def test_only_the_bots_own_migrations_may_update_rows(sql: str) -> None:
    """A user migration never changes data (that is ``mutate``'s job, with its guards); the
    bot's shipped migrations may, to convert a column they retype."""
    (stmt,) = split_statements(sql)
    with pytest.raises(StatementRejected, match="UPDATE is not allowed in a migration"):
        classify(stmt)
    packaged = classify(stmt, packaged=True)
    assert packaged.kind is StatementKind.UPDATE_ROWS and packaged.destructive


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("UPDATE main.deliveries SET a = 1", "schema-qualified"),
        ("UPDATE schema_migration_log SET applied_by = 'x'", "migration ledger"),
        ("UPDATE sqlite_sequence SET seq = 0", "reserved for SQLite"),
        ("UPDATE OR REPLACE t SET a = 1", "UPDATE must name its table and then SET"),
        ("DELETE FROM t", "DELETE is not allowed"),
        ("INSERT INTO t VALUES (1)", "INSERT is not allowed"),
    ],
)
def test_what_even_the_bots_own_migrations_may_not_do(sql: str, reason: str) -> None:
    (stmt,) = split_statements(sql)
    with pytest.raises(StatementRejected, match=reason):
        classify(stmt, packaged=True)
