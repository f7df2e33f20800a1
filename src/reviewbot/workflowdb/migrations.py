"""The one managed route for schema changes: ``apply_workflow_db_migration``.

A migration is a file in ``db/migrations/`` of the workflow folder, named by its bare file
name. Its statements are split quote- and comment-aware, checked against the allow-list
(:mod:`reviewbot.workflowdb.allowlist`) before anything runs, and run with their
``schema_migration_log`` row in one write transaction (``BEGIN IMMEDIATE`` on SQLite; on
PostgreSQL, a transaction that first takes the store's advisory write lock, so concurrent
starters apply each migration once): the row exists if and only if the migration committed.
A migration with a destructive statement first writes a backup to
``db/migrations/.backups/`` (outside the transaction): on SQLite a ``VACUUM INTO``
snapshot; on PostgreSQL a ``pg_dump`` of the tables the migration touches, or, where
``pg_dump`` is missing or fails, copies of those tables in the ``reviewbot_backups`` schema
(:mod:`reviewbot.workflowdb.pgbackup`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import psycopg

from reviewbot.core.errors import ReviewbotError
from reviewbot.store.database import SQLITE, Database, SQLiteDatabase, Tx
from reviewbot.store.postgres import PgTx, PostgresDatabase
from reviewbot.workflowdb import pgbackup, pgtools
from reviewbot.workflowdb.access import DBAccess, require
from reviewbot.workflowdb.allowlist import (
    LEDGER_TABLE,
    ClassifiedStatement,
    StatementKind,
    StatementRejected,
    classify_all,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import (
    BotSchema,
    Guard,
    ProtectedTable,
    bot_schema,
    refuse_change,
    reserved_name_problem,
)
from reviewbot.workflowdb.sqltext import (
    SqlTextError,
    Statement,
    migration_statements,
    tokenize,
)

log = logging.getLogger(__name__)

MAX_MIGRATION_BYTES = 1024 * 1024
MAX_NAME_CHARS = 255
BACKUPS_KEPT = 20
BACKUP_SUFFIX = "-pre-migration.sqlite"
_BACKUP_NAME = re.compile(r"^(\d+)" + re.escape(BACKUP_SUFFIX) + "$")

LEDGER_DDL = f"""
CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
    id {{id_type}},
    file_name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    destructive INTEGER NOT NULL,
    backup_path TEXT,
    applied_by TEXT NOT NULL,
    applied_at TEXT NOT NULL
)
"""


class MigrationError(ReviewbotError):
    """A migration was refused or failed; nothing of it was applied."""


class BadMigrationName(MigrationError):
    """The name is not a bare ``.sql`` file name in the migrations folder."""


@dataclass(frozen=True)
class MigrationResult:
    file_name: str
    sha256: str  # of the applied statements (see :func:`statements_sha256`)
    statements: int
    destructive: bool
    backup_path: Path | None  # the pre-migration snapshot, if one was taken
    applied_by: str
    applied_at: str  # ISO 8601, UTC
    log_id: int | None  # the schema_migration_log row; None when skipped
    skipped: bool = False  # already in the ledger with this hash (only with skip_if_applied)

    def as_dict(self) -> dict[str, Any]:
        return {
            "file_name": self.file_name,
            "sha256": self.sha256,
            "statements": self.statements,
            "destructive": self.destructive,
            "backup_path": None if self.backup_path is None else str(self.backup_path),
            "applied_by": self.applied_by,
            "applied_at": self.applied_at,
            "log_id": self.log_id,
            "skipped": self.skipped,
        }


# --- the file name ---------------------------------------------------------------------


def check_migration_name(migration_file: str) -> str:
    """Return ``migration_file`` if it is a bare ``.sql`` name; else :class:`BadMigrationName`.

    Pure: looks at the string only.
    """
    name = migration_file
    if not isinstance(name, str) or not name:
        raise BadMigrationName("migration file name is empty")
    if "\x00" in name:
        raise BadMigrationName("migration file name contains a NUL byte")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise BadMigrationName("migration file name contains a control character")
    if len(name) > MAX_NAME_CHARS:
        raise BadMigrationName(f"migration file name is longer than {MAX_NAME_CHARS} characters")
    shown = repr(name)
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute():
        raise BadMigrationName(f"migration file {shown} is an absolute path; give a bare name")
    if ".." in name:
        raise BadMigrationName(f"migration file {shown} contains '..'; give a bare name")
    if "/" in name or "\\" in name:
        raise BadMigrationName(
            f"migration file {shown} contains a path separator; give a bare name "
            "of a file in db/migrations/"
        )
    if PureWindowsPath(name).drive:
        raise BadMigrationName(f"migration file {shown} names a drive; give a bare name")
    if name.startswith("."):
        raise BadMigrationName(f"migration file {shown} starts with a dot")
    if not name.endswith(".sql"):
        raise BadMigrationName(f"migration file {shown} does not end in .sql")
    return name


def resolve_migration_file(migration_file: str, migrations_dir: Path) -> Path:
    """The file ``db/migrations/<name>``: must exist and stay inside the folder."""
    name = check_migration_name(migration_file)
    candidate = migrations_dir / name
    if not candidate.exists() and not candidate.is_symlink():
        raise BadMigrationName(f"migration file {name!r} not found in {migrations_dir}")
    folder = migrations_dir.resolve()
    target = candidate.resolve()
    if target.parent != folder:
        raise BadMigrationName(
            f"migration file {name!r} is a link to {target}, outside {migrations_dir}"
        )
    if not target.is_file():
        what = "a dangling link" if candidate.is_symlink() else "not a regular file"
        raise BadMigrationName(f"migration file {name!r} is {what}")
    return target


def read_migration(path: Path, *, packaged: bool = False) -> list[ClassifiedStatement]:
    """Read, split and classify a migration file; any refusal happens here, before running."""
    if path.stat().st_size > MAX_MIGRATION_BYTES:
        raise MigrationError(f"{path.name}: larger than {MAX_MIGRATION_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MigrationError(f"{path.name}: not UTF-8 text ({exc.reason})") from None
    return parse_migration(text, path.name, packaged=packaged)


def parse_migration(
    text: str, file_name: str, *, packaged: bool = False
) -> list[ClassifiedStatement]:
    if packaged:
        # The bot's own migrations are package data that never changes under a process,
        # and every store open checks each of them: parse each text once per process.
        return list(_parse_packaged(text, file_name))
    return _parse(text, file_name, packaged=False)


@functools.lru_cache(maxsize=128)
def _parse_packaged(text: str, file_name: str) -> tuple[ClassifiedStatement, ...]:
    return tuple(_parse(text, file_name, packaged=True))


def _parse(text: str, file_name: str, *, packaged: bool) -> list[ClassifiedStatement]:
    try:
        statements = migration_statements(text)
        classified = classify_all(statements, packaged=packaged)
    except (SqlTextError, StatementRejected) as exc:
        raise MigrationError(f"{file_name}: {exc}; nothing was applied") from None
    if not classified:
        raise MigrationError(f"{file_name}: no statements to apply")
    return classified


def statements_sha256(statements: list[Statement]) -> str:
    """SHA-256 of the applied statements: each as written, followed by ``;`` and a newline."""
    digest = hashlib.sha256()
    for stmt in statements:
        digest.update(stmt.text.encode("utf-8") + b";\n")
    return digest.hexdigest()


def open_database(paths: WorkflowPaths) -> Database:
    """The workflow database ``paths`` names (no migrations applied: see bootstrap)."""
    if paths.database_url is not None:
        return PostgresDatabase(paths.database_url, pool_size=1)
    return SQLiteDatabase(paths.db_file)


# --- backups ---------------------------------------------------------------------------


def list_backups(paths: WorkflowPaths) -> list[Path]:
    """The pre-migration snapshots, oldest first."""
    folder = paths.backups_dir
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _BACKUP_NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def ledger_ddl(dialect: str) -> str:
    if dialect == SQLITE:
        return LEDGER_DDL.replace("{id_type}", "INTEGER PRIMARY KEY AUTOINCREMENT")
    return LEDGER_DDL.replace("{id_type}", "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")


def next_backup_stamp(paths: WorkflowPaths, clock_ns: Callable[[], int], suffix: str) -> Path:
    """A new backup file name; names are distinct even within one nanosecond, and sort by
    time whatever the store."""
    paths.backups_dir.mkdir(parents=True, exist_ok=True)
    stamp = clock_ns()
    existing = list_backups(paths)
    if existing:  # names sort by time: never go back behind the newest snapshot
        newest = _BACKUP_NAME.match(existing[-1].name)
        assert newest is not None
        stamp = max(stamp, int(newest.group(1)) + 1)
    while any((paths.backups_dir / f"{stamp}{end}").exists() for end in (BACKUP_SUFFIX, suffix)):
        stamp += 1
    return paths.backups_dir / f"{stamp}{suffix}"


def take_backup(db: SQLiteDatabase, paths: WorkflowPaths, clock_ns: Callable[[], int]) -> Path:
    """``VACUUM INTO`` a new snapshot."""
    target = next_backup_stamp(paths, clock_ns, BACKUP_SUFFIX)
    db.vacuum_into(target)
    return target.resolve()


def prune_backups(paths: WorkflowPaths, keep: int = BACKUPS_KEPT) -> list[Path]:
    """Delete all but the newest ``keep`` snapshots; returns what was deleted.

    Best effort: a snapshot that cannot be deleted (a folder under a snapshot's name, a
    permission problem) is logged and skipped, and never fails the migration that pruned.
    """
    try:
        backups = list_backups(paths)
    except OSError as exc:
        log.warning("could not list the backups in %s to prune them: %s", paths.backups_dir, exc)
        return []
    doomed = backups[:-keep] if keep > 0 else backups
    deleted = []
    for path in doomed:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not prune the backup %s: %s", path, exc)
            continue
        deleted.append(path)
    return deleted


# --- DROP COLUMN checks ----------------------------------------------------------------


def _mentions(sql: str | None, word: str) -> bool:
    """Whether ``sql`` names ``word`` as an identifier (case-insensitive, any quoting)."""
    if not sql:
        return False
    try:
        return any((t.name or "").lower() == word.lower() for t in tokenize(sql))
    except SqlTextError:
        return True  # unreadable: assume it might


def drop_column_problem(tx: Tx, table: str, column: str) -> str | None:
    """Why SQLite cannot drop ``table.column`` (``None`` if it can, as far as we can tell)."""
    exists = tx.one(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE",
        (table,),
    )
    if exists is None:
        return f"table {table} does not exist"
    cols = tx.all("SELECT name, pk, hidden FROM pragma_table_xinfo(?)", (table,))
    match = [c for c in cols if str(c["name"]).lower() == column.lower()]
    if not match:
        return f"table {table} has no column {column}"
    if match[0]["pk"]:
        return "it is (part of) the primary key"
    if match[0]["hidden"] in (2, 3):
        return "it is a generated column"
    for idx in tx.all("SELECT name, origin FROM pragma_index_list(?)", (table,)):
        idx_cols = tx.all("SELECT name FROM pragma_index_info(?)", (idx["name"],))
        named = any(str(c["name"] or "").lower() == column.lower() for c in idx_cols)
        if not named:
            idx_sql = tx.one("SELECT sql FROM sqlite_master WHERE name = ?", (idx["name"],))
            named = idx_sql is not None and _mentions(idx_sql["sql"], column)
        if named:
            if idx["origin"] in ("u", "pk"):
                return "it has a UNIQUE constraint"
            return f"it is used by index {idx['name']} (drop the index first)"
    for fk in tx.all('SELECT "from" FROM pragma_foreign_key_list(?)', (table,)):
        if str(fk["from"]).lower() == column.lower():
            return "it is a foreign key"
    for other in tx.all("SELECT name FROM sqlite_master WHERE type = 'table'"):
        for fk in tx.all('SELECT "table", "to" FROM pragma_foreign_key_list(?)', (other["name"],)):
            if str(fk["table"]).lower() == table.lower() and str(fk["to"] or "").lower() == (
                column.lower()
            ):
                return f"a foreign key of table {other['name']} refers to it"
    for obj in tx.all(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"
    ):
        if _mentions(obj["sql"], table) and _mentions(obj["sql"], column):
            return f"it is used by {obj['type']} {obj['name']}"
    return None


def _check_drop_columns(tx: Tx, file_name: str, statements: list[ClassifiedStatement]) -> None:
    """Check each DROP COLUMN against the current schema, unless an earlier statement of the
    same migration touches its table (then the check runs inside the transaction)."""
    touched: set[str] = set()
    index_dropped = False  # DROP INDEX names no table: it may free any column
    for cs in statements:
        if (
            cs.kind is StatementKind.DROP_COLUMN
            and cs.name.lower() not in touched
            and not index_dropped
        ):
            _check_one_drop(tx, file_name, cs)
        touched.add(cs.name.lower())
        index_dropped = index_dropped or cs.kind is StatementKind.DROP_INDEX
        if cs.new_name is not None:
            touched.add(cs.new_name.lower())


def _check_one_drop(tx: Tx, file_name: str, cs: ClassifiedStatement) -> None:
    assert cs.column is not None
    problem = drop_column_problem(tx, cs.name, cs.column)
    if problem is not None:
        stmt = cs.statement
        raise MigrationError(
            f"{file_name}: statement {stmt.number} (line {stmt.line}: {stmt.first_line}): "
            f"cannot drop column {cs.column} of {cs.name}: {problem}; nothing was applied"
        )


# --- the bot's own tables ----------------------------------------------------------------


def check_bot_tables(
    file_name: str, statements: list[ClassifiedStatement], schema: BotSchema
) -> None:
    """Refuse a user migration that creates, drops, alters, indexes or references (by a
    foreign key) one of the bot's tables or indexes; nothing has run yet."""
    route = f"migration {file_name}"
    for cs in statements:
        where = f"statement {cs.statement.number} (line {cs.statement.line})"
        names = [cs.name, cs.new_name]
        if cs.kind is StatementKind.DROP_INDEX and schema.is_bot_index(cs.name):
            raise ProtectedTable(
                f"{route}: {where} drops index {cs.name}, one of reviewbot's own indexes; "
                "nothing was applied",
                table=cs.name,
            )
        if cs.kind is StatementKind.CREATE_TABLE:
            names += _referenced_tables(cs.statement)
        for name in names:
            if schema.is_bot_table(name):
                assert name is not None
                refusal = refuse_change(route, name)
                raise ProtectedTable(f"{refusal} ({where}); nothing was applied", table=name)


def _referenced_tables(stmt: Statement) -> list[str | None]:
    """The tables a CREATE TABLE names after REFERENCES (its foreign keys' parents)."""
    toks = stmt.tokens
    return [toks[i + 1].name for i, t in enumerate(toks[:-1]) if t.upper == "REFERENCES"]


# --- applying ----------------------------------------------------------------------------


def has_tables(tx: Tx) -> bool:
    if tx.dialect != SQLITE:
        row = tx.one(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return row is not None
    row = tx.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    return row is not None


def table_exists(tx: Tx, name: str) -> bool:
    """Whether the table ``name`` exists (in the store's schema, on PostgreSQL)."""
    if tx.dialect != SQLITE:
        sql = (
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_name = ?"
        )
        return tx.one(sql, (name.lower(),)) is not None
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE"
    return tx.one(sql, (name,)) is not None


def _already_applied(tx: Tx, file_name: str, sha: str) -> bool:
    if table_exists(tx, LEDGER_TABLE):
        row = tx.one(
            f"SELECT 1 FROM {LEDGER_TABLE} WHERE file_name = ? AND sha256 = ?", (file_name, sha)
        )
        return row is not None
    return False


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def apply_workflow_db_migration(
    migration_file: str,
    *,
    paths: WorkflowPaths,
    access: DBAccess,
    applied_by: str,
    db: Database | None = None,
    skip_if_applied: bool = False,
    packaged: bool = False,
    packaged_text: bytes | None = None,
    backup: bool = True,
    clock_ns: Callable[[], int] = time.time_ns,
    now: Callable[[], str] = _utc_now,
) -> MigrationResult:
    """Apply ``db/migrations/<migration_file>`` to the workflow database.

    ``access`` must be exactly read-write. ``db`` is the open store (opened on
    ``paths.db_file`` and closed again when not given). With ``skip_if_applied``, a file whose
    name and statement hash are already in the ledger is skipped (the bot's own migrations
    at start); otherwise re-applying is allowed and logged again.

    ``packaged`` is only for the bot's own shipped migrations (at start); with
    ``packaged_text`` (PostgreSQL) the shipped file's bytes are applied as they are in the
    package, not read from ``db/migrations/`` (which keeps SQLite's files of the same
    names, so one workflow folder can serve either store). Every other
    migration is a user migration: it may not take a name of the bot's files nor touch a bot
    table (:mod:`reviewbot.workflowdb.protected`), checked before anything runs.
    ``backup=False`` (packaged only: a store created by this very start-up, which holds
    nothing to lose) skips the pre-migration snapshot.

    Raises :class:`~reviewbot.workflowdb.access.AccessDenied` (incl.
    :class:`~reviewbot.workflowdb.protected.ProtectedTable`) or :class:`MigrationError`
    (incl. :class:`BadMigrationName`); in every case nothing was applied.
    """
    require(access, DBAccess.READ_WRITE, exactly=True)
    if not backup and not packaged:
        raise ValueError("only the bot's own migrations on a new store may skip the backup")
    schema = None if packaged else bot_schema()
    if schema is not None:
        problem = reserved_name_problem(check_migration_name(migration_file), schema)
        if problem is not None:
            raise BadMigrationName(
                f"migration file {problem}; give yours a prefix such as site_ (nothing was applied)"
            )
    file_name = migration_file
    if packaged_text is not None:
        assert packaged, "only the bot's own migrations are applied from the package"
        classified = parse_migration(
            packaged_text.decode("utf-8"), check_migration_name(file_name), packaged=True
        )
    else:
        path = resolve_migration_file(migration_file, paths.migrations_dir)
        classified = read_migration(path, packaged=packaged)
    if schema is not None:
        check_bot_tables(file_name, classified, schema)
    statements = [cs.statement for cs in classified]
    sha = statements_sha256(statements)
    destructive = any(cs.destructive for cs in classified)

    own_db = db is None
    store = db if db is not None else open_database(paths)
    try:
        return _apply(
            store,
            paths=paths,
            file_name=file_name,
            classified=classified,
            sha=sha,
            destructive=destructive,
            may_back_up=backup,
            applied_by=applied_by,
            skip_if_applied=skip_if_applied,
            schema=schema,
            clock_ns=clock_ns,
            now=now,
        )
    finally:
        if own_db:
            store.close()


def _apply(
    db: Database,
    *,
    paths: WorkflowPaths,
    file_name: str,
    classified: list[ClassifiedStatement],
    sha: str,
    destructive: bool,
    may_back_up: bool,
    applied_by: str,
    skip_if_applied: bool,
    schema: BotSchema | None,
    clock_ns: Callable[[], int],
    now: Callable[[], str],
) -> MigrationResult:
    def skipped() -> MigrationResult:
        return MigrationResult(
            file_name, sha, len(classified), destructive, None, applied_by, "", None, True
        )

    with db.read() as tx:
        if skip_if_applied and _already_applied(tx, file_name, sha):
            return skipped()
        if db.dialect == SQLITE:
            # Refuse what SQLite cannot drop before taking a backup or opening the transaction
            # (PostgreSQL refuses a column others depend on by itself, inside the transaction).
            _check_drop_columns(tx, file_name, classified)
        needs_backup = may_back_up and destructive and has_tables(tx)

    backup = _backup(db, paths, classified, clock_ns) if needs_backup else None
    if backup is not None:
        try:
            prune_backups(paths)
        except Exception:  # pruning is housekeeping: it never fails the migration
            log.exception("pruning the backups in %s failed", paths.backups_dir)

    applied_at = now()
    try:
        with db.write() as tx:
            if skip_if_applied and _already_applied(tx, file_name, sha):
                return skipped()
            tx.execute(ledger_ddl(db.dialect))
            for cs in classified:
                if cs.kind is StatementKind.DROP_COLUMN and db.dialect == SQLITE:
                    # An earlier statement of this migration may have changed the table.
                    _check_one_drop(tx, file_name, cs)
                _run(tx, file_name, cs.statement, schema)
            if isinstance(tx, PgTx):
                # the tools' role follows the user's tables (and never gains a bot table)
                pgtools.grant_after_migration(tx)
            row = tx.one(
                f"INSERT INTO {LEDGER_TABLE} (file_name, sha256, destructive, backup_path, "
                "applied_by, applied_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    file_name,
                    sha,
                    int(destructive),
                    None if backup is None else str(backup),
                    applied_by,
                    applied_at,
                ),
            )
            log_id = None if row is None else int(row["id"])
    except (sqlite3.Error, psycopg.Error) as exc:
        raise MigrationError(f"{file_name}: {exc}; nothing was applied") from None
    log.info(
        "migration applied: %s (%d statement%s%s, by %s)",
        file_name,
        len(classified),
        "" if len(classified) == 1 else "s",
        f", backup {backup}" if backup is not None else "",
        applied_by,
    )
    return MigrationResult(
        file_name, sha, len(classified), destructive, backup, applied_by, applied_at, log_id
    )


# Actions no allow-listed statement needs: SQLite refuses them even if a statement slipped
# past the allow-list (defence in depth; the allow-list is the rule users see).
_DENIED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_PRAGMA,
        sqlite3.SQLITE_ATTACH,
        sqlite3.SQLITE_DETACH,
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_SAVEPOINT,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_VTABLE,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_DROP_VTABLE,
        sqlite3.SQLITE_ANALYZE,
        # not SQLITE_REINDEX: CREATE INDEX asks for it (REINDEX itself is not allow-listed)
    }
)


def _migration_authorizer(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_DENY if action in _DENIED_ACTIONS else sqlite3.SQLITE_OK


def _backup(
    db: Database,
    paths: WorkflowPaths,
    classified: list[ClassifiedStatement],
    clock_ns: Callable[[], int],
) -> Path:
    if not isinstance(db, PostgresDatabase):
        assert isinstance(db, SQLiteDatabase)
        return take_backup(db, paths, clock_ns)
    tables = {cs.name for cs in classified if cs.kind is not StatementKind.DROP_INDEX}
    target = next_backup_stamp(paths, clock_ns, pgbackup.BACKUP_SUFFIX)
    return pgbackup.backup_tables(db, sorted(tables), target)


def _run(tx: Any, file_name: str, stmt: Statement, schema: BotSchema | None) -> None:
    """Run one statement; a user migration's (``schema`` given) also under the bot-table
    guard, which catches what the text check cannot see (e.g. a cascade)."""
    if tx.dialect != SQLITE:
        _run_postgres(tx, file_name, stmt)
        return
    conn: sqlite3.Connection = tx.conn
    route = f"migration {file_name}"
    guard = None if schema is None else Guard(route, _migration_authorizer, schema)
    conn.set_authorizer(_migration_authorizer if guard is None else guard)
    try:
        conn.execute(stmt.text)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        if guard is not None:
            guard.raise_if_refused()
        raise MigrationError(
            f"{file_name}: statement {stmt.number} (line {stmt.line}: {stmt.first_line}) "
            f"failed: {exc}; nothing was applied"
        ) from None
    finally:
        conn.set_authorizer(None)


def _run_postgres(tx: Any, file_name: str, stmt: Statement) -> None:
    """One statement on PostgreSQL, as written (no placeholders: a ``%`` or ``?`` in it is
    text). There is no authorizer: the allow-list and the bot-table check on the text
    (plus the refusal of ``CASCADE``, which could reach a bot table) decided before."""
    if any(t.upper == "CASCADE" for t in stmt.tokens):
        raise MigrationError(
            f"{file_name}: statement {stmt.number} (line {stmt.line}: {stmt.first_line}): "
            "CASCADE is not allowed (it may drop what other tables depend on); "
            "nothing was applied"
        )
    try:
        tx.conn.execute(stmt.text)
    except psycopg.Error as exc:
        raise MigrationError(
            f"{file_name}: statement {stmt.number} (line {stmt.line}: {stmt.first_line}) "
            f"failed: {str(exc).strip()}; nothing was applied"
        ) from None


def migration_log(db: Database) -> list[dict[str, Any]]:
    """The ledger, oldest first (empty before the first migration)."""
    with db.read() as tx:
        if not table_exists(tx, LEDGER_TABLE):
            return []
        rows = tx.all(f"SELECT * FROM {LEDGER_TABLE} ORDER BY id")
    out = []
    for row in rows:
        item = dict(row)
        item["destructive"] = bool(item["destructive"])
        out.append(item)
    return out
