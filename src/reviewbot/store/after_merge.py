"""The after-merge actions the bot took or skipped, one row each (``explain`` shows them).

A row is claimed before its action is sent (:func:`claim`, result ``sending``) and finished
with the forge's answer (:func:`finish`): two processes finishing the same merge never both
delete a branch or close an issue, and a process that stopped in between leaves a row that
says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.store.database import Database, rows_as

SENDING = "sending"


@dataclass(frozen=True)
class ActionRow:
    forge: str
    repo: str
    number: int
    head_sha: str
    kind: str
    target: str
    result: str
    detail: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "result": self.result,
            "detail": self.detail,
            "head_sha": self.head_sha,
            "at": iso(self.at, timespec="microseconds"),
        }

    def line(self) -> str:
        why = f": {self.detail}" if self.detail else ""
        return f"{iso(self.at)} {self.kind} {self.target} {self.result}{why}"


def claim(db: Database, row: ActionRow) -> bool:
    """Record ``row``; False when its (PR, kind, target) has a row already (tried before)."""
    with db.write() as tx:
        # ON CONFLICT: two processes finishing the same merge at once never both send it.
        added = tx.execute(
            "INSERT INTO after_merge_actions"
            " (forge, repo, number, head_sha, kind, target, result, detail, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (forge, repo, number, kind, target) DO NOTHING",
            (
                row.forge,
                row.repo,
                row.number,
                row.head_sha,
                row.kind,
                row.target,
                row.result,
                row.detail,
                row.at,
            ),
        )
        return bool(added.rowcount == 1)


def finish(db: Database, row: ActionRow) -> None:
    """The result of a claimed action."""
    with db.write() as tx:
        tx.execute(
            "UPDATE after_merge_actions SET result = ?, detail = ?, at = ?"
            " WHERE forge = ? AND repo = ? AND number = ? AND kind = ? AND target = ?",
            (row.result, row.detail, row.at, row.forge, row.repo, row.number, row.kind, row.target),
        )


def for_pull(db: Database, forge: str, repo: str, number: int) -> list[ActionRow]:
    """The PR's after-merge actions, oldest first."""
    with db.read() as tx:
        rows = tx.all(
            "SELECT forge, repo, number, head_sha, kind, target, result, detail, at"
            " FROM after_merge_actions WHERE forge = ? AND repo = ? AND number = ? ORDER BY id",
            (forge, repo, number),
        )
    return rows_as(ActionRow, rows)
