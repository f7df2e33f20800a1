"""The outbox of native reviews: one row per review to post on a PR head, posted (and
retried) by the drainer after the decision that queued it committed.

A row is written in the same transaction as its decision, and closed in the same one as the
decision that says how it ended, both fenced by the reviewer lease (see
:mod:`reviewbot.store.reviews`). The unique key (PR, head, verdict, round) makes a second
row for the same verdict impossible; a second evaluation of the same head adopts the
existing row instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reviewbot.core.clock import iso, iso_or_none
from reviewbot.core.models import InlineComment, repo_key
from reviewbot.store.database import Database, OnDatabase, Row, row_as
from reviewbot.store.reviews import (
    Fence,
    NewDecision,
    ReviewDecision,
    decision_in,
    insert_decision,
    review_round,
)

if TYPE_CHECKING:
    from reviewbot.observe import Telemetry

PENDING = "pending"
POSTED = "posted"
DROPPED = "dropped"
FAILED = "failed"

MARKER_PREFIX = "<!-- reviewbot:outbox:"


def outbox_marker(outbox_id: int) -> str:
    """The hidden line in a review body that proves which outbox row posted it."""
    return f"{MARKER_PREFIX}{outbox_id} -->"


def _comments(row: Row) -> tuple[InlineComment, ...]:
    return tuple(
        InlineComment(str(c["path"]), int(c["line"]), str(c["body"]))
        for c in json.loads(row["comments"] or "[]")
    )


@dataclass(frozen=True)
class NewOutbox:
    verdict: str  # approve / request_changes / missing_checks
    event: str  # ReviewEvent value
    render_body: Callable[[str], str]  # marker -> body; the marker holds the row id
    comments: tuple[InlineComment, ...] = ()


@dataclass(frozen=True)
class OutboxRow:
    id: int
    forge: str
    repo: str
    number: int
    head_sha: str
    verdict: str
    round: int
    event: str
    body: str
    comments: tuple[InlineComment, ...]
    status: str
    attempts: int
    next_attempt_at: float
    last_error: str | None
    forge_review_id: int | None
    decision_id: int | None
    worker: str | None
    epoch: int | None
    created_at: float
    created_ts: float  # the same moment (kept from when created_at was text)
    finished_at: float | None

    @property
    def marker(self) -> str:
        return outbox_marker(self.id)

    @classmethod
    def from_row(cls, row: Row) -> OutboxRow:
        return row_as(cls, row, comments=_comments)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "forge": self.forge,
            "repo": self.repo,
            "number": self.number,
            "head_sha": self.head_sha,
            "verdict": self.verdict,
            "round": self.round,
            "event": self.event,
            "status": self.status,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "forge_review_id": self.forge_review_id,
            "created_at": iso(self.created_at, timespec="microseconds"),
            "finished_at": iso_or_none(self.finished_at, timespec="microseconds"),
        }


@dataclass(frozen=True)
class Recorded:
    decision: ReviewDecision
    outboxes: tuple[OutboxRow, ...] = field(default_factory=tuple)
    created: tuple[int, ...] = ()  # ids of outbox rows this call created (others existed)


class OutboxStore(OnDatabase):
    """The ``review_outbox`` rows. ``clock`` returns seconds since the epoch."""

    def __init__(
        self, db: Database, clock: Callable[[], float], *, telemetry: Telemetry | None = None
    ) -> None:
        """``telemetry`` hears of every decision recorded with a row (after its commit)."""
        self.db = db
        self.clock = clock
        self.telemetry = telemetry

    def record(
        self,
        decision: NewDecision,
        outboxes: Sequence[NewOutbox] = (),
        *,
        fence: Fence | None = None,
    ) -> Recorded:
        """Write the decision and its outbox rows in one transaction, fenced by the lease.

        An outbox row that exists for the same (PR, head, verdict, round) is reused, never
        duplicated.
        """
        now = self.clock()
        rows: list[OutboxRow] = []
        created: list[int] = []
        with self.db.write() as tx:
            if fence is not None:
                fence(tx)
            rnd = review_round(
                tx, decision.forge, decision.repo, decision.number, decision.head_sha
            )
            decision_id = insert_decision(tx, decision, now, outbox_id=None)
            for new in outboxes:
                inserted = tx.one(
                    "INSERT INTO review_outbox (forge, repo, number, head_sha, "
                    "verdict, round, event, body, comments, status, decision_id, worker, epoch, "
                    "created_at, created_ts) VALUES (?, ?, ?, ?, ?, ?, ?, '', ?, 'pending', ?, "
                    "?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                    (
                        decision.forge,
                        decision.repo,
                        decision.number,
                        decision.head_sha,
                        new.verdict,
                        rnd,
                        new.event,
                        json.dumps(
                            [{"path": c.path, "line": c.line, "body": c.body} for c in new.comments]
                        ),
                        decision_id,
                        decision.worker,
                        decision.epoch,
                        now,
                        now,
                    ),
                )
                if inserted is not None:
                    oid = int(inserted["id"])
                    tx.execute(
                        "UPDATE review_outbox SET body = ? WHERE id = ?",
                        (new.render_body(outbox_marker(oid)), oid),
                    )
                    created.append(oid)
                row = tx.one(
                    "SELECT * FROM review_outbox WHERE forge = ? AND repo = ? AND number = ? "
                    "AND head_sha = ? AND verdict = ? AND round = ?",
                    (
                        decision.forge,
                        decision.repo,
                        decision.number,
                        decision.head_sha,
                        new.verdict,
                        rnd,
                    ),
                )
                assert row is not None
                rows.append(OutboxRow.from_row(row))
            if rows:
                tx.execute(
                    "UPDATE review_decisions SET outbox_id = ? WHERE id = ?",
                    (rows[0].id, decision_id),
                )
            stored = decision_in(tx, decision_id)
        if self.telemetry is not None:
            self.telemetry.decided(decision)
        return Recorded(stored, tuple(rows), tuple(created))

    def get(self, outbox_id: int) -> OutboxRow | None:
        with self.db.read() as tx:
            row = tx.one("SELECT * FROM review_outbox WHERE id = ?", (outbox_id,))
        return None if row is None else OutboxRow.from_row(row)

    def for_pull(self, forge: str, repo: str, number: int) -> list[OutboxRow]:
        """Oldest first."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM review_outbox WHERE forge = ? AND repo = ? AND number = ? "
                "ORDER BY id",
                (forge, repo, number),
            )
        return [OutboxRow.from_row(r) for r in rows]

    def due(self, now: float, *, limit: int = 100) -> list[OutboxRow]:
        """Pending rows whose next attempt is due, oldest first."""
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM review_outbox WHERE status = 'pending' AND next_attempt_at <= ? "
                "ORDER BY id LIMIT ?",
                (now, limit),
            )
        return [OutboxRow.from_row(r) for r in rows]

    def next_due_at(self) -> float | None:
        with self.db.read() as tx:
            row = tx.one(
                "SELECT MIN(next_attempt_at) AS t FROM review_outbox WHERE status = 'pending'"
            )
        return None if row is None or row["t"] is None else float(row["t"])

    def begin_attempt(self, outbox_id: int, *, fence: Fence | None = None) -> OutboxRow | None:
        """Count an attempt before anything is sent: a row with attempts > 0 may have been
        posted by an attempt that crashed, so the next one must look for it first."""
        with self.db.write() as tx:
            if fence is not None:
                fence(tx)
            cur = tx.execute(
                "UPDATE review_outbox SET attempts = attempts + 1 "
                "WHERE id = ? AND status = 'pending'",
                (outbox_id,),
            )
            if cur.rowcount != 1:
                return None
            row = tx.one("SELECT * FROM review_outbox WHERE id = ?", (outbox_id,))
        return None if row is None else OutboxRow.from_row(row)

    def finish(
        self,
        outbox_id: int,
        status: str,
        *,
        decision: NewDecision | None = None,
        forge_review_id: int | None = None,
        error: str | None = None,
        fence: Fence | None = None,
    ) -> bool:
        """Close a pending row (posted / dropped / failed) and record what happened."""
        now = self.clock()
        with self.db.write() as tx:
            if fence is not None:
                fence(tx)
            cur = tx.execute(
                "UPDATE review_outbox SET status = ?, forge_review_id = COALESCE(?, "
                "forge_review_id), last_error = COALESCE(?, last_error), finished_at = ? "
                "WHERE id = ? AND status = 'pending'",
                (status, forge_review_id, error, now, outbox_id),
            )
            if cur.rowcount != 1:
                return False
            if decision is not None:
                insert_decision(tx, decision, now, outbox_id=outbox_id)
        if decision is not None and self.telemetry is not None:
            self.telemetry.decided(decision)
        return True

    def retry_later(self, outbox_id: int, at: float, error: str) -> None:
        with self.db.write() as tx:
            tx.execute(
                "UPDATE review_outbox SET next_attempt_at = ?, last_error = ? "
                "WHERE id = ? AND status = 'pending'",
                (at, error, outbox_id),
            )

    def drop_pending_for_other_heads(
        self, forge: str, repo: str, number: int, head_sha: str, *, fence: Fence | None = None
    ) -> list[int]:
        """A new head supersedes what was queued for the old one."""
        repo = repo_key(repo)
        now = self.clock()
        with self.db.write() as tx:
            if fence is not None:
                fence(tx)
            rows = tx.all(
                "SELECT id FROM review_outbox WHERE forge = ? AND repo = ? AND number = ? "
                "AND head_sha != ? AND status = 'pending'",
                (forge, repo, number, head_sha),
            )
            ids = [int(r["id"]) for r in rows]
            for oid in ids:
                tx.execute(
                    "UPDATE review_outbox SET status = 'dropped', last_error = ?, "
                    "finished_at = ? WHERE id = ?",
                    (f"superseded by head {head_sha}", now, oid),
                )
        return ids
