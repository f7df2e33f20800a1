"""The pre-migration backup on PostgreSQL: the tables a destructive migration touches.

With ``pg_dump`` on PATH, the tables that exist are dumped (``--format=custom``: restore
with ``pg_restore``) to ``db/migrations/.backups/<nanoseconds>-pre-migration.pgdump``.
Without it, or when it fails (a client older than the server, say), the documented
equivalent: each table is copied, rows and all, into the ``reviewbot_backups`` schema of the
same database as ``"<nanoseconds>_<table>"``, and the backup path names that schema and
stamp (``postgresql:reviewbot_backups/<nanoseconds>``). Either way, the backup exists before
the migration's transaction starts.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from psycopg import sql

from reviewbot.store.postgres import PostgresDatabase

log = logging.getLogger(__name__)

BACKUP_SUFFIX = "-pre-migration.pgdump"
BACKUP_SCHEMA = "reviewbot_backups"
PG_DUMP_TIMEOUT_S = 600.0


def existing_tables(db: PostgresDatabase, names: list[str]) -> list[str]:
    """Those of ``names`` that are tables of the store's schema (names as stored)."""
    if not names:
        return []
    with db.read() as tx:
        rows = tx.all(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = ANY(?)",
            ([n.lower() for n in names] + list(names),),
        )
    return sorted({str(r["table_name"]) for r in rows})


def backup_tables(db: PostgresDatabase, names: list[str], target: Path) -> Path:
    """Back up the tables of ``names`` that exist; returns the dump file or the schema mark."""
    tables = existing_tables(db, names)
    pg_dump = shutil.which("pg_dump")
    if pg_dump is not None:
        try:
            return _dump(pg_dump, db, tables, target)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("pg_dump failed (%s); copying the tables into %s", exc, BACKUP_SCHEMA)
    return _copy_into_schema(db, tables, target.name.removesuffix(BACKUP_SUFFIX))


def _dump(pg_dump: str, db: PostgresDatabase, tables: list[str], target: Path) -> Path:
    args = [pg_dump, "--format=custom", "--no-owner", f"--file={target}", f"--dbname={db.url}"]
    with db.read() as tx:
        schema = str(tx.one("SELECT current_schema() AS s")["s"])
    for table in tables:
        args.append(f'--table="{schema}"."{table}"')
    if not tables:  # nothing to keep, but the backup still names a real (empty) dump
        args.append("--schema-only")
    # The arguments are this store's own URL and table names, as a list: no shell.
    done = subprocess.run(  # noqa: S603
        args, capture_output=True, timeout=PG_DUMP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        target.unlink(missing_ok=True)
        raise subprocess.SubprocessError(done.stderr.decode("utf-8", "replace").strip())
    return target.resolve()


def _copy_into_schema(db: PostgresDatabase, tables: list[str], stamp: str) -> Path:
    with db.write() as tx:
        tx.conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(BACKUP_SCHEMA))
        )
        for table in tables:
            tx.conn.execute(
                sql.SQL("CREATE TABLE {}.{} AS TABLE {}").format(
                    sql.Identifier(BACKUP_SCHEMA),
                    sql.Identifier(f"{stamp}_{table}"),
                    sql.Identifier(table),
                )
            )
    return Path(f"postgresql:{BACKUP_SCHEMA}/{stamp}")
