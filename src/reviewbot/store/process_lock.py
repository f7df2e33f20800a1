"""An exclusive lock held by one process for as long as it runs (``flock`` on a file).

The kernel releases it when the process ends, however it ends (SIGKILL too), so a crash never
leaves a stale lock behind. The file says which process holds it, for the refusal message.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO


class ProcessLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None

    def try_acquire(self) -> str | None:
        """Take the lock; ``None`` when taken, else who holds it (``pid N``)."""
        if sys.platform == "win32":  # pragma: no cover - no flock; nothing is enforced
            return None
        import fcntl  # POSIX only (Windows returns above)

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+b")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(100).decode("utf-8", "replace").strip() or "unknown process"
            handle.close()
            return holder
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}".encode())
        handle.flush()
        self._handle = handle
        return None

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()  # closing the descriptor releases the flock
