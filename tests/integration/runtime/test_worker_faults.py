"""Store faults never shrink the worker pool: a disk I/O error while a batch is recorded and
re-queued backs off and retries, and once the fault clears every delivery is processed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.attempts import RetryPolicy
from reviewbot.core.models import Trigger
from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.ingestion import workers
from reviewbot.runtime.ingestion.gate_runner import GateRunner
from reviewbot.runtime.ingestion.workers import WorkerPool
from reviewbot.store import journal
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.journal import NewDelivery, StoredDelivery
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.server_support import WAIT_S, make_settings
from tests.support.store_faults import disk_io_error


class FlakyDatabase(SQLiteDatabase):
    """A real SQLite store whose write transactions fail like a failing disk while
    ``failing`` is set, until ``fail_writes`` writes were refused (then the disk recovers:
    counted in writes, not seconds, so a loaded machine sees the same fault)."""

    failing = False
    refused = 0
    fail_writes = 0  # 0: until ``failing`` is cleared by hand

    @contextmanager
    def write(
        self,
        *,
        durable: bool = False,
        serialized: bool = True,
        poll_lock: bool = False,
        hot: bool = False,
    ) -> Iterator[Any]:
        if self.failing:
            self.refused += 1
            if self.fail_writes and self.refused >= self.fail_writes:
                self.failing = False
            raise disk_io_error()
        with super().write(
            durable=durable, serialized=serialized, poll_lock=poll_lock, hot=hot
        ) as tx:
            yield tx


@pytest.fixture
def db(tmp_path: Path) -> Iterator[FlakyDatabase]:
    settings = make_settings(tmp_path / "data")
    open_store(settings).close()  # the schema
    flaky = FlakyDatabase(settings.database_path)
    yield flaky
    flaky.close()


def add(db: SQLiteDatabase, n: int, prefix: str) -> list[str]:
    ids = [f"{prefix}-{i:03d}" for i in range(n)]
    for i, delivery_id in enumerate(ids):
        journal.insert_delivery(
            db,
            NewDelivery(delivery_id, "api", b"{}", 1_767_225_600.0 + i),
        )
    return ids


async def test_a_disk_error_mid_batch_never_ends_a_worker(
    db: FlakyDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers, "RETRY_AFTER_FAILURE_S", 0.02)
    ids = add(db, 40, "d")
    loop = asyncio.get_running_loop()
    faults_started = False

    async def process(batch: Sequence[StoredDelivery]) -> None:
        nonlocal faults_started
        if not faults_started:
            # The disk fails while the first batches are being recorded, for 12 writes.
            faults_started = True
            db.fail_writes = 12
            db.failing = True
        for delivery in batch:
            await db.run(
                journal.finish, db, delivery.delivery_id, ok=True, error=None, at=1_767_312_000.0
            )

    pool = WorkerPool(db, process, size=3, batch=4, restart=RetryPolicy(base_s=0.01, max_s=0.05))
    await pool.start()
    try:
        deadline = loop.time() + WAIT_S
        while db.refused == 0:  # the fault is on
            assert loop.time() < deadline, "no write was refused"
            await asyncio.sleep(0.01)
        assert pool.alive() == 3
        deadline = loop.time() + WAIT_S
        while True:
            counts = await db.run(journal.count_by_status, db)
            if counts[journal.DONE] == len(ids):
                break
            assert loop.time() < deadline, counts
            await asyncio.sleep(0.02)
        # New work after the fault is taken up by the same, full pool.
        more = await db.run(add, db, 5, "e")
        pool.submit(more)
        await asyncio.wait_for(pool.wait_idle(), WAIT_S)
        counts = await db.run(journal.count_by_status, db)
        assert counts[journal.DONE] == len(ids) + len(more)
        assert counts[journal.QUEUED] == counts[journal.PROCESSING] == 0
        assert pool.alive() == 3
        assert pool.store_errors > 0
        # The outage was the store's: it used up none of the deliveries' own attempts.
        attempts = {journal.get_delivery(db, i).attempts for i in ids + more}  # type: ignore[union-attr]
        assert attempts == {1}, attempts
    finally:
        await pool.stop(grace_s=1.0)


async def test_only_the_delivery_that_fails_a_batch_is_charged_an_attempt(
    db: FlakyDatabase,
) -> None:
    """One poison delivery fails every batch it is in; the innocent ones of that batch are
    gated again one by one without being charged a second attempt."""
    ids = add(db, 8, "d")
    poison = ids[3]

    async def process(batch: Sequence[StoredDelivery]) -> None:
        if any(d.delivery_id == poison for d in batch):
            raise RuntimeError("this delivery breaks the batch")
        for delivery in batch:
            await db.run(
                journal.finish, db, delivery.delivery_id, ok=True, error=None, at=1_767_312_000.0
            )

    retry = RetryPolicy(max_attempts=3, base_s=0.01, max_s=0.01)
    pool = WorkerPool(db, process, size=1, batch=16, retry=retry)
    await pool.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while (await db.run(journal.get_delivery, db, poison)).status != journal.DEAD:  # type: ignore[union-attr]
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        await asyncio.wait_for(pool.wait_idle(), WAIT_S)
    finally:
        await pool.stop(grace_s=1.0)
    stored = {i: journal.get_delivery(db, i) for i in ids}
    assert {(s.status, s.attempts) for i, s in stored.items() if i != poison} == {  # type: ignore[union-attr]
        (journal.DONE, 1)
    }
    assert stored[poison].attempts == 3  # type: ignore[union-attr]


def first_webhook(delivery: StoredDelivery) -> Trigger:
    """A signed webhook naming a repository for the first time: the gate records it."""
    return Trigger(
        "github",
        delivery.delivery_id,
        "github",
        "pull_request",
        number=7,
        owner="acme",
        name="widgets",
        head_sha="a" * 40,
        repo_id=4242,
    )


async def gate_in_a_pool(
    db: FlakyDatabase, settings_dir: Path, delivery_id: str, parse: Any
) -> list[dict[str, Any]]:
    """The delivery gated by a real worker pool and gate until the pool is idle; its
    decisions (reason code and detail)."""
    runner = GateRunner(db, make_settings(settings_dir), {}, parse=parse)
    pool = WorkerPool(db, runner.process_batch, size=1, batch=4)
    await pool.start()
    try:
        pool.submit([delivery_id])
        await asyncio.wait_for(pool.wait_idle(), WAIT_S)
    finally:
        await pool.stop(grace_s=1.0)
        await runner.aclose()
    with db.read() as tx:
        rows = tx.all(
            "SELECT reason_code, detail FROM pr_gate_decisions WHERE delivery_id = ?",
            (delivery_id,),
        )
    return [dict(r) for r in rows]


async def test_a_disk_error_while_gating_is_retried_not_recorded_as_the_decision(
    db: FlakyDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's first write (it records the repository it saw) fails like a failing disk;
    the delivery goes back to the queue and is gated again, rather than finished with that
    fault as its ``internal_error`` decision (a finished delivery is never reviewed)."""
    monkeypatch.setattr(workers, "RETRY_AFTER_FAILURE_S", 0.01)
    (delivery_id,) = add(db, 1, "d")
    faulted = []

    def parse(delivery: StoredDelivery, forges: Sequence[str]) -> Trigger:
        if not faulted:
            faulted.append(delivery.delivery_id)
            db.fail_writes = 1  # the disk fails once, right after the delivery is claimed
            db.failing = True
        return first_webhook(delivery)

    decided = await gate_in_a_pool(db, tmp_path / "settings", delivery_id, parse)
    assert db.refused == 1
    stored = journal.get_delivery(db, delivery_id)
    assert stored is not None and stored.attempts == 1  # the fault was the store's
    # Gated as it would be without the fault: this test configures no GitHub connection.
    assert [r["reason_code"] for r in decided] == [ReasonCode.FORGE_NOT_CONFIGURED.value]


async def test_a_store_error_that_never_clears_is_the_decision_not_a_loop(
    db: FlakyDatabase, tmp_path: Path
) -> None:
    """SQL that fails the same way every time (here: a table gone) is no store fault to wait
    out: the delivery is decided ``internal_error`` with SQLite's own words, once, rather than
    put back in the queue for ever with its whole batch."""
    (delivery_id,) = add(db, 1, "d")
    with db.write() as tx:
        tx.execute("DROP TABLE repositories")

    def parse(delivery: StoredDelivery, forges: Sequence[str]) -> Trigger:
        return first_webhook(delivery)

    decided = await gate_in_a_pool(db, tmp_path / "settings", delivery_id, parse)
    stored = journal.get_delivery(db, delivery_id)
    assert stored is not None and (stored.status, stored.attempts) == ("failed", 1)
    assert [r["reason_code"] for r in decided] == [ReasonCode.INTERNAL_ERROR.value]
    assert "no such table: repositories" in decided[0]["detail"]


def test_giving_back_an_attempt_never_goes_below_none(db: FlakyDatabase) -> None:
    (delivery_id,) = add(db, 1, "z")
    taken = journal.claim(db, delivery_id, charge=False)  # claimed without a charge
    assert taken is not None and taken.attempts == 0
    journal.requeue(db, [delivery_id], uncharge=True)
    back = journal.get_delivery(db, delivery_id)
    assert back is not None and (back.status, back.attempts) == (journal.QUEUED, 0)
