"""``review_jobs``: the durable intent to review an eligible PR head.

A job is inserted with the gate's eligible decision (same transaction, see
:mod:`reviewbot.store.decisions`), already claimed by the process that gated it. Claims
lapse; :func:`claim_lapsed` hands unfinished jobs whose claim lapsed to whoever asks, so a
restart resumes every one of them.

Replicas on PostgreSQL claim with ``FOR UPDATE SKIP LOCKED``: two processes asking at once
get different jobs, and neither waits for the other. The holder renews its claim while it
reviews (:func:`renew`); its verdict is recorded under :func:`fence`, so a holder whose
claim lapsed and was taken over records nothing, and :func:`finish` is its holder's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reviewbot.store.claims import ClaimLost
from reviewbot.store.database import Database, Row, Tx, row_as, skip_locked


@dataclass(frozen=True)
class JobClaim:
    """Who claims the jobs a gate transaction writes, and until when."""

    worker: str
    until: float


@dataclass(frozen=True)
class ReviewJob:
    id: int
    decision_id: int
    delivery_id: str
    source: str
    forge: str
    repo: str
    number: int
    head_sha: str | None
    event: str | None
    action: str | None
    sender: str | None
    status: str
    attempts: int

    @classmethod
    def from_row(cls, row: Row) -> ReviewJob:
        return row_as(cls, row)


def insert_in(
    tx: Tx,
    *,
    decision_id: int,
    delivery_id: str,
    source: str,
    forge: str,
    repo: str,
    number: int,
    head_sha: str | None,
    event: str | None,
    action: str | None,
    sender: str | None,
    claim: JobClaim,
    created_at: float,
) -> int:
    cur = tx.execute(
        "INSERT INTO review_jobs (decision_id, delivery_id, source, forge, repo, number,"
        " head_sha, event, action, sender, attempts, claimed_by, claim_until, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?) RETURNING id",
        (
            decision_id,
            delivery_id,
            source,
            forge,
            repo,
            number,
            head_sha,
            event,
            action,
            sender,
            claim.worker,
            claim.until,
            created_at,
        ),
    )
    row = cur.fetchone()
    assert row is not None
    return int(row["id"])


def claim_lapsed(db: Database, claim: JobClaim, now: float, limit: int = 10) -> list[ReviewJob]:
    """Claim unfinished jobs whose claim lapsed, oldest first."""
    with db.write(serialized=False) as tx:
        rows = tx.all(
            "UPDATE review_jobs SET claimed_by = ?, claim_until = ?, attempts = attempts + 1"
            " WHERE id IN (SELECT id FROM review_jobs WHERE status = 'queued'"
            f" AND claim_until <= ? ORDER BY id LIMIT ?{skip_locked(tx)}) RETURNING *",
            (claim.worker, claim.until, now, limit),
        )
    return sorted((ReviewJob.from_row(r) for r in rows), key=lambda j: j.id)


def renew(db: Database, job_id: int, claim: JobClaim) -> bool:
    """Extend a claim still held; False when it lapsed and another process took the job."""
    with db.write(serialized=False) as tx:
        cur = tx.execute(
            "UPDATE review_jobs SET claim_until = ? WHERE id = ? AND claimed_by = ?"
            " AND status = 'queued'",
            (claim.until, job_id, claim.worker),
        )
        return bool(cur.rowcount == 1)


def fence(job_id: int, holder: str) -> Callable[[Tx], None]:
    """A check for the transaction that records the job's result: raises :class:`ClaimLost`
    unless ``holder`` still holds the unfinished job. It is an update, so on PostgreSQL the
    row stays locked until the commit and no claimer takes the job over in between."""

    def check(tx: Tx) -> None:
        cur = tx.execute(
            "UPDATE review_jobs SET claimed_by = claimed_by WHERE id = ? AND claimed_by = ?"
            " AND status = 'queued'",
            (job_id, holder),
        )
        if cur.rowcount != 1:
            raise ClaimLost(f"review job {job_id} is no longer held by {holder}", job=job_id)

    return check


def finish(db: Database, job_id: int, worker: str, at: float, error: str | None = None) -> bool:
    """Mark the job done; False (nothing changed) when ``worker`` no longer holds it."""
    with db.write(serialized=False) as tx:
        cur = tx.execute(
            "UPDATE review_jobs SET status = 'done', finished_at = ?, last_error = ?"
            " WHERE id = ? AND claimed_by = ? AND status = 'queued'",
            (at, error, job_id, worker),
        )
        return bool(cur.rowcount == 1)


def unfinished(db: Database) -> list[ReviewJob]:
    with db.read() as tx:
        rows = tx.all("SELECT * FROM review_jobs WHERE status = 'queued' ORDER BY id")
    return [ReviewJob.from_row(r) for r in rows]
