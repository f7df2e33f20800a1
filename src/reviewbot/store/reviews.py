"""Review decisions per PR head, and what an evaluation keeps of a head: the findings of
its external reviewers and when each required check was first seen missing.

Every write that acts under the reviewer lease takes a ``fence``: a callable run inside the
same write transaction that raises when the lease epoch is no longer held, so a superseded
worker's write is rolled back and changes nothing. The outbox of native reviews
(:mod:`reviewbot.store.review_outbox`) writes its decisions with :func:`insert_decision`
inside its own transactions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reviewbot.core.clock import iso
from reviewbot.core.findings import Finding, Severity
from reviewbot.core.models import repo_key
from reviewbot.store.database import Database, OnDatabase, Row, Tx, row_as

if TYPE_CHECKING:
    from reviewbot.observe import Telemetry

Fence = Callable[[Tx], None]


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(str(v) for v in json.loads(value or "[]"))


def _names_in(column: str) -> Callable[[Row], tuple[str, ...]]:
    """The conversion of a column holding a JSON list of names."""
    return lambda row: _names(row[column])


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
        return row_as(
            cls,
            row,
            blockers=_names_in("blockers"),
            pending=_names_in("pending"),
            missing=_names_in("missing"),
            failed=_names_in("failed"),
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


class ReviewStore(OnDatabase):
    """Review decisions, reviewer findings and missing checks. ``clock`` returns seconds
    since the epoch."""

    def __init__(
        self, db: Database, clock: Callable[[], float], *, telemetry: Telemetry | None = None
    ) -> None:
        """``telemetry`` hears of every decision recorded (after its commit)."""
        self.db = db
        self.clock = clock
        self.telemetry = telemetry

    # -- decisions ---------------------------------------------------------------------

    def record_decision(
        self, decision: NewDecision, *, fence: Fence | None = None
    ) -> ReviewDecision:
        """Write the decision, fenced by the lease (``fence`` raises: nothing is written)."""
        with self.db.write() as tx:
            if fence is not None:
                fence(tx)
            recorded = decision_in(tx, insert_decision(tx, decision, self.clock(), outbox_id=None))
        if self.telemetry is not None:
            self.telemetry.decided(decision)
        return recorded

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

    # -- external reviewers --------------------------------------------------------------

    def reviewer_findings(
        self, forge: str, repo: str, number: int, head_sha: str
    ) -> tuple[Finding, ...] | None:
        """The findings of the reviewers' run at this head in its current round (``None``:
        they have not run successfully in this round)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rnd = review_round(tx, forge, repo, number, head_sha)
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
            rnd = review_round(tx, forge, repo, number, head_sha)
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


def body_sha256(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def _findings(value: str | None) -> tuple[Finding, ...]:
    return tuple(
        Finding(
            str(f["path"]), int(f["line"]), str(f["message"]), Severity(f["severity"]), f["source"]
        )
        for f in json.loads(value or "[]")
    )


def review_round(tx: Tx, forge: str, repo: str, number: int, head_sha: str) -> int:
    repo = repo_key(repo)
    row = tx.one(
        "SELECT COUNT(*) AS n FROM review_decisions WHERE forge = ? AND repo = ? AND number = ? "
        "AND head_sha = ? AND decision = 'reopened'",
        (forge, repo, number, head_sha),
    )
    return 0 if row is None else int(row["n"])


def insert_decision(tx: Tx, d: NewDecision, now: float, *, outbox_id: int | None) -> int:
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


def decision_in(tx: Tx, decision_id: int) -> ReviewDecision:
    """The decision ``decision_id`` inside an open transaction (one it wrote)."""
    row = tx.one("SELECT * FROM review_decisions WHERE id = ?", (decision_id,))
    assert row is not None
    return ReviewDecision.from_row(row)
