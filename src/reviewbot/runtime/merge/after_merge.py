"""Carrying out the after-merge actions a repository's rules turn on, each recorded.

:class:`AfterMerge` runs once the merger has confirmed a merge (the merge path, its
re-verification, and an earlier attempt found merged). It plans with
:func:`reviewbot.core.after_merge.plan`, claims each action in the store before sending it
(so an action is tried once however many processes finish the same merge), and records the
forge's answer: ``done``, ``skipped`` with why, or ``failed`` with the forge's error. A
failure never undoes or fails the merge.

The head branch is read right before it is deleted: a branch that moved since the merge is
left alone. Between that read and the delete the forge offers no precondition (neither
GitHub's "Delete a reference" nor Gitea's branch delete takes an expected commit), so a push
in that instant could still be lost with the branch; the window is one request long.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from reviewbot.config import RepoRules, Settings
from reviewbot.core.after_merge import Closing, Kind, Result, Rules, plan
from reviewbot.core.clock import Clock
from reviewbot.core.models import PullRequestSnapshot, RepoRef
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.store import after_merge as rows
from reviewbot.store.after_merge import ActionRow
from reviewbot.store.database import Database

log = logging.getLogger(__name__)

_CLOSING_WHY = {
    Closing.ALREADY_CLOSED: "the issue was closed already",
    Closing.NOT_AN_ISSUE: "it is a pull request, not an issue: left as it is",
}


class AfterMerge:
    def __init__(
        self, settings: Settings, forges: Mapping[str, Forge], db: Database, clock: Clock
    ) -> None:
        self.settings = settings
        self.forges = forges
        self.db = db
        self.clock = clock

    def rules_for(self, forge: str, repo: str) -> Rules:
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge)) or RepoRules()
        return Rules(rules.delete_head_branch_after_merge, rules.close_linked_issues_after_merge)

    async def __call__(
        self, forge_name: str, repo: str, number: int, pull: PullRequestSnapshot, head: str
    ) -> list[ActionRow]:
        """Carry out what the rules turn on for ``pull``, merged at ``head``; the rows
        recorded by this call (an action recorded before is not tried again)."""
        wanted = self.rules_for(forge_name, repo)
        forge = self.forges.get(forge_name)
        if forge is None or not (wanted.delete_head_branch or wanted.close_linked_issues):
            return []
        done: list[ActionRow] = []
        branch_sha: str | None = None
        if wanted.delete_head_branch:
            try:
                branch_sha = await forge.branch_head(repo, pull.head_ref)
            except ForgeError as exc:
                wanted = Rules(False, wanted.close_linked_issues)
                why = f"reading the branch failed: {exc}"
                row = self._row(forge_name, repo, number, head, Kind.DELETE_HEAD_BRANCH,
                                pull.head_ref, Result.FAILED, why)  # fmt: skip
                if await self.db.run(rows.claim, self.db, row):
                    done.append(row)
        for action in plan(pull, head, wanted, branch_sha):
            result = Result.SKIPPED if not action.go else rows.SENDING
            row = self._row(forge_name, repo, number, head, action.kind, action.target,
                            result, action.why)  # fmt: skip
            if not await self.db.run(rows.claim, self.db, row):
                continue  # tried before (another process, or an earlier call)
            if action.go:
                row = await self._send(forge, repo, row)
                await self.db.run(rows.finish, self.db, row)
            log.info(
                "after merge of %s:%s#%s: %s %s %s%s",
                forge_name, repo, number, row.kind, row.target, row.result,
                f" ({row.detail})" if row.detail else "",
            )  # fmt: skip
            done.append(row)
        return done

    async def _send(self, forge: Forge, repo: str, row: ActionRow) -> ActionRow:
        try:
            if row.kind == Kind.DELETE_HEAD_BRANCH:
                await forge.delete_branch(repo, row.target)
                result, why = Result.DONE, "deleted"
            else:
                closing = await forge.close_issue(repo, int(row.target.lstrip("#")))
                result = Result.DONE if closing is Closing.CLOSED else Result.SKIPPED
                why = _CLOSING_WHY.get(closing, "closed")
        except ForgeError as exc:
            result, why = Result.FAILED, str(exc)
        return replace(row, result=result.value, detail=why, at=self.clock())

    def _row(
        self,
        forge: str,
        repo: str,
        number: int,
        head: str,
        kind: Kind,
        target: str,
        result: str,
        detail: str,
    ) -> ActionRow:
        return ActionRow(forge, repo, number, head, kind.value, target, str(result), detail,
                         self.clock())  # fmt: skip
