"""The bot's own schema inside the workflow database, and what user routes may do to it.

The workflow database holds two kinds of tables: the bot's own (tokens, leases, epochs,
workers, the delivery journal, decisions, the outbox, merges, sessions, the migration ledger)
and workflow tables created by user migrations. The set of the bot's tables is read from
the migration files the package ships (``reviewbot/store/migrations/NNNN_name.sql``) plus
the ledger, never kept by hand, so a new shipped table is protected the day it ships.

The rules:

- ``mutate`` and user migrations may not insert, update, delete, drop, alter or index a
  bot table; the refusal names the table.
- Nothing a user route runs may read a secret table (``api_tokens``: token hashes), not even
  its row count.
- A user migration may not take a shipped file's name, nor any name of the bot's
  ``NNNN_name.sql`` form, so the bot's schema files can never be shadowed.

Each rule is enforced twice: on the statement text (a clear early refusal) and by an SQLite
authorizer on the connection (so a CTE, a quoted or mis-cased name, or a foreign-key
cascade cannot slip past the text check).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from reviewbot.workflowdb.access import AccessDenied
from reviewbot.workflowdb.allowlist import LEDGER_TABLE, StatementKind, classify_all
from reviewbot.workflowdb.sqltext import migration_statements

PACKAGED_NAME = re.compile(r"^[0-9]{4}_[a-z0-9_]+\.sql$")
SECRET_TABLES = frozenset({"api_tokens"})

Authorizer = Callable[[int, Any, Any, Any, Any], int]


class ProtectedTable(AccessDenied):
    """A user route tried to change (or read a secret of) one of the bot's own tables."""

    def __init__(self, detail: str, table: str) -> None:
        super().__init__(detail)
        self.table = table


def packaged_migrations(dialect: str = "sqlite") -> list[tuple[str, bytes]]:
    """The package's migration files ``(name, bytes)`` for ``dialect``, in name order.

    SQLite's are ``store/migrations/NNNN_name.sql``; PostgreSQL's, the same schema in its
    types, are ``store/migrations/postgresql/NNNN_name.sql`` under the same names.
    """
    folder = resources.files("reviewbot.store").joinpath("migrations")
    if dialect != "sqlite":
        folder = folder.joinpath(dialect)
    found = [
        (entry.name, entry.read_bytes())
        for entry in folder.iterdir()
        if entry.is_file() and PACKAGED_NAME.match(entry.name)
    ]
    return sorted(found)


@dataclass(frozen=True)
class BotSchema:
    """The names the bot owns (lower-cased: SQLite names are case-insensitive)."""

    tables: frozenset[str]
    indexes: frozenset[str]
    file_names: frozenset[str] = field(default_factory=frozenset)

    def is_bot_table(self, name: str | None) -> bool:
        return name is not None and name.lower() in self.tables

    def is_bot_index(self, name: str | None) -> bool:
        return name is not None and name.lower() in self.indexes


def schema_of(files: list[tuple[str, bytes]]) -> BotSchema:
    """The tables and indexes that ``files`` (shipped migrations) create, plus the ledger."""
    tables = {LEDGER_TABLE}
    indexes: set[str] = set()
    for _, data in files:
        for cs in classify_all(migration_statements(data.decode("utf-8")), packaged=True):
            if cs.kind is StatementKind.CREATE_TABLE:
                tables.add(cs.name.lower())
            elif cs.kind is StatementKind.CREATE_INDEX and cs.index is not None:
                indexes.add(cs.index.lower())
            if cs.new_name is not None:  # a shipped rename keeps the table the bot's
                tables.add(cs.new_name.lower())
    return BotSchema(frozenset(tables), frozenset(indexes), frozenset(n for n, _ in files))


@cache
def bot_schema() -> BotSchema:
    """The bot's schema as this package ships it (read once per process)."""
    return schema_of(packaged_migrations())


def reserved_name_problem(file_name: str, schema: BotSchema | None = None) -> str | None:
    """Why a user migration may not have this name (it is, or looks like, one of the bot's
    shipped files), or ``None``."""
    schema = schema or bot_schema()
    if file_name.lower() in {n.lower() for n in schema.file_names}:
        return f"{file_name!r} is the name of one of reviewbot's own migrations"
    if PACKAGED_NAME.match(file_name.lower()):
        return f"names of the form NNNN_name.sql, like {file_name!r}, belong to reviewbot"
    return None


def refuse_change(route: str, table: str) -> ProtectedTable:
    return ProtectedTable(
        f"{route}: {table} is one of reviewbot's own tables; {route} cannot change it "
        "(only workflow tables created by your migrations can be changed)",
        table=table,
    )


def refuse_secret(route: str, table: str) -> ProtectedTable:
    return ProtectedTable(
        f"{route}: {table} holds secrets (API token hashes) and cannot be read through "
        f"{route}; use `reviewbot token list`",
        table=table,
    )


# -- authorizers ---------------------------------------------------------------------------

# Actions whose first argument is the table acted on.
_TABLE_IN_ARG1 = frozenset(
    {
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TABLE,
    }
)
# Actions whose second argument is the table (the first is an index, or the database).
_TABLE_IN_ARG2 = frozenset(
    {
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_ALTER_TABLE,
    }
)


@dataclass
class Guard:
    """An SQLite authorizer for a user route, remembering the first protected table it
    refused so the error can name it (SQLite's own message says only "not authorized").

    ``inner`` is the route's own authorizer (which actions it allows at all); the guard adds
    the bot-table rules on top and never allows what ``inner`` denies.
    """

    route: str
    inner: Authorizer
    schema: BotSchema = field(default_factory=bot_schema)
    refused: ProtectedTable | None = None

    def __call__(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if action == sqlite3.SQLITE_READ and str(arg1 or "").lower() in SECRET_TABLES:
            return self._deny(refuse_secret(self.route, str(arg1)))
        table: str | None = None
        if action in _TABLE_IN_ARG1:
            table = arg1
        elif action in _TABLE_IN_ARG2:
            table = arg2
        if table is not None and self.schema.is_bot_table(table):
            return self._deny(refuse_change(self.route, str(table)))
        return self.inner(action, arg1, arg2, dbname, source)

    def _deny(self, refusal: ProtectedTable) -> int:
        if self.refused is None:
            self.refused = refusal
        return sqlite3.SQLITE_DENY

    def raise_if_refused(self) -> None:
        if self.refused is not None:
            raise self.refused
