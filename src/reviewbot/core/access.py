"""What the bot needs on a repository, against what its credentials hold there (pure).

``reviewbot doctor`` reads the facts (a GitHub App installation's granted permissions, the
``permissions`` object a forge shows a token's account, a Gitea/Forgejo server's version)
and asks :func:`access_lines` which needs are met, each with what fails without it and where
to grant it. The needs follow docs/github-app.md and docs/gitea.md, which name the official
source of each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
# GitHub's repository permissions as its App settings title them (docs/github-app.md): one
# vocabulary for doctor's lines and for the refusals that name what GitHub asked for.
GITHUB_PERMISSIONS: dict[str, str] = {
    "administration": "Administration",
    "checks": "Checks",
    "contents": "Contents",
    "issues": "Issues",
    "metadata": "Metadata",
    "pull_requests": "Pull requests",
    "statuses": "Commit statuses",
    "workflows": "Workflows",
}
GITHUB_APP_FIX = (
    "GitHub: the App's settings > Permissions & events > Repository permissions, then accept "
    "the new permissions on each installation (docs/github-app.md#permissions)"
)
GITHUB_ACCOUNT_FIX = (
    "GitHub: the repository's Settings > Collaborators and teams (docs/github-app.md)"
)
GITEA_FIX = (
    "Gitea/Forgejo: the repository's Settings > Collaborators (docs/gitea.md#the-bot-account)"
)
STATUS_WEBHOOK_GITEA = (1, 23)  # Gitea added the commit-status webhook in 1.23.0


@dataclass(frozen=True)
class AccessFacts:
    """What a forge showed of the bot's access to one repository.

    ``granted``: a GitHub App installation's repository permissions. ``shown``: the
    ``permissions`` object of ``GET /repos/{o}/{r}`` for a token's account (``admin``,
    ``push``, ``pull``). ``version``: a Gitea/Forgejo server's ``/version``.
    """

    forge: str
    repo: str
    credential: str  # "app" or "token"
    granted: Mapping[str, str] | None = None
    shown: Mapping[str, bool] | None = None
    version: str | None = None


@dataclass(frozen=True)
class AccessLine:
    permission: str  # as the forge's settings name it
    used_for: str  # what fails without it
    ok: bool | None  # None: the forge does not show it
    required: bool  # False: only some features need it
    fix: str  # where to grant it


# (key, level, what needs it): each always required
_GITHUB_APP: tuple[tuple[str, str, str], ...] = (
    ("metadata", "read", "every read of the repository (and its rulesets)"),
    (
        "pull_requests",
        "write",
        "reading pull requests and reviews, submitting reviews, the PR state comment",
    ),
    ("checks", "read", "check runs of the head commit"),
    ("statuses", "read", "commit statuses of the head commit"),
    ("contents", "read", "the base branch's classic protection (its required checks)"),
)


def _titled(key: str, level: str) -> str:
    return f"{GITHUB_PERMISSIONS[key]} ({'read and write' if level == 'write' else 'read'})"


def _level(granted: Mapping[str, str], key: str) -> int:
    return LEVELS.get(granted.get(key, "none"), 0)


def access_lines(
    facts: AccessFacts,
    *,
    merges: bool,
    deletes_branches: bool = False,
    closes_issues: bool = False,
) -> list[AccessLine]:
    """Every need of the bot on ``facts.repo``; ``merges``: the repository merges through
    the bot (automerge), so the merge permission is required rather than optional;
    ``deletes_branches`` and ``closes_issues``: its after-merge rules
    (``delete_head_branch_after_merge``, ``close_linked_issues_after_merge``) are on, so
    what they write with is required too."""
    after_merge = [
        *(["deleting the head branch after a merge"] if deletes_branches else []),
        *(["closing linked issues after a merge"] if closes_issues else []),
    ]
    if facts.forge == "github" and facts.credential == "app":
        granted = facts.granted

        def holds(key: str, level: str) -> bool | None:
            # Grants the forge did not report are unknown, never "nothing".
            return None if granted is None else _level(granted, key) >= LEVELS[level]

        lines = [
            AccessLine(_titled(key, level), used, holds(key, level), True, GITHUB_APP_FIX)
            for key, level, used in _GITHUB_APP
        ]
        lines.append(
            AccessLine(
                _titled("contents", "write"),
                "merges (automerge, reviewbot merge, merge_pr)"
                + ("; deleting the head branch after a merge" if deletes_branches else ""),
                holds("contents", "write"),
                merges or deletes_branches,
                GITHUB_APP_FIX,
            )
        )
        if closes_issues:
            # "Update an issue" names Issues (write)
            # (https://docs.github.com/en/rest/issues/issues#update-an-issue).
            lines.append(
                AccessLine(
                    _titled("issues", "write"),
                    "closing linked issues after a merge (close_linked_issues_after_merge)",
                    holds("issues", "write"),
                    True,
                    GITHUB_APP_FIX,
                )
            )
        lines.append(
            AccessLine(
                _titled("workflows", "write"),
                "merging a pull request that changes .github/workflows/",
                holds("workflows", "write"),
                False,
                GITHUB_APP_FIX,
            )
        )
        return lines
    shown = facts.shown or {}
    fix = GITHUB_ACCOUNT_FIX if facts.forge == "github" else GITEA_FIX

    def has(key: str) -> bool | None:
        value = shown.get(key)
        return value if isinstance(value, bool) else None

    lines = [
        AccessLine(
            "Read",
            "reading pull requests, branches, checks; submitting reviews and the state comment",
            has("pull"),
            True,
            fix,
        ),
        AccessLine(
            "Write",
            "merges (automerge, reviewbot merge, merge_pr)"
            + ("" if facts.forge == "github" else "; also a place on a merge whitelist")
            + "".join(f"; {use}" for use in after_merge),
            has("push"),
            merges or bool(after_merge),
            fix,
        ),
    ]
    if facts.forge != "github":
        lines.append(
            AccessLine(
                "Admin",
                "`/reviewbot review` comments: Gitea shows another user's permission to "
                "repository admins only, so without it such a command is refused "
                "(permission_denied)",
                has("admin"),
                False,
                fix,
            )
        )
    return lines


def version_notes(version: str, reconcile_interval_s: float) -> list[str]:
    """What a Gitea/Forgejo server of ``version`` lacks that the bot uses."""
    late = (
        "a green CI is noticed by the reconcile sweep instead, up to "
        f"reconcile_interval_s = {reconcile_interval_s:g} s later"
    )
    if "+gitea" in version.lower() or "forgejo" in version.lower():
        return [f"Forgejo {version} sends no commit-status webhook: {late}"]
    found = re.match(r"v?(\d+)\.(\d+)", version.strip())
    if found is None:
        return [f"version {version!r} not recognised: cannot tell what it lacks"]
    if (int(found[1]), int(found[2])) < STATUS_WEBHOOK_GITEA:
        return [f"Gitea {version} sends no commit-status webhook (added in 1.23): {late}"]
    return []
