"""The small interface every store implementation provides, and its SQLite implementation.

SQL written by callers uses ``?`` placeholders and portable SQL; a PostgreSQL
implementation translates placeholders and takes row locks where SQLite takes the
database write lock (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

BUSY_TIMEOUT_MS = 10_000

Row = sqlite3.Row
Params = Sequence[Any]


class Tx(Protocol):
    """An open transaction."""

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor: ...

    def one(self, sql: str, params: Params = ()) -> Row | None: ...

    def all(self, sql: str, params: Params = ()) -> list[Row]: ...


class Database(Protocol):
    def write(self, *, durable: bool = False) -> Any:
        """Context manager: a write transaction that holds the write lock from its start."""
        ...

    def read(self) -> Any:
        """Context manager: a read-only snapshot."""
        ...

    def close(self) -> None: ...


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Params = ()) -> list[Row]:
        return list(self.conn.execute(sql, params).fetchall())


def connect_sqlite(
    path: Path, *, read_only: bool = False, immutable: bool = False
) -> sqlite3.Connection:
    """A connection in WAL mode with a busy timeout, in autocommit (we issue BEGIN ourselves).

    ``immutable`` (read-only only) reads a file nobody can be writing: a WAL database in a
    folder this user cannot write has no ``-shm`` file to share, and SQLite needs this to
    open it at all.
    """
    if read_only:
        conn = sqlite3.connect(
            # as_uri() percent-encodes, so a "?" or "#" in the path cannot alter the mode.
            path.resolve().as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro"),
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if read_only:
        conn.execute("PRAGMA query_only = ON")  # also covers anything attached later
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class ThreadConnections:
    """One connection per thread, opened by ``connect`` on the thread's first use; a
    connection is never shared between threads, and :meth:`close` closes them all."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class SQLiteDatabase:
    """One file, one connection per thread; every write transaction is ``BEGIN IMMEDIATE``."""

    def __init__(self, path: Path, *, read_only: bool = False, immutable: bool = False) -> None:
        self.path = path
        # Read-only: every connection opens with ``mode=ro``; write() then fails in the engine.
        self.read_only = read_only
        self._conns = ThreadConnections(
            lambda: connect_sqlite(self.path, read_only=self.read_only, immutable=immutable)
        )

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[_SQLiteTx]:
        """``durable`` commits with ``synchronous=FULL`` (the delivery journal)."""
        conn = self._conn()
        if durable:
            conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield _SQLiteTx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")
        finally:
            if durable:
                conn.execute("PRAGMA synchronous = NORMAL")

    @contextmanager
    def read(self) -> Iterator[_SQLiteTx]:
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield _SQLiteTx(conn)
        finally:
            conn.execute("COMMIT")

    def vacuum_into(self, target: Path) -> None:
        """Write a consistent snapshot of the database to the new file ``target``.

        Runs outside any transaction (``VACUUM`` cannot run inside one).
        """
        self._conn().execute("VACUUM INTO ?", (str(target),))

    def close(self) -> None:
        self._conns.close()
