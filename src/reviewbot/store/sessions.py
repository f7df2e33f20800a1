"""The record of session-scoped tool calls: who called, whose registry answered, the outcome.

Session tokens themselves are not stored here: they live (as hashes) in the memory of the
process whose registries they unlock, and die with the run. What outlives the run is this
record, so "which session made this write" has an answer afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from reviewbot.store.database import Database, Row, row_as

MAX_DETAIL_CHARS = 500


@dataclass(frozen=True)
class ToolCallRecord:
    id: int
    session_id: str
    owner_session_id: str | None
    run_id: str
    tool: str
    outcome: str  # "ok" or the refusal's error code
    detail: str
    called_at: float  # seconds since the epoch

    @classmethod
    def from_row(cls, row: Row) -> ToolCallRecord:
        return row_as(cls, row, called_at=lambda r: float(r["called_at"]))


def record_tool_call(
    db: Database,
    *,
    session_id: str,
    owner_session_id: str | None,
    run_id: str,
    tool: str,
    outcome: str,
    detail: str,
    called_at: float,
) -> int:
    with db.write() as tx:
        cur = tx.execute(
            "INSERT INTO session_tool_calls (session_id, owner_session_id, run_id, tool, "
            "outcome, detail, called_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                session_id,
                owner_session_id,
                run_id,
                tool,
                outcome,
                detail[:MAX_DETAIL_CHARS],
                called_at,
            ),
        )
        row = cur.fetchone()
        return 0 if row is None else int(row["id"])


def tool_calls(
    db: Database, *, session_id: str | None = None, run_id: str | None = None
) -> list[ToolCallRecord]:
    """Recorded calls, oldest first, of one session and/or one run (all when neither)."""
    sql = "SELECT * FROM session_tool_calls"
    where: list[str] = []
    params: list[str] = []
    if session_id is not None:
        where.append("session_id = ?")
        params.append(session_id)
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if where:
        sql += " WHERE " + " AND ".join(where)
    with db.read() as tx:
        rows = tx.all(sql + " ORDER BY id", params)
    return [ToolCallRecord.from_row(r) for r in rows]


def prune_tool_calls(db: Database, before: float, *, limit: int) -> int:
    """Delete up to ``limit`` of the oldest audit rows of tool calls made before ``before``;
    the number deleted. Rows are taken in id order (the order they were written), so no
    index on the time is needed and a call never scans the table."""
    with db.write() as tx:
        rows = tx.all("SELECT id, called_at FROM session_tool_calls ORDER BY id LIMIT ?", (limit,))
        ids = []
        for row in rows:
            if float(row["called_at"]) >= before:
                break
            ids.append(int(row["id"]))
        if ids:
            marks = ", ".join("?" for _ in ids)
            tx.execute(f"DELETE FROM session_tool_calls WHERE id IN ({marks})", ids)
    return len(ids)
