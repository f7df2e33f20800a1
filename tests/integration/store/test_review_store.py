"""The review and outbox stores on SQLite and PostgreSQL: one outbox row per verdict, fenced
writes."""

from __future__ import annotations

import pytest

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Refused, Role
from reviewbot.runtime.review.outbox import FenceRefused, StoreReviewerLeases
from reviewbot.store.database import Database
from reviewbot.store.leases import LeaseStore
from reviewbot.store.review_outbox import NewOutbox, OutboxStore, outbox_marker
from reviewbot.store.reviews import NewDecision, ReviewStore

HEAD = "a" * 40
OTHER = "b" * 40


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def decision(head: str = HEAD, verdict: str = "approve", **kw: object) -> NewDecision:
    return NewDecision(
        forge="github",
        repo="acme/api",
        number=7,
        head_sha=head,
        decision=verdict,
        reason_code="checks_passed",
        **kw,  # type: ignore[arg-type]
    )


def approve_row() -> NewOutbox:
    return NewOutbox("approve", "approve", lambda marker: f"Approved.\n\n{marker}")


def test_one_outbox_row_per_pull_head_and_verdict(db: Database) -> None:
    store, outbox = ReviewStore(db, Clock()), OutboxStore(db, Clock())
    first = outbox.record(decision(), [approve_row()])
    again = outbox.record(decision(), [approve_row()])
    assert first.created == (first.outboxes[0].id,)
    assert again.created == ()
    assert again.outboxes[0].id == first.outboxes[0].id
    assert len(outbox.for_pull("github", "acme/api", 7)) == 1
    # the body carries the marker of its own row
    row = first.outboxes[0]
    assert row.body.endswith(outbox_marker(row.id))
    # each evaluation is still recorded, and points at the one row
    assert [d.outbox_id for d in store.decisions("github", "acme/api", 7)] == [row.id, row.id]


def test_another_verdict_or_head_is_another_row(db: Database) -> None:
    outbox = OutboxStore(db, Clock())
    outbox.record(decision(), [approve_row()])
    rc = NewOutbox("request_changes", "request_changes", lambda m: f"Changes.\n{m}")
    outbox.record(decision(verdict="request_changes"), [rc])
    outbox.record(decision(head=OTHER), [approve_row()])
    rows = outbox.for_pull("github", "acme/api", 7)
    assert [(r.head_sha, r.verdict) for r in rows] == [
        (HEAD, "approve"),
        (HEAD, "request_changes"),
        (OTHER, "approve"),
    ]
    assert outbox.drop_pending_for_other_heads("github", "acme/api", 7, OTHER) == [
        rows[0].id,
        rows[1].id,
    ]


def test_a_dismissal_opens_a_new_round(db: Database) -> None:
    store, outbox = ReviewStore(db, Clock()), OutboxStore(db, Clock())
    first = outbox.record(decision(), [approve_row()]).outboxes[0]
    assert outbox.finish(first.id, "posted", forge_review_id=11)
    store.reopen(decision(verdict="reopened"))
    second = outbox.record(decision(), [approve_row()]).outboxes[0]
    assert second.id != first.id and second.round == 1


def test_a_stale_epoch_writes_nothing(db: Database) -> None:
    clock = Clock()
    store, outbox = ReviewStore(db, clock), OutboxStore(db, clock)
    leases = LeaseStore.open(db, LeaseSettings(lease_s=15, renew_s=10, retry_s=2), clock=clock)
    try:
        workers = [
            leases.workers.register("bot", client="t", session_id=str(n), role="reviewer").identity
            for n in (1, 2)
        ]
        one = StoreReviewerLeases(leases, workers[0])
        two = StoreReviewerLeases(leases, workers[1])
        old = one.acquire("github", "acme/api", 7, HEAD)
        assert isinstance(old, LeaseClaim)
        refused = two.acquire("github", "acme/api", 7, HEAD)
        assert isinstance(refused, Refused) and refused.holder == workers[0]
        clock.now += 20  # worker one stopped heartbeating: its claim lapsed
        new = two.acquire("github", "acme/api", 7, HEAD)
        assert isinstance(new, LeaseClaim) and new.epoch > old.epoch
        with pytest.raises(FenceRefused):
            outbox.record(decision(), [approve_row()], fence=one.fence(old))
        assert store.decisions("github", "acme/api", 7) == []
        assert outbox.for_pull("github", "acme/api", 7) == []
        recorded = outbox.record(decision(), [approve_row()], fence=two.fence(new))
        assert len(recorded.outboxes) == 1
        # a new head supersedes the claim pinned to the old one
        two.supersede_head("github", "acme/api", 7, OTHER)
        lease = leases.get(LeaseTarget("github", "acme/api", 7, Role.REVIEWER))
        assert lease is not None and lease.phase.value == "superseded"
    finally:
        leases.close()


def test_attempts_are_counted_before_posting_and_rows_close_once(db: Database) -> None:
    outbox = OutboxStore(db, Clock())
    row = outbox.record(decision(), [approve_row()]).outboxes[0]
    started = outbox.begin_attempt(row.id)
    assert started is not None and started.attempts == 1
    assert outbox.finish(row.id, "posted", forge_review_id=5)
    assert not outbox.finish(row.id, "dropped", error="late")
    assert outbox.begin_attempt(row.id) is None
    final = outbox.get(row.id)
    assert final is not None and (final.status, final.forge_review_id) == ("posted", 5)


def test_missing_checks_keep_their_first_sighting(db: Database) -> None:
    clock = Clock()
    store = ReviewStore(db, clock)
    first = store.note_missing("github", "acme/api", 7, HEAD, ["ci/test"])
    clock.now += 100
    later = store.note_missing("github", "acme/api", 7, HEAD, ["ci/test", "lint"])
    assert later["ci/test"] == first["ci/test"]
    assert later["lint"] == clock.now
