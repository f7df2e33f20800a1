"""May this caller review or merge this pull request now? The pure answer, with every reason.

:func:`resolve_capability` takes plain facts (the caller's scopes and binding, its worker's
record, the PR as the forge shows it now, its reviews and checks, the lease of the role) and
returns a :class:`Capability`: ``allowed`` and, when not, **every** :class:`Blocker` at once,
each with a stable code and the next action that would clear it. It never reads anything
and never refuses by raising: the caller (the API, the command line, an MCP tool) reads the
facts and shows the answer.

The codes (``docs/capability.md``): ``missing_scope``, ``repo_not_allowed``,
``worker_unproven``, ``not_worker_owner``, ``worker_stale``, ``lease_held``,
``lease_not_held``, ``head_moved``, ``not_approved``, ``self_approval``,
``changes_requested``, ``checks_not_green``, ``protection_unreadable``, ``permission_denied``,
``pr_closed``, ``pr_draft``, ``not_mergeable``, ``author_is_bot``.

A free merger lease is not a blocker: the next action is to acquire it. A refusal names a
lease holder and its expiry, never its epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.core.leases import Lease, WorkerStatus
from reviewbot.core.merge import (
    approvals_short,
    approvers_at,
    checks_refusal,
    requesting_changes,
    same_sha,
    standings,
)
from reviewbot.core.models import (
    CheckResult,
    PullRequestSnapshot,
    RepoRef,
    RequiredChecks,
    Review,
    ReviewState,
)
from reviewbot.core.reasons import ReasonCode


class Action(StrEnum):
    REVIEW = "review"
    MERGE = "merge"


class BlockerCode(StrEnum):
    MISSING_SCOPE = "missing_scope"
    REPO_NOT_ALLOWED = "repo_not_allowed"
    WORKER_UNPROVEN = "worker_unproven"
    NOT_WORKER_OWNER = "not_worker_owner"
    WORKER_STALE = "worker_stale"
    LEASE_HELD = "lease_held"
    LEASE_NOT_HELD = "lease_not_held"
    HEAD_MOVED = "head_moved"
    NOT_APPROVED = "not_approved"
    SELF_APPROVAL = "self_approval"
    CHANGES_REQUESTED = "changes_requested"
    CHECKS_NOT_GREEN = "checks_not_green"
    PROTECTION_UNREADABLE = "protection_unreadable"
    PERMISSION_DENIED = "permission_denied"
    PR_CLOSED = "pr_closed"
    PR_DRAFT = "pr_draft"
    NOT_MERGEABLE = "not_mergeable"
    AUTHOR_IS_BOT = "author_is_bot"


# The scopes each action needs: a merge is made under the merger lease.
NEEDED_SCOPES: dict[Action, tuple[str, ...]] = {
    Action.REVIEW: ("review",),
    Action.MERGE: ("lease", "merge"),
}


@dataclass(frozen=True)
class CallerFacts:
    scopes: frozenset[str]
    binding: str | None = None  # FORGE:OWNER/NAME the token is bound to, if any
    worker: str | None = None  # the worker identity asked about
    worker_status: WorkerStatus | None = None  # None when no worker was named
    worker_owned: bool = True  # False: another caller registered it


@dataclass(frozen=True)
class CapabilityFacts:
    action: Action
    forge: str
    repo: str  # OWNER/NAME (any casing)
    number: int
    caller: CallerFacts
    pull: PullRequestSnapshot
    reviews: Sequence[Review] = ()
    protection: RequiredChecks = field(default_factory=RequiredChecks)
    configured_checks: Sequence[str] = ()
    results: Sequence[CheckResult] = ()
    lease: Lease | None = None  # the role's lease as seen now (its worker's liveness applied)
    bot_login: str | None = None
    now: float = 0.0
    missing_permission: str | None = None  # what the bot's credentials lack to merge, if known


@dataclass(frozen=True)
class Blocker:
    code: BlockerCode
    detail: str
    next_action: str
    holder: str | None = None
    expires_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": self.code.value,
            "detail": self.detail,
            "next_action": self.next_action,
        }
        if self.holder is not None:
            body["holder"] = self.holder
        if self.expires_at is not None:
            body["expires_at"] = iso(self.expires_at)
        return body


@dataclass(frozen=True)
class Capability:
    action: Action
    pr: str  # FORGE:OWNER/REPO#N
    worker: str | None
    head_sha: str
    blockers: tuple[Blocker, ...]
    next_action: str  # what to do now: the first blocker's, or the step that is allowed

    @property
    def allowed(self) -> bool:
        return not self.blockers

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(b.code.value for b in self.blockers)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "pr": self.pr,
            "worker": self.worker,
            "head_sha": self.head_sha,
            "allowed": self.allowed,
            "codes": list(self.codes),
            "blockers": [b.to_json() for b in self.blockers],
            "next_action": self.next_action,
        }


def _bound_elsewhere(binding: str | None, forge: str, repo: str) -> bool:
    if binding is None:
        return False
    try:
        return RepoRef.parse(binding) != RepoRef.parse(repo, forge=forge)
    except ValueError:
        return True  # a binding that names no repository allows none


def _caller_blockers(facts: CapabilityFacts) -> list[Blocker]:
    caller = facts.caller
    out: list[Blocker] = []
    for scope in NEEDED_SCOPES[facts.action]:
        if scope not in caller.scopes:
            out.append(
                Blocker(
                    BlockerCode.MISSING_SCOPE,
                    f"{facts.action.value} needs scope {scope!r}; the token has "
                    f"{', '.join(sorted(caller.scopes)) or 'none'}",
                    f"use a token with scope {scope!r}",
                )
            )
    if _bound_elsewhere(caller.binding, facts.forge, facts.repo):
        out.append(
            Blocker(
                BlockerCode.REPO_NOT_ALLOWED,
                f"the token is bound to {caller.binding}, not {facts.forge}:{facts.repo}",
                "use a token for this repository",
            )
        )
    if caller.worker is None:
        return out
    if caller.worker_status is WorkerStatus.UNPROVEN:
        out.append(
            Blocker(
                BlockerCode.WORKER_UNPROVEN,
                f"no worker {caller.worker} is registered",
                "register a worker (POST /api/v1/workers) and ask with its identity",
            )
        )
    elif not caller.worker_owned:
        out.append(
            Blocker(
                BlockerCode.NOT_WORKER_OWNER,
                f"worker {caller.worker} was registered by another caller",
                "register a worker of your own with this token",
            )
        )
    elif caller.worker_status is WorkerStatus.STALE:
        out.append(
            Blocker(
                BlockerCode.WORKER_STALE,
                f"worker {caller.worker} has not heartbeaten within one lease term; it holds"
                " nothing",
                "heartbeat the worker (POST /api/v1/workers/heartbeat), then acquire again",
            )
        )
    return out


def _pull_blockers(facts: CapabilityFacts) -> list[Blocker]:
    pull = facts.pull
    if pull.merged:
        return [Blocker(BlockerCode.PR_CLOSED, "the pull request is merged", "nothing to do")]
    if pull.state != "open":
        return [
            Blocker(
                BlockerCode.PR_CLOSED,
                f"the pull request is {pull.state}",
                "reopen it on the forge if it should still be acted on",
            )
        ]
    out: list[Blocker] = []
    if pull.draft:
        out.append(
            Blocker(BlockerCode.PR_DRAFT, "the pull request is a draft", "mark it ready for review")
        )
    bot = facts.bot_login
    if facts.action is Action.REVIEW and bot and pull.author.lower() == bot.lower():
        out.append(
            Blocker(
                BlockerCode.AUTHOR_IS_BOT,
                f"the pull request was opened by the bot's own login {bot};"
                " an author cannot approve its own pull request",
                "have another reviewer review it",
            )
        )
    if facts.action is Action.MERGE and pull.mergeable is False:
        out.append(
            Blocker(
                BlockerCode.NOT_MERGEABLE,
                "the forge reports it cannot be merged (conflicts, branch rules)",
                "resolve it on the forge",
            )
        )
    return out


def _lease_blockers(facts: CapabilityFacts) -> list[Blocker]:
    lease, now, worker = facts.lease, facts.now, facts.caller.worker
    role = "merger" if facts.action is Action.MERGE else "reviewer"
    if lease is None or not lease.live(now):
        return []
    if lease.holder != worker:
        return [
            Blocker(
                BlockerCode.LEASE_HELD,
                f"the {role} lease is held by {lease.holder} until {iso(lease.expires_at)}",
                f"wait until {iso(lease.expires_at)} or its release, then acquire it",
                holder=lease.holder,
                expires_at=lease.expires_at,
            )
        ]
    if not same_sha(lease.head_sha, facts.pull.head_sha):
        return [
            Blocker(
                BlockerCode.LEASE_NOT_HELD,
                f"your {role} lease is pinned to {lease.head_sha}, not the head"
                f" {facts.pull.head_sha}",
                f"acquire the {role} lease at {facts.pull.head_sha}",
            )
        ]
    return []


def _approval_blockers(facts: CapabilityFacts) -> list[Blocker]:
    pull = facts.pull
    head = pull.head_sha
    out: list[Blocker] = []
    if not approvers_at(facts.reviews, pull.author, head):
        standing = standings(facts.reviews)
        approved = [r for r in standing.values() if r.state is ReviewState.APPROVED]
        own = [r for r in approved if r.reviewer.lower() == pull.author.lower()]
        older = [
            r
            for r in approved
            if r.reviewer.lower() != pull.author.lower() and not same_sha(r.commit_sha, head)
        ]
        if older:
            at = ", ".join(f"{r.reviewer} at {(r.commit_sha or '?')[:12]}" for r in older)
            out.append(
                Blocker(
                    BlockerCode.HEAD_MOVED,
                    f"approved at an older head ({at}); the head is now {head}",
                    f"get a review at {head[:12]}; an approval never carries over",
                )
            )
        elif own:
            out.append(
                Blocker(
                    BlockerCode.SELF_APPROVAL,
                    f"the only approval is the author's ({pull.author}); an author cannot"
                    " approve their own pull request",
                    "get an approval from someone other than the author",
                )
            )
        else:
            out.append(
                Blocker(
                    BlockerCode.NOT_APPROVED,
                    f"no approval by anyone other than the author at {head[:12]}",
                    f"get a review at {head[:12]}",
                )
            )
    blocking = requesting_changes(facts.reviews)
    if blocking:
        out.append(
            Blocker(
                BlockerCode.CHANGES_REQUESTED,
                "changes requested by " + ", ".join(blocking),
                "address them and have the reviewers approve or dismiss their reviews",
            )
        )
    short = approvals_short(facts.protection, approvers_at(facts.reviews, pull.author, head), head)
    if short is not None:
        out.append(Blocker(BlockerCode.NOT_APPROVED, short, f"get more approvals at {head[:12]}"))
    checks = checks_refusal(facts.protection, facts.configured_checks, facts.results)
    if checks is not None and checks.code is ReasonCode.PROTECTION_UNREADABLE:
        out.append(
            Blocker(
                BlockerCode.PROTECTION_UNREADABLE,
                checks.detail,
                "grant the bot the permission named, or set required_checks in its rules",
            )
        )
    elif checks is not None:
        out.append(
            Blocker(BlockerCode.CHECKS_NOT_GREEN, checks.detail, "wait for CI, or fix the failures")
        )
    if facts.missing_permission is not None:
        out.append(
            Blocker(
                BlockerCode.PERMISSION_DENIED,
                facts.missing_permission,
                "grant the bot that permission on the forge (docs/github-app.md, docs/gitea.md)",
            )
        )
    return out


def _next_step(facts: CapabilityFacts) -> str:
    head = facts.pull.head_sha
    held = (
        facts.lease is not None
        and facts.lease.live(facts.now)
        and facts.lease.holder == facts.caller.worker
    )
    if facts.action is Action.REVIEW:
        return f"ask for a review at {head} (POST /api/v1/reviews)"
    if held:
        return f"merge at {head} with your lease's epoch (POST /api/v1/merges)"
    if facts.caller.worker is None:
        return f"register a worker, acquire the merger lease at {head}, then merge"
    return f"acquire the merger lease at {head}, then merge (POST /api/v1/merges)"


def resolve_capability(facts: CapabilityFacts) -> Capability:
    """Whether the caller may take ``facts.action`` on the PR now, and every reason if not."""
    blockers = _caller_blockers(facts) + _pull_blockers(facts) + _lease_blockers(facts)
    if facts.action is Action.MERGE and not facts.pull.merged and facts.pull.state == "open":
        blockers += _approval_blockers(facts)
    next_action = blockers[0].next_action if blockers else _next_step(facts)
    pr = f"{facts.forge}:{facts.pull.owner}/{facts.pull.name}#{facts.number}"
    return Capability(
        action=facts.action,
        pr=pr,
        worker=facts.caller.worker,
        head_sha=facts.pull.head_sha,
        blockers=tuple(blockers),
        next_action=next_action,
    )
