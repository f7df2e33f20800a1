"""The store faults tests raise by hand, shaped as SQLite raises them."""

from __future__ import annotations

import sqlite3


def disk_io_error() -> sqlite3.OperationalError:
    """A failing disk's error, with the result code SQLite itself sets (which is what tells
    a passing fault from a statement that fails every time)."""
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = sqlite3.SQLITE_IOERR
    return error
