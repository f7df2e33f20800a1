"""The small interface every store implementation provides, and its SQLite implementation.

SQL written by callers uses ``?`` placeholders and portable SQL (``INSERT ... ON CONFLICT``,
``RETURNING``, ``CASE`` rather than the two-argument ``max``), so one query serves both
stores; :mod:`reviewbot.store.postgres` translates placeholders and serializes its write
transactions the way SQLite's ``BEGIN IMMEDIATE`` does, except on the paths that take row
locks instead (``write(serialized=False)``).

The one rule for async code: the event loop never calls the database itself. It awaits
:meth:`Database.run`, which runs a blocking store call on the database's own bounded pool
of threads (each with its own connection). ``tests/unit/test_async_store.py`` holds every
``async def`` to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

import psycopg

from reviewbot.store.write_gate import GATE_WAIT_S, WriteGate

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

BUSY_TIMEOUT_MS = 10_000
LOCK_STEP_S = 0.0002  # how often a polling writer asks again for SQLite's write lock
STORE_THREADS = 4  # the bound on store calls running at once for the event loop

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C", bound=sqlite3.Connection)
D = TypeVar("D", bound="DataclassInstance")

Params = Sequence[Any]

SQLITE = "sqlite"
POSTGRESQL = "postgresql"


class Row(Protocol):
    """A result row: by column name or position (``sqlite3.Row`` and the PostgreSQL rows)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    """What callers use of a cursor: the rows a statement returned and how many it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def opt_float(value: Any) -> float | None:
    """A nullable REAL column (a moment that may not have happened yet) as a float."""
    return None if value is None else float(value)


@functools.cache
def _init_fields(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def row_as(cls: type[D], row: Row, /, **convert: Callable[[Row], Any]) -> D:
    """The dataclass ``cls`` from one row: each field is the column of its name, or what
    ``convert[field]`` makes of the row (a column stored in another form, or a field built
    from several columns). Columns no field names are ignored (joins, ids); a field with
    neither a column nor a conversion keeps its default."""
    names = set(row.keys())
    values = {
        name: convert[name](row) if name in convert else row[name]
        for name in _init_fields(cls)
        if name in convert or name in names
    }
    return cls(**values)


def rows_as(cls: type[D], rows: Iterable[Row], /, **convert: Callable[[Row], Any]) -> list[D]:
    """:func:`row_as` of every row, in order."""
    return [row_as(cls, row, **convert) for row in rows]


def is_row_fault(exc: BaseException) -> bool:
    """The values of one row cannot be stored (a number past 64 bits, text that is not
    UTF-8, a constraint): a fault of that row, not of the store, so retrying the rest of its
    transaction without it succeeds."""
    return isinstance(
        exc,
        ValueError  # UnicodeEncodeError is one
        | OverflowError
        | TypeError
        | sqlite3.IntegrityError
        | sqlite3.DataError
        | sqlite3.InterfaceError
        | psycopg.errors.IntegrityError
        | psycopg.errors.DataError,
    )


# SQLite's primary result codes of a fault that may clear by itself: another writer holds
# the lock, memory or the disk (I/O, full, read-only after a remount, a file it cannot open),
# the WAL index changing under a reader, the schema changed by another connection. The rest of
# what SQLite raises as OperationalError (SQLITE_ERROR: no such table, too many variables)
# does not clear by retrying the same statement. (SQLITE_NOMEM reaches Python as MemoryError
# and SQLITE_CORRUPT as DatabaseError; NOMEM stays listed for a build that maps it here.)
_SQLITE_TRANSIENT = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_SCHEMA,
    }
)


def is_transient(exc: BaseException) -> bool:
    """A store error that may clear by itself (disk full, I/O error, busy, locked, a lost
    connection to the server), as opposed to one the same statement meets every time.

    The errors it was raised while handling count too: after an I/O error SQLite may have
    rolled the transaction back itself, and the ``ROLLBACK TO`` of a savepoint then fails
    with SQLITE_ERROR ("no such savepoint"), hiding the fault that caused it."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a bound rather than trusting it has no loop
        # Only store errors lead to the fault behind them: anything else raised while
        # handling a fault (a bug, an error raised ``from None``) is what it is.
        if not isinstance(seen, sqlite3.Error | psycopg.Error):
            return False
        if _transient(seen):
            return True
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return False


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)  # None: not raised by SQLite
        return code is not None and (code & 0xFF) in _SQLITE_TRANSIENT  # extended -> primary
    if isinstance(exc, psycopg.OperationalError):
        # A lost connection (no SQLSTATE), a deadlock or serialization failure, a lock not
        # available, a full disk, a cancelled query, an I/O error: all may clear. Class 54
        # (program limit exceeded: a statement too complex, too many arguments) is the
        # statement's own and comes back every time.
        return not (exc.sqlstate or "").startswith("54")
    return False


class Tx(Protocol):
    """An open transaction."""

    @property
    def dialect(self) -> str: ...

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def one(self, sql: str, params: Params = ()) -> Row | None: ...

    def all(self, sql: str, params: Params = ()) -> list[Row]: ...

    def lock_text(self, text: str, *, space: int) -> None:
        """Hold a lock named ``(space, text)`` until the transaction ends (PostgreSQL: an
        advisory lock; SQLite: nothing more, its write transaction excludes all others)."""
        ...


def skip_locked(tx: Tx) -> str:
    """The clause that makes a claim query replica-safe: PostgreSQL locks the rows it picks
    and skips those another transaction is claiming; SQLite's write lock already keeps every
    other writer out, and it has no such clause."""
    return " FOR UPDATE SKIP LOCKED" if tx.dialect == POSTGRESQL else ""


class Database(Protocol):
    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        ...

    def write(
        self,
        *,
        durable: bool = False,
        serialized: bool = True,
        poll_lock: bool = False,
        hot: bool = False,
    ) -> Any:
        """Context manager: a write transaction that holds the write lock from its start.

        ``serialized=False`` (PostgreSQL): the transaction takes only the row locks its
        statements take, for the paths written to be safe under concurrency on their own
        (``FOR UPDATE SKIP LOCKED`` claims, ``ON CONFLICT`` inserts); SQLite ignores it.
        ``poll_lock`` (SQLite): ask for the write lock every :data:`LOCK_STEP_S` instead of
        through the busy handler, whose sleeps grow to 100 ms, so that processes contending
        for one hot row take turns instead of the last writer winning again; PostgreSQL,
        where waiters queue on the lock, ignores it. ``hot`` (SQLite): a transaction on a
        row several processes take turns at (a lease target with a line) waits for the write
        lock at the store's gate (:mod:`reviewbot.store.write_gate`), woken as soon as the
        writer before it is done.
        """
        ...

    def read(self) -> Any:
        """Context manager: a read-only snapshot."""
        ...

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Await a blocking store call, run on the database's bounded executor."""
        ...

    def close(self) -> None: ...


class OnDatabase:
    """A store over one :class:`Database`: its calls are plain and blocking, and async code
    awaits them through :meth:`run` (the one async door)."""

    db: Database

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Await one of this store's calls on the database's executor."""
        return await self.db.run(fn, *args, **kwargs)


class StoreExecutor:
    """The bounded pool of threads the event loop's store calls run on (started lazily)."""

    def __init__(self, threads: int = STORE_THREADS, *, name: str = "store") -> None:
        self.threads = threads
        self.name = name  # the threads' name prefix
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
            pool = self._pool
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class _SQLiteTx:
    dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Params = ()) -> list[Row]:
        return list(self.conn.execute(sql, params).fetchall())

    def lock_text(self, text: str, *, space: int) -> None:
        """Nothing: ``BEGIN IMMEDIATE`` holds the database write lock already."""


def begin_immediate(
    conn: sqlite3.Connection, *, wait_s: float = BUSY_TIMEOUT_MS / 1000, step_s: float = LOCK_STEP_S
) -> None:
    """``BEGIN IMMEDIATE`` on a connection without a busy timeout, asking again every
    ``step_s`` while another connection writes, for at most ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(step_s)


class StoreConnection(sqlite3.Connection):
    """A store connection that knows its busy timeout, so that switching between SQLite's
    own wait and the fine-step wait of ``write(poll_lock=True)`` runs a PRAGMA only when the
    mode changes: two per transaction were a tenth of the cost of a lease heartbeat."""

    busy_timeout_ms = BUSY_TIMEOUT_MS

    def set_busy_timeout(self, ms: int) -> None:
        if ms != self.busy_timeout_ms:
            self.execute(f"PRAGMA busy_timeout = {ms}")
            self.busy_timeout_ms = ms


def connect_sqlite(
    path: Path, *, read_only: bool = False, immutable: bool = False
) -> StoreConnection:
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
            factory=StoreConnection,
        )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, factory=StoreConnection
        )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if read_only:
        conn.execute("PRAGMA query_only = ON")  # also covers anything attached later
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class ThreadConnections(Generic[C]):
    """One connection per thread, opened by ``connect`` on the thread's first use; a
    connection is never shared between threads, and :meth:`close` closes them all."""

    def __init__(self, connect: Callable[[], C]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[C] = []
        self._lock = threading.Lock()

    def get(self) -> C:
        conn: C | None = getattr(self._local, "conn", None)
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


CHECKPOINT_EVERY_COMMITS = 25  # about 250 WAL pages of this store's usual transactions


class Checkpointer:
    """Copies the WAL back into the database on a thread of its own.

    SQLite checkpoints inside the commit that takes the WAL past 1000 pages: that commit
    waits for the copy and its syncs (16-22 ms on one lease acquire in about 55, measured).
    Woken every ``every`` commits of this process, this thread runs passive checkpoints
    (they never wait for readers or writers), so the WAL starts over before it gets there.
    SQLite's own checkpoint stays on as the backstop: when a reader holds the WAL back, or
    this thread falls behind, a commit still checkpoints as before.
    """

    def __init__(self, path: Path, every: int = CHECKPOINT_EVERY_COMMITS) -> None:
        self.path = path
        self.every = every
        self.passes = 0  # checkpoints run
        self._commits = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def committed(self) -> None:
        """Called after each commit (any thread); cheap: a counter, and a wake-up every
        ``every`` commits."""
        self._commits += 1  # racy increments only shift when the next pass comes
        if self._commits < self.every:
            return
        self._commits = 0
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopping:
                    self._thread = threading.Thread(
                        target=self._run, name="sqlite-checkpoint", daemon=True
                    )
                    self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        conn = connect_sqlite(self.path)
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                # A failed pass (busy, I/O) leaves the pages for the next one or SQLite's own.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.passes += 1
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._wake.set()
            thread.join()


class SQLiteDatabase:
    """One file, one connection per thread; every write transaction is ``BEGIN IMMEDIATE``."""

    dialect = SQLITE

    def __init__(self, path: Path, *, read_only: bool = False, immutable: bool = False) -> None:
        self.path = path
        # Read-only: every connection opens with ``mode=ro``; write() then fails in the engine.
        self.read_only = read_only
        self._conns = ThreadConnections(
            lambda: connect_sqlite(self.path, read_only=self.read_only, immutable=immutable)
        )
        self._executor = StoreExecutor()
        self.checkpointer = Checkpointer(path)
        self._gate: WriteGate | None = None
        self._gate_opened = read_only  # a read-only store never writes: no gate
        self._gate_lock = threading.Lock()

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Await a blocking store call, run on this database's bounded executor."""
        return await self._executor.run(fn, *args, **kwargs)

    def _conn(self) -> StoreConnection:
        return self._conns.get()

    @property
    def gate(self) -> WriteGate | None:
        """The store's write gate, opened at the first hot write (the file may not exist
        before); ``None`` where it cannot be (then hot writes wait as others do)."""
        if not self._gate_opened:
            with self._gate_lock:
                if not self._gate_opened:
                    self._gate = WriteGate.open(self.path)
                    self._gate_opened = True
        return self._gate

    @contextmanager
    def write(
        self,
        *,
        durable: bool = False,
        serialized: bool = True,
        poll_lock: bool = False,
        hot: bool = False,
    ) -> Iterator[_SQLiteTx]:
        """``durable`` commits with ``synchronous=FULL`` (the delivery journal); every
        transaction holds the database write lock, whatever ``serialized`` says;
        ``poll_lock`` waits for it in fine steps, ``hot`` at the gate first (see
        :meth:`Database.write`)."""
        conn = self._conn()
        gate = self.gate if hot else None
        if gate is not None and not gate.enter(GATE_WAIT_S):
            gate = None  # waited long enough: on without it
        try:
            with self._transaction(conn, durable=durable, poll_lock=poll_lock) as tx:
                yield tx
        finally:
            if gate is not None:
                gate.leave()
        self.checkpointer.committed()

    @staticmethod
    @contextmanager
    def _transaction(
        conn: StoreConnection, *, durable: bool, poll_lock: bool
    ) -> Iterator[_SQLiteTx]:
        if durable:
            conn.execute("PRAGMA synchronous = FULL")
        try:
            if poll_lock:
                # The timeout stays off until another kind of transaction needs it back:
                # inside BEGIN IMMEDIATE a WAL writer waits for nobody.
                conn.set_busy_timeout(0)
                begin_immediate(conn)
            else:
                conn.set_busy_timeout(BUSY_TIMEOUT_MS)
                conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteTx(conn)
            except BaseException:
                if conn.in_transaction:  # an interrupted statement has rolled back already
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            if durable:
                conn.execute("PRAGMA synchronous = NORMAL")

    @contextmanager
    def read(self) -> Iterator[_SQLiteTx]:
        conn = self._conn()
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.execute("BEGIN")
        try:
            yield _SQLiteTx(conn)
        finally:
            conn.execute("COMMIT")

    def vacuum_into(self, target: Path) -> None:
        """Write a consistent snapshot of the database to the new file ``target``.

        Runs outside any transaction (``VACUUM`` cannot run inside one).
        """
        conn = self._conn()
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.execute("VACUUM INTO ?", (str(target),))

    def close(self) -> None:
        self._executor.shutdown()
        self.checkpointer.close()
        self._conns.close()
        with self._gate_lock:
            gate, self._gate, self._gate_opened = self._gate, None, True
        if gate is not None:
            gate.close()
