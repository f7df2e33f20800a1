"""``pr_gate_decisions``: every delivery ends in at least one recorded decision.

Recording the decisions of a delivery, claiming its semantic key and finishing the delivery
happen in one transaction, so a crash leaves either all of them or none (a resumed delivery
is then gated again and recorded exactly once).

Several deliveries share a transaction, each inside its own savepoint: one whose rows cannot
be stored (a PR number past 64 bits, a lone surrogate) is rolled back alone and counted as a
failed attempt, and its batch-mates are recorded all the same. After the last attempt it is
parked as ``dead`` with a ``delivery_failed`` decision.

A delivery gated under a claim (replicas) is recorded only while that claim still holds it,
checked in the recording transaction: a claimer that lost the delivery to another (its term
lapsed while it worked) writes nothing for it and hears ``lost``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from reviewbot.core.attempts import RetryPolicy
from reviewbot.core.clock import iso
from reviewbot.core.gated_heads import GatedHeads
from reviewbot.core.gated_heads import gated_heads as core_gated_heads
from reviewbot.core.models import Reason, repo_key
from reviewbot.core.reasons import Outcome, ReasonCode
from reviewbot.store import review_jobs
from reviewbot.store.database import Database, Row, Tx, is_row_fault, row_as
from reviewbot.store.journal import still_held
from reviewbot.store.review_jobs import JobClaim


@dataclass(frozen=True)
class DecisionRecord:
    """One decision for one delivery and (when known) one pull request."""

    delivery_id: str
    source: str
    decision: str  # eligible / skip / error / waiting
    reasons: tuple[Reason, ...]
    decided_at: float  # seconds since the epoch
    forge: str | None = None
    repo: str | None = None  # OWNER/NAME
    number: int | None = None
    head_sha: str | None = None
    event: str | None = None
    action: str | None = None
    semantic_key: str | None = None
    id: int | None = None

    @property
    def reason_code(self) -> str:
        return self.reasons[0].code if self.reasons else ""

    @property
    def detail(self) -> str:
        return self.reasons[0].detail if self.reasons else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "delivery_id": self.delivery_id,
            "source": self.source,
            "forge": self.forge,
            "repo": self.repo,
            "number": self.number,
            "head_sha": self.head_sha,
            "event": self.event,
            "action": self.action,
            "decision": self.decision,
            "reason_code": self.reason_code,
            "detail": self.detail,
            "reasons": [{"code": r.code, "detail": r.detail} for r in self.reasons],
            "decided_at": iso(self.decided_at, timespec="microseconds"),
        }

    @classmethod
    def from_row(cls, row: Row) -> DecisionRecord:
        reasons = tuple(
            Reason(str(r.get("code", "")), str(r.get("detail", "")))
            for r in json.loads(row["reasons"] or "[]")
        ) or (Reason(row["reason_code"], row["detail"]),)
        return row_as(
            cls, row, reasons=lambda r: reasons, decided_at=lambda r: float(r["decided_at"])
        )


@dataclass(frozen=True)
class Recorded:
    """What was written: the rows, and the delivery that first acted when this one replays it."""

    records: tuple[DecisionRecord, ...]
    duplicate_of: str | None = None
    jobs: tuple[int | None, ...] = ()  # the review job of each record (eligible ones)
    # Set when the rows could not be stored: the error. The delivery was re-queued with a
    # backoff, or (``dead``) parked with the one ``delivery_failed`` row in ``records``.
    failed: str | None = None
    dead: bool = False
    # The claim it was gated under had passed to another claimer: nothing was written.
    lost: bool = False


def semantic_owner(db: Database, semantic_key: str) -> str | None:
    """The delivery that acted on this semantic key, if any."""
    with db.read() as tx:
        row = tx.one(
            "SELECT delivery_id FROM delivery_semantic_keys WHERE semantic_key = ?",
            (semantic_key,),
        )
    return None if row is None else str(row["delivery_id"])


def duplicate_of(record: DecisionRecord, first: str) -> DecisionRecord:
    """The decision a semantic replay gets instead of its own."""
    return replace(
        record,
        decision=Outcome.SKIP.value,
        reasons=(
            Reason(
                ReasonCode.DUPLICATE_DELIVERY.value,
                f"the same event was already handled as delivery {first}",
            ),
        ),
    )


@dataclass(frozen=True)
class ToRecord:
    """One delivery's decisions, its semantic key, and (ok, error) to finish it with."""

    records: Sequence[DecisionRecord]
    semantic_key: str | None = None
    finish_delivery: tuple[bool, str | None] | None = None
    # Eligible decisions get a review job claimed this way (None: no review follows here);
    # the second item is who caused the event.
    review_job: tuple[JobClaim, str | None] | None = None
    # The claim the delivery was gated under (None: unclaimed, one process per store).
    held_by: str | None = None


def record(
    db: Database,
    records: Sequence[DecisionRecord],
    *,
    semantic_key: str | None = None,
    finish_delivery: tuple[bool, str | None] | None = None,
) -> Recorded:
    """Write the decisions of one delivery (all rows share its ``delivery_id``).

    With ``semantic_key``, the key is claimed for this delivery unless another delivery holds
    it; then every row becomes ``duplicate_delivery`` (no second action). A key is claimed
    only by decisions that are not errors, so a failed attempt does not block a retry.
    ``finish_delivery`` = (ok, error) marks the delivery done/failed in the same transaction.
    """
    return record_many(db, [ToRecord(records, semantic_key, finish_delivery)])[0]


def record_many(
    db: Database,
    items: Sequence[ToRecord],
    *,
    retry: RetryPolicy | None = None,
    now: float | None = None,
) -> list[Recorded]:
    """:func:`record` for several deliveries in one transaction (in order), each in its own
    savepoint. With ``retry`` (and ``now``), a delivery whose rows cannot be stored becomes a
    failed attempt (see :func:`fail_attempt`) instead of failing the whole transaction."""
    with db.write() as tx:
        out = []
        for item in items:
            tx.execute("SAVEPOINT delivery")
            try:
                out.append(_record_one(tx, item))
            except Exception as exc:
                tx.execute("ROLLBACK TO delivery")
                tx.execute("RELEASE delivery")
                if retry is None or now is None or not is_row_fault(exc) or not item.records:
                    raise
                error = describe(exc)
                delivery_id = item.records[0].delivery_id
                out.append(fail_attempt(tx, delivery_id, error, retry=retry, now=now))
            else:
                tx.execute("RELEASE delivery")
        return out


def describe(exc: BaseException) -> str:
    """An error as text the store can always hold (no lone surrogates, bounded)."""
    text = f"{type(exc).__name__}: {exc}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:2000]


def fail_delivery(
    db: Database,
    delivery_id: str,
    error: str,
    retry: RetryPolicy,
    now: float,
    held_by: str | None = None,
) -> Recorded:
    """:func:`fail_attempt` in a transaction of its own (a delivery whose gating failed);
    with ``held_by``, only while that claim still holds the delivery."""
    with db.write() as tx:
        if held_by is not None and not still_held(tx, delivery_id, held_by):
            return Recorded((), lost=True)
        return fail_attempt(tx, delivery_id, error, retry=retry, now=now)


def fail_attempt(
    tx: Tx, delivery_id: str, error: str, *, retry: RetryPolicy, now: float
) -> Recorded:
    """One failed attempt at a delivery: back to ``queued`` with a backoff, or, after the
    last attempt, ``dead`` with a ``delivery_failed`` decision that ``explain`` shows."""
    row = tx.one(
        "SELECT source, forge, event, attempts FROM deliveries WHERE delivery_id = ?",
        (delivery_id,),
    )
    attempts = int(row["attempts"]) if row is not None else retry.max_attempts
    if not retry.exhausted(attempts):
        tx.execute(
            "UPDATE deliveries SET status = 'queued', error = ?, next_attempt_at = ? "
            "WHERE delivery_id = ?",
            (error, now + retry.delay(attempts), delivery_id),
        )
        return Recorded((), failed=error)
    at = now
    detail = f"not recorded after {attempts} attempt{'s' if attempts != 1 else ''}: {error}"
    failed = DecisionRecord(
        delivery_id=delivery_id,
        source=row["source"] if row is not None else "unknown",
        decision=Outcome.ERROR.value,
        reasons=(Reason(ReasonCode.DELIVERY_FAILED.value, detail),),
        decided_at=at,
        forge=row["forge"] if row is not None else None,
        event=row["event"] if row is not None else None,
    )
    written = _insert(tx, failed)
    tx.execute(
        "UPDATE deliveries SET status = 'dead', error = ?, finished_at = ?, "
        "next_attempt_at = NULL WHERE delivery_id = ?",
        (error, at, delivery_id),
    )
    return Recorded((written,), failed=error, dead=True)


def _record_one(tx: Tx, item: ToRecord) -> Recorded:
    if not item.records:
        raise ValueError("a delivery must end in at least one decision")
    rows = list(item.records)
    delivery_id = rows[0].delivery_id
    if item.held_by is not None and not still_held(tx, delivery_id, item.held_by):
        return Recorded((), lost=True)
    first: str | None = None
    key = item.semantic_key
    if key is not None and any(r.decision != Outcome.ERROR.value for r in rows):
        tx.execute(
            "INSERT INTO delivery_semantic_keys "
            "(semantic_key, delivery_id, claimed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (key, delivery_id, rows[0].decided_at),
        )
        owner = tx.one(
            "SELECT delivery_id FROM delivery_semantic_keys WHERE semantic_key = ?", (key,)
        )
        if owner is not None and owner["delivery_id"] != delivery_id:
            first = str(owner["delivery_id"])
            rows = [duplicate_of(r, first) for r in rows]
    written = tuple(_insert(tx, r) for r in rows)
    jobs = tuple(_job(tx, item, r) if first is None else None for r in written)
    if item.finish_delivery is not None:
        ok, error = item.finish_delivery
        tx.execute(
            "UPDATE deliveries SET status = ?, error = ?, finished_at = ?, next_attempt_at = NULL "
            "WHERE delivery_id = ?",
            ("done" if ok else "failed", error, rows[0].decided_at, delivery_id),
        )
    return Recorded(written, first, jobs)


def _job(tx: Tx, item: ToRecord, r: DecisionRecord) -> int | None:
    """The review job of an eligible decision, in the decision's own transaction."""
    if item.review_job is None or r.decision != Outcome.ELIGIBLE.value:
        return None
    if r.id is None or r.forge is None or r.repo is None or r.number is None:
        return None
    claim, sender = item.review_job
    return review_jobs.insert_in(
        tx,
        decision_id=r.id,
        delivery_id=r.delivery_id,
        source=r.source,
        forge=r.forge,
        repo=r.repo,
        number=r.number,
        head_sha=r.head_sha,
        event=r.event,
        action=r.action,
        sender=sender,
        claim=claim,
        created_at=r.decided_at,
    )


def _insert(tx: Tx, r: DecisionRecord) -> DecisionRecord:
    cur = tx.execute(
        "INSERT INTO pr_gate_decisions (delivery_id, source, forge, repo, number, head_sha, "
        "event, action, decision, reason_code, detail, reasons, semantic_key, decided_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            r.delivery_id,
            r.source,
            r.forge,
            r.repo,
            r.number,
            r.head_sha,
            r.event,
            r.action,
            r.decision,
            r.reason_code,
            r.detail,
            json.dumps([{"code": x.code, "detail": x.detail} for x in r.reasons]),
            r.semantic_key,
            r.decided_at,
        ),
    )
    row = cur.fetchone()
    return replace(r, id=None if row is None else int(row["id"]))


def for_delivery(db: Database, delivery_id: str) -> list[DecisionRecord]:
    with db.read() as tx:
        rows = tx.all(
            "SELECT * FROM pr_gate_decisions WHERE delivery_id = ? ORDER BY id", (delivery_id,)
        )
    return [DecisionRecord.from_row(r) for r in rows]


def for_pull(
    db: Database,
    *,
    forge: str | None = None,
    repo: str | None = None,
    number: int | None = None,
    limit: int = 100,
) -> list[DecisionRecord]:
    """Decisions, newest first, filtered by whichever of forge / repo / number are given."""
    repo = None if repo is None else repo_key(repo)
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("forge", forge), ("repo", repo), ("number", number)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = "SELECT * FROM pr_gate_decisions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    with db.read() as tx:
        rows = tx.all(sql, params)
    return [DecisionRecord.from_row(r) for r in rows]


def count_for_delivery(db: Database, delivery_id: str) -> int:
    with db.read() as tx:
        row = tx.one(
            "SELECT COUNT(*) AS n FROM pr_gate_decisions WHERE delivery_id = ?", (delivery_id,)
        )
    return 0 if row is None else int(row["n"])


def gated_heads(db: Database, forge: str, repo: str) -> GatedHeads:
    """The repository's heads the gate answered, and those it met only errors on
    (:func:`reviewbot.core.gated_heads.gated_heads` decides)."""
    with db.read() as tx:
        rows = tx.all(
            "SELECT number, head_sha, decision FROM pr_gate_decisions"
            " WHERE forge = ? AND repo = ? AND number IS NOT NULL AND head_sha IS NOT NULL"
            " ORDER BY id",
            (forge, repo_key(repo)),
        )
    return core_gated_heads(
        ((int(r["number"]), str(r["head_sha"])), str(r["decision"])) for r in rows
    )
