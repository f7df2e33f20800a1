"""Both ways a SQLite store waits for the database write lock held by another connection:
SQLite's own busy timeout (plain writes, reads) and the fine steps of ``poll_lock`` (the
lease store), on one connection that switches between them. Real files, a real second
connection holding the lock."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reviewbot.store.database import SQLiteDatabase

HELD_S = 0.3  # how long the other connection holds the lock: well inside either wait


@contextmanager
def lock_held_elsewhere(file: Path) -> Iterator[None]:
    """Another connection holds the write lock for ``HELD_S``, then commits."""
    other = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(HELD_S, lambda: other.execute("COMMIT"))
    timer.start()
    try:
        yield
    finally:
        timer.join()
        other.close()


def test_every_kind_of_write_waits_for_the_lock_whatever_ran_before(tmp_path: Path) -> None:
    file = tmp_path / "db.sqlite"
    db = SQLiteDatabase(file)
    try:
        with db.write() as tx:
            tx.execute("CREATE TABLE t (n INTEGER)")
        for n, poll in enumerate([True, True, False, True, False, False]):
            with lock_held_elsewhere(file), db.write(poll_lock=poll) as tx:
                tx.execute("INSERT INTO t VALUES (?)", (n,))
        with db.read() as tx:
            assert [r[0] for r in tx.all("SELECT n FROM t ORDER BY n")] == list(range(6))
    finally:
        db.close()
