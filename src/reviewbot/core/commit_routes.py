"""Which listeners hear of a commit event: a part's interest in a SHA or a branch pattern.

A part of the bot that tests commits belonging to no pull request (a merge queue's
``reviewbot/queue/main/3``) registers interest in a commit SHA or in a branch pattern of one
repository. A status, check or push event on such a commit is then routed to it instead of
ending as ``no_open_pull_requests``. This module is the decision alone, over plain data: the
registry that keeps registrations and calls listeners is in the runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from reviewbot.core.leases import check_full_sha
from reviewbot.core.models import FORGES, repo_key

BRANCH_PREFIX = "refs/heads/"


@dataclass(frozen=True)
class Registration:
    """One listener's interest in one commit SHA or one branch pattern of one repository.

    ``branch`` is an fnmatch pattern over branch names (``reviewbot/queue/*``; ``*`` also
    crosses ``/``), compared case-sensitively as git compares branch names.
    """

    id: int
    listener: str
    forge: str
    repo: str  # canonical OWNER/NAME
    sha: str | None = None
    branch: str | None = None

    def __post_init__(self) -> None:
        if self.forge not in FORGES:
            raise ValueError(f"unknown forge {self.forge!r}; expected one of {', '.join(FORGES)}")
        if not self.listener.strip():
            raise ValueError("a registration names its listener")
        if (self.sha is None) == (self.branch is None):
            raise ValueError("a registration names exactly one of a SHA and a branch pattern")
        object.__setattr__(self, "repo", repo_key(self.repo))
        if self.sha is not None:
            try:
                object.__setattr__(self, "sha", check_full_sha(self.sha).lower())
            except ValueError:
                shown = self.sha[:80]
                raise ValueError(
                    f"sha must be a full commit SHA (40 or 64 hex digits), not {shown!r}"
                ) from None
        if self.branch is not None:
            pattern = branch_name(self.branch)
            if not pattern:
                raise ValueError("a branch pattern must not be empty")
            object.__setattr__(self, "branch", pattern)

    def describe(self) -> str:
        what = f"sha {self.sha[:12]}" if self.sha is not None else f"branch {self.branch}"
        return f"{self.listener} ({self.forge}:{self.repo} {what})"


@dataclass(frozen=True)
class CommitEvent:
    """What a status, check or push event says of one commit, for matching."""

    forge: str
    repo: str  # canonical OWNER/NAME
    sha: str | None
    branches: tuple[str, ...] = ()  # branches at that commit, as the event names them


def branch_name(ref: str) -> str:
    """A branch name from a ref or a name (``refs/heads/x`` and ``x`` are both ``x``)."""
    return ref.removeprefix(BRANCH_PREFIX).strip()


def matches(registration: Registration, event: CommitEvent) -> bool:
    if registration.forge != event.forge or registration.repo != event.repo.casefold():
        return False
    if registration.sha is not None:
        return event.sha is not None and event.sha.lower() == registration.sha
    pattern = registration.branch or ""
    return any(fnmatchcase(branch_name(b), pattern) for b in event.branches)


def matching(registrations: Iterable[Registration], event: CommitEvent) -> tuple[Registration, ...]:
    """The registrations that want ``event``, in registration order (oldest first)."""
    return tuple(sorted((r for r in registrations if matches(r, event)), key=lambda r: r.id))


def listener_names(found: Iterable[Registration]) -> tuple[str, ...]:
    """Each listener once, in the order found (one listener may match by SHA and branch)."""
    return tuple(dict.fromkeys(r.listener for r in found))


def polled_commits(registrations: Iterable[Registration]) -> tuple[tuple[str, str, str], ...]:
    """The ``(forge, repo, sha)`` a poll reads, each once: only SHA registrations name a
    commit (a branch pattern names none until an event does)."""
    found = {(r.forge, r.repo, r.sha) for r in registrations if r.sha is not None}
    return tuple(sorted((f, repo, sha) for f, repo, sha in found if sha is not None))


@dataclass(frozen=True)
class CommitResult:
    """One check report of one commit, as a listener hears it: from a webhook or a poll."""

    context: str  # the status context, the check run's (or suite's app's) name
    state: str  # a CheckState value: both paths name states alike, so they deduplicate


def result_key(event: CommitEvent, result: CommitResult) -> tuple[str, str, str, str, str]:
    """What makes two reports the same for a listener: a listener hears each key once."""
    return (event.forge, event.repo, (event.sha or "").lower(), result.context, result.state)
