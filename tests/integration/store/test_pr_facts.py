"""What a PR watcher reads from the store, on each store kind: the head the PR's deliveries
last carried (never a stale delivery's), the failing checks of the latest verdict at that
head (not a posting note), and a merge refused not_mergeable there."""

from __future__ import annotations

from reviewbot.store.database import Database
from reviewbot.store.pr_facts import recorded_pull

A, B = "a" * 40, "b" * 40
PR = ("gitea", "acme/api", 7)


def gate(db: Database, delivery: str, head: str | None, reason: str = "eligible") -> None:
    with db.write() as tx:
        tx.execute(
            "INSERT INTO pr_gate_decisions (delivery_id, source, forge, repo, number, head_sha, "
            "decision, reason_code, decided_at) "
            "VALUES (?, 'gitea', ?, ?, ?, ?, 'eligible', ?, 1.0)",
            (delivery, *PR, head, reason),
        )


def verdict(db: Database, head: str, decision: str, failed: str = "[]") -> None:
    with db.write() as tx:
        tx.execute(
            "INSERT INTO review_decisions (forge, repo, number, head_sha, decision, reason_code, "
            "failed, decided_at) VALUES (?, ?, ?, ?, ?, 'x', ?, 1.0)",
            (*PR, head, decision, failed),
        )


def test_the_recorded_pull_on_each_store(db: Database) -> None:
    assert recorded_pull(db, *PR).head_sha is None
    gate(db, "d1", A)
    gate(db, "d2", B)
    gate(db, "d3", A, reason="head_moved")  # a stale delivery names the old head
    gate(db, "d4", None, reason="action_ignored")
    verdict(db, B, "request_changes", '["ci/test"]')
    verdict(db, B, "posted")  # a posting note is not a verdict
    pull = recorded_pull(db, *PR)
    assert (pull.head_sha, pull.failing, pull.merge_refused) == (B, ("ci/test",), False)
    assert pull.recent_deliveries[:2] == ("d4", "d3")
    with db.write() as tx:
        tx.execute(
            "INSERT INTO merge_attempts (forge, repo, number, head_sha, holder, epoch, method, "
            "status, codes, started_at) VALUES (?, ?, ?, ?, 'w', 1, 'merge', 'refused', "
            "'checks_not_green,not_mergeable', 1.0)",
            (*PR, B),
        )
    assert recorded_pull(db, *PR).merge_refused is True
    verdict(db, B, "approve")
    assert recorded_pull(db, *PR).failing == ()
