"""The PR state comment's rows: which comment the bot keeps up to date on each PR (table
``pr_state_comments``), the hash of the body last written, and the delivery it reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reviewbot.core.models import repo_key
from reviewbot.store.database import Database, OnDatabase
from reviewbot.store.reviews import body_sha256


class StateCommentStore(OnDatabase):
    """The state comment of each PR. ``clock`` returns seconds since the epoch."""

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self.db = db
        self.clock = clock

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

    def get(self, forge: str, repo: str, number: int) -> tuple[int, str] | None:
        """(comment id, SHA-256 of the body last written)."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            row = tx.one(
                "SELECT comment_id, body_sha256 FROM pr_state_comments "
                "WHERE forge = ? AND repo = ? AND number = ?",
                (forge, repo, number),
            )
        return None if row is None else (int(row["comment_id"]), str(row["body_sha256"]))

    def save(self, forge: str, repo: str, number: int, comment_id: int, body: str) -> None:
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
