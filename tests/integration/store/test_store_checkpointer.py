"""A SQLite store's WAL is copied back into the database by a thread of its own, so the
commits of the lease and review paths do not wait for SQLite's checkpoint inside them. Real
files: a commit's rows reach the database file itself, not only its WAL."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from reviewbot.store.database import CHECKPOINT_EVERY_COMMITS, SQLiteDatabase
from tests.integration.wal_support import rows_in_main_file

WAIT_S = 30.0  # a bound for a slow machine, not a measure


def test_commits_are_checkpointed_off_the_committing_thread(tmp_path: Path) -> None:
    file = tmp_path / "db.sqlite"
    db = SQLiteDatabase(file)
    # A reader that stays open: the last connection's close would checkpoint by itself.
    reader = sqlite3.connect(file)
    try:
        with db.write() as tx:
            tx.execute("CREATE TABLE t (n INTEGER)")
        reader.execute("SELECT 1").fetchone()
        for n in range(CHECKPOINT_EVERY_COMMITS):
            with db.write() as tx:
                tx.execute("INSERT INTO t VALUES (?)", (n,))
        deadline = time.monotonic() + WAIT_S
        while db.checkpointer.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert db.checkpointer.passes >= 1
        # Far fewer commits than SQLite's own 1000-page checkpoint needs, yet in the file.
        assert rows_in_main_file(file, tmp_path, "t") >= CHECKPOINT_EVERY_COMMITS - 1
    finally:
        db.close()
        reader.close()
    assert db.checkpointer.passes >= 1
    assert not db.checkpointer.running  # stopped with the store


def test_a_store_that_only_reads_starts_no_thread(tmp_path: Path) -> None:
    file = tmp_path / "db.sqlite"
    sqlite3.connect(file).execute("CREATE TABLE t (n INTEGER)").connection.close()
    db = SQLiteDatabase(file)
    try:
        for _ in range(3 * CHECKPOINT_EVERY_COMMITS):
            with db.read() as tx:
                tx.one("SELECT COUNT(*) FROM t")
        assert not db.checkpointer.running
    finally:
        db.close()
