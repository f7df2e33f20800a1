"""Claims on both stores, and two store instances (two pools, as two replicas would have)
racing on one database: every delivery and review job is taken by one claimer, a dead
claimer's work comes back when its term lapses, and lease epochs stay strictly increasing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import pytest

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.store import journal, review_jobs
from reviewbot.store.database import Database, SQLiteDatabase
from reviewbot.store.journal import DeliveryClaim, NewDelivery
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.store.review_jobs import JobClaim
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

HEAD = "c" * 40
THREADS = 4


@pytest.fixture
def replicas(workflow_paths: WorkflowPaths) -> Iterator[tuple[Database, Database]]:
    """Two independent store instances on one database."""
    a, b = open_store(workflow_paths), open_store(workflow_paths)
    yield a, b
    a.close()
    b.close()


def delivery(n: int) -> NewDelivery:
    return NewDelivery(f"d-{n:04d}", "github", b"{}", 1_767_225_600.0 + n / 1000)


def race(workers: list[Callable[[], None]]) -> None:
    """Start every worker at once; re-raise the first failure."""
    errors: list[BaseException] = []
    gate = threading.Barrier(len(workers))

    def run(fn: Callable[[], None]) -> None:
        try:
            gate.wait()
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# --- the journal -------------------------------------------------------------------------


def test_a_delivery_is_stored_once_and_claimed_once(db: Database) -> None:
    assert journal.insert_delivery(db, delivery(1)) is True
    assert journal.insert_delivery(db, delivery(1)) is False  # a redelivery: duplicate
    (first,) = journal.claim_batch(db, 10)
    assert (first.delivery_id, first.status, first.attempts) == ("d-0001", "processing", 1)
    assert journal.claim_batch(db, 10) == []
    journal.requeue(db, ["d-0001"])
    journal.finish(db, "d-0001", ok=True, error=None, at=1_767_225_660.0)
    assert journal.count_by_status(db)["done"] == 1


def test_the_group_commit_writer_stores_batches(db: Database, tmp_path: Path) -> None:
    if isinstance(db, SQLiteDatabase):  # the writer's own connection to the file
        writer = journal.GroupCommitJournal(db.path)
    else:  # batches through the store's pool
        writer = journal.GroupCommitJournal(tmp_path / "unused", database=db)
    writer.start()
    try:
        answers = [writer.append_blocking(delivery(n)) for n in (1, 2, 1)]
    finally:
        writer.close()
    assert answers == [True, True, False]
    stored = journal.get_delivery(db, "d-0002")
    assert stored is not None and stored.body == b"{}" and stored.status == "queued"


def test_a_dead_claimers_deliveries_come_back_when_its_term_lapses(db: Database) -> None:
    for n in range(3):
        journal.insert_delivery(db, delivery(n))
    dead = DeliveryClaim("replica-a", now=100.0, until=160.0)
    assert len(journal.claim_batch(db, 10, claim=dead)) == 3
    # Another replica: nothing to take while the term runs, and its start leaves them alone.
    assert journal.claim_batch(db, 10, claim=DeliveryClaim("replica-b", 159.0, 219.0)) == []
    assert journal.resume_unfinished(db, lapsed_at=159.0) == []
    # Past the term, a claim takes them up again (one more attempt each).
    taken = journal.claim_batch(db, 10, claim=DeliveryClaim("replica-b", 161.0, 221.0))
    assert sorted(d.delivery_id for d in taken) == ["d-0000", "d-0001", "d-0002"]
    assert {d.attempts for d in taken} == {2}
    with db.read() as tx:
        owners = {r["claimed_by"] for r in tx.all("SELECT claimed_by FROM deliveries")}
    assert owners == {"replica-b"}


def test_a_replica_starting_puts_back_only_lapsed_claims(db: Database) -> None:
    journal.insert_delivery(db, delivery(1))
    journal.insert_delivery(db, delivery(2))
    journal.claim_batch(db, 1, claim=DeliveryClaim("a", 100.0, 110.0))
    journal.claim_batch(db, 1, claim=DeliveryClaim("b", 100.0, 200.0))
    assert journal.resume_unfinished(db, lapsed_at=150.0) == ["d-0001"]
    assert journal.count_by_status(db)["processing"] == 1


def test_two_replicas_racing_claim_every_delivery_exactly_once(
    replicas: tuple[Database, Database],
) -> None:
    a, _ = replicas
    total = 120
    for n in range(total):
        journal.insert_delivery(a, delivery(n))
    claimed: list[str] = []
    lock = threading.Lock()

    def claimer(store: Database, name: str) -> Callable[[], None]:
        def run() -> None:
            while True:
                got = journal.claim_batch(store, 7, claim=DeliveryClaim(name, 1.0, 1000.0))
                if not got:
                    return
                with lock:
                    claimed.extend(d.delivery_id for d in got)

        return run

    race([claimer(store, f"r{i}-{t}") for i, store in enumerate(replicas) for t in range(2)])
    assert len(claimed) == total
    assert len(set(claimed)) == total


# --- review jobs -------------------------------------------------------------------------

_decisions = count(1)


def add_job(db: Database, claim: JobClaim) -> int:
    with db.write() as tx:
        return review_jobs.insert_in(
            tx,
            decision_id=next(_decisions),
            delivery_id="d",
            source="github",
            forge="github",
            repo="acme/api",
            number=7,
            head_sha=HEAD,
            event="pull_request",
            action="opened",
            sender="dev",
            claim=claim,
            created_at=1_767_225_600.0,
        )


def test_a_job_claimed_elsewhere_is_taken_only_after_its_claim_lapses(db: Database) -> None:
    job = add_job(db, JobClaim("a", until=100.0))
    assert review_jobs.claim_lapsed(db, JobClaim("b", 200.0), now=99.0) == []
    (taken,) = review_jobs.claim_lapsed(db, JobClaim("b", 200.0), now=100.0)
    assert (taken.id, taken.attempts) == (job, 2)
    assert review_jobs.renew(db, job, JobClaim("a", 300.0)) is False  # a lost it
    assert review_jobs.renew(db, job, JobClaim("b", 300.0)) is True
    review_jobs.finish(db, job, "b", 1_767_225_900.0)
    assert review_jobs.unfinished(db) == []


def test_two_replicas_racing_take_every_lapsed_job_once(
    replicas: tuple[Database, Database],
) -> None:
    a, _ = replicas
    jobs = {add_job(a, JobClaim("dead", until=0.0)) for _ in range(40)}
    taken: list[int] = []
    lock = threading.Lock()

    def claimer(store: Database, name: str) -> Callable[[], None]:
        def run() -> None:
            while got := review_jobs.claim_lapsed(store, JobClaim(name, 500.0), 10.0, limit=3):
                with lock:
                    taken.extend(j.id for j in got)

        return run

    race([claimer(store, f"r{i}-{t}") for i, store in enumerate(replicas) for t in range(2)])
    assert sorted(taken) == sorted(jobs)


# --- leases --------------------------------------------------------------------------------


def test_epochs_stay_strictly_increasing_across_two_store_instances(
    replicas: tuple[Database, Database],
) -> None:
    target = LeaseTarget("github", "acme/api", 7, Role.MERGER)
    stores = [LeaseStore.open(db) for db in replicas]
    granted: list[int] = []
    lock = threading.Lock()

    def grabber(store: LeaseStore, name: str) -> Callable[[], None]:
        worker = store.workers.register(name, client="t", session_id="s", role="merger")

        def run() -> None:
            for _ in range(15):
                try:
                    lease = store.acquire(target, worker.identity, HEAD, ttl_s=60)
                except LeaseRefused:
                    continue
                with lock:
                    granted.append(lease.epoch)
                store.release(lease.claim)

        return run

    try:
        race([grabber(s, f"w{i}x{t}") for i, s in enumerate(stores) for t in range(THREADS // 2)])
    finally:
        for s in stores:
            s.close()
    assert granted, "no grant at all"
    assert len(set(granted)) == len(granted)  # never the same epoch twice
    # Each grant saw the last: in the order they were granted, epochs only go up.
    with replicas[0].read() as tx:
        trail = [
            int(r["epoch"])
            for r in tx.all(
                "SELECT epoch FROM lease_history WHERE number = 7 AND event = 'granted' ORDER BY id"
            )
        ]
    assert sorted(trail) == sorted(granted) and trail == sorted(trail)


async def test_one_batch_with_a_repeated_id_and_an_unstorable_delivery(
    db: Database, tmp_path: Path
) -> None:
    if isinstance(db, SQLiteDatabase):
        writer = journal.GroupCommitJournal(db.path)
    else:
        writer = journal.GroupCommitJournal(tmp_path / "unused", database=db)
    writer.start()
    bad = NewDelivery("d-\udc80", "github", b"{}", 1_767_225_600.0)  # not encodable
    try:
        answers = await asyncio.gather(
            *(writer.append(d) for d in (delivery(1), delivery(2), delivery(1), delivery(3))),
            writer.append(bad),
            return_exceptions=True,
        )
    finally:
        writer.close()
    assert sorted(map(repr, answers[:4])) == ["False", "True", "True", "True"]
    assert answers[0] is True and answers[2] is False  # the first of the repeated id wins
    assert isinstance(answers[4], journal.UnwritableDelivery)
    assert journal.count_by_status(db)["queued"] == 3
    stored = journal.get_delivery(db, "d-0003")
    assert stored is not None and stored.body == b"{}"
