"""The write gate of a SQLite store: a hot write waits at the gate until the writer before it
is done (in this process or another, or one that died), never longer than its bound, and the
lease store sends only the writes of a target with a line through it. Real files, real
``flock`` and inotify, a real second process."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.store import write_gate
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.write_gate import WriteGate, gate_path
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.store_fixtures import seeded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock: Linux")

HEAD = "a" * 40
PATIENCE_S = 30.0  # what a step may take on a loaded machine; never a measured duration


def eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.005)


@pytest.fixture
def file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "db.sqlite"
    db = SQLiteDatabase(path)
    with db.write() as tx:
        tx.execute("CREATE TABLE t (n INTEGER, who TEXT)")
    db.close()
    yield path


def test_a_hot_write_waits_at_the_gate_until_the_writer_before_it_commits(file: Path) -> None:
    first, second = SQLiteDatabase(file), SQLiteDatabase(file)
    inside, finish = threading.Event(), threading.Event()

    def hold() -> None:
        with first.write(hot=True) as tx:
            tx.execute("INSERT INTO t VALUES (1, 'first')")
            inside.set()
            finish.wait(PATIENCE_S)

    def follow() -> None:
        with second.write(hot=True) as tx:
            # What the first writer committed is there when the second is let in.
            assert tx.one("SELECT count(*) FROM t")[0] == 1
            tx.execute("INSERT INTO t VALUES (2, 'second')")

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(PATIENCE_S)
    follower = threading.Thread(target=follow)
    follower.start()
    try:
        assert second.gate is not None
        eventually(lambda: second.gate is not None and second.gate.waits == 1)
        assert follower.is_alive()  # at the gate, not in SQLite's busy wait
    finally:
        finish.set()
        holder.join()
        follower.join(PATIENCE_S)
    assert not follower.is_alive()
    with first.read() as tx:
        assert [r[0] for r in tx.all("SELECT who FROM t ORDER BY n")] == ["first", "second"]
    first.close()
    second.close()


def test_a_plain_write_does_not_take_the_gate(file: Path) -> None:
    db = SQLiteDatabase(file)
    holder = WriteGate.open(file)
    assert holder is not None and holder.enter(0)
    try:
        with db.write() as tx:  # the gate is held, SQLite's lock is free
            tx.execute("INSERT INTO t VALUES (1, 'plain')")
        assert db.gate is not None and db.gate.waits == 0
    finally:
        holder.leave()
        holder.close()
        db.close()


def test_the_wait_is_bounded(file: Path) -> None:
    holder, waiter = WriteGate.open(file), WriteGate.open(file)
    assert holder is not None and waiter is not None
    assert holder.enter(0)
    assert waiter.enter(0.05) is False  # gone on without it
    holder.leave()
    assert waiter.enter(0)
    waiter.leave()
    holder.close()
    waiter.close()


def test_a_holder_that_outlasts_a_wait_costs_one_wait_not_one_per_write(file: Path) -> None:
    """A process stopped while it holds the gate (between its commit and giving the gate
    back) holds up one writer for one wait; later writers go on at once while the gate is
    taken, and wait for it again once it was found free."""
    stopped, writer = WriteGate.open(file), WriteGate.open(file)
    assert stopped is not None and writer is not None
    assert stopped.enter(0)
    assert writer.enter(0.05) is False  # one wait, given up
    got: list[bool] = []
    later = threading.Thread(target=lambda: got.append(writer.enter(3600.0)), daemon=True)
    later.start()
    later.join(PATIENCE_S)
    assert got == [False]  # it did not wait the hour
    stopped.leave()
    assert writer.enter(0) is True  # found free: waiting is back
    writer.leave()
    assert stopped.enter(0)
    waited: list[bool] = []
    again = threading.Thread(target=lambda: waited.append(writer.enter(PATIENCE_S)), daemon=True)
    again.start()
    eventually(lambda: writer.waits == 3)  # it waits for the holder now
    assert not waited
    stopped.leave()
    again.join(PATIENCE_S)
    assert waited == [True]
    writer.leave()
    stopped.close()
    writer.close()


HOLDER = """
import sys
from pathlib import Path
from reviewbot.store.write_gate import WriteGate
gate = WriteGate.open(Path(sys.argv[1]))
assert gate is not None and gate.enter(0)
print("held", flush=True)
sys.stdin.readline()
gate.leave()
print("left", flush=True)
"""


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
@pytest.mark.parametrize("end", ["leaves", "dies"])
def test_a_waiter_gets_the_gate_when_another_process_leaves_it_or_dies(
    file: Path, monkeypatch: pytest.MonkeyPatch, inotify: bool, end: str
) -> None:
    if not inotify:
        monkeypatch.setattr(write_gate, "_LIBC", None)
    elif end == "leaves":
        # Woken by the leaving writer's event alone: no timed look would find the gate free.
        monkeypatch.setattr(write_gate, "_LONGEST_SLEEP_S", 3600.0)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "held"
        gate = WriteGate.open(file)
        assert gate is not None
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(gate.enter(PATIENCE_S)))
        waiter.start()
        eventually(lambda: gate.waits == 1)
        assert not got  # still waiting while the other process holds it
        if end == "leaves":
            child.stdin.write("\n")
            child.stdin.flush()
        else:
            child.kill()  # its flock goes with it: no event, the waiter looks again
        waiter.join(PATIENCE_S)
        assert got == [True]
        gate.leave()
        gate.close()
    finally:
        child.kill()
        child.wait()


def test_the_gate_file_sits_beside_the_database(file: Path) -> None:
    db = SQLiteDatabase(file)
    with db.write(hot=True) as tx:
        tx.execute("INSERT INTO t VALUES (1, 'x')")
    db.close()
    assert gate_path(file) == file.with_name("db.sqlite-writers")
    assert gate_path(file).read_bytes() == b"\n"  # the byte a leaving writer reads


# --- the lease store: only a target with a line goes through the gate ------------------------


@pytest.fixture
def leases(tmp_path: Path) -> Iterator[LeaseStore]:
    db = open_store(WorkflowPaths(seeded(tmp_path / "data")))
    store = LeaseStore.open(db, LeaseSettings())
    yield store
    store.close()
    db.close()


def register(store: LeaseStore, name: str) -> str:
    return store.workers.register(name, client="test", session_id=name, role="merger").identity


def guarded_write_while_gate_is_held(
    store: LeaseStore, target: LeaseTarget, worker: str, *, waits: bool
) -> int:
    """The holder's guarded write while another process's writer holds the gate (``waits``:
    it must wait for it); how many times this store's writers found the gate taken."""
    claim = store.granted(target, worker)
    assert claim is not None
    db = store.db
    assert isinstance(db, SQLiteDatabase) and db.gate is not None
    other = WriteGate.open(db.path)
    assert other is not None and other.enter(0)
    done = threading.Event()

    def write() -> None:
        store.write_under(
            claim.claim, "UPDATE workers SET client = client WHERE identity = ?", (worker,)
        )
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        if waits:
            eventually(lambda: db.gate is not None and db.gate.waits == 1)
            assert not done.is_set()
    finally:
        other.leave()
        other.close()
        writer.join(PATIENCE_S)
    assert done.is_set()
    return db.gate.waits


def test_the_writes_of_a_target_with_a_line_take_the_gate(
    leases: LeaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The guarded write must still be at the gate when the test looks, however slow the
    # machine: it may wait there as long as the test is patient.
    monkeypatch.setattr("reviewbot.store.database.GATE_WAIT_S", PATIENCE_S)
    lined = LeaseTarget("github", "acme/api", 1, Role.MERGER)
    alone = LeaseTarget("github", "acme/api", 2, Role.MERGER)
    holder, waiter = register(leases, "holder"), register(leases, "waiter")
    leases.acquire(lined, holder, HEAD)
    with pytest.raises(LeaseRefused):
        leases.acquire(lined, waiter, HEAD, wait=True)  # a line forms
    leases.acquire(alone, holder, HEAD)
    assert guarded_write_while_gate_is_held(leases, alone, holder, waits=False) == 0
    assert guarded_write_while_gate_is_held(leases, lined, holder, waits=True) == 1


def test_the_gate_file_takes_the_database_files_permissions(tmp_path: Path) -> None:
    """As SQLite's own sidecars do: a command run by an administrator and the bot's user
    share it (as root, the database file's owner gets it)."""
    file = tmp_path / "db.sqlite"
    SQLiteDatabase(file).close()
    file.touch()
    file.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(file, 4242, 4343)
    gate = WriteGate.open(file)
    assert gate is not None
    gate.close()
    made = os.stat(gate_path(file))
    assert made.st_mode & 0o777 == 0o640
    if os.geteuid() == 0:
        assert (made.st_uid, made.st_gid) == (4242, 4343)


def test_a_waiter_whose_descriptors_number_past_1024_still_waits(file: Path) -> None:
    """A busy server has more than 1024 descriptors open; the wait must not need low ones."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) is below what the test opens")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        holder, waiter = WriteGate.open(file), WriteGate.open(file)
        assert holder is not None and waiter is not None
        assert holder.enter(0)
        got: list[bool] = []
        thread = threading.Thread(target=lambda: got.append(waiter.enter(PATIENCE_S)))
        thread.start()
        eventually(lambda: waiter.waits == 1)
        holder.leave()
        thread.join(PATIENCE_S)
        assert got == [True]
        waiter.leave()
        holder.close()
        waiter.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
