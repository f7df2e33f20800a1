"""Opening the store at start: the workflow folder, then the bot's own migrations.

The bot's schema ships as migration files in ``reviewbot/store/migrations/`` named
``NNNN_name.sql``. At start every one of them is copied (byte for byte) into
``db/migrations/`` of the workflow folder and applied, in name order, through the same
engine users and agents get (:func:`~reviewbot.workflowdb.migrations.apply_workflow_db_migration`),
unless the ledger already holds that file with the same statement hash.

Two processes starting at once on one database apply each migration once: the whole
start-up holds an exclusive lock on ``db/migrations/.lock``, and the engine checks the
ledger again inside its ``BEGIN IMMEDIATE`` transaction.

With ``database_url = "postgresql://..."`` the store is PostgreSQL
(:mod:`reviewbot.store.postgres`): the packaged PostgreSQL migrations are applied from the
package through the same engine, and starters on other machines serialize on a
session-level advisory lock held across the whole start-up (the file lock only covers one
machine).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg_pool import PoolTimeout

from reviewbot.config import CONFIG_ENV, ConfigError, Settings, config_file_path
from reviewbot.core.redact import url_for_display
from reviewbot.store.database import SQLITE, Database, SQLiteDatabase
from reviewbot.store.postgres import (
    MIGRATION_LOCK,
    REVIEWBOT_LOCKS,
    PostgresDatabase,
)
from reviewbot.workflowdb import pgtools
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.allowlist import LEDGER_TABLE
from reviewbot.workflowdb.migrations import (
    MigrationError,
    MigrationResult,
    apply_workflow_db_migration,
    has_tables,
    table_exists,
)
from reviewbot.workflowdb.packaged_sums import known_sums
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import packaged_migrations

log = logging.getLogger(__name__)

APPLIED_BY = "reviewbot (packaged migrations)"
LOCK_FILE = ".lock"


@contextmanager
def migrations_lock(paths: WorkflowPaths) -> Iterator[None]:
    """An exclusive lock on the migrations folder, held across processes."""
    paths.migrations_dir.mkdir(parents=True, exist_ok=True)
    with open(paths.migrations_dir / LOCK_FILE, "a+b") as handle:
        if sys.platform == "win32":  # pragma: no cover - the ledger check still holds
            yield
            return
        import fcntl  # POSIX only: Windows has no fcntl (and returns above)

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def install_migration(paths: WorkflowPaths, name: str, data: bytes) -> Path:
    """Copy a packaged migration into ``db/migrations/``; refuse to replace a different file."""
    target = paths.migrations_dir / name
    if target.exists() or target.is_symlink():
        if target.is_file() and target.read_bytes() == data:
            return target
        raise MigrationError(
            f"{target} exists and differs from reviewbot's own migration {name}; "
            "rename that file (reviewbot owns the NNNN_name.sql names)"
        )
    tmp = paths.migrations_dir / f".{name}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


@contextmanager
def database_migration_lock(db: Database) -> Iterator[None]:
    """PostgreSQL: an advisory lock on the database, held across machines, for the start-up."""
    if not isinstance(db, PostgresDatabase):
        yield
        return
    with db.connection() as conn:
        conn.execute("SELECT pg_advisory_lock(%s, %s)", (REVIEWBOT_LOCKS, MIGRATION_LOCK))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (REVIEWBOT_LOCKS, MIGRATION_LOCK))


def apply_packaged_migrations(
    paths: WorkflowPaths, db: Database, *, applied_by: str = APPLIED_BY
) -> list[MigrationResult]:
    """Install and apply every packaged migration not yet in the ledger (same hash).

    A migration that changes existing data is applied after a pre-migration snapshot, as
    every destructive migration is, except on a store this call creates: it holds nothing.
    """
    migrations = packaged_migrations(db.dialect)
    if db.dialect != SQLITE:
        # Almost always everything is applied: recognise that before parsing or locking.
        done = _all_applied(paths, db, migrations, applied_by)
        return done if done is not None else _apply_packaged_from_package(paths, db, applied_by)
    results = []
    with migrations_lock(paths):
        # Under the lock on SQLite: the first connection to a file another starter is
        # creating would meet its lock while switching the journal to WAL.
        done = _all_applied(paths, db, migrations, applied_by)
        if done is not None:
            return done
        with db.read() as tx:
            new_store = not has_tables(tx)
        for name, data in migrations:
            install_migration(paths, name, data)
            results.append(
                apply_workflow_db_migration(
                    name,
                    paths=paths,
                    access=DBAccess.READ_WRITE,
                    applied_by=applied_by,
                    db=db,
                    skip_if_applied=True,
                    packaged=True,
                    backup=not new_store,
                )
            )
    return results


def _all_applied(
    paths: WorkflowPaths, db: Database, migrations: list[tuple[str, bytes]], applied_by: str
) -> list[MigrationResult] | None:
    """The skipped results when every packaged file is in the ledger under its manifest
    checksum (and, on SQLite, installed as shipped); None when anything needs the full
    route. Applied migrations are never undone, so this needs no migration lock (SQLite
    takes its file lock anyway, for the first connection to a new file)."""
    sums = known_sums(migrations, db.dialect)
    if sums is None:
        return None
    with db.read() as tx:
        if not table_exists(tx, LEDGER_TABLE):
            return None
        applied = {(r["file_name"], r["sha256"]) for r in tx.all(_LEDGER_ENTRIES)}
    if any((name, line.sha256) not in applied for name, line in sums.items()):
        return None
    if db.dialect == SQLITE and not all(
        _installed_as(paths.migrations_dir / name, data) for name, data in migrations
    ):
        return None
    return [
        MigrationResult(
            name, line.sha256, line.statements, line.destructive, None, applied_by, "", None, True
        )
        for name, line in sums.items()
    ]


_LEDGER_ENTRIES = f"SELECT file_name, sha256 FROM {LEDGER_TABLE}"


def _installed_as(target: Path, data: bytes) -> bool:
    try:
        return not target.is_symlink() and target.is_file() and target.read_bytes() == data
    except OSError:
        return False


def _apply_packaged_from_package(
    paths: WorkflowPaths, db: Database, applied_by: str
) -> list[MigrationResult]:
    results = []
    with migrations_lock(paths), database_migration_lock(db):
        for name, data in packaged_migrations(db.dialect):
            results.append(
                apply_workflow_db_migration(
                    name,
                    paths=paths,
                    access=DBAccess.READ_WRITE,
                    applied_by=applied_by,
                    db=db,
                    skip_if_applied=True,
                    packaged=True,
                    packaged_text=data,
                )
            )
    return results


def open_postgres_store(url: str, paths: WorkflowPaths) -> PostgresDatabase:
    """Connect to PostgreSQL and bring the bot's schema up to date there."""
    try:
        paths.ensure()
    except OSError as exc:
        raise _not_writable(paths, exc) from None
    try:
        db = PostgresDatabase(url)
    except (psycopg.Error, PoolTimeout) as exc:
        raise ConfigError(
            f"database_url {url_for_display(url)}: cannot connect to PostgreSQL ({exc})"
        ) from None
    try:
        apply_packaged_migrations(paths, db)
    except BaseException:
        db.close()
        raise
    try:
        state = pgtools.ensure_role(db)
    except psycopg.Error as exc:  # the tools refuse until it is set up; the bot still runs
        log.warning("the workflow-DB tools' role could not be set up: %s", exc)
    else:
        if state.problem is not None:
            log.warning("query and mutate are refused until this is done: %s", state.problem)
    return db


def open_store(source: Settings | WorkflowPaths) -> Database:
    """Create the workflow folders, bring the bot's schema up to date, return the store.

    Raises :class:`~reviewbot.workflowdb.migrations.MigrationError` if a packaged migration
    cannot be installed or applied.
    """
    paths = source if isinstance(source, WorkflowPaths) else WorkflowPaths.from_settings(source)
    if paths.database_url is not None:
        return open_postgres_store(paths.database_url, paths)
    try:
        paths.ensure()
        db = SQLiteDatabase(paths.db_file)
    except OSError as exc:
        raise _not_writable(paths, exc) from None
    try:
        apply_packaged_migrations(paths, db)
    except OSError as exc:
        db.close()
        raise _not_writable(paths, exc) from None
    except sqlite3.OperationalError as exc:
        db.close()
        if "readonly" in str(exc) or "unable to open" in str(exc):
            raise _not_writable(paths, exc) from None
        raise
    except BaseException:
        db.close()
        raise
    return db


def open_existing_store(source: Settings | WorkflowPaths) -> Database:
    """The store, read-only, for commands that only read; it is never created here.

    A missing store is a configuration problem (the command runs where another data
    directory is configured), so it raises :class:`ConfigError` naming the path it looked
    at and how to point elsewhere. Nothing is written, so a read-only data directory works.
    """
    paths = source if isinstance(source, WorkflowPaths) else WorkflowPaths.from_settings(source)
    if paths.database_url is not None:
        return _open_existing_postgres(paths.database_url)
    db_file = paths.db_file
    if not db_file.is_file():
        config = config_file_path()
        read = f"settings from {config}" if config is not None else "no config file here"
        raise ConfigError(
            f"no reviewbot store at {db_file.absolute()} ({read}); run this where the bot's "
            f"reviewbot.toml is, or set REVIEWBOT_DATA_DIR to its data directory "
            f"(or {CONFIG_ENV} to its config file)"
        )
    # Without a -wal file no connection has the database open: read the file as it is, so
    # that a reader (perhaps root, or another user) leaves no -shm/-wal files behind that
    # the service could not open later. In a folder this user cannot write there is no
    # other way to open it at all.
    wal, shm = (db_file.with_name(db_file.name + suffix) for suffix in ("-wal", "-shm"))
    immutable = not wal.exists() or (not os.access(db_file.parent, os.W_OK) and not shm.exists())
    db = SQLiteDatabase(db_file, read_only=True, immutable=immutable)
    try:
        with db.read() as tx:
            tx.one("SELECT 1 AS one")
    except sqlite3.Error as exc:
        db.close()
        where = db_file.absolute()
        raise ConfigError(f"cannot read the reviewbot store at {where}: {exc}") from None
    return db


def _open_existing_postgres(url: str) -> PostgresDatabase:
    """The PostgreSQL store for a reader: nothing is written, not even the bot's schema."""
    try:
        db = PostgresDatabase(url)
    except (psycopg.Error, PoolTimeout) as exc:
        raise ConfigError(
            f"database_url {url_for_display(url)}: cannot connect to PostgreSQL ({exc})"
        ) from None
    with db.read() as tx:
        ready = table_exists(tx, LEDGER_TABLE)
    if not ready:
        db.close()
        raise ConfigError(
            f"no reviewbot store in the database {url_for_display(url)} (no {LEDGER_TABLE} table);"
            " start reviewbot once against it, or check database_url"
        )
    return db


def _not_writable(paths: WorkflowPaths, exc: BaseException) -> ConfigError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ConfigError(
        f"data_dir {paths.data_dir.absolute()}: cannot write there ({reason}); set "
        "REVIEWBOT_DATA_DIR to a directory this user can write, or fix its owner and mode"
    )
