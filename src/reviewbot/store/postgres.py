"""The PostgreSQL store: the same :class:`~reviewbot.store.database.Database` interface as
SQLite, over a psycopg 3 connection pool, for several processes (replicas) on one database.

The dialect layer is small on purpose; callers write one portable query:

- ``?`` placeholders become ``%s`` (a literal ``%`` is escaped), outside quotes and comments;
- rows answer by column name and by position, like ``sqlite3.Row``;
- a write transaction is *serialized* by default: it starts by taking one transaction-scoped
  advisory lock, the same guarantee as SQLite's ``BEGIN IMMEDIATE`` (one writer at a time,
  across every process on the database), so a read-then-write inside it needs no more
  thought than on SQLite. The hot paths that are safe under concurrency by themselves
  (``FOR UPDATE SKIP LOCKED`` claims, ``ON CONFLICT`` inserts, updates guarded by their
  ``WHERE``, lease grants under a per-target lock) ask for ``write(serialized=False)``
  and take only row locks, so replicas do not queue behind one another there;
- a read is a ``REPEATABLE READ READ ONLY`` transaction: one snapshot, and no writes.

Commits are durable (``synchronous_commit`` as the server has it, ``on`` by default), so
``write(durable=True)`` needs nothing more here.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool

from reviewbot.store.database import POSTGRESQL, P, Params, StoreExecutor, T

POOL_SIZE = 10  # the store executor's threads, the journal writer and a few direct callers
CONNECT_TIMEOUT_S = 10.0

# pg_advisory_xact_lock(REVIEWBOT_LOCKS, n): one class of advisory locks for reviewbot.
REVIEWBOT_LOCKS = 0x52425442  # "RBTB"
WRITE_LOCK = 1  # every serialized write transaction
MIGRATION_LOCK = 2  # the packaged migrations at start
LEASE_TARGET_LOCKS = 0x52424C53  # "RBLS": one lock per lease target (hashtext of its key)

_TOKENS = re.compile(
    r"""'(?:[^']|'')*'?"""  # a string literal ('' escapes a quote)
    r"""|"(?:[^"]|"")*"?"""  # a quoted identifier
    r"|--[^\n]*"  # a line comment
    r"|/\*.*?(?:\*/|$)"  # a block comment
    r"|[?%]",
    re.DOTALL,
)


def translate(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (and ``%`` to ``%%``) outside quotes and
    comments; everything else is passed through as written."""

    def swap(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "?":
            return "%s"
        if text == "%":
            return "%%"
        return text

    return _TOKENS.sub(swap, sql)


class PgRow(tuple[Any, ...]):
    """A row that answers by position and by column name, like ``sqlite3.Row``."""

    _index: dict[str, int]
    _names: list[str]

    def __new__(cls, values: Sequence[Any], names: list[str], index: dict[str, int]) -> PgRow:
        row = super().__new__(cls, values)
        row._names = names
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = self._index[key]
            except KeyError:
                raise IndexError(f"no column named {key}") from None
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._names)


def pg_row(cursor: Any) -> RowMaker[PgRow]:
    """psycopg row factory producing :class:`PgRow`."""
    description = cursor.description
    names = [] if description is None else [col.name for col in description]
    index = {name: i for i, name in enumerate(names)}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, names, index)

    return make


class PgTx:
    """An open transaction on one pooled connection."""

    dialect = POSTGRESQL

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> psycopg.Cursor[Any]:
        if not params:  # psycopg reads placeholders (and %) only when there are values
            return self.conn.execute(sql)
        return self.conn.execute(translate(sql), tuple(params))

    def one(self, sql: str, params: Params = ()) -> Any:
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Params = ()) -> list[Any]:
        return list(self.execute(sql, params).fetchall())

    def returning_many(self, sql: str, rows: Sequence[Params]) -> list[Any]:
        """Run ``sql`` (ending in ``RETURNING``) once per row of values, in one round trip
        (psycopg pipelines ``executemany``); the first returned row of each, or ``None``."""
        if not rows:
            return []
        cur = self.conn.cursor()
        cur.executemany(translate(sql), [tuple(r) for r in rows], returning=True)
        out = []
        while True:
            out.append(cur.fetchone())
            if not cur.nextset():
                return out

    def lock(self, key: int, *, space: int = REVIEWBOT_LOCKS) -> None:
        """Take the advisory lock ``(space, key)`` until this transaction ends."""
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (space, key))

    def lock_text(self, text: str, *, space: int) -> None:
        """Take the advisory lock named by ``text`` (hashed by the server) until the end."""
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (space, text))


class PostgresDatabase:
    """A pool of connections to one PostgreSQL database (see the module docstring)."""

    dialect = POSTGRESQL

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = POOL_SIZE,
        configure: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> None:
        self.url = url
        self.path = None  # no file: there is no epoch ledger beside it, no VACUUM INTO
        self._configure = configure
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": pg_row},
            configure=self._setup,
            timeout=CONNECT_TIMEOUT_S,
            open=False,
            name="reviewbot-store",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        self._executor = StoreExecutor()
        self._closed = threading.Event()

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SET TIME ZONE 'UTC'")
        if self._configure is not None:
            self._configure(conn)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Await a blocking store call, run on this database's bounded executor."""
        return await self._executor.run(fn, *args, **kwargs)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit mode (for what runs outside a transaction)."""
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def write(
        self,
        *,
        durable: bool = False,
        serialized: bool = True,
        poll_lock: bool = False,
        hot: bool = False,
    ) -> Iterator[PgTx]:
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                tx = PgTx(conn)
                if serialized:
                    tx.lock(WRITE_LOCK)
                yield tx
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[PgTx]:
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield PgTx(conn)
            finally:
                conn.execute("ROLLBACK")

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._executor.shutdown()
        self._pool.close()
