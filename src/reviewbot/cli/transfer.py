"""``reviewbot db export`` and ``reviewbot db import``: the bot's data as JSON lines, to move
a store from SQLite to PostgreSQL (or back). See :mod:`reviewbot.workflowdb.transfer`.

Both need read-write DB access exactly: the export holds every token hash and session, and
the import writes the bot's own tables (into an empty store only).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.workflowdb.access import DBAccess, require
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.migrations import MigrationError
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.transfer import TransferError, import_lines, write_export

Context = Callable[[argparse.Namespace], tuple[WorkflowPaths, DBAccess]]


def register(add: Callable[[str, str, str], argparse.ArgumentParser], context: Context) -> None:
    export = add(
        "export",
        "write the bot's data (its own tables) as JSON lines (needs read-write access)",
        "reviewbot db export --output reviewbot.jsonl",
    )
    export.add_argument(
        "--output", type=Path, help="file to create (mode 0600; default: standard output)"
    )
    export.set_defaults(func=lambda args: _export(args, context))

    imp = add(
        "import",
        "read an export into this (empty) store, all rows or none (needs read-write access)",
        "REVIEWBOT_DATABASE_URL=postgresql://... reviewbot db import reviewbot.jsonl",
    )
    imp.add_argument("file", nargs="?", type=Path, help="the export (default: standard input)")
    imp.set_defaults(func=lambda args: _import(args, context))


def _open(args: argparse.Namespace, context: Context) -> Any:
    paths, access = context(args)
    require(access, DBAccess.READ_WRITE, exactly=True)
    try:
        return open_store(paths)
    except MigrationError as exc:
        raise CommandError(" ".join(str(exc).split())) from None


def _export(args: argparse.Namespace, context: Context) -> int:
    db = _open(args, context)
    try:
        if args.output is None:
            result = write_export(db, sys.stdout)
        else:
            # Token hashes and sessions: readable by this user only, and never overwritten.
            try:
                fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                raise CommandError(f"{args.output} exists; give a new file name") from None
            with open(fd, "w", encoding="utf-8") as out:
                result = write_export(db, out)
    finally:
        db.close()
    print(f"exported {result.total} rows from {len(result.rows)} tables", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace, context: Context) -> int:
    db = _open(args, context)
    try:
        if args.file is None:
            result = import_lines(db, sys.stdin)
        else:
            with open(args.file, encoding="utf-8") as handle:
                result = import_lines(db, handle)
    except TransferError as exc:
        raise CommandError(f"import refused: {exc.detail}; nothing was imported") from None
    finally:
        db.close()
    print(f"imported {result.total} rows into {len(result.rows)} tables", file=sys.stderr)
    return 0
