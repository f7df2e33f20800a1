"""A gate in front of SQLite's write lock: a writer that finds it taken sleeps until the writer
before it is done, instead of polling for it or sleeping a fixed while.

SQLite keeps no queue for its write lock. A writer that finds it taken either asks again in
small steps (``begin_immediate``, paid in CPU by every waiter) or sleeps in the engine's busy
handler, 1 ms at first and up to 100 ms. On a hot lease target the holder's successor waited
about a millisecond that way for a lock free again after a tenth of one, in one write of three
(measured with eight processes on two cores), and the line moved at that pace.

So the processes writing to one store take a gate first: an exclusive ``flock`` on a side file
(``<db>-writers``), taken before ``BEGIN IMMEDIATE`` and given back right after the ``COMMIT``
or ``ROLLBACK``. A writer that finds the gate taken waits for an inotify event on that file,
which each writer causes when it gives the gate back (it reads the file's one byte), so it asks
again at once. Its wait is bounded (:data:`GATE_WAIT_S`): then it goes on without the gate to
SQLite's own wait, and its error.

The gate decides nothing: SQLite's lock still keeps transactions apart. A writer that passes no
gate (the delivery journal's own connection, the ``sqlite3`` shell, a process that cannot open
the side file) is only noticed later; a gate dies with its process (``flock`` is released when
the file is closed); where inotify is missing (not Linux, or out of instances) a waiter looks
again every half millisecond.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import select
import sys
import threading
import time
from pathlib import Path

# How long a writer waits at the gate. Its holders hold it for a transaction of a lease
# call (a millisecond); past this the writer goes on to SQLite's own wait, which bounds
# what a long transaction holds up.
GATE_WAIT_S = 1.0
_IN_ACCESS = 0x00000001
_LONGEST_SLEEP_S = 0.010  # a wake-up missed anyhow costs at most this
_POLL_STEP_S = 0.0005  # without inotify
_EVENTS = 4096


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def gate_path(db_file: Path) -> Path:
    """The side file of ``db_file``'s gate."""
    return db_file.with_name(db_file.name + "-writers")


class _Watch:
    """An inotify instance watching the gate file for reads (a writer giving the gate back)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        # poll, not select: a busy server's descriptors pass select's limit of 1024.
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    @classmethod
    def open(cls, path: Path) -> _Watch | None:
        if _LIBC is None:
            return None
        fd = int(_LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:  # out of instances (fs.inotify.max_user_instances): poll
            return None
        if int(_LIBC.inotify_add_watch(fd, os.fsencode(path), _IN_ACCESS)) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, _EVENTS):
                pass

    def wait(self, timeout_s: float) -> None:
        self._poll.poll(timeout_s * 1000.0)

    def close(self) -> None:
        os.close(self.fd)


def _like(fd: int, db: os.stat_result) -> None:
    """Give a new gate file the database file's permissions, and as root its owner, as
    SQLite does for its own sidecars: the bot's user and an administrator's command share it."""
    os.fchmod(fd, db.st_mode & 0o666)
    if os.geteuid() == 0:
        os.fchown(fd, db.st_uid, db.st_gid)


class WriteGate:
    """The gate of one store file for this process's writers (each thread in turn)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self._path = path
        self._turn = threading.Lock()  # this process's threads take the gate one at a time
        self._owner: int | None = None  # the thread holding it
        self._depth = 0
        self._watch: _Watch | None = None  # opened at the first wait, not before
        self._watch_tried = False
        self.waits = 0  # entries that found the gate taken, for tests and benchmarks
        # A holder kept the gate past a whole wait (a process stopped between its commit and
        # giving the gate back): until the gate is found free again, writers do not wait
        # for it, so such a process costs one wait, not one per write.
        self._stuck = False

    @classmethod
    def open(cls, db_file: Path) -> WriteGate | None:
        """The gate of ``db_file``, or ``None`` when its side file cannot be opened (a
        read-only folder): then writers go straight to SQLite's lock, as before."""
        path = gate_path(db_file)
        try:
            db = os.stat(db_file)
        except OSError:
            db = None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size == 0:
                os.pwrite(fd, b"\n", 0)  # a read of nothing causes no event
                if db is not None:
                    _like(fd, db)
        except OSError:
            os.close(fd)
            return None
        return cls(fd, path)

    def enter(self, wait_s: float) -> bool:
        """Take the gate, waiting at most ``wait_s`` for this process's other threads and as
        long again for other processes; whether it was taken (``False``: go on without it).
        A thread already holding it passes (a nested write fails in SQLite)."""
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return True
        if self._stuck:  # a holder outlasted a whole wait: only a free gate is taken
            wait_s = 0.0
        if not self._turn.acquire(timeout=max(wait_s, 0.0)):
            return False
        try:
            # The wait for the other processes' writers starts once this process's turn has
            # come: a wait that runs out means one of them held the gate for all of it.
            if not self._lock(time.monotonic() + wait_s):
                self._stuck = True
                self._turn.release()
                return False
        except BaseException:
            self._turn.release()
            raise
        self._stuck = False
        self._owner, self._depth = me, 1
        return True

    def leave(self) -> None:
        """Give the gate back, and wake the writers waiting for it."""
        self._depth -= 1
        if self._depth > 0:
            return
        self._owner = None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.pread(self._fd, 1, 0)  # the inotify event a waiting writer wakes on
        finally:
            self._turn.release()

    def _lock(self, deadline: float) -> bool:
        if self._try():
            return True
        self.waits += 1
        watch = self._watching()
        while True:
            if watch is not None:
                watch.drain()  # events from before this try: the next one is news
            if self._try():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if watch is not None:
                watch.wait(min(left, _LONGEST_SLEEP_S))
            else:
                time.sleep(min(left, _POLL_STEP_S))

    def _try(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _watching(self) -> _Watch | None:
        if not self._watch_tried:
            self._watch_tried = True
            self._watch = _Watch.open(self._path)
        return self._watch

    def close(self) -> None:
        with self._turn:
            if self._watch is not None:
                self._watch.close()
                self._watch = None
            os.close(self._fd)
            self._fd = -1
