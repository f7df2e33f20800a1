"""``reviewbot db``: the workflow database's managed routes on the command line.

``apply FILE`` runs a migration from ``db/migrations/``; ``query SQL`` reads; ``mutate SQL``
changes rows; ``log`` shows the migration ledger; ``backups`` lists pre-migration snapshots;
``export`` / ``import`` move the bot's data between stores (SQLite and PostgreSQL).
``REVIEWBOT_DB_ACCESS`` bounds what this process may do and ``--access`` can only lower it.
With read-write access the store is opened as the bot opens it (folders created, the bot's
own migrations applied); with read access nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any

from reviewbot.cli import CommandError, transfer
from reviewbot.config import load_settings
from reviewbot.store.database import Database
from reviewbot.workflowdb.access import DBAccess, effective_access, require
from reviewbot.workflowdb.bootstrap import open_existing_store, open_store
from reviewbot.workflowdb.migrations import (
    MigrationError,
    apply_workflow_db_migration,
    list_backups,
    migration_log,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.query import (
    DEFAULT_MAX_ROWS,
    QueryFailed,
    QueryLimits,
    QueryRefused,
    QueryResult,
    mutate_workflow_db,
    query_workflow_db,
)

ACCESS_CHOICES = ("read", "read-write")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "db",
        help="workflow database: migrations, queries, row changes",
        description=__doc__,
        epilog="Example: reviewbot db apply site_0001_notes.sql",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="db_command", metavar="DB_COMMAND", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    common.add_argument(
        "--access",
        choices=ACCESS_CHOICES,
        help="lower this command's DB access (it can never exceed REVIEWBOT_DB_ACCESS)",
    )

    def add(name: str, help_text: str, example: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=f"Example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    apply = add(
        "apply",
        "apply a migration file from DATA_DIR/db/migrations/ (needs read-write access)",
        "reviewbot db apply site_0001_notes.sql --json",
    )
    apply.add_argument(
        "file",
        metavar="FILE",
        # NNNN_name.sql is the pattern of reviewbot's own migrations: examples stay clear of it.
        help="bare file name, e.g. site_0001_notes.sql (NNNN_name.sql names are reviewbot's own)",
    )
    apply.add_argument(
        "--by", dest="applied_by", help="who applies it, for the ledger (default: cli:$USER)"
    )
    apply.set_defaults(func=_apply)

    query = add(
        "query",
        "run one SELECT / WITH / EXPLAIN, or describe TABLE, read-only (needs read access)",
        'reviewbot db query "SELECT file_name, applied_at FROM schema_migration_log" --json',
    )
    query.add_argument("sql", metavar="SQL")
    query.add_argument("--params", help="JSON array of values for ? placeholders")
    query.add_argument(
        "--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="row limit (default 1000)"
    )
    query.set_defaults(func=_query)

    mutate = add(
        "mutate",
        "run exactly one INSERT / UPDATE / DELETE (needs read-write access)",
        "reviewbot db mutate \"DELETE FROM site_notes WHERE id = ?\" --params '[7]'",
    )
    mutate.add_argument("sql", metavar="SQL")
    mutate.add_argument("--params", help="JSON array of values for ? placeholders")
    mutate.set_defaults(func=_mutate)

    log = add("log", "show the migration ledger (schema_migration_log)", "reviewbot db log --json")
    log.set_defaults(func=_log)

    backups = add(
        "backups", "list pre-migration snapshots, oldest first", "reviewbot db backups --json"
    )
    backups.set_defaults(func=_backups)

    transfer.register(add, _context)


# --- shared plumbing ------------------------------------------------------------------------


def _context(args: argparse.Namespace) -> tuple[WorkflowPaths, DBAccess]:
    settings = load_settings()
    access = effective_access(settings.db_access, args.access)
    return WorkflowPaths.from_settings(settings), access


def _limits(max_rows: int = DEFAULT_MAX_ROWS) -> QueryLimits:
    """The configured time limit; the operator's ``--max-rows`` is the row limit."""
    return QueryLimits(timeout_s=load_settings().query_timeout_s, max_rows=max(1, max_rows))


def _open(paths: WorkflowPaths, access: DBAccess) -> Database:
    """The store as this access allows: bootstrapped when read-write, read-only otherwise."""
    require(access, DBAccess.READ)
    try:
        if access >= DBAccess.READ_WRITE:
            return open_store(paths)
    except MigrationError as exc:
        raise CommandError(_line(str(exc))) from None
    return open_existing_store(paths)


def _open_read(paths: WorkflowPaths, access: DBAccess) -> Database:
    """The existing store, read-only, for commands that only read (never creates one)."""
    require(access, DBAccess.READ)
    return open_existing_store(paths)


def _line(text: str) -> str:
    return " ".join(text.split())


def _params(raw: str | None) -> list[Any]:
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CommandError(f"--params: not JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise CommandError("--params: must be a JSON array, e.g. '[1, \"x\"]'")
    return value


def _print_json(data: Any) -> None:
    # Query answers arrive JSON-ready (QueryResult.as_dict); anything else prints as text.
    print(json.dumps(data, default=str, indent=2))


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return "x'" + bytes(value).hex() + "'"
    return _line(str(value))


def _print_table(columns: list[str], rows: list[list[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(t.ljust(w) for t, w in zip(row, widths, strict=True)).rstrip())


# --- commands ----------------------------------------------------------------------------------


def _apply(args: argparse.Namespace) -> int:
    paths, access = _context(args)
    require(access, DBAccess.READ_WRITE, exactly=True)
    applied_by = args.applied_by or f"cli:{os.environ.get('USER') or 'operator'}"
    db = _open(paths, access)
    try:
        result = apply_workflow_db_migration(
            args.file, paths=paths, access=access, applied_by=applied_by, db=db
        )
    except MigrationError as exc:
        raise CommandError(_line(str(exc))) from None
    finally:
        db.close()
    if args.json:
        _print_json(result.as_dict())
    else:
        backup = f"backup {result.backup_path}" if result.backup_path else "no backup needed"
        kind = "destructive" if result.destructive else "non-destructive"
        print(
            f"applied {result.file_name}: {result.statements} statement"
            f"{'s' if result.statements != 1 else ''}, {kind}, {backup} "
            f"(ledger row {result.log_id})"
        )
    return 0


def _show_result(args: argparse.Namespace, result: QueryResult, *, changed: bool) -> None:
    if args.json:
        _print_json(result.as_dict())
        return
    if result.columns:
        _print_table(result.columns, result.rows)
    if changed:
        print(f"{result.rowcount} row{'s' if result.rowcount != 1 else ''} changed")
    else:
        more = " (truncated: more rows exist)" if result.truncated else ""
        print(f"({result.rowcount} row{'s' if result.rowcount != 1 else ''}){more}")


def _query(args: argparse.Namespace) -> int:
    paths, access = _context(args)
    params = _params(args.params)
    _open_read(paths, access).close()
    try:
        result = query_workflow_db(
            args.sql,
            params,
            paths=paths,
            access=access,
            max_rows=max(1, args.max_rows),
            limits=_limits(args.max_rows),
        )
    except (QueryRefused, QueryFailed) as exc:
        raise CommandError(_line(str(exc))) from None
    _show_result(args, result, changed=False)
    return 0


def _mutate(args: argparse.Namespace) -> int:
    paths, access = _context(args)
    require(access, DBAccess.READ_WRITE)
    params = _params(args.params)
    _open(paths, access).close()
    try:
        result = mutate_workflow_db(args.sql, params, paths=paths, access=access, limits=_limits())
    except (QueryRefused, QueryFailed) as exc:
        raise CommandError(_line(str(exc))) from None
    _show_result(args, result, changed=True)
    return 0


def _log(args: argparse.Namespace) -> int:
    paths, access = _context(args)
    db = _open_read(paths, access)
    try:
        rows = migration_log(db)
    finally:
        db.close()
    if args.json:
        _print_json(rows)
        return 0
    columns = ["id", "file_name", "applied_at", "applied_by", "destructive", "backup", "sha256"]
    table = [
        [
            r["id"],
            r["file_name"],
            r["applied_at"],
            r["applied_by"],
            "yes" if r["destructive"] else "no",
            r["backup_path"] or "-",
            str(r["sha256"])[:12],
        ]
        for r in rows
    ]
    _print_table(columns, table)
    print(f"({len(rows)} migration{'s' if len(rows) != 1 else ''} applied)")
    return 0


def _backups(args: argparse.Namespace) -> int:
    paths, access = _context(args)
    require(access, DBAccess.READ)
    items = []
    for path in list_backups(paths):
        stamp = int(path.name.split("-", 1)[0])
        taken = datetime.fromtimestamp(stamp / 1e9, UTC).isoformat(timespec="seconds")
        items.append({"path": str(path.resolve()), "taken_at": taken, "bytes": path.stat().st_size})
    if args.json:
        _print_json(items)
        return 0
    _print_table(
        ["taken_at", "bytes", "path"], [[i["taken_at"], i["bytes"], i["path"]] for i in items]
    )
    print(f"({len(items)} backup{'s' if len(items) != 1 else ''})")
    return 0
