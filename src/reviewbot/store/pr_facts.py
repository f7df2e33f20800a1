"""What the bot has recorded about a pull request, for the watchers of its leases: the head
its deliveries last carried, the checks its latest verdict found failing, and where the
forge's report of mergeability is kept."""

from __future__ import annotations

import json
from dataclasses import dataclass

from reviewbot.store.database import Database


@dataclass(frozen=True)
class RecordedPull:
    head_sha: str | None
    # The PR's latest deliveries, newest first (also those the gate skipped, such as an
    # edit): where a forge event reported the PR's mergeability.
    recent_deliveries: tuple[str, ...]
    failing: tuple[str, ...]  # failed required checks of the latest verdict at that head
    merge_refused: bool  # a merge at that head was refused not_mergeable


def recorded_pull(db: Database, forge: str, repo: str, number: int) -> RecordedPull:
    """The PR as the bot's records show it now (``repo`` is the repository's key)."""
    with db.read() as tx:
        # A stale delivery is decided head_moved with its own (old) head: not the PR's.
        gate = tx.one(
            "SELECT head_sha FROM pr_gate_decisions WHERE forge = ? AND repo = ? "
            "AND number = ? AND head_sha IS NOT NULL AND reason_code != 'head_moved' "
            "ORDER BY id DESC LIMIT 1",
            (forge, repo, number),
        )
        head = None if gate is None else str(gate["head_sha"])
        failing: tuple[str, ...] = ()
        refused = False
        if head is not None:
            # The newest policy outcome (as ReviewStore.latest_verdict reads it), not a
            # posting note.
            verdict = tx.one(
                "SELECT decision, failed FROM review_decisions WHERE forge = ? AND repo = ? "
                "AND number = ? AND head_sha = ? AND decision NOT IN ('posted', "
                "'missing_reported', 'superseded') ORDER BY id DESC LIMIT 1",
                (forge, repo, number, head),
            )
            if verdict is not None and verdict["decision"] == "request_changes":
                failing = tuple(str(name) for name in json.loads(verdict["failed"] or "[]"))
            attempt = tx.one(
                "SELECT 1 FROM merge_attempts WHERE forge = ? AND repo = ? AND number = ? "
                "AND head_sha = ? AND (status = 'not_mergeable' OR codes LIKE ?) LIMIT 1",
                (forge, repo, number, head, "%not_mergeable%"),
            )
            refused = attempt is not None
        recent = tx.all(
            "SELECT delivery_id FROM pr_gate_decisions WHERE forge = ? AND repo = ? AND "
            "number = ? ORDER BY id DESC LIMIT 5",
            (forge, repo, number),
        )
    return RecordedPull(head, tuple(str(r["delivery_id"]) for r in recent), failing, refused)
