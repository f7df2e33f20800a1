"""The lease line's bells on a SQLite store: a grant wakes its waiter at once, in this
process or another, and only the waiter it was granted to."""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.runtime.lease_line import acquire_waiting
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.line_bells import SUPPORTED, LineBells, bell_address
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.store_fixtures import seeded

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="bells are abstract sockets: Linux only")

HEAD = "a" * 40
T = LeaseTarget("github", "acme/api", 7, Role.MERGER)


@pytest.fixture
def paths(tmp_path: Path) -> WorkflowPaths:
    return WorkflowPaths(seeded(tmp_path / "data"))


@pytest.fixture
def store(paths: WorkflowPaths) -> Iterator[LeaseStore]:
    db = open_store(paths)
    s = LeaseStore.open(db, LeaseSettings())
    yield s
    s.close()
    db.close()


def register(store: LeaseStore, name: str) -> str:
    return store.workers.register(name, client="test", session_id="s1", role="merger").identity


def join(store: LeaseStore, worker: str) -> None:
    with pytest.raises(LeaseRefused):
        store.acquire(T, worker, HEAD, wait=True)


def test_the_release_rings_the_first_waiter_and_no_one_else(store: LeaseStore) -> None:
    a, b, c = register(store, "a"), register(store, "b"), register(store, "c")
    held = store.acquire(T, a, HEAD)
    with store.bell(T, b) as bell_b, store.bell(T, c) as bell_c:  # type: ignore[union-attr]
        join(store, b)
        join(store, c)
        store.heartbeat(held.claim)  # a renewal grants nobody anything
        assert not bell_b.wait(0) and not bell_c.wait(0)

        store.release(held.claim)  # the line grants B
        assert bell_b.wait(10)
        granted = store.granted(T, b)
        assert granted is not None and granted.holder == b
        assert not bell_c.wait(0)  # C is still in line: nothing to read

        store.release(granted.claim)
        assert bell_c.wait(10)
        assert not bell_b.wait(0)  # rung once: the rings of one grant are drained
        assert store.granted(T, c) is not None


def test_a_caller_granted_by_its_own_acquire_is_not_rung(store: LeaseStore) -> None:
    a = register(store, "a")
    with store.bell(T, a) as bell:  # type: ignore[union-attr]
        store.acquire(T, a, HEAD, wait=True)  # free: granted in the call itself
        assert not bell.wait(0)


def test_one_bell_per_waiter_and_ringing_nobody_is_harmless(store: LeaseStore) -> None:
    a = register(store, "a")
    first = store.bell(T, a)
    assert first is not None
    assert store.bell(T, a) is None  # another call of the same worker polls instead
    first.close()
    again = store.bell(T, a)
    assert again is not None
    again.close()
    # Nobody listening, or a closed sender: a ring never fails the grant it follows.
    bells = LineBells("/nowhere")
    bells.ring(T, a)
    bells.close()
    bells.ring(T, a)


RELEASE = """
import sys
from pathlib import Path
from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.store.leases import LeaseStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

db = open_store(WorkflowPaths(Path(sys.argv[1])))
store = LeaseStore.open(db, LeaseSettings())
target = LeaseTarget("github", "acme/api", 7, Role.MERGER)
store.release(LeaseClaim(target, sys.argv[2], int(sys.argv[3])))
store.close()
"""


async def test_a_waiting_acquire_is_answered_by_the_bell_a_release_in_another_process_rings(
    paths: WorkflowPaths,
) -> None:
    """The waiter reads the store only every 30 s here (and asks again no sooner): without
    the bell it would still be waiting when the test gives up on it, long after the release
    granted it the target."""
    db = open_store(paths)
    store = LeaseStore.open(db, LeaseSettings(lease_s=120, line_ttl_s=90))
    a, b = register(store, "a"), register(store, "b")
    held = store.acquire(T, a, HEAD)
    waiting = asyncio.create_task(
        acquire_waiting(store, T, b, HEAD, wait_s=28, poll_s=60, refresh_s=60)
    )
    while store.line_status(T, b).position is None:  # noqa: ASYNC110 (a store read)
        await asyncio.sleep(0.01)  # until B is in line, its bell bound
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", RELEASE, str(paths.data_dir), a, str(held.epoch)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lease = await asyncio.wait_for(waiting, 20)
    # Granted in the other process: above its epoch (and above that process's reservation).
    assert lease.holder == b and lease.epoch > held.epoch
    store.close()
    db.close()


SEND = """
import os, socket, sys
os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"!", bytes.fromhex(sys.argv[1]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="sending as another user needs root")
def test_a_ring_from_another_user_is_dropped_unread(store: LeaseStore) -> None:
    """Anyone on the machine may send to an abstract socket: a ring only counts when the
    kernel says it came from the bot's own user."""
    a = register(store, "a")
    assert store.bells is not None
    with store.bell(T, a) as bell:  # type: ignore[union-attr]
        name = bell_address(store.bells.scope, T, a)
        sent = subprocess.run([sys.executable, "-c", SEND, name.hex()], capture_output=True)
        assert sent.returncode == 0, sent.stderr
        assert not bell.wait(0)  # the stranger's ring was queued, read and dropped
        store.bells.ring(T, a)
        assert bell.wait(10)


def test_a_bell_that_cannot_be_made_leaves_the_waiter_polling(
    store: LeaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_descriptors(*_: object) -> socket.socket:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(socket, "socket", no_descriptors)
    assert store.bell(T, register(store, "a")) is None


def test_a_bell_numbered_past_1024_still_rings() -> None:
    """A busy server has more than 1024 descriptors open; waiting must not need low ones."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) is below what the test opens")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    bells = LineBells("/high-descriptors")
    try:
        bell = bells.bind(T, "w1")
        assert bell is not None
        assert bell._sock.fileno() > 1024
        heard: list[bool] = []
        waiter = threading.Thread(target=lambda: heard.append(bell.wait(30.0)))
        waiter.start()
        time.sleep(0.2)  # most likely asleep in its wait by now (either way it must hear)
        bells.ring(T, "w1")
        waiter.join(30.0)
        assert heard == [True]
        bell.close()
    finally:
        bells.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
