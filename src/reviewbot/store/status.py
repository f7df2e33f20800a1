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

from reviewbot.core.lease_history import HistoryEntry
from reviewbot.store import lease_history
from reviewbot.store.database import Database, Tx
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision

# Rows per list: a page a person reads, not an export.
LIMIT = 50
PULL_WINDOW = 40  # the pull list is built from the newest LIMIT * PULL_WINDOW decisions
# Review rows that note how a verdict was handled, not what it is: never a PR's verdict.
NOT_VERDICTS = ("posted", "missing_reported", "reopened", "superseded", "lease_held")


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
    gate_details: tuple[str, ...] = ()  # each gate reason's detail, beside gate_reasons
    verdict_detail: str = ""
    verdict_at: float | None = None
    failed: tuple[str, ...] = ()  # the verdict's required checks by state
    missing: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    merged_head: str | None = None  # the recorded merge: at which head, as which commit
    merge_commit: str | None = None
    merge_method: str | None = None


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
    merge_commit: str | None = None  # the forge's merge commit, for the attempt that merged


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


# What one stage recorded: a gate decision, a review verdict (or posting), a merge attempt
# or a lease event.
StageRecord = DecisionRecord | ReviewDecision | MergeRow | HistoryEntry


@dataclass(frozen=True)
class CarRow:
    """A merge-queue car in flight: the PRs it adds, its status and tested commit."""

    car: int
    batch: tuple[int, ...]
    status: str
    tested_sha: str | None
    since: float


@dataclass(frozen=True)
class TrainRow:
    """One train of a base branch's merge queue: its PRs in admission order (hotfixes
    first) and its cars in flight, oldest first."""

    forge: str
    repo: str
    base: str
    train: str
    queued: tuple[int, ...]
    cars: tuple[CarRow, ...]


@dataclass(frozen=True)
class Activity:
    """One row of the page's timeline of every stage, newest first."""

    stage: str  # gate, review, merge, lease
    at: float
    forge: str | None
    repo: str | None
    number: int | None
    record: StageRecord


@dataclass(frozen=True)
class StatusSnapshot:
    queue: QueueState
    decisions: list[DecisionRecord] = field(default_factory=list)
    pulls: list[PullRow] = field(default_factory=list)
    leases: list[LeaseRow] = field(default_factory=list)
    merges: list[MergeRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    display: dict[tuple[str, str], str] = field(default_factory=dict)
    activity: list[Activity] = field(default_factory=list)
    trains: list[TrainRow] = field(default_factory=list)

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
        gates = [DecisionRecord.from_row(r) for r in decision_rows]
        merges = _merges(tx, scope, limit)
        return StatusSnapshot(
            queue=_queue(tx, scope),
            decisions=gates,
            pulls=_pulls(tx, scope, limit, display),
            leases=_leases(tx, scope, now, limit),
            merges=merges,
            runs=_runs(tx, scope, limit),
            display=display,
            activity=_activity(tx, scope, limit, gates, merges),
            trains=_trains(tx, scope, limit),
        )


def _trains(tx: Tx, scope: Scope, limit: int) -> list[TrainRow]:
    """The merge queues' trains with a queued PR or a car in flight (at most ``limit``)."""
    cond, params = scope.where()
    entries = tx.all(
        f"SELECT forge, repo, base, train, number, priority FROM queue_entries WHERE {cond}"
        " AND state = 'queued' ORDER BY id",
        params,
    )
    cars = tx.all(
        f"SELECT forge, repo, base, train, car, batch, status, tested_sha, created_at"
        f" FROM queue_cars WHERE {cond} AND status IN ('building', 'testing', 'green')"
        " ORDER BY id",
        params,
    )
    queued: dict[tuple[str, str, str, str], list[tuple[bool, int]]] = {}
    for r in entries:
        key = (str(r["forge"]), str(r["repo"]), str(r["base"]), str(r["train"]))
        queued.setdefault(key, []).append((not r["priority"], int(r["number"])))
    flying: dict[tuple[str, str, str, str], list[CarRow]] = {}
    for r in cars:
        key = (str(r["forge"]), str(r["repo"]), str(r["base"]), str(r["train"]))
        flying.setdefault(key, []).append(
            CarRow(
                int(r["car"]),
                tuple(int(n) for n in json.loads(r["batch"])),
                str(r["status"]),
                r["tested_sha"],
                float(r["created_at"]),
            )
        )
    keys = sorted(set(queued) | set(flying))[:limit]
    return [
        TrainRow(
            *key,
            queued=tuple(n for _, n in sorted(queued.get(key, []), key=lambda x: x[0])),
            cars=tuple(flying.get(key, [])),
        )
        for key in keys
    ]


def _activity(
    tx: Tx, scope: Scope, limit: int, gates: list[DecisionRecord], merges: list[MergeRow]
) -> list[Activity]:
    """The newest ``limit`` records of every stage, merged by time."""
    cond, params = scope.where()
    reviews = [
        ReviewDecision.from_row(r)
        for r in tx.all(
            f"SELECT * FROM review_decisions WHERE {cond} ORDER BY id DESC LIMIT ?",
            [*params, limit],
        )
    ]
    leases = lease_history.recent(tx, cond, params, limit)
    rows = [
        *(Activity("gate", d.decided_at, d.forge, d.repo, d.number, d) for d in gates),
        *(Activity("review", r.decided_at, r.forge, r.repo, r.number, r) for r in reviews),
        *(Activity("merge", m.started_at, m.forge, m.repo, m.number, m) for m in merges),
        *(Activity("lease", e.at, *_pull_of(e), e) for e in leases),
    ]
    # Stable: records of one moment keep their stage order (a gate before its review).
    rows.sort(key=lambda a: a.at, reverse=True)
    return rows[:limit]


def _pull_of(entry: HistoryEntry) -> tuple[str, str, int]:
    return entry.target.forge, entry.target.repo, entry.target.number


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
        marks = ", ".join("?" for _ in NOT_VERDICTS)
        newest_verdict = tx.one(
            "SELECT * FROM review_decisions WHERE forge = ? AND repo = ? AND number = ? "
            f"AND decision NOT IN ({marks}) ORDER BY id DESC LIMIT 1",
            [*key, *NOT_VERDICTS],
        )
        verdict = None if newest_verdict is None else ReviewDecision.from_row(newest_verdict)
        merged = tx.one(
            "SELECT head_sha, merge_commit_sha, method FROM merged_pulls "
            "WHERE forge = ? AND repo = ? AND number = ?",
            key,
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
                verdict=None if verdict is None else verdict.decision,
                verdict_reason=None if verdict is None else verdict.reason_code,
                verdict_head=None if verdict is None else verdict.head_sha,
                merged=merged is not None,
                gate_details=tuple(r.detail for r in gate.reasons),
                verdict_detail="" if verdict is None else verdict.detail,
                verdict_at=None if verdict is None else verdict.decided_at,
                failed=() if verdict is None else verdict.failed,
                missing=() if verdict is None else verdict.missing,
                pending=() if verdict is None else verdict.pending,
                merged_head=None if merged is None else str(merged["head_sha"]),
                merge_commit=None if merged is None else merged["merge_commit_sha"],
                merge_method=None if merged is None else str(merged["method"]),
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
    cond, params = scope.where("a.")
    # The merge commit is the merged PR's, named on the attempt that merged at its head.
    rows = tx.all(
        "SELECT a.*, m.merge_commit_sha FROM merge_attempts AS a LEFT JOIN merged_pulls AS m"
        " ON a.status = 'merged' AND m.forge = a.forge AND m.repo = a.repo"
        " AND m.number = a.number AND m.head_sha = a.head_sha"
        f" WHERE {cond} ORDER BY a.id DESC LIMIT ?",
        [*params, limit],
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
            r["merge_commit_sha"],
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
