"""What the status page shows, read in one transaction: plain rows, no formatting.

Every list is filtered by a :class:`Scope`: a token bound to a repository (or a filter the
reader chose) sees only that repository's rows. The queue is not attributed to repositories
until its deliveries are gated, so a scoped reader gets its size and age but never a
delivery's id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reviewbot.store.database import Database, Tx
from reviewbot.store.decisions import DecisionRecord

# Rows per list: a page a person reads, not an export.
LIMIT = 50
PULL_WINDOW = 40  # the pull list is built from the newest LIMIT * PULL_WINDOW decisions


@dataclass(frozen=True)
class Scope:
    """``forge`` and ``repo`` (the canonical ``owner/name`` key) or ``None`` for all."""

    forge: str | None = None
    repo: str | None = None

    @property
    def narrowed(self) -> bool:
        return self.forge is not None or self.repo is not None

    def where(self, prefix: str = "") -> tuple[str, list[Any]]:
        """An SQL condition (always valid after WHERE) and its parameters."""
        parts, params = ["1 = 1"], []
        for column, value in (("forge", self.forge), ("repo", self.repo)):
            if value is not None:
                parts.append(f"{prefix}{column} = ?")
                params.append(value)
        return " AND ".join(parts), params


@dataclass(frozen=True)
class QueueState:
    counts: dict[str, int]
    oldest_at: float | None  # when the oldest waiting delivery was received
    oldest_id: str | None  # shown only to a reader who sees every repository
    oldest_source: str | None
    jobs_pending: int


@dataclass(frozen=True)
class PullRow:
    forge: str
    repo: str
    display: str
    number: int
    head_sha: str | None
    gate: str  # the newest gate decision
    gate_reasons: tuple[str, ...]
    gate_at: float
    verdict: str | None  # the newest review verdict, if any
    verdict_reason: str | None
    verdict_head: str | None
    merged: bool


@dataclass(frozen=True)
class LeaseRow:
    forge: str
    repo: str
    number: int
    role: str
    holder: str
    epoch: int
    head_sha: str
    expires_at: float


@dataclass(frozen=True)
class MergeRow:
    forge: str
    repo: str
    number: int
    head_sha: str
    status: str
    codes: tuple[str, ...]
    detail: str
    method: str
    holder: str
    epoch: int
    started_at: float


@dataclass(frozen=True)
class RunRow:
    forge: str
    repo: str
    number: int
    head_sha: str
    round: int
    run_id: str
    findings: int
    ran_at: float


@dataclass(frozen=True)
class StatusSnapshot:
    queue: QueueState
    decisions: list[DecisionRecord] = field(default_factory=list)
    pulls: list[PullRow] = field(default_factory=list)
    leases: list[LeaseRow] = field(default_factory=list)
    merges: list[MergeRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    display: dict[tuple[str, str], str] = field(default_factory=dict)

    def name(self, forge: str, repo: str) -> str:
        return self.display.get((forge, repo), repo)


def snapshot(db: Database, scope: Scope, now: float, limit: int = LIMIT) -> StatusSnapshot:
    with db.read() as tx:
        display = {
            (r["forge"], r["repo"]): r["display_name"]
            for r in tx.all("SELECT forge, repo, display_name FROM repositories")
        }
        cond, params = scope.where()
        decision_rows = tx.all(
            f"SELECT * FROM pr_gate_decisions WHERE {cond} ORDER BY id DESC LIMIT ?",
            [*params, limit],
        )
        return StatusSnapshot(
            queue=_queue(tx, scope),
            decisions=[DecisionRecord.from_row(r) for r in decision_rows],
            pulls=_pulls(tx, scope, limit, display),
            leases=_leases(tx, scope, now, limit),
            merges=_merges(tx, scope, limit),
            runs=_runs(tx, scope, limit),
            display=display,
        )


def _queue(tx: Tx, scope: Scope) -> QueueState:
    counts = {
        r["status"]: int(r["n"])
        for r in tx.all("SELECT status, COUNT(*) AS n FROM deliveries GROUP BY status")
    }
    oldest = tx.one(
        "SELECT delivery_id, source, received_at FROM deliveries "
        "WHERE status IN ('queued', 'processing') ORDER BY received_at, delivery_id LIMIT 1"
    )
    cond, params = scope.where()
    jobs = tx.one(
        f"SELECT COUNT(*) AS n FROM review_jobs WHERE status = 'queued' AND {cond}", params
    )
    at = source = delivery = None
    if oldest is not None:
        at = float(oldest["received_at"])
        if not scope.narrowed:
            delivery, source = str(oldest["delivery_id"]), str(oldest["source"])
    return QueueState(
        counts=counts,
        oldest_at=at,
        oldest_id=delivery,
        oldest_source=source,
        jobs_pending=int(jobs["n"]) if jobs else 0,
    )


def _pulls(tx: Tx, scope: Scope, limit: int, display: dict[tuple[str, str], str]) -> list[PullRow]:
    cond, params = scope.where()
    # The PRs of the newest decisions only: the page stays as fast with a year of history.
    newest = tx.all(
        "SELECT d.* FROM pr_gate_decisions AS d JOIN (SELECT MAX(id) AS id FROM (SELECT id,"
        f" forge, repo, number FROM pr_gate_decisions WHERE number IS NOT NULL AND {cond}"
        " ORDER BY id DESC LIMIT ?) AS recent GROUP BY forge, repo, number) AS m ON d.id = m.id"
        " ORDER BY d.id DESC LIMIT ?",
        [*params, limit * PULL_WINDOW, limit],
    )
    out: list[PullRow] = []
    for row in newest:
        gate = DecisionRecord.from_row(row)
        assert gate.forge is not None and gate.repo is not None and gate.number is not None
        key = (gate.forge, gate.repo, gate.number)
        verdict = tx.one(
            "SELECT decision, reason_code, head_sha FROM review_decisions "
            "WHERE forge = ? AND repo = ? AND number = ? "
            "AND decision NOT IN ('posted', 'missing_reported') ORDER BY id DESC LIMIT 1",
            key,
        )
        merged = tx.one(
            "SELECT 1 FROM merged_pulls WHERE forge = ? AND repo = ? AND number = ?", key
        )
        out.append(
            PullRow(
                forge=gate.forge,
                repo=gate.repo,
                display=display.get((gate.forge, gate.repo), gate.repo),
                number=gate.number,
                head_sha=gate.head_sha,
                gate=gate.decision,
                gate_reasons=tuple(r.code for r in gate.reasons),
                gate_at=gate.decided_at,
                verdict=None if verdict is None else str(verdict["decision"]),
                verdict_reason=None if verdict is None else str(verdict["reason_code"]),
                verdict_head=None if verdict is None else str(verdict["head_sha"]),
                merged=merged is not None,
            )
        )
    return out


def _leases(tx: Tx, scope: Scope, now: float, limit: int) -> list[LeaseRow]:
    cond, params = scope.where()
    rows = tx.all(
        f"SELECT * FROM leases WHERE phase = 'claimed' AND expires_at > ? AND {cond} "
        "ORDER BY expires_at LIMIT ?",
        [now, *params, limit],
    )
    return [
        LeaseRow(
            r["forge"],
            r["repo"],
            int(r["number"]),
            r["role"],
            r["holder"],
            int(r["epoch"]),
            r["head_sha"],
            float(r["expires_at"]),
        )
        for r in rows
    ]


def _merges(tx: Tx, scope: Scope, limit: int) -> list[MergeRow]:
    cond, params = scope.where()
    rows = tx.all(
        f"SELECT * FROM merge_attempts WHERE {cond} ORDER BY id DESC LIMIT ?", [*params, limit]
    )
    return [
        MergeRow(
            r["forge"],
            r["repo"],
            int(r["number"]),
            r["head_sha"],
            r["status"],
            tuple(c for c in str(r["codes"]).split(",") if c),
            r["detail"],
            r["method"],
            r["holder"],
            int(r["epoch"]),
            float(r["started_at"]),
        )
        for r in rows
    ]


def _runs(tx: Tx, scope: Scope, limit: int) -> list[RunRow]:
    cond, params = scope.where()
    rows = tx.all(
        f"SELECT * FROM review_reviewer_runs WHERE {cond} ORDER BY ran_at DESC LIMIT ?",
        [*params, limit],
    )
    return [
        RunRow(
            r["forge"],
            r["repo"],
            int(r["number"]),
            r["head_sha"],
            int(r["round"]),
            r["run_id"],
            len(json.loads(r["findings"] or "[]")),
            float(r["ran_at"]),
        )
        for r in rows
    ]
