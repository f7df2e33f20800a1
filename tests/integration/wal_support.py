"""What a SQLite file holds by itself, without the WAL beside it: whether a checkpoint
copied committed rows back into the database."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path


def rows_in_main_file(db_file: Path, folder: Path, table: str) -> int:
    """Rows of ``table`` in the database file itself, not counting what is only in its WAL
    (``folder``: where the copy that leaves the WAL behind is made)."""
    copy = folder / "main-only.sqlite"
    shutil.copyfile(db_file, copy)  # without the -wal file beside it
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()
