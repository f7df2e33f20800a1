"""Which store errors are worth retrying (``is_transient``), told from what SQLite itself
raises on a real file: a held lock, a write through a read-only connection and a full disk
may clear by themselves; a statement that names what does not exist fails the same way every
time, so retrying it would only hold its work back for ever."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from reviewbot.store.database import is_transient


def raised(conn: sqlite3.Connection, sql: str) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        conn.execute(sql)
    return caught.value


def no_room(conn: sqlite3.Connection) -> None:
    """The file may not grow past its current pages: SQLite answers SQLITE_FULL, as on a
    disk with no space left."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA max_page_count = {pages}")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "db.sqlite"
    conn = sqlite3.connect(file, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()
    return file


@pytest.fixture
def conn(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to the test's file, closed after the test."""
    connection = sqlite3.connect(path, isolation_level=None)
    yield connection
    connection.close()


def test_a_held_write_lock_is_transient(path: Path) -> None:
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        error = raised(other, "BEGIN IMMEDIATE")
        assert isinstance(error, sqlite3.OperationalError)
        assert is_transient(error), error
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()


def test_a_write_the_file_refuses_is_transient(path: Path) -> None:
    reader = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
    try:
        error = raised(reader, "INSERT INTO t VALUES (1)")
        assert isinstance(error, sqlite3.OperationalError)
        assert is_transient(error), error
    finally:
        reader.close()


def test_a_full_disk_is_transient(conn: sqlite3.Connection) -> None:
    no_room(conn)
    error = raised(conn, "INSERT INTO t SELECT zeroblob(100000)")
    assert isinstance(error, sqlite3.OperationalError)
    assert error.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert is_transient(error), error


def test_a_statement_that_fails_every_time_is_not_transient(conn: sqlite3.Connection) -> None:
    for sql in ("SELECT * FROM no_such_table", "SELECT no_such_column FROM t"):
        error = raised(conn, sql)
        assert isinstance(error, sqlite3.OperationalError)
        assert not is_transient(error), error


def test_an_error_sqlite_did_not_raise_is_not_taken_for_a_fault() -> None:
    assert not is_transient(sqlite3.OperationalError("disk I/O error"))
    assert not is_transient(RuntimeError("database is locked"))


def test_an_error_raised_while_undoing_a_fault_is_that_fault(conn: sqlite3.Connection) -> None:
    """After an I/O error SQLite may roll the transaction back itself; undoing the savepoint
    then fails with SQLITE_ERROR ("no such savepoint"), which must not hide the fault."""

    def undo_after(sql: str) -> sqlite3.Error:
        """The error of undoing a savepoint that is gone, raised while ``sql``'s is handled."""
        conn.execute("BEGIN")
        try:
            conn.execute(sql)
        except sqlite3.OperationalError:
            undo = raised(conn, "ROLLBACK TO no_such_savepoint")
        conn.execute("ROLLBACK")
        return undo

    no_room(conn)
    undo = undo_after("INSERT INTO t SELECT zeroblob(100000)")
    assert isinstance(undo, sqlite3.OperationalError)
    assert undo.sqlite_errorcode == sqlite3.SQLITE_ERROR
    assert is_transient(undo), undo.__context__
    # The same failed undo after a statement that fails every time is no fault.
    assert not is_transient(undo_after("SELECT * FROM no_such_table"))


@pytest.mark.parametrize(
    ("sqlstate", "transient"),
    [
        ("08006", True),  # connection failure
        ("40001", True),  # serialization failure
        ("40P01", True),  # deadlock detected
        ("53100", True),  # disk full
        ("55P03", True),  # lock not available
        ("57014", True),  # query cancelled (statement timeout)
        ("58030", True),  # I/O error
        ("54000", False),  # program limit exceeded
        ("54001", False),  # statement too complex
    ],
)
def test_postgresql_faults_by_their_sqlstate(sqlstate: str, transient: bool) -> None:
    """psycopg raises these as OperationalError; the SQLSTATE class tells a fault that may
    clear from a statement that exceeds a limit every time."""
    error = psycopg.errors.lookup(sqlstate)("from the server")
    assert isinstance(error, psycopg.OperationalError)
    assert is_transient(error) is transient
    assert is_transient(psycopg.OperationalError("connection lost"))  # no SQLSTATE at all


def test_only_store_errors_lead_to_the_fault_behind_them(path: Path) -> None:
    """A bug raised while a fault was handled is a bug; so is a store error raised
    ``from None``, which says the fault behind it does not matter."""
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        busy = raised(other, "BEGIN IMMEDIATE")
        assert is_transient(busy)
        try:
            raise busy
        except sqlite3.OperationalError:
            with pytest.raises(ValueError) as bug:
                raise ValueError("a bug while handling it")  # noqa: B904 (the point)
        assert bug.value.__context__ is busy and not is_transient(bug.value)
        try:
            raise busy
        except sqlite3.OperationalError:
            with pytest.raises(sqlite3.OperationalError) as hidden:
                other.execute("SELECT * FROM no_such_table")
        assert hidden.value.__context__ is busy and is_transient(hidden.value)
        hidden.value.__suppress_context__ = True  # as ``raise ... from None`` leaves it
        assert not is_transient(hidden.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()
