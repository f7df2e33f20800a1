"""Doorbells for the lease lines of one SQLite store: a grant reaches its waiter at once.

A worker waiting in a target's line used to learn of its grant only by reading the store
again, so every waiter polled, and the whole line paid for it: on two cores, eight waiting
processes spent most of a core asking, and the holder they waited on ran slower. Now a
waiter binds a **bell** before it joins the line, and whoever grants it the target (a
release, or an acquire that finds the holder lapsed) rings that bell once the grant's
transaction has committed.

A bell is a datagram socket in Linux's abstract namespace, named for the database file (its
resolved path), the target and the worker: no file to create or clean up, and gone with its
process. A ring carries nothing: it only makes the waiter read the store, which alone says
who holds what, so a lost ring costs what polling cost before (waiters still read the store
at their poll interval), and a ring from another user is dropped unread (the kernel names
each sender). Rings reach the processes of one network namespace that opened the database
by the same path; a process elsewhere (another container, ``PrivateNetwork=``), on
PostgreSQL, or where abstract sockets do not exist, polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import select
import socket
import struct
import sys
import time
from types import TracebackType

from reviewbot.core.leases import LeaseTarget

SUPPORTED = sys.platform.startswith("linux")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CREDENTIALS_SPACE = socket.CMSG_SPACE(_UCRED.size) if SUPPORTED else 0


def bell_address(scope: str, target: LeaseTarget, worker: str) -> bytes:
    """The abstract socket name of ``worker``'s bell in ``target``'s line of the store
    ``scope`` (its file): a hash, so any name fits the 107 bytes a socket name may have."""
    digest = hashlib.sha256(f"{scope}\n{target}\n{worker}".encode()).hexdigest()[:40]
    return b"\0reviewbot-line-" + digest.encode()


class Bell:
    """One waiter's bell, bound until :meth:`close` (or the end of a ``with`` block).

    Abstract sockets have no permissions, so any local user may send to a bell: the kernel
    attaches each sender's credentials (``SO_PASSCRED``) and only rings sent by this
    process's user count. Rings from anyone else are read and dropped, never a store read.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.setblocking(False)

    def wait(self, timeout_s: float) -> bool:
        """Block until the bell rings or ``timeout_s`` passes; whether it rang."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            if self._rung():
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(self._sock.fileno(), left):
                return self._rung()

    async def wait_async(self, timeout_s: float) -> bool:
        """:meth:`wait` on the running event loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        fd = self._sock.fileno()
        while True:
            if self._rung():
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _settle, readable)
            try:
                await asyncio.wait_for(readable, left)
            except TimeoutError:
                return self._rung()
            finally:
                loop.remove_reader(fd)

    def _rung(self) -> bool:
        """Read every ring waiting (rings that came together are one: the store is read
        once for all of them); whether one of them came from this process's user."""
        ours = False
        while True:
            try:
                _, ancillary, _, _ = self._sock.recvmsg(16, _CREDENTIALS_SPACE)
            except (BlockingIOError, InterruptedError):
                return ours
            for level, kind, data in ancillary:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS):
                    _pid, uid, _gid = struct.unpack("3i", data[: _UCRED.size])
                    ours = ours or uid == os.getuid()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Bell:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` became readable within ``timeout_s`` (``poll``: unlike ``select``, any
    descriptor number, as a busy server has)."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    return bool(waiting.poll(max(timeout_s, 0.0) * 1000.0))


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LineBells:
    """The bells of one store's lines: binding a waiter's, ringing a granted worker's."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._sender: socket.socket | None = None
        if SUPPORTED:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)

    def bind(self, target: LeaseTarget, worker: str) -> Bell | None:
        """``worker``'s bell in ``target``'s line, or ``None`` when it cannot be bound (the
        same worker waits for the same target in another process, which keeps that bell,
        or the platform has none): that waiter polls."""
        if not SUPPORTED:
            return None
        try:  # out of descriptors (EMFILE) is a reason to poll too, not a failed call
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            return None
        try:
            sock.bind(bell_address(self.scope, target, worker))
            return Bell(sock)
        except OSError:
            sock.close()
            return None

    def ring(self, target: LeaseTarget, worker: str) -> None:
        """Ring ``worker``'s bell in ``target``'s line, if one is bound; never raises (a
        waiter that hears nothing reads the store at its next poll)."""
        sender = self._sender  # once: a close() on another thread may clear it meanwhile
        if sender is None:
            return
        # Nobody bound (ECONNREFUSED), its queue is full (rung already), or the sender was
        # closed: nothing to do.
        with contextlib.suppress(OSError):
            sender.sendto(b"!", bell_address(self.scope, target, worker))

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
