"""The managed migration route on both stores: SQLite files and a real PostgreSQL server.

The SQLite-only details (VACUUM INTO snapshots, what SQLite cannot drop, the authorizer)
are in test_migrations.py; here is what must hold on every store: one transaction with its
ledger row, the allow-list, the bot's tables out of reach, a backup before a destructive
change, and concurrent starters applying each packaged migration once.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.store.database import Database
from reviewbot.store.postgres import PostgresDatabase
from reviewbot.workflowdb import pgbackup
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.migrations import (
    MigrationError,
    MigrationResult,
    apply_workflow_db_migration,
    migration_log,
    open_database,
    table_exists,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import (
    ProtectedTable,
    bot_schema,
    packaged_migrations,
    schema_of,
)


@pytest.fixture
def paths(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> WorkflowPaths:
    """An empty database of each kind (no packaged migrations applied yet)."""
    if store_kind == "postgresql":
        url = request.getfixturevalue("postgres_url")
        return WorkflowPaths(tmp_path / "data", None, url).ensure()
    return WorkflowPaths(tmp_path / "data").ensure()


@pytest.fixture
def db(paths: WorkflowPaths) -> Iterator[Database]:
    store = open_database(paths)
    yield store
    store.close()


_numbers = itertools.count(1)


def run(paths: WorkflowPaths, db: Database, sql: str, **kwargs: Any) -> MigrationResult:
    name = f"site_m{next(_numbers):04d}.sql"
    (paths.migrations_dir / name).write_text(sql)
    kwargs.setdefault("access", DBAccess.READ_WRITE)
    kwargs.setdefault("applied_by", "test")
    return apply_workflow_db_migration(name, paths=paths, db=db, **kwargs)


def has_table(db: Database, name: str) -> bool:
    with db.read() as tx:
        return table_exists(tx, name)


def count(db: Database, table: str) -> int:
    with db.read() as tx:
        row = tx.one(f"SELECT COUNT(*) AS n FROM {table}")
    assert row is not None
    return int(row["n"])


def test_a_migration_and_its_ledger_row_commit_together(paths: WorkflowPaths, db: Database) -> None:
    result = run(paths, db, "CREATE TABLE IF NOT EXISTS notes (id INTEGER, body TEXT);")
    assert has_table(db, "notes")
    (row,) = migration_log(db)
    assert row["file_name"] == result.file_name and row["sha256"] == result.sha256
    assert row["id"] == result.log_id and row["destructive"] is False


def test_a_failing_statement_leaves_no_table_and_no_ledger_row(
    paths: WorkflowPaths, db: Database
) -> None:
    with pytest.raises(MigrationError, match="statement 2"):
        run(
            paths,
            db,
            "CREATE TABLE IF NOT EXISTS half (id INTEGER);\n"
            "ALTER TABLE missing_table ADD COLUMN x INTEGER;",
        )
    assert not has_table(db, "half")
    assert migration_log(db) == []


def test_reapplying_an_idempotent_migration_is_logged_again(
    paths: WorkflowPaths, db: Database
) -> None:
    name = "site_again.sql"
    (paths.migrations_dir / name).write_text("CREATE TABLE IF NOT EXISTS again (id INTEGER);")
    for _ in range(2):
        apply_workflow_db_migration(
            name, paths=paths, db=db, access=DBAccess.READ_WRITE, applied_by="t"
        )
    assert [r["file_name"] for r in migration_log(db)] == [name, name]


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO notes VALUES (1);",
        "UPDATE notes SET id = 2;",
        "CREATE VIEW v AS SELECT 1;",
        "PRAGMA journal_mode = DELETE;",
        "GRANT ALL ON notes TO PUBLIC;",
        "CREATE TABLE notes (id INTEGER);",  # without IF NOT EXISTS
    ],
)
def test_statements_outside_the_allow_list_refuse_the_file(
    paths: WorkflowPaths, db: Database, sql: str
) -> None:
    with pytest.raises(MigrationError, match="nothing was applied"):
        run(paths, db, f"CREATE TABLE IF NOT EXISTS first (id INTEGER);\n{sql}")
    assert not has_table(db, "first")


def test_the_bots_tables_are_out_of_reach_of_user_migrations(
    paths: WorkflowPaths, db: Database
) -> None:
    open_store(paths).close()
    for sql in (
        "DROP TABLE IF EXISTS leases;",
        "ALTER TABLE API_TOKENS ADD COLUMN stolen TEXT;",
        'ALTER TABLE "lease_epochs" RENAME TO mine;',
        "CREATE TABLE IF NOT EXISTS x (id INTEGER REFERENCES workers (identity));",
    ):
        with pytest.raises(ProtectedTable):
            run(paths, db, sql)
    assert has_table(db, "leases") and has_table(db, "lease_epochs")


def test_cascade_is_refused_on_postgresql(
    store_kind: str, paths: WorkflowPaths, db: Database
) -> None:
    if store_kind != "postgresql":
        pytest.skip("CASCADE is PostgreSQL syntax (SQLite's parser refuses it anyway)")
    run(paths, db, "CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY);")
    with pytest.raises(MigrationError, match="CASCADE"):
        run(paths, db, "DROP TABLE IF EXISTS parent CASCADE;")
    assert has_table(db, "parent")


def test_a_destructive_migration_is_backed_up_first(
    store_kind: str, paths: WorkflowPaths, db: Database
) -> None:
    run(paths, db, "CREATE TABLE IF NOT EXISTS old_notes (id INTEGER, body TEXT);")
    with db.write() as tx:
        tx.execute("INSERT INTO old_notes (id, body) VALUES (?, ?)", (1, "kept"))
    result = run(paths, db, "DROP TABLE IF EXISTS old_notes;")
    assert result.destructive and result.backup_path is not None
    assert not has_table(db, "old_notes")
    (_, dropped) = migration_log(db)
    assert dropped["backup_path"] == str(result.backup_path)
    assert result.backup_path.is_file()
    if store_kind == "postgresql":
        listing = _pg_restore_list(result.backup_path)
        assert "TABLE DATA" in listing and "old_notes" in listing


def _pg_restore_list(dump: Path) -> str:
    pg_restore = shutil.which("pg_restore")
    if pg_restore is None:
        pytest.skip("pg_restore is not installed (Debian: postgresql-client)")
    done = subprocess.run([pg_restore, "--list", str(dump)], capture_output=True, check=True)
    return done.stdout.decode()


def test_without_pg_dump_the_tables_are_copied_into_the_backup_schema(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = WorkflowPaths(tmp_path / "data", None, postgres_url).ensure()
    db = open_database(paths)
    try:
        run(paths, db, "CREATE TABLE IF NOT EXISTS old_notes (id INTEGER, body TEXT);")
        with db.write() as tx:
            tx.execute("INSERT INTO old_notes (id, body) VALUES (?, ?)", (1, "kept"))
        monkeypatch.setattr(pgbackup.shutil, "which", lambda _name: None)
        result = run(paths, db, "ALTER TABLE old_notes DROP COLUMN body;")
        assert result.backup_path is not None
        schema, stamp = str(result.backup_path).removeprefix("postgresql:").split("/")
        assert schema == pgbackup.BACKUP_SCHEMA
        with db.read() as tx:
            row = tx.one(f'SELECT id, body FROM {schema}."{stamp}_old_notes"')
        assert row is not None and (row["id"], row["body"]) == (1, "kept")
    finally:
        db.close()


def test_every_table_of_a_fresh_store_is_a_protected_bot_table(
    store_kind: str, paths: WorkflowPaths
) -> None:
    db = open_store(paths)
    try:
        with db.read() as tx:
            if store_kind == "postgresql":
                rows = tx.all(
                    "SELECT table_name AS name FROM information_schema.tables"
                    " WHERE table_schema = current_schema()"
                )
            else:
                rows = tx.all(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
        names = {str(r["name"]) for r in rows}
    finally:
        db.close()
    schema = bot_schema()
    assert names and all(schema.is_bot_table(n) for n in names), names


def test_both_dialects_ship_the_same_tables() -> None:
    sqlite = packaged_migrations("sqlite")
    postgresql = packaged_migrations("postgresql")
    # Same names where both have a file; SQLite alone converts its text timestamps (0013).
    assert {n for n, _ in postgresql} == {n for n, _ in sqlite} - {"0013_timestamps_real.sql"}
    assert schema_of(sqlite).tables == schema_of(postgresql).tables


def test_concurrent_starters_apply_each_packaged_migration_once(
    store_kind: str, paths: WorkflowPaths
) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def starter(data_dir: Path) -> None:
        # Separate workflow folders (as on separate machines) on one database.
        mine = WorkflowPaths(data_dir, paths.database_file, paths.database_url)
        try:
            start.wait()
            open_store(mine).close()
        except BaseException as exc:
            errors.append(exc)

    if store_kind == "sqlite":
        pytest.skip("SQLite starters share one folder and its file lock (test_migrations.py)")
    threads = [
        threading.Thread(target=starter, args=(paths.data_dir.parent / f"replica{i}",))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = open_database(paths)
    try:
        names = [r["file_name"] for r in migration_log(db)]
    finally:
        db.close()
    assert sorted(names) == [n for n, _ in packaged_migrations("postgresql")]
    assert isinstance(db, PostgresDatabase)
