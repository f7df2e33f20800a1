"""Reads with subqueries on both stores: a PR's lease history (which the review pipeline reads
before posting) and the status page's PR list. PostgreSQL before 16 refuses a subquery in
FROM without an alias, where SQLite accepts one: both reads must work on both."""

from __future__ import annotations

from reviewbot.core.lease_history import LeaseEvent
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.core.models import Reason
from reviewbot.core.reasons import ReasonCode
from reviewbot.store import decisions, lease_history, status
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.leases import LeaseStore

HEAD = "d" * 40
NOW = 1_767_225_600.0


def test_a_pulls_lease_history_reads_newest_rows_oldest_first(db: Database) -> None:
    leases = LeaseStore.open(db)
    worker = leases.workers.register("w", client="t", session_id="s", role="reviewer")
    target = LeaseTarget("github", "acme/api", 7, Role.REVIEWER)
    for _ in range(3):
        leases.release(leases.acquire(target, worker.identity, HEAD, ttl_s=60).claim)
    with db.read() as tx:
        last_two = lease_history.for_pull(tx, "github", "acme/api", 7, limit=2)
        every = lease_history.for_pull(tx, "github", "acme/api", 7, role=Role.REVIEWER)
    assert [(e.event, e.epoch) for e in every] == [
        (event, epoch) for epoch in (1, 2, 3) for event in (LeaseEvent.GRANTED, LeaseEvent.RELEASED)
    ]
    assert last_two == every[-2:]


def test_the_status_pages_pull_list_shows_each_pulls_newest_decision(db: Database) -> None:
    for n, (number, decision) in enumerate(((7, "skip"), (8, "eligible"), (7, "eligible"))):
        reason = ReasonCode.ELIGIBLE if decision == "eligible" else ReasonCode.PR_DRAFT
        decisions.record(
            db,
            [
                DecisionRecord(
                    delivery_id=f"d-{n}",
                    source="github",
                    decision=decision,
                    reasons=(Reason(reason, ""),),
                    decided_at=NOW + n,
                    forge="github",
                    repo="acme/api",
                    number=number,
                    head_sha=HEAD,
                )
            ],
        )
    snap = status.snapshot(db, status.Scope(), now=NOW + 10)
    assert [(p.number, p.gate) for p in snap.pulls] == [(7, "eligible"), (8, "eligible")]
