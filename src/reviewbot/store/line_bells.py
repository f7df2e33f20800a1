"""Doorbells for the lease lines of one SQLite store: a grant reaches its waiter at once.

A worker waiting in a target's line used to learn of its grant only by reading the store
again, so every waiter polled, and the whole line paid for it: on two cores, eight waiting
processes spent most of a core asking, and the holder they waited on ran slower. Now a
waiter binds a **bell** before it joins the line, and whoever grants it the target (a
release, or an acquire that finds the holder lapsed) rings that bell once the grant's
transaction has committed.

A bell is a datagram socket in Linux's abstract namespace, named for the database file, the
target and the worker: no file to create or clean up, and gone with its process. A ring
carries nothing: it only makes the waiter read the store, which alone says who holds what,
so a stray ring costs one read and a lost ring costs what polling cost before (waiters
still read the store at their poll interval). SQLite is one machine's store, so one
machine's sockets reach every waiter; on PostgreSQL, or where abstract sockets do not exist,
there are no bells and waiters poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import sys
from types import TracebackType

from reviewbot.core.leases import LeaseTarget

SUPPORTED = sys.platform.startswith("linux")


def bell_address(scope: str, target: LeaseTarget, worker: str) -> bytes:
    """The abstract socket name of ``worker``'s bell in ``target``'s line of the store
    ``scope`` (its file): a hash, so any name fits the 107 bytes a socket name may have."""
    digest = hashlib.sha256(f"{scope}\n{target}\n{worker}".encode()).hexdigest()[:40]
    return b"\0reviewbot-line-" + digest.encode()


class Bell:
    """One waiter's bell, bound until :meth:`close` (or the end of a ``with`` block)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def wait(self, timeout_s: float) -> bool:
        """Block until the bell rings or ``timeout_s`` passes; whether it rang."""
        self._sock.setblocking(True)
        self._sock.settimeout(max(timeout_s, 0.0))
        try:
            self._sock.recv(16)
        except (TimeoutError, BlockingIOError):
            return False
        self._drain()
        return True

    async def wait_async(self, timeout_s: float) -> bool:
        """:meth:`wait` on the running event loop."""
        self._sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_recv(self._sock, 16), max(timeout_s, 0.0))
        except TimeoutError:
            return False
        self._drain()
        return True

    def _drain(self) -> None:
        """Rings that arrived together are one: the store is read once for all of them."""
        self._sock.setblocking(False)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                self._sock.recv(16)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Bell:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(bell_address(self.scope, target, worker))
        except OSError:
            sock.close()
            return None
        return Bell(sock)

    def ring(self, target: LeaseTarget, worker: str) -> None:
        """Ring ``worker``'s bell in ``target``'s line, if one is bound; never raises (a
        waiter that hears nothing reads the store at its next poll)."""
        if self._sender is None:
            return
        # Nobody bound (ECONNREFUSED), or its queue is full (rung already): nothing to do.
        with contextlib.suppress(OSError):
            self._sender.sendto(b"!", bell_address(self.scope, target, worker))

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
