"""The after-merge action records on both stores: an action is claimed once per (PR, kind,
target), however many processes finish the same merge, and its result is kept."""

from __future__ import annotations

from dataclasses import replace

from reviewbot.store import after_merge
from reviewbot.store.after_merge import ActionRow
from reviewbot.store.database import Database

ROW = ActionRow("gitea", "acme/api", 7, "a" * 40, "close_issue", "#3", "sending", "", 100.0)


def test_an_action_is_claimed_once_and_its_result_kept(db: Database) -> None:
    assert after_merge.claim(db, ROW) is True
    assert after_merge.claim(db, replace(ROW, at=101.0)) is False  # another process, later
    assert after_merge.claim(db, replace(ROW, target="#4")) is True
    after_merge.finish(db, replace(ROW, result="done", detail="closed", at=102.0))
    rows = after_merge.for_pull(db, "gitea", "acme/api", 7)
    assert [(r.target, r.result, r.detail, r.at) for r in rows] == [
        ("#3", "done", "closed", 102.0),
        ("#4", "sending", "", 100.0),
    ]
    assert after_merge.for_pull(db, "gitea", "acme/api", 8) == []
