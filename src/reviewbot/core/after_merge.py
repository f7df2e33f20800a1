"""What the bot may do to a pull request's surroundings once it is merged (pure).

Two actions, each off unless the repository's rules turn it on
(``delete_head_branch_after_merge``, ``close_linked_issues_after_merge``):

- **delete the head branch**, only when the head branch lives in the base repository (never
  a fork's: the bot has no business there), is not the base branch itself nor the
  repository's default branch, and still points at the merged head (a branch that moved
  after the merge carries someone's new work);
- **close the issues the pull request says it closes**: the closing keywords GitHub
  documents ("Linking a pull request to an issue using a keyword",
  https://docs.github.com/en/issues/tracking-your-work-with-issues/using-issues/linking-a-pull-request-to-an-issue:
  ``close``, ``closes``, ``closed``, ``fix``, ``fixes``, ``fixed``, ``resolve``,
  ``resolves``, ``resolved``, any casing, an optional colon, then ``#N`` or
  ``OWNER/REPO#N``), which are also Gitea's default ``CLOSE_KEYWORDS``
  (modules/references/references.go). Only issues of the pull request's own repository
  are closed: a body naming another repository's issue reaches nothing.

:func:`linked_issues` reads the body; :func:`plan` decides each action and why; the runtime
(:mod:`reviewbot.runtime.merge.after_merge`) carries them out and records each result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from reviewbot.core.models import PullRequestSnapshot

CLOSING_KEYWORDS = (
    "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
)  # fmt: skip
MAX_LINKED = 20  # a body naming more is cut to the first this many: one merge, bounded work
_REF = re.compile(
    r"(?<![\w/.-])(?:" + "|".join(CLOSING_KEYWORDS) + r")\b:?[ \t]*"
    r"(?:(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+))?#(?P<number>[0-9]{1,18})\b",
    re.IGNORECASE,
)


def linked_issues(body: str, owner: str, name: str) -> tuple[int, ...]:
    """The issue numbers of ``owner/name`` that ``body`` says the pull request closes, in
    the order first named, each once (at most :data:`MAX_LINKED`)."""
    found: dict[int, None] = {}
    for m in _REF.finditer(body[:65536]):
        if m["owner"] is not None and (
            m["owner"].lower() != owner.lower() or m["name"].lower() != name.lower()
        ):
            continue
        number = int(m["number"])
        if number > 0:
            found.setdefault(number, None)
        if len(found) >= MAX_LINKED:
            break
    return tuple(found)


class Closing(StrEnum):
    """What closing an issue found (a forge adapter's answer)."""

    CLOSED = "closed"
    ALREADY_CLOSED = "already_closed"
    NOT_AN_ISSUE = "not_an_issue"  # the number is a pull request: never closed this way


class Kind(StrEnum):
    DELETE_HEAD_BRANCH = "delete_head_branch"
    CLOSE_ISSUE = "close_issue"


class Result(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True)
class Action:
    kind: Kind
    target: str  # the branch name, or the issue as "#N"
    go: bool  # False: skipped, and ``why`` says why
    why: str = ""


@dataclass(frozen=True)
class Rules:
    delete_head_branch: bool = False
    close_linked_issues: bool = False


def plan(
    pull: PullRequestSnapshot, merged_head: str, rules: Rules, branch_sha: str | None
) -> tuple[Action, ...]:
    """The after-merge actions for ``pull``, merged at ``merged_head``: each that its rule
    turns on, told to go or skipped with the reason (see the module docstring).
    ``branch_sha``: where the head branch points now (``None``: gone, or not read)."""
    out: list[Action] = []
    if rules.delete_head_branch:
        out.append(_branch_action(pull, merged_head, branch_sha))
    if rules.close_linked_issues:
        for number in linked_issues(pull.body, pull.owner, pull.name):
            out.append(Action(Kind.CLOSE_ISSUE, f"#{number}", True))
    return tuple(out)


def _branch_action(pull: PullRequestSnapshot, merged_head: str, branch_sha: str | None) -> Action:
    ref = pull.head_ref

    def skip(why: str) -> Action:
        return Action(Kind.DELETE_HEAD_BRANCH, ref, False, why)

    if not pull.merged:
        return skip("the pull request is not merged")
    if pull.head_repo is None:
        return skip("the forge did not say which repository the head branch is in")
    if pull.head_repo.lower() != f"{pull.owner}/{pull.name}".lower():
        return skip(f"the head branch is in the fork {pull.head_repo}, not the repository")
    if pull.default_branch is None:
        return skip("the forge did not say which branch is the repository's default")
    if ref in (pull.base_ref, pull.default_branch):
        return skip(f"{ref} is the base or the default branch")
    if branch_sha is None:
        return skip("the head branch is gone already")
    if branch_sha.lower() != merged_head.lower():
        return skip(f"the head branch moved to {branch_sha} after the merge at {merged_head}")
    return Action(Kind.DELETE_HEAD_BRANCH, ref, True)
