"""The journal's WAL on SQLite is copied back into the database between batches, never
inside a commit that acknowledgements wait for (an ``ingest`` process has no other writer
that would do it)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from reviewbot.store.journal import GroupCommitJournal, NewDelivery
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.wal_support import rows_in_main_file

BODY = b"{" + b" " * 16_000 + b"}"


def test_the_journal_checkpoints_its_wal_between_batches(tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data")
    open_store(paths).close()  # the schema
    # A reader that stays open: closing the journal is then not the last connection, whose
    # close would checkpoint everything by itself.
    reader = sqlite3.connect(paths.db_file)
    reader.execute("SELECT COUNT(*) FROM deliveries").fetchone()
    writer = GroupCommitJournal(paths.db_file, checkpoint_bytes=64 * 1024).start()
    try:
        for n in range(40):  # about 640 KB: several checkpoints' worth
            delivery = NewDelivery(f"d-{n:03d}", "github", BODY, 1_767_225_600.0 + n)
            assert writer.append_blocking(delivery) is True
        deadline = time.monotonic() + 30
        while writer.checkpointed == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writer.checkpointed >= 1
    finally:
        writer.close()
    try:
        # 64 KB of 16 KB bodies
        assert rows_in_main_file(paths.db_file, tmp_path, "deliveries") >= 4
    finally:
        reader.close()


def test_without_checkpoints_the_writer_leaves_the_wal_to_others(tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data")
    open_store(paths).close()
    reader = sqlite3.connect(paths.db_file)
    reader.execute("SELECT COUNT(*) FROM deliveries").fetchone()
    writer = GroupCommitJournal(paths.db_file, checkpoints=False).start()
    try:
        for n in range(300):  # about 4.8 MB: past SQLite's own automatic checkpoint
            delivery = NewDelivery(f"d-{n:03d}", "github", BODY, 1_767_225_600.0 + n)
            assert writer.append_blocking(delivery) is True
    finally:
        writer.close()
    try:
        assert writer.checkpointed == 0
        # All still in the WAL.
        assert rows_in_main_file(paths.db_file, tmp_path, "deliveries") == 0
        assert int(reader.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]) == 300
    finally:
        reader.close()
