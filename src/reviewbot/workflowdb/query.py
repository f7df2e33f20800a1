"""Reading and changing rows of the workflow database: query and mutate.

Both are bound to the caller's :class:`~reviewbot.workflowdb.access.DBAccess` and return plain
data. Each is guarded twice: the statement text is checked first (one statement, an allowed
kind, no write verb hidden in a CTE), then SQLite itself enforces it: queries run on a
``mode=ro`` ``query_only`` connection, and both run under an authorizer that denies every
action outside a read (or, for mutations, a row change), every change to the bot's own
tables and every read of a secret table (:mod:`reviewbot.workflowdb.protected`). On a
PostgreSQL store the same contract is kept by PostgreSQL's own parser and a database role
(:mod:`reviewbot.workflowdb.pgtools`). Schema changes have their own route
(:mod:`reviewbot.workflowdb.migrations`).

Both are bounded (:class:`QueryLimits`): a statement running longer than its time limit is
interrupted (:class:`QueryTimeout`), and an answer above the row limit is truncated while one
above the byte limit is refused (:class:`QueryTooLarge`). Servers run them on their own
small executor (:func:`run_bounded`), so runaway statements cannot take the threads that
health checks, ingress and the lease API need.
"""

from __future__ import annotations

import base64
import functools
import math
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import psycopg

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.pgstatement import PgStatementRefused, Route
from reviewbot.store.database import SQLiteDatabase, StoreExecutor
from reviewbot.workflowdb import pgtools
from reviewbot.workflowdb.access import DBAccess, require
from reviewbot.workflowdb.allowlist import LEDGER_TABLE
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import (
    SECRET_TABLES,
    Guard,
    bot_schema,
    refuse_change,
    refuse_secret,
)
from reviewbot.workflowdb.sqltext import SqlTextError, Statement, TokenKind, split_statements

MAX_SQL_CHARS = 100_000
DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_GROWTH_BYTES = 64 * 1024 * 1024
QUERY_WORKERS = 2  # the machine's tool/CLI statements run at most this many at once
_PROGRESS_STEPS = 1000  # SQLite VM steps between two looks at the clock

# Write or schema verbs: never inside a query; the schema ones never inside a mutation.
_SCHEMA_WORDS = frozenset(
    {"CREATE", "DROP", "ALTER", "PRAGMA", "ATTACH", "DETACH", "VACUUM", "REINDEX", "ANALYZE"}
)
_TX_WORDS = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT"})
_WRITE_WORDS = frozenset({"INSERT", "UPDATE", "DELETE"})
_QUERY_STARTS = ("SELECT", "WITH", "EXPLAIN")
# SQLite reserves every table name with this prefix for itself: the schema, the
# AUTOINCREMENT counters (sqlite_sequence: lowering one would hand out a used id again),
# the statistics. mutate changes none of them (the authorizer refuses every such name; the
# text check names the ones SQLite has, so a column called sqlite_x stays usable).
_SQLITE_PREFIX = "sqlite_"
_SQLITE_TABLES = frozenset(
    {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}
    | {"sqlite_sequence", "sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"}
)
_MUTATION_STARTS = ("INSERT", "UPDATE", "DELETE")


def _is_sqlite_table(name: str) -> bool:
    return name.lower().startswith(_SQLITE_PREFIX)


class QueryRefused(ReviewbotError, ValueError):
    """The statement is not allowed on this route; nothing ran."""


class QueryFailed(ReviewbotError, RuntimeError):
    """The statement was allowed but SQLite could not run it (nothing was changed)."""

    code = "statement_failed"


class ToolsRoleMissing(QueryFailed):
    """PostgreSQL store: the database role that confines these routes cannot be used
    (:mod:`reviewbot.workflowdb.pgtools`), so they refuse rather than run less confined.
    The message says what to set up."""

    code = "tools_role_missing"


class QueryTimeout(QueryFailed):
    """The statement ran past its time limit and was interrupted (nothing was changed)."""

    code = "query_timeout"


class QueryTooLarge(QueryFailed):
    """The answer (or one value in it) is larger than the byte limit."""

    code = "query_too_large"


@dataclass(frozen=True)
class QueryLimits:
    """How long one statement may run and how large its answer may be.

    ``clock`` returns monotonic seconds; tests pass their own.
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    # How much one mutation may grow the database file (it shares the disk with the bot's
    # own state): a few rows each up to max_bytes, not a recursive CTE of blobs.
    max_growth_bytes: int = DEFAULT_MAX_GROWTH_BYTES
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)


DEFAULT_LIMITS = QueryLimits()

# -- the bounded executor ------------------------------------------------------------------

# Apart from every store's own pool: a runaway statement waits here, never in the threads
# that health checks, ingress and the lease API need.
_QUERY_POOL = StoreExecutor(QUERY_WORKERS, name="workflowdb-query")

P = ParamSpec("P")
R = TypeVar("R")


class _Cancels:
    """Which statements a stopping server has given up on: those submitted to the pool
    before the last :func:`cancel_submitted` (their epoch is older)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.lock = threading.Lock()
        self.local = threading.local()  # the epoch of the call running on this thread

    def running_is_cancelled(self) -> bool:
        epoch: int | None = getattr(self.local, "epoch", None)
        return epoch is not None and epoch != self.epoch


_CANCELS = _Cancels()


async def run_bounded(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``fn`` on the process's pool for tool and CLI statements: at most
    ``QUERY_WORKERS`` at once, the rest wait their turn there."""
    call = functools.partial(fn, *args, **kwargs)
    return await _QUERY_POOL.run(_in_epoch, _CANCELS.epoch, call)


def _in_epoch(epoch: int, call: Callable[[], R]) -> R:
    _CANCELS.local.epoch = epoch
    try:
        return call()
    finally:
        _CANCELS.local.epoch = None


def cancel_submitted() -> None:
    """Interrupt every statement running or waiting on the pool now (a server stopping:
    its shutdown must not wait for runaway statements). Later ones run as usual."""
    with _CANCELS.lock:
        _CANCELS.epoch += 1
    pgtools.cancel_running()


@contextmanager
def _bounded(conn: sqlite3.Connection, route: str, limits: QueryLimits) -> Iterator[list[bool]]:
    """Interrupt the statement at its deadline; cap every string or blob it builds.

    Yields a two-item list: whether the deadline interrupted it, and whether a stopping
    server did (:func:`cancel_submitted`).
    """
    deadline = limits.clock() + limits.timeout_s
    timed_out = [False, False]

    def progress() -> int:
        if limits.clock() >= deadline:
            timed_out[0] = True
            return 1  # non-zero: SQLite abandons the statement ("interrupted")
        if _CANCELS.running_is_cancelled():
            timed_out[1] = True
            return 1
        return 0

    old_length = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    old_text = conn.text_factory
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(1, limits.max_bytes))
    conn.set_progress_handler(progress, _PROGRESS_STEPS)
    conn.text_factory = _text_or_bytes
    try:
        yield timed_out
    finally:
        conn.text_factory = old_text
        conn.set_progress_handler(None, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, old_length)


def _text_or_bytes(raw: bytes) -> str | bytes:
    """TEXT as a string; text that is not UTF-8 (a blob cast to TEXT) as the bytes it holds
    (answered as ``{"$bytes": ...}``), so one such value never makes a table unreadable."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return 8


def _fetch(cur: sqlite3.Cursor, route: str, max_rows: int, max_bytes: int) -> list[Any]:
    """Up to ``max_rows + 1`` rows (one more shows truncation), refusing past ``max_bytes``."""
    rows: list[Any] = []
    total = 0
    for row in cur:
        total += sum(_size(v) for v in row)
        if total > max_bytes:
            raise QueryTooLarge(
                f"{route}: the answer is larger than {max_bytes} bytes; select fewer columns "
                "or rows (LIMIT), or aggregate"
            )
        rows.append(row)
        if len(rows) > max_rows:
            break
    return rows


def json_value(value: Any) -> Any:
    """A column value as JSON carries it: a BLOB becomes ``{"$bytes": BASE64}`` (the form
    ``db export`` writes), an infinite or NaN float ``{"$float": "inf" | "-inf" | "nan"}``
    (JSON has no such number: ``Infinity`` is not JSON), every other value is JSON already."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": str(value)}
    return value


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]
    rowcount: int  # rows returned (query) or rows changed (mutation)
    truncated: bool = False  # more rows existed than max_rows

    def as_dict(self) -> dict[str, Any]:
        """The answer of every route (tools API, MCP, ``db query --json``), JSON-ready."""
        return {
            "columns": self.columns,
            "rows": [[json_value(v) for v in row] for row in self.rows],
            "rowcount": self.rowcount,
            "truncated": self.truncated,
        }


def _one_statement(sql: str, route: str) -> Statement:
    if len(sql) > MAX_SQL_CHARS:
        raise QueryRefused(f"{route}: SQL longer than {MAX_SQL_CHARS} characters")
    try:
        statements = split_statements(sql)
    except SqlTextError as exc:
        raise QueryRefused(f"{route}: {exc}") from None
    if len(statements) != 1:
        raise QueryRefused(
            f"{route}: exactly one statement is allowed; found {len(statements)}"
            + (f" (statement 2: {statements[1].first_line})" if len(statements) > 1 else "")
        )
    return statements[0]


def _forbidden_word(stmt: Statement, words: frozenset[str]) -> str | None:
    toks = stmt.tokens
    for i, tok in enumerate(toks):
        if tok.upper in words:
            return tok.upper
        if tok.upper == "REPLACE" and i + 1 < len(toks) and toks[i + 1].upper == "INTO":
            return "REPLACE"
    return None


def check_query(sql: str) -> Statement:
    """The single read statement in ``sql``, or :class:`QueryRefused`."""
    stmt = _one_statement(sql, "query")
    first = stmt.words[0] if stmt.words else ""
    if first not in _QUERY_STARTS:
        shown = first or stmt.first_line
        raise QueryRefused(
            f"query: {shown} is not allowed; use SELECT, WITH, EXPLAIN or describe TABLE "
            "(mutate changes rows, apply changes the schema)"
        )
    bad = _forbidden_word(stmt, _WRITE_WORDS | _SCHEMA_WORDS | _TX_WORDS)
    if bad is not None:
        raise QueryRefused(
            f"query: {bad} is not allowed in a query (a write hidden in a CTE or an EXPLAIN "
            "is still a write); quote the name if it is a column"
        )
    return stmt


def check_mutation(sql: str) -> Statement:
    """The single INSERT / UPDATE / DELETE in ``sql``, or :class:`QueryRefused`."""
    stmt = _one_statement(sql, "mutate")
    first = stmt.words[0] if stmt.words else ""
    if first not in _MUTATION_STARTS:
        shown = first or stmt.first_line
        raise QueryRefused(
            f"mutate: {shown} is not allowed; use exactly one INSERT, UPDATE or DELETE "
            "(schema changes go through db apply with a migration file)"
        )
    bad = _forbidden_word(stmt, _SCHEMA_WORDS | _TX_WORDS)
    if bad is not None:
        raise QueryRefused(f"mutate: {bad} is not allowed in a mutation")
    for tok in stmt.tokens:
        name = (tok.name or "").lower() if tok.kind is not TokenKind.STRING else ""
        if name == LEDGER_TABLE:
            raise QueryRefused(f"mutate: {LEDGER_TABLE} is the migration ledger; it is read-only")
        if name in _SQLITE_TABLES:
            raise QueryRefused(
                f"mutate: {name} is one of SQLite's own tables (the schema table, the "
                "AUTOINCREMENT counters, the statistics); it cannot be changed"
            )
    return stmt


# --- the engine-side guard ----------------------------------------------------------------

_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_ROW_ACTIONS = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})


def _read_only_authorizer(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _mutation_authorizer(action: int, arg1: Any, _arg2: Any, dbname: Any, _src: Any) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action in _ROW_ACTIONS:
        table = str(arg1 or "").lower()
        if dbname not in (None, "main") or table == LEDGER_TABLE or _is_sqlite_table(table):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _failed(
    route: str, exc: sqlite3.Error, guard: Guard, timed_out: list[bool], limits: QueryLimits
) -> Exception:
    if guard.refused is not None:
        return guard.refused
    if timed_out[1]:
        return QueryFailed(f"{route}: the server is stopping; the statement was cancelled")
    if timed_out[0]:
        return QueryTimeout(
            f"{route}: the statement ran longer than {limits.timeout_s:g} s and was cancelled "
            "(nothing was changed); narrow it or add a LIMIT"
        )
    text = str(exc)
    if "too big" in text:  # SQLITE_TOOBIG: one value above SQLITE_LIMIT_LENGTH
        return QueryTooLarge(
            f"{route}: a value in the answer is larger than {limits.max_bytes} bytes ({text})"
        )
    if "not authorized" in text:
        text += f" (the statement reaches outside what {route} allows)"
    return QueryFailed(f"{route}: {text}")


def _bound_growth(conn: sqlite3.Connection, max_growth_bytes: int) -> None:
    """Cap this connection's database at its size now plus ``max_growth_bytes``: SQLite
    answers SQLITE_FULL past it, and the statement's transaction is rolled back."""
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages + max(1, max_growth_bytes // page_size)}")


def _require_db(paths: WorkflowPaths) -> None:
    if not paths.db_file.exists():
        raise QueryFailed(
            f"no workflow database at {paths.db_file} yet (reviewbot creates it at start)"
        )


def describe_table(db: SQLiteDatabase, table: str) -> QueryResult:
    """The columns of ``table`` (or a view), as ``PRAGMA table_xinfo`` reports them."""
    with db.read() as tx:
        found = tx.one(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name = ? COLLATE NOCASE",
            (table,),
        )
        if found is None:
            raise QueryRefused(f"describe: no table or view named {table}")
        cur = tx.execute(
            'SELECT name, type, "notnull", dflt_value, pk, hidden FROM pragma_table_xinfo(?) '
            "ORDER BY cid",
            (found["name"],),
        )
        rows = [list(r) for r in cur.fetchall()]
    columns = ["name", "type", "notnull", "default", "pk", "hidden"]
    return QueryResult(columns, rows, len(rows))


def _describe_target(stmt: Statement) -> str | None:
    if not stmt.words or stmt.words[0] != "DESCRIBE":
        return None
    if len(stmt.tokens) != 2 or stmt.tokens[1].name is None:
        raise QueryRefused("query: use describe TABLE (one table name)")
    return stmt.tokens[1].name


def query_workflow_db(
    sql: str,
    params: Sequence[Any] = (),
    *,
    paths: WorkflowPaths,
    access: DBAccess,
    max_rows: int = DEFAULT_MAX_ROWS,
    limits: QueryLimits = DEFAULT_LIMITS,
) -> QueryResult:
    """Run one SELECT / WITH / EXPLAIN (or ``describe TABLE``) on a read-only connection.

    Needs read access. Returns at most ``max_rows`` rows (and never more than the limits
    allow; ``truncated`` says if more existed). Raises :class:`QueryRefused`,
    :class:`QueryFailed` (incl. :class:`QueryTimeout`, :class:`QueryTooLarge`) or
    :class:`~reviewbot.workflowdb.protected.ProtectedTable`.
    """
    max_rows = min(max_rows, limits.max_rows)
    require(access, DBAccess.READ)
    if paths.database_url is not None:
        described = _PG_DESCRIBE.match(sql)
        if described is not None:
            return _describe_postgres(paths.database_url, described.group(1) or described[2])
        if sql.split(None, 1)[:1] and sql.split(None, 1)[0].lower() == "describe":
            raise QueryRefused("query: use describe TABLE (one table name)")
        return _on_postgres(paths.database_url, Route.QUERY, sql, params, limits, max_rows)
    stmt = _one_statement(sql, "query")
    target = _describe_target(stmt)
    if target is None:
        check_query(sql)
    _require_db(paths)
    db = SQLiteDatabase(paths.db_file, read_only=True)
    try:
        if target is not None:
            return describe_table(db, target)
        guard = Guard("query", _read_only_authorizer)
        with db.read() as tx, _bounded(tx.conn, "query", limits) as timed_out:
            tx.conn.set_authorizer(guard)
            try:
                cur = tx.execute(stmt.text, params)
                columns = [d[0] for d in cur.description or ()]
                fetched = _fetch(cur, "query", max_rows, limits.max_bytes)
            except sqlite3.Error as exc:
                raise _failed("query", exc, guard, timed_out, limits) from None
            finally:
                tx.conn.set_authorizer(None)
    finally:
        db.close()
    truncated = len(fetched) > max_rows
    rows = [list(r) for r in fetched[:max_rows]]
    return QueryResult(columns, rows, len(rows), truncated)


def mutate_workflow_db(
    sql: str,
    params: Sequence[Any] = (),
    *,
    paths: WorkflowPaths,
    access: DBAccess,
    limits: QueryLimits = DEFAULT_LIMITS,
) -> QueryResult:
    """Run exactly one INSERT / UPDATE / DELETE (``RETURNING`` allowed) in a write transaction.

    Needs read-write access. ``rowcount`` is the number of rows changed; ``rows`` holds what
    ``RETURNING`` returned. The bot's own tables cannot be changed
    (:class:`~reviewbot.workflowdb.protected.ProtectedTable`, naming the table); a statement
    past the limits is rolled back (:class:`QueryTimeout`, :class:`QueryTooLarge`).
    """
    require(access, DBAccess.READ_WRITE)
    if paths.database_url is not None:
        return _on_postgres(paths.database_url, Route.MUTATE, sql, params, limits, limits.max_rows)
    stmt = check_mutation(sql)
    _require_db(paths)
    db = SQLiteDatabase(paths.db_file)
    try:
        guard = Guard("mutate", _mutation_authorizer)
        with db.write() as tx, _bounded(tx.conn, "mutate", limits) as timed_out:
            _bound_growth(tx.conn, limits.max_growth_bytes)
            tx.conn.set_authorizer(guard)
            try:
                cur = tx.execute(stmt.text, params)
                columns = [d[0] for d in cur.description or ()]
                fetched = _fetch(cur, "mutate", limits.max_rows, limits.max_bytes)
                if len(fetched) > limits.max_rows:  # RETURNING: never a partial write
                    raise QueryTooLarge(
                        f"mutate: RETURNING gave more than {limits.max_rows} rows; "
                        "nothing was changed"
                    )
                cur.fetchall()  # run the statement to its end (RETURNING yields early)
                rows = [list(r) for r in fetched]
            except sqlite3.Error as exc:
                if "database or disk is full" in str(exc):  # the growth bound, or the disk
                    raise QueryTooLarge(
                        f"mutate: the statement would grow the database by more than "
                        f"{limits.max_growth_bytes} bytes (or the disk is full); nothing was "
                        "changed"
                    ) from None
                raise _failed("mutate", exc, guard, timed_out, limits) from None
            finally:
                tx.conn.set_authorizer(None)
            changed = tx.one("SELECT changes()")
    finally:
        db.close()
    return QueryResult(columns, rows, int(changed[0]) if changed else 0)


# --- PostgreSQL ------------------------------------------------------------------------------


def _on_postgres(
    url: str,
    route: Route,
    sql: str,
    params: Sequence[Any],
    limits: QueryLimits,
    max_rows: int,
) -> QueryResult:
    """Both fences of :mod:`reviewbot.workflowdb.pgtools`; refusals in this module's terms."""
    if len(sql) > MAX_SQL_CHARS:
        raise QueryRefused(f"{route.value}: SQL longer than {MAX_SQL_CHARS} characters")
    try:
        answer = pgtools.run_confined(
            url,
            route,
            sql,
            params,
            timeout_s=limits.timeout_s,
            max_rows=max_rows,
            max_bytes=limits.max_bytes,
            cancelled=_CANCELS.running_is_cancelled,
        )
    except PgStatementRefused as exc:
        if exc.unknown:  # answered like SQLite's "no such table": the statement failed
            raise QueryFailed(str(exc)) from None
        raise _refusal(route, str(exc), exc.table) from None
    except pgtools.PgDenied as exc:
        raise _refusal(route, exc.detail, exc.table, denied=True) from None
    except pgtools.ToolsRoleMissing as exc:
        raise ToolsRoleMissing(exc.detail) from None
    except pgtools.RoleEscaped as exc:
        raise QueryRefused(exc.detail) from None
    except pgtools.PgTimeout as exc:
        raise QueryTimeout(exc.detail) from None
    except pgtools.PgTooLarge as exc:
        raise QueryTooLarge(exc.detail) from None
    except (pgtools.PgFailed, pgtools.Cancelled) as exc:
        raise QueryFailed(exc.detail) from None
    except psycopg.OperationalError as exc:
        raise QueryFailed(f"{route.value}: cannot reach PostgreSQL ({exc})") from None
    return QueryResult(answer.columns, answer.rows, answer.rowcount, answer.truncated)


def _refusal(route: Route, detail: str, table: str | None, *, denied: bool = False) -> Exception:
    """A refusal naming the bot's table or secret it is about (the SQLite routes' codes)."""
    name = (table or "").lower()
    if name in SECRET_TABLES:
        return refuse_secret(route.value, name)
    if bot_schema().is_bot_table(name):
        return refuse_change(route.value, name)
    return QueryFailed(detail) if denied else QueryRefused(detail)


# ``describe TABLE`` on PostgreSQL (its parser has no such statement): one plain or quoted name.
_PG_DESCRIBE = re.compile(r'\s*describe\s+(?:"([^"]+)"|(\w+))\s*;?\s*$', re.IGNORECASE)


def _describe_postgres(url: str, table: str) -> QueryResult:
    """The columns of ``table`` in the store's schema, in :func:`describe_table`'s shape."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        cur = conn.execute(
            "SELECT column_name, data_type, is_nullable = 'NO', column_default, "
            "COALESCE((SELECT 1 FROM information_schema.key_column_usage k "
            "JOIN information_schema.table_constraints c USING (constraint_schema, "
            "constraint_name) WHERE c.constraint_type = 'PRIMARY KEY' "
            "AND k.table_schema = col.table_schema AND k.table_name = col.table_name "
            "AND k.column_name = col.column_name), 0), 0 "
            "FROM information_schema.columns col WHERE table_schema = current_schema() "
            "AND table_name = %s ORDER BY ordinal_position",
            (table.lower(),),
        )
        rows = [[pgtools.plain(v) for v in r] for r in cur.fetchall()]
    if not rows:
        raise QueryRefused(f"describe: no table or view named {table}")
    for row in rows:
        row[2] = int(bool(row[2]))
    columns = ["name", "type", "notnull", "default", "pk", "hidden"]
    return QueryResult(columns, rows, len(rows))
