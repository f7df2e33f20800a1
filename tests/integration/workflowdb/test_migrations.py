"""The managed migration route on real SQLite files."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from reviewbot.store.database import SQLiteDatabase
from reviewbot.workflowdb import bootstrap, migrations
from reviewbot.workflowdb.access import AccessDenied, DBAccess
from reviewbot.workflowdb.bootstrap import apply_packaged_migrations, open_store
from reviewbot.workflowdb.migrations import (
    BACKUPS_KEPT,
    BadMigrationName,
    MigrationError,
    MigrationResult,
    apply_workflow_db_migration,
    list_backups,
    migration_log,
    statements_sha256,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import SECRET_TABLES, bot_schema, packaged_migrations
from reviewbot.workflowdb.sqltext import migration_statements


@pytest.fixture
def paths(tmp_path: Path) -> WorkflowPaths:
    return WorkflowPaths(tmp_path / "data").ensure()


def write(paths: WorkflowPaths, name: str, sql: str) -> str:
    (paths.migrations_dir / name).write_text(sql)
    return name


def apply(paths: WorkflowPaths, name: str, **kwargs: Any) -> MigrationResult:
    kwargs.setdefault("access", DBAccess.READ_WRITE)
    kwargs.setdefault("applied_by", "test")
    return apply_workflow_db_migration(name, paths=paths, **kwargs)


_numbers = itertools.count(1)


def run(paths: WorkflowPaths, sql: str, **kwargs: Any) -> MigrationResult:
    """Write ``sql`` as a new migration file and apply it."""
    return apply(paths, write(paths, f"m{next(_numbers):04d}.sql", sql), **kwargs)


def db_query(paths: WorkflowPaths, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(paths.db_file)
    try:
        return list(conn.execute(sql, params).fetchall())
    finally:
        conn.close()


def db_exec(paths: WorkflowPaths, script: str) -> None:
    """Set up test data directly (rows, views, triggers the route itself never creates)."""
    conn = sqlite3.connect(paths.db_file)
    try:
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()


def tables(paths: WorkflowPaths) -> set[str]:
    if not paths.db_file.exists():
        return set()
    rows = db_query(paths, "SELECT name FROM sqlite_master WHERE type = 'table'")
    return {r[0] for r in rows} - {"sqlite_sequence"}


def columns(paths: WorkflowPaths, table: str) -> list[str]:
    return [r[1] for r in db_query(paths, f"PRAGMA table_info({table})")]


def ledger(paths: WorkflowPaths) -> list[dict[str, Any]]:
    db = SQLiteDatabase(paths.db_file)
    try:
        return migration_log(db)
    finally:
        db.close()


# --- applying and the ledger -------------------------------------------------------------------


def test_create_is_applied_and_logged(paths: WorkflowPaths) -> None:
    sql = (
        "-- notes kept by operators\n"
        "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT);\n"
    )
    result = run(paths, sql, applied_by="alice")
    assert tables(paths) == {"notes", "schema_migration_log"}
    assert not result.destructive and result.backup_path is None
    (row,) = ledger(paths)
    assert row["file_name"] == result.file_name
    assert row["sha256"] == statements_sha256(migration_statements(sql)) == result.sha256
    assert row["destructive"] is False
    assert row["backup_path"] is None
    assert row["applied_by"] == "alice"
    assert row["applied_at"] == result.applied_at and row["applied_at"].endswith("+00:00")
    assert row["id"] == result.log_id


def test_reapplying_an_idempotent_migration_is_a_logged_no_op(paths: WorkflowPaths) -> None:
    name = write(
        paths,
        "notes.sql",
        "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT);\n"
        "CREATE INDEX IF NOT EXISTS notes_body ON notes (body);\n",
    )
    apply(paths, name)
    db_exec(paths, "INSERT INTO notes (body) VALUES ('kept');")
    second = apply(paths, name)
    assert second.backup_path is None
    assert db_query(paths, "SELECT body FROM notes") == [("kept",)]
    assert [r["file_name"] for r in ledger(paths)] == [name, name]
    assert list_backups(paths) == []


def test_drop_table_if_exists_can_be_reapplied(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS old (a)")
    name = write(paths, "drop_old.sql", "DROP TABLE IF EXISTS old;")
    first = apply(paths, name)
    second = apply(paths, name)
    assert "old" not in tables(paths)
    assert first.destructive and second.destructive
    assert first.backup_path is not None and second.backup_path is not None
    assert [r["file_name"] for r in ledger(paths)][-2:] == [name, name]


def test_file_envelope_is_dropped(paths: WorkflowPaths) -> None:
    result = run(
        paths,
        "BEGIN TRANSACTION;\nCREATE TABLE IF NOT EXISTS a (x);\n"
        "CREATE TABLE IF NOT EXISTS b (y);\nEND;\n",
    )
    assert result.statements == 2
    assert {"a", "b"} <= tables(paths)


def test_semicolon_inside_a_string_literal(paths: WorkflowPaths) -> None:
    run(
        paths,
        "CREATE TABLE IF NOT EXISTS t (a TEXT DEFAULT 'x;y', \"b;c\" TEXT); -- a; comment\n"
        "/* ; */ ALTER TABLE t ADD COLUMN d TEXT DEFAULT ';';",
    )
    db_exec(paths, "INSERT INTO t DEFAULT VALUES;")
    assert db_query(paths, 'SELECT a, "b;c", d FROM t') == [("x;y", None, ";")]


def test_repeated_alter_fails_loudly(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    name = write(paths, "add_b.sql", "ALTER TABLE t ADD COLUMN b TEXT;")
    apply(paths, name)
    with pytest.raises(MigrationError) as err:
        apply(paths, name)
    message = str(err.value)
    assert "add_b.sql: statement 1 (line 1: ALTER TABLE t ADD COLUMN b TEXT) failed" in message
    assert "duplicate column name: b" in message
    assert "nothing was applied" in message
    assert [r["file_name"] for r in ledger(paths)].count(name) == 1


def test_ledger_row_iff_commit_failing_middle_statement(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS keep (a)")
    before = ledger(paths)
    with pytest.raises(MigrationError, match=r"statement 2 .*no such table: missing"):
        run(
            paths,
            "CREATE TABLE IF NOT EXISTS first (a);\n"
            "ALTER TABLE missing ADD COLUMN b;\n"
            "CREATE TABLE IF NOT EXISTS third (c);\n",
        )
    assert tables(paths) == {"keep", "schema_migration_log"}
    assert ledger(paths) == before


def test_ledger_row_iff_commit_failure_at_the_last_statement(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    before = ledger(paths)
    with pytest.raises(MigrationError):
        run(paths, "ALTER TABLE t ADD COLUMN b;\nALTER TABLE t ADD COLUMN b;")
    assert columns(paths, "t") == ["a"]
    assert ledger(paths) == before


def test_empty_migration_is_refused(paths: WorkflowPaths) -> None:
    with pytest.raises(MigrationError, match="no statements to apply"):
        run(paths, "-- nothing yet\nBEGIN; COMMIT;")


def test_non_utf8_migration_is_refused(paths: WorkflowPaths) -> None:
    (paths.migrations_dir / "latin.sql").write_bytes(
        b"CREATE TABLE IF NOT EXISTS t (a DEFAULT '\xe9')"
    )
    with pytest.raises(MigrationError, match="not UTF-8"):
        apply(paths, "latin.sql")
    assert not paths.db_file.exists()


# --- the allow-list, before anything runs ----------------------------------------------------

FORBIDDEN = [
    "PRAGMA foreign_keys = OFF",
    "-- harmless, really\nPRAGMA writable_schema = 1",
    "/* a comment */ pragma journal_mode = delete",
    "pRaGmA user_version = 7",
    "ATTACH DATABASE 'other.sqlite' AS other",
    "-- note\nattach 'other.sqlite' as other",
    "DETACH other",
    "VACUUM",
    "REINDEX",
    "CREATE TRIGGER tr AFTER INSERT ON t BEGIN DELETE FROM t; END",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TABLE plain (a)",
    "CREATE TABLE IF NOT EXISTS copy AS SELECT * FROM sqlite_master",
    "INSERT INTO t VALUES (1)",
    "UPDATE t SET a = 2",
    "DELETE FROM t",
    "DROP TABLE t",
    "DROP TABLE IF EXISTS schema_migration_log",
    "CREATE TABLE IF NOT EXISTS t2 (a TEXT DEFAULT 'x\\'); PRAGMA foreign_keys = OFF; --')",
]


@pytest.mark.parametrize("forbidden", FORBIDDEN)
@pytest.mark.parametrize("position", ["alone", "second"])
def test_forbidden_statement_refuses_the_whole_file(
    paths: WorkflowPaths, forbidden: str, position: str
) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    before = ledger(paths)
    sql = (
        forbidden if position == "alone" else f"CREATE TABLE IF NOT EXISTS fine (a);\n{forbidden};"
    )
    with pytest.raises(MigrationError) as err:
        run(paths, sql)
    message = str(err.value)
    assert "is not allowed" in message and "nothing was applied" in message
    assert "statement " in message and "(line " in message
    assert "fine" not in tables(paths) and "t2" not in tables(paths)
    assert ledger(paths) == before
    assert list_backups(paths) == []


def test_error_names_the_statement_number_and_first_line(paths: WorkflowPaths) -> None:
    with pytest.raises(MigrationError) as err:
        run(
            paths,
            "CREATE TABLE IF NOT EXISTS fine (a);\n"
            "-- turn off checks\npragma foreign_keys\n = OFF;",
        )
    assert "statement 2 (line 3: pragma foreign_keys) is not allowed: PRAGMA" in str(err.value)
    assert not paths.db_file.exists()  # refused before the database was even opened


# --- backups ----------------------------------------------------------------------------------


def test_add_column_takes_no_backup(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    result = run(paths, "ALTER TABLE t ADD COLUMN b INTEGER NOT NULL DEFAULT 0")
    assert not result.destructive and result.backup_path is None
    assert list_backups(paths) == []
    assert columns(paths, "t") == ["a", "b"]


def test_fresh_database_needs_no_backup(paths: WorkflowPaths) -> None:
    result = run(paths, "DROP TABLE IF EXISTS nothing_here")
    assert result.destructive and result.backup_path is None
    assert list_backups(paths) == []
    assert ledger(paths)[0]["destructive"] is True


def test_dropped_column_is_recoverable_from_the_backup(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS people (id INTEGER PRIMARY KEY, name TEXT, phone TEXT)")
    db_exec(paths, "INSERT INTO people (name, phone) VALUES ('ada', '555-1'), ('bob', '555-2');")
    result = run(paths, "ALTER TABLE people DROP COLUMN phone")
    assert result.destructive
    assert columns(paths, "people") == ["id", "name"]
    backup = result.backup_path
    assert backup is not None and backup.is_file()
    assert backup.parent == paths.backups_dir.resolve()
    assert backup.name.endswith("-pre-migration.sqlite") and backup.name.split("-")[0].isdigit()
    conn = sqlite3.connect(backup)
    try:
        assert conn.execute("SELECT name, phone FROM people ORDER BY id").fetchall() == [
            ("ada", "555-1"),
            ("bob", "555-2"),
        ]
    finally:
        conn.close()
    assert ledger(paths)[-1]["backup_path"] == str(backup)


def test_rename_table_and_rename_column(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a, b)")
    db_exec(paths, "INSERT INTO t VALUES (1, 2);")
    table = run(paths, "ALTER TABLE t RENAME TO u")
    column = run(paths, "ALTER TABLE u RENAME COLUMN a TO alpha")
    assert table.destructive and table.backup_path is not None
    assert column.destructive and column.backup_path is not None
    assert "t" not in tables(paths)
    assert db_query(paths, "SELECT alpha, b FROM u") == [(1, 2)]
    assert [r["destructive"] for r in ledger(paths)] == [False, True, True]


def test_two_destructive_migrations_in_the_same_instant_get_two_backups(
    paths: WorkflowPaths,
) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    same_instant = 1_700_000_000_000_000_000
    name = write(paths, "drop_x.sql", "DROP TABLE IF EXISTS x;")
    first = apply(paths, name, clock_ns=lambda: same_instant)
    second = apply(paths, name, clock_ns=lambda: same_instant)
    assert first.backup_path is not None and second.backup_path is not None
    assert first.backup_path != second.backup_path
    assert list_backups(paths) == [first.backup_path, second.backup_path]


def test_two_destructive_migrations_within_one_second_on_the_real_clock(
    paths: WorkflowPaths,
) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    name = write(paths, "drop_x.sql", "DROP TABLE IF EXISTS x;")
    backups = {apply(paths, name).backup_path, apply(paths, name).backup_path}
    assert None not in backups and len(backups) == 2


def test_retention_keeps_the_newest_twenty(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    name = write(paths, "drop_x.sql", "DROP TABLE IF EXISTS x;")
    made = [apply(paths, name).backup_path for _ in range(BACKUPS_KEPT + 3)]
    kept = list_backups(paths)
    assert len(kept) == BACKUPS_KEPT == 20
    assert kept == made[-BACKUPS_KEPT:]
    assert all(p is not None and not p.exists() for p in made[:3])


def test_retention_ignores_files_that_are_not_backups(paths: WorkflowPaths) -> None:
    paths.backups_dir.mkdir(parents=True, exist_ok=True)
    keep = paths.backups_dir / "README.txt"
    keep.write_text("mine")
    run(paths, "CREATE TABLE IF NOT EXISTS t (a)")
    name = write(paths, "drop_x.sql", "DROP TABLE IF EXISTS x;")
    for _ in range(BACKUPS_KEPT + 1):
        apply(paths, name)
    assert keep.read_text() == "mine"


# --- DROP COLUMN that SQLite cannot do ------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "drop", "why"),
    [
        (
            "CREATE TABLE t (id INTEGER PRIMARY KEY, a)",
            "ALTER TABLE t DROP COLUMN id",
            "primary key",
        ),
        ("CREATE TABLE t (a, b, PRIMARY KEY (a, b))", "ALTER TABLE t DROP COLUMN b", "primary key"),
        ("CREATE TABLE t (a, b UNIQUE)", "ALTER TABLE t DROP COLUMN b", "UNIQUE constraint"),
        (
            "CREATE TABLE t (a, b, UNIQUE (a, b))",
            "ALTER TABLE t DROP COLUMN a",
            "UNIQUE constraint",
        ),
        (
            "CREATE TABLE t (a, b); CREATE INDEX t_b ON t (b)",
            "ALTER TABLE t DROP COLUMN b",
            "used by index t_b",
        ),
        (
            "CREATE TABLE t (a, b); CREATE INDEX t_part ON t (a) WHERE b > 0",
            "ALTER TABLE t DROP COLUMN b",
            "used by index t_part",
        ),
        (
            "CREATE TABLE p (id INTEGER PRIMARY KEY); CREATE TABLE t (a, pid REFERENCES p (id))",
            "ALTER TABLE t DROP COLUMN pid",
            "foreign key",
        ),
        (
            "CREATE TABLE p (id INTEGER PRIMARY KEY, code UNIQUE, x);"
            "CREATE TABLE c (a, pcode REFERENCES p (code))",
            "ALTER TABLE p DROP COLUMN code",
            "UNIQUE constraint",
        ),
        (
            "CREATE TABLE t (a, b); CREATE VIEW v AS SELECT b FROM t",
            "ALTER TABLE t DROP COLUMN b",
            "used by view v",
        ),
        (
            "CREATE TABLE t (a, b); CREATE TABLE log (x);"
            "CREATE TRIGGER tr AFTER UPDATE ON t BEGIN INSERT INTO log VALUES (new.b); END",
            "ALTER TABLE t DROP COLUMN b",
            "used by trigger tr",
        ),
        ("CREATE TABLE t (a, b)", "ALTER TABLE t DROP COLUMN zzz", "has no column zzz"),
        ("CREATE TABLE t (a, b)", "ALTER TABLE nope DROP COLUMN b", "table nope does not exist"),
    ],
)
def test_drop_column_sqlite_cannot_do_is_refused_before_anything_runs(
    paths: WorkflowPaths, setup: str, drop: str, why: str
) -> None:
    db_exec(paths, setup + ";")
    before_tables = tables(paths)
    with pytest.raises(MigrationError) as err:
        run(paths, f"CREATE TABLE IF NOT EXISTS fine (a);\n{drop};")
    message = str(err.value)
    column = drop.split()[-1]
    assert f"cannot drop column {column}" in message
    assert why in message
    assert "statement 2 (line 2:" in message
    assert tables(paths) == before_tables  # not even the first statement ran
    assert list_backups(paths) == []  # refused before the backup


def test_drop_column_referenced_by_another_tables_foreign_key(paths: WorkflowPaths) -> None:
    db_exec(
        paths,
        "CREATE TABLE p (id INTEGER PRIMARY KEY, code TEXT, x);"
        "CREATE TABLE c (a, pcode REFERENCES p (code));",
    )
    with pytest.raises(
        MigrationError, match="cannot drop column code of p: a foreign key of table c"
    ):
        run(paths, "ALTER TABLE p DROP COLUMN code")


def test_drop_column_of_a_table_created_in_the_same_migration(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS keep (a)")
    result = run(
        paths,
        "CREATE TABLE IF NOT EXISTS t (a, b);\nALTER TABLE t DROP COLUMN b;\n",
    )
    assert columns(paths, "t") == ["a"]
    assert result.destructive


def test_drop_column_after_dropping_its_index_in_the_same_migration(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a, b);\nCREATE INDEX IF NOT EXISTS t_b ON t (b);")
    result = run(paths, "DROP INDEX IF EXISTS t_b;\nALTER TABLE t DROP COLUMN b;")
    assert columns(paths, "t") == ["a"]
    assert result.backup_path is not None


def test_drop_column_made_impossible_earlier_in_the_same_migration(paths: WorkflowPaths) -> None:
    run(paths, "CREATE TABLE IF NOT EXISTS t (a, b)")
    with pytest.raises(MigrationError, match="cannot drop column b of t: it is used by index t_b"):
        run(paths, "CREATE INDEX IF NOT EXISTS t_b ON t (b);\nALTER TABLE t DROP COLUMN b;")
    assert db_query(paths, "SELECT name FROM sqlite_master WHERE type = 'index'") == []


# --- the file name ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("sub/x.sql", "path separator"),
        ("sub\\x.sql", "path separator"),
        ("../x.sql", "'..'"),
        ("..", "'..'"),
        ("x..sql", "'..'"),
        ("/etc/x.sql", "absolute path"),
        ("C:\\x.sql", "absolute path"),
        ("C:x.sql", "drive"),
        ("x.sql\x00.txt", "NUL"),
        ("x\n.sql", "control character"),
        ("x.txt", "does not end in .sql"),
        ("x.sql.bak", "does not end in .sql"),
        ("x", "does not end in .sql"),
        (".hidden.sql", "starts with a dot"),
        (".sql", "starts with a dot"),
        ("missing.sql", "not found"),
        ("a" * 300 + ".sql", "longer than"),
    ],
)
def test_bad_file_names_are_refused_without_side_effects(
    paths: WorkflowPaths, name: str, problem: str
) -> None:
    (paths.data_dir / "x.sql").write_text("CREATE TABLE IF NOT EXISTS escaped (a);")
    with pytest.raises(BadMigrationName, match=problem):
        apply(paths, name)
    assert not paths.db_file.exists()
    assert not paths.backups_dir.exists()


def test_symlink_outside_the_migrations_folder_is_refused(paths: WorkflowPaths) -> None:
    outside = paths.data_dir / "outside.sql"
    outside.write_text("CREATE TABLE IF NOT EXISTS escaped (a);")
    (paths.migrations_dir / "link.sql").symlink_to(outside)
    with pytest.raises(BadMigrationName, match="outside"):
        apply(paths, "link.sql")
    (paths.migrations_dir / "backup_link.sql").symlink_to(paths.backups_dir / "x.sql")
    with pytest.raises(BadMigrationName):
        apply(paths, "backup_link.sql")
    assert not paths.db_file.exists()


def test_dangling_symlink_is_refused(paths: WorkflowPaths) -> None:
    (paths.migrations_dir / "gone.sql").symlink_to(paths.migrations_dir / "nothing.sql")
    with pytest.raises(BadMigrationName, match="dangling link"):
        apply(paths, "gone.sql")


def test_symlink_inside_the_migrations_folder_is_followed(paths: WorkflowPaths) -> None:
    write(paths, "real.sql", "CREATE TABLE IF NOT EXISTS t (a);")
    (paths.migrations_dir / "alias.sql").symlink_to("real.sql")
    assert apply(paths, "alias.sql").file_name == "alias.sql"
    assert "t" in tables(paths)


def test_directory_is_refused(paths: WorkflowPaths) -> None:
    (paths.migrations_dir / "dir.sql").mkdir()
    with pytest.raises(BadMigrationName, match="not a regular file"):
        apply(paths, "dir.sql")


# --- access -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("access", "held"), [(DBAccess.READ, "read"), (DBAccess.NONE, "none")])
def test_apply_requires_read_write_access(
    paths: WorkflowPaths, access: DBAccess, held: str
) -> None:
    name = write(paths, "t.sql", "CREATE TABLE IF NOT EXISTS t (a);")
    with pytest.raises(AccessDenied) as err:
        apply(paths, name, access=access)
    assert str(err.value) == f"requires read-write DB access; this process has {held}"
    assert not paths.db_file.exists()


# --- the bot's own migrations ---------------------------------------------------------------------


def test_packaged_migrations_are_numbered_and_in_name_order() -> None:
    names = [name for name, _ in packaged_migrations()]
    assert names[0] == "0001_foundation.sql"
    assert names == sorted(names)
    for name, data in packaged_migrations():
        statements = migration_statements(data.decode("utf-8"))
        assert statements, name


def test_open_store_applies_packaged_migrations_once(paths: WorkflowPaths) -> None:
    db = open_store(paths)
    try:
        first = migration_log(db)
    finally:
        db.close()
    packaged = packaged_migrations()
    assert [r["file_name"] for r in first] == [name for name, _ in packaged]
    assert "bot_meta" in tables(paths)
    for name, data in packaged:
        assert (paths.migrations_dir / name).read_bytes() == data
    open_store(paths).close()
    assert ledger(paths) == first


def test_open_store_creates_the_workflow_folders(tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "new")
    open_store(paths).close()
    assert paths.db_file.is_file() and paths.migrations_dir.is_dir() and paths.runs_dir.is_dir()


def test_open_store_refuses_a_different_file_with_a_packaged_name(paths: WorkflowPaths) -> None:
    write(paths, "0001_foundation.sql", "CREATE TABLE IF NOT EXISTS mine (a);")
    with pytest.raises(
        MigrationError, match=r"differs from reviewbot's own migration 0001_foundation\.sql"
    ):
        open_store(paths)
    assert not paths.db_file.exists() or ledger(paths) == []
    assert (
        (paths.migrations_dir / "0001_foundation.sql")
        .read_text()
        .startswith("CREATE TABLE IF NOT EXISTS mine")
    )


def test_ledger_check_inside_the_transaction_skips_an_applied_migration(
    paths: WorkflowPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the manifest every file takes the full route, down to the engine's own check.
    monkeypatch.setattr(bootstrap, "known_sums", lambda migrations, dialect: None)
    db = SQLiteDatabase(paths.db_file)
    try:
        results = apply_packaged_migrations(paths, db)
        again = apply_packaged_migrations(paths, db)
    finally:
        db.close()
    assert not any(r.skipped for r in results)
    assert all(r.skipped and r.log_id is None for r in again)
    assert len(ledger(paths)) == len(results)


def _no_parsing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every file the SQL parser is asked to read (and parse it as before)."""
    parsed: list[str] = []
    real = migrations._parse

    def spy(text: str, file_name: str, *, packaged: bool) -> list[Any]:
        parsed.append(file_name)
        return real(text, file_name, packaged=packaged)

    monkeypatch.setattr(migrations, "_parse", spy)
    migrations._parse_packaged.cache_clear()
    return parsed


def test_an_up_to_date_store_opens_without_parsing_any_migration(
    paths: WorkflowPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(paths).close()
    parsed = _no_parsing(monkeypatch)
    db = open_store(paths)
    try:
        again = apply_packaged_migrations(paths, db)
    finally:
        db.close()
    assert parsed == []
    names = [name for name, _ in packaged_migrations()]
    assert [r.file_name for r in again] == names
    assert all(r.skipped and r.log_id is None for r in again)
    assert len(ledger(paths)) == len(names)  # nothing applied twice


def test_a_store_from_an_older_release_gets_the_new_migration(
    paths: WorkflowPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = packaged_migrations()
    newest = shipped[-1][0]
    with monkeypatch.context() as older:  # the release before the newest migration
        older.setattr(bootstrap, "packaged_migrations", lambda dialect="sqlite": shipped[:-1])
        open_store(paths).close()
    assert newest not in [row["file_name"] for row in ledger(paths)]
    parsed = _no_parsing(monkeypatch)
    open_store(paths).close()
    assert newest in parsed  # the full route ran and applied it
    assert [row["file_name"] for row in ledger(paths)][-1] == newest


def test_a_file_that_differs_from_its_manifest_line_takes_the_full_route(
    paths: WorkflowPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(paths).close()
    real = bootstrap.known_sums
    first = packaged_migrations()[0][0]

    def edited(found: list[tuple[str, bytes]], dialect: str) -> object:
        # As if the shipped bytes of the first file no longer matched the manifest.
        return real([(n, d + b"\n" if n == first else d) for n, d in found], dialect)

    monkeypatch.setattr(bootstrap, "known_sums", edited)
    parsed = _no_parsing(monkeypatch)
    open_store(paths).close()
    assert parsed  # recognised the slow way: parsed, compared with the ledger, skipped
    assert len(ledger(paths)) == len(packaged_migrations())


def test_a_changed_installed_copy_is_still_refused_on_reopen(paths: WorkflowPaths) -> None:
    open_store(paths).close()
    (paths.migrations_dir / "0001_foundation.sql").write_text("SELECT 1;\n")
    with pytest.raises(MigrationError, match="differs from reviewbot's own migration"):
        open_store(paths)


_START = """
import sys
import time
from pathlib import Path
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
Path(sys.argv[2]).touch()
while not all(Path(p).exists() for p in sys.argv[3:]):  # start together
    time.sleep(0.001)
open_store(WorkflowPaths(Path(sys.argv[1]))).close()
"""


@pytest.mark.slow
def test_concurrent_starts_apply_packaged_migrations_once(tmp_path: Path) -> None:
    data = tmp_path / "shared"
    count = 3
    ready = [str(tmp_path / f"ready{i}") for i in range(count)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _START, str(data), ready[i], *ready],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    paths = WorkflowPaths(data)
    names = [r["file_name"] for r in ledger(paths)]
    assert names == [name for name, _ in packaged_migrations()]


def test_every_table_of_a_fresh_store_is_one_of_the_protected_bot_tables(tmp_path: Path) -> None:
    """The protected set comes from the shipped files: nothing the bot creates is missed."""
    paths = WorkflowPaths(tmp_path / "data")
    open_store(paths).close()
    schema = bot_schema()
    with closing(sqlite3.connect(paths.db_file)) as conn:
        found = conn.execute(
            "SELECT type, name FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL"
        ).fetchall()
    assert {n.lower() for t, n in found if t == "table"} == set(schema.tables)
    indexes = {n.lower() for t, n in found if t == "index"}
    # A dropped index keeps its name reserved: a later shipped file may create it again.
    dropped = {"lease_history_by_holder", "lease_history_by_pull"}  # by 0024
    assert indexes == set(schema.indexes) - dropped
    assert schema.tables >= SECRET_TABLES
