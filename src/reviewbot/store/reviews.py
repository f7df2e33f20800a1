"""Review records: decisions per PR head, the outbox of native reviews, state comments.

Every write that acts under the reviewer lease takes a ``fence``: a callable run inside the
same write transaction that raises when the lease epoch is no longer held, so a superseded
worker's write is rolled back and changes nothing. The outbox's unique key
(PR, head, verdict, round) makes a second row for the same verdict impossible; a second
evaluation of the same head adopts the existing row instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reviewbot.core.clock import iso, iso_or_none
from reviewbot.core.findings import Finding, Severity
from reviewbot.core.models import InlineComment, repo_key
from reviewbot.store.database import Database, P, Row, T, Tx, opt_float

if TYPE_CHECKING:
    from reviewbot.observe import Telemetry

Fence = Callable[[Tx], None]

PENDING = "pending"
POSTED = "posted"
DROPPED = "dropped"
FAILED = "failed"

MARKER_PREFIX = "<!-- reviewbot:outbox:"


def outbox_marker(outbox_id: int) -> str:
    """The hidden line in a review body that proves which outbox row posted it."""
    return f"{MARKER_PREFIX}{outbox_id} -->"


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(str(v) for v in json.loads(value or "[]"))


@dataclass(frozen=True)
class NewDecision:
    forge: str
    repo: str
    number: int
    head_sha: str
    decision: str
    reason_code: str
    detail: str = ""
    blockers: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    delivery_id: str | None = None
    source: str | None = None
    worker: str | None = None
    epoch: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "repo", repo_key(self.repo))  # stored under the canonical key


@dataclass(frozen=True)
class ReviewDecision:
    id: int
    forge: str
    repo: str
    number: int
    head_sha: str
    decision: str
    reason_code: str
    detail: str
    blockers: tuple[str, ...]
    pending: tuple[str, ...]
    missing: tuple[str, ...]
    failed: tuple[str, ...]
    delivery_id: str | None
    source: str | None
    worker: str | None
    epoch: int | None
    outbox_id: int | None
    decided_at: float

    @classmethod
    def from_row(cls, row: Row) -> ReviewDecision:
        return cls(
            id=int(row["id"]),
            forge=row["forge"],
            repo=row["repo"],
            number=int(row["number"]),
            head_sha=row["head_sha"],
            decision=row["decision"],
            reason_code=row["reason_code"],
            detail=row["detail"],
            blockers=_names(row["blockers"]),
            pending=_names(row["pending"]),
            missing=_names(row["missing"]),
            failed=_names(row["failed"]),
            delivery_id=row["delivery_id"],
            source=row["source"],
            worker=row["worker"],
            epoch=row["epoch"],
            outbox_id=row["outbox_id"],
            decided_at=float(row["decided_at"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "forge": self.forge,
            "repo": self.repo,
            "number": self.number,
            "head_sha": self.head_sha,
            "decision": self.decision,
            "reason_code": self.reason_code,
            "detail": self.detail,
            "blockers": list(self.blockers),
            "pending": list(self.pending),
            "missing": list(self.missing),
            "failed": list(self.failed),
            "delivery_id": self.delivery_id,
            "source": self.source,
            "worker": self.worker,
            "epoch": self.epoch,
            "outbox_id": self.outbox_id,
            "decided_at": iso(self.decided_at, timespec="microseconds"),
        }


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
        comments = tuple(
            InlineComment(str(c["path"]), int(c["line"]), str(c["body"]))
            for c in json.loads(row["comments"] or "[]")
        )
        return cls(
            id=int(row["id"]),
            forge=row["forge"],
            repo=row["repo"],
            number=int(row["number"]),
            head_sha=row["head_sha"],
            verdict=row["verdict"],
            round=int(row["round"]),
            event=row["event"],
            body=row["body"],
            comments=comments,
            status=row["status"],
            attempts=int(row["attempts"]),
            next_attempt_at=float(row["next_attempt_at"]),
            last_error=row["last_error"],
            forge_review_id=row["forge_review_id"],
            decision_id=row["decision_id"],
            worker=row["worker"],
            epoch=row["epoch"],
            created_at=float(row["created_at"]),
            created_ts=float(row["created_ts"]),
            finished_at=opt_float(row["finished_at"]),
        )

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


class ReviewStore:
    """Reads and writes of the review tables. ``clock`` returns seconds since the epoch."""

    def __init__(
        self, db: Database, clock: Callable[[], float], *, telemetry: Telemetry | None = None
    ) -> None:
        """``telemetry`` hears of every decision recorded (after its commit)."""
        self.db = db
        self.clock = clock
        self.telemetry = telemetry

    # -- decisions ---------------------------------------------------------------------

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Await one of this store's calls on the database's executor (the async door)."""
        return await self.db.run(fn, *args, **kwargs)

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
            rnd = _round(tx, decision.forge, decision.repo, decision.number, decision.head_sha)
            decision_id = _insert_decision(tx, decision, now, outbox_id=None)
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
            stored = tx.one("SELECT * FROM review_decisions WHERE id = ?", (decision_id,))
            assert stored is not None
        if self.telemetry is not None:
            self.telemetry.decided(decision)
        return Recorded(ReviewDecision.from_row(stored), tuple(rows), tuple(created))

    def record_decision(
        self, decision: NewDecision, *, fence: Fence | None = None
    ) -> ReviewDecision:
        return self.record(decision, fence=fence).decision

    def latest(
        self, forge: str, repo: str, number: int, *, head_sha: str | None = None
    ) -> ReviewDecision | None:
        repo = repo_key(repo)
        sql = "SELECT * FROM review_decisions WHERE forge = ? AND repo = ? AND number = ?"
        params: list[Any] = [forge, repo, number]
        if head_sha is not None:
            sql += " AND head_sha = ?"
            params.append(head_sha)
        sql += " ORDER BY id DESC LIMIT 1"
        with self.db.read() as tx:
            row = tx.one(sql, params)
        return None if row is None else ReviewDecision.from_row(row)

    def latest_verdict(self, forge: str, repo: str, number: int) -> ReviewDecision | None:
        """The newest decision that is a policy outcome (not a posting note like ``posted``)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            row = tx.one(
                "SELECT * FROM review_decisions WHERE forge = ? AND repo = ? AND number = ? "
                "AND decision NOT IN ('posted', 'missing_reported') ORDER BY id DESC LIMIT 1",
                (forge, repo, number),
            )
        return None if row is None else ReviewDecision.from_row(row)

    def decisions(
        self, forge: str, repo: str, number: int, *, limit: int = 100
    ) -> list[ReviewDecision]:
        """Newest first."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM review_decisions WHERE forge = ? AND repo = ? AND number = ? "
                "ORDER BY id DESC LIMIT ?",
                (forge, repo, number, limit),
            )
        return [ReviewDecision.from_row(r) for r in rows]

    def reopen(self, decision: NewDecision) -> ReviewDecision:
        """A human dismissed the bot's review: the next evaluation of this head may post again."""
        return self.record_decision(decision)

    # -- outbox --------------------------------------------------------------------------

    def outbox(self, outbox_id: int) -> OutboxRow | None:
        with self.db.read() as tx:
            row = tx.one("SELECT * FROM review_outbox WHERE id = ?", (outbox_id,))
        return None if row is None else OutboxRow.from_row(row)

    def outbox_for_pull(self, forge: str, repo: str, number: int) -> list[OutboxRow]:
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
                _insert_decision(tx, decision, now, outbox_id=outbox_id)
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

    # -- external reviewers --------------------------------------------------------------

    def reviewer_findings(
        self, forge: str, repo: str, number: int, head_sha: str
    ) -> tuple[Finding, ...] | None:
        """The findings of the reviewers' run at this head in its current round (``None``:
        they have not run successfully in this round)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rnd = _round(tx, forge, repo, number, head_sha)
            row = tx.one(
                "SELECT findings FROM review_reviewer_runs WHERE forge = ? AND repo = ? "
                "AND number = ? AND head_sha = ? AND round = ?",
                (forge, repo, number, head_sha, rnd),
            )
        return None if row is None else _findings(row["findings"])

    def save_reviewer_findings(
        self,
        forge: str,
        repo: str,
        number: int,
        head_sha: str,
        run_id: str,
        findings: Sequence[Finding],
    ) -> tuple[Finding, ...]:
        """Keep a successful run's findings for this head and round; the first run kept wins
        (another process may have run them at the same time), and its findings are returned."""
        repo = repo_key(repo)
        data = json.dumps(
            [
                {
                    "path": f.path,
                    "line": f.line,
                    "message": f.message,
                    "severity": f.severity.value,
                    "source": f.source,
                }
                for f in findings
            ]
        )
        with self.db.write() as tx:
            rnd = _round(tx, forge, repo, number, head_sha)
            tx.execute(
                "INSERT INTO review_reviewer_runs (forge, repo, number, head_sha, "
                "round, run_id, findings, ran_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (
                    forge,
                    repo,
                    number,
                    head_sha,
                    rnd,
                    run_id,
                    data,
                    self.clock(),
                ),
            )
            row = tx.one(
                "SELECT findings FROM review_reviewer_runs WHERE forge = ? AND repo = ? "
                "AND number = ? AND head_sha = ? AND round = ?",
                (forge, repo, number, head_sha, rnd),
            )
        assert row is not None
        return _findings(row["findings"])

    # -- missing checks ------------------------------------------------------------------

    def note_missing(
        self, forge: str, repo: str, number: int, head_sha: str, names: Sequence[str]
    ) -> dict[str, float]:
        """When each name was first seen missing at this head (recording new ones now)."""
        repo = repo_key(repo)
        if not names:
            return {}
        now = self.clock()
        with self.db.write() as tx:
            for name in names:
                tx.execute(
                    "INSERT INTO review_missing_checks (forge, repo, number, "
                    "head_sha, name, first_seen) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (forge, repo, number, head_sha, name, now),
                )
            marks = ",".join("?" for _ in names)
            rows = tx.all(
                "SELECT name, first_seen FROM review_missing_checks WHERE forge = ? AND repo = ? "
                f"AND number = ? AND head_sha = ? AND name IN ({marks})",
                (forge, repo, number, head_sha, *names),
            )
        return {str(r["name"]): float(r["first_seen"]) for r in rows}

    # -- the state comment ---------------------------------------------------------------

    def last_delivery(self, forge: str, repo: str, number: int) -> dict[str, Any] | None:
        """The newest delivery the gate decided for this PR (from the journal's tables)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            row = tx.one(
                "SELECT g.delivery_id, g.source, g.event, g.action, g.decided_at, "
                "d.received_at FROM pr_gate_decisions g LEFT JOIN deliveries d "
                "ON d.delivery_id = g.delivery_id WHERE g.forge = ? AND g.repo = ? "
                "AND g.number = ? ORDER BY g.id DESC LIMIT 1",
                (forge, repo, number),
            )
        if row is None:
            return None
        return {
            "delivery_id": row["delivery_id"],
            "source": row["source"],
            "event": row["event"] or "",
            "action": row["action"],
            "received_at": row["received_at"] or row["decided_at"],
        }

    def gated_heads(self, forge: str, repo: str) -> set[tuple[int, str]]:
        """(PR, head) pairs the gate has a decision for."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT DISTINCT number, head_sha FROM pr_gate_decisions "
                "WHERE forge = ? AND repo = ? AND number IS NOT NULL AND head_sha IS NOT NULL",
                (forge, repo),
            )
        return {(int(r["number"]), str(r["head_sha"])) for r in rows}

    def signed_repos(self) -> set[tuple[str, str]]:
        """(forge, key) of every repository a signed webhook named (see repositories.py);
        an API caller naming a repository does not add it."""
        with self.db.read() as tx:
            rows = tx.all("SELECT forge, repo FROM repositories WHERE signed = 1")
        return {(str(r["forge"]), str(r["repo"])) for r in rows}

    def state_comment(self, forge: str, repo: str, number: int) -> tuple[int, str] | None:
        """(comment id, SHA-256 of the body last written)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            row = tx.one(
                "SELECT comment_id, body_sha256 FROM pr_state_comments "
                "WHERE forge = ? AND repo = ? AND number = ?",
                (forge, repo, number),
            )
        return None if row is None else (int(row["comment_id"]), str(row["body_sha256"]))

    def save_state_comment(
        self, forge: str, repo: str, number: int, comment_id: int, body: str
    ) -> None:
        repo = repo_key(repo)
        with self.db.write() as tx:
            tx.execute(
                "INSERT INTO pr_state_comments (forge, repo, number, comment_id, body_sha256, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (forge, repo, number) DO "
                "UPDATE SET comment_id = excluded.comment_id, body_sha256 = excluded.body_sha256, "
                "updated_at = excluded.updated_at",
                (
                    forge,
                    repo,
                    number,
                    comment_id,
                    body_sha256(body),
                    self.clock(),
                ),
            )


def body_sha256(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def _findings(value: str | None) -> tuple[Finding, ...]:
    return tuple(
        Finding(
            str(f["path"]), int(f["line"]), str(f["message"]), Severity(f["severity"]), f["source"]
        )
        for f in json.loads(value or "[]")
    )


def _round(tx: Tx, forge: str, repo: str, number: int, head_sha: str) -> int:
    repo = repo_key(repo)
    row = tx.one(
        "SELECT COUNT(*) AS n FROM review_decisions WHERE forge = ? AND repo = ? AND number = ? "
        "AND head_sha = ? AND decision = 'reopened'",
        (forge, repo, number, head_sha),
    )
    return 0 if row is None else int(row["n"])


def _insert_decision(tx: Tx, d: NewDecision, now: float, *, outbox_id: int | None) -> int:
    cur = tx.execute(
        "INSERT INTO review_decisions (forge, repo, number, head_sha, decision, reason_code, "
        "detail, blockers, pending, missing, failed, delivery_id, source, worker, epoch, "
        "outbox_id, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " RETURNING id",
        (
            d.forge,
            d.repo,
            d.number,
            d.head_sha,
            d.decision,
            d.reason_code,
            d.detail,
            json.dumps(list(d.blockers)),
            json.dumps(list(d.pending)),
            json.dumps(list(d.missing)),
            json.dumps(list(d.failed)),
            d.delivery_id,
            d.source,
            d.worker,
            d.epoch,
            outbox_id,
            now,
        ),
    )
    row = cur.fetchone()
    return 0 if row is None else int(row["id"])
