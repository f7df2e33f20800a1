"""A replica whose claim on a delivery lapsed while its gate was slow records nothing: the
replica that took the delivery up records its decisions, once (on both stores)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reviewbot.core.models import Reason
from reviewbot.core.reasons import ReasonCode
from reviewbot.store import decisions, journal
from reviewbot.store.database import Database
from reviewbot.store.decisions import DecisionRecord, ToRecord
from reviewbot.store.journal import DeliveryClaim, NewDelivery
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

T0 = 1_767_225_600.0


@pytest.fixture
def db(workflow_paths: WorkflowPaths) -> Iterator[Database]:
    store = open_store(workflow_paths)
    yield store
    store.close()


def gated(delivery_id: str, at: float, claimed_by: str | None) -> ToRecord:
    row = DecisionRecord(
        delivery_id=delivery_id,
        source="github",
        decision="eligible",
        reasons=(Reason(ReasonCode.ELIGIBLE, ""),),
        decided_at=at,
        forge="github",
        repo="acme/api",
        number=7,
        head_sha="e" * 40,
    )
    return ToRecord([row], finish_delivery=(True, None), claimed_by=claimed_by)


def test_a_lapsed_claimer_records_nothing_the_one_that_took_over_records_once(
    db: Database,
) -> None:
    journal.insert_delivery(db, NewDelivery("d-1", "github", b"{}", T0))
    (slow,) = journal.claim_batch(db, 10, T0, claim=DeliveryClaim("replica-a", T0, T0 + 3))
    assert slow.claimed_by == "replica-a"
    # replica-a's gate outlives its term: replica-b takes the delivery up.
    (taken,) = journal.claim_batch(db, 10, T0 + 4, claim=DeliveryClaim("replica-b", T0 + 4, T0 + 7))
    assert taken.claimed_by == "replica-b"

    (late,) = decisions.record_many(db, [gated("d-1", T0 + 5, slow.claimed_by)])
    assert late.records == () and late.duplicate_of == "d-1"
    assert decisions.for_delivery(db, "d-1") == []

    (counted,) = decisions.record_many(db, [gated("d-1", T0 + 6, taken.claimed_by)])
    assert [r.decision for r in counted.records] == ["eligible"]
    # Finished now: replica-a, however late, cannot add a second decision.
    (again,) = decisions.record_many(db, [gated("d-1", T0 + 8, slow.claimed_by)])
    assert again.records == ()
    assert [r.decided_at for r in decisions.for_delivery(db, "d-1")] == [T0 + 6]
    stored = journal.get_delivery(db, "d-1")
    assert stored is not None and stored.status == "done"


def test_without_claims_one_process_records_as_before(db: Database) -> None:
    journal.insert_delivery(db, NewDelivery("d-2", "github", b"{}", T0))
    (mine,) = journal.claim_batch(db, 10, T0)
    assert mine.claimed_by is None
    (recorded,) = decisions.record_many(db, [gated("d-2", T0 + 1, mine.claimed_by)])
    assert len(recorded.records) == 1
