"""May this caller review or merge this pull request now? The pure answer, with every reason.

:func:`resolve_capability` takes plain facts (the caller's scopes and binding, its worker's
record, the PR as the forge shows it now, its reviews and checks, the lease of the role) and
returns a :class:`Capability`: ``allowed`` and, when not, **every** :class:`Blocker` at once,
each with a stable code and the next action that would clear it. It never reads anything
and never refuses by raising: the caller (the API, the command line, an MCP tool) reads the
facts and shows the answer.

The codes are reason codes (:data:`reviewbot.core.blockers.BLOCKER_CODES`,
``docs/capability.md``). This module adds only who asks (scopes, binding, worker) and the
lease of the role; for a merge, every other blocker is
:func:`reviewbot.core.merge.merge_readiness` at the PR's head, the same answer a merge is
refused with and the state comment's ``MERGE_READY`` shows.

A free merger lease is not a blocker: the next action is to acquire it. A refusal names a
lease holder and its expiry, never its epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reviewbot.core.blockers import Blocker, in_order
from reviewbot.core.clock import iso
from reviewbot.core.leases import Lease, WorkerStatus
from reviewbot.core.merge import PrFacts, merge_readiness, same_sha, state_blockers
from reviewbot.core.models import (
    CheckResult,
    PullRequestSnapshot,
    RepoRef,
    RequiredChecks,
    Review,
)
from reviewbot.core.reasons import ReasonCode


class Action(StrEnum):
    REVIEW = "review"
    MERGE = "merge"


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

    @property
    def merge_facts(self) -> PrFacts:
        """The forge-side facts at the PR's head, as a merge at it would judge them."""
        return PrFacts(
            self.pull,
            self.pull.head_sha,
            tuple(self.reviews),
            self.protection,
            tuple(self.results),
            self.missing_permission,
        )


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
                    ReasonCode.MISSING_SCOPE,
                    f"{facts.action.value} needs scope {scope!r}; the token has "
                    f"{', '.join(sorted(caller.scopes)) or 'none'}",
                    f"use a token with scope {scope!r}",
                )
            )
    if _bound_elsewhere(caller.binding, facts.forge, facts.repo):
        out.append(
            Blocker(
                ReasonCode.REPO_NOT_ALLOWED,
                f"the token is bound to {caller.binding}, not {facts.forge}:{facts.repo}",
                "use a token for this repository",
            )
        )
    if caller.worker is None:
        return out
    if caller.worker_status is WorkerStatus.UNPROVEN:
        out.append(
            Blocker(
                ReasonCode.WORKER_UNPROVEN,
                f"no worker {caller.worker} is registered",
                "register a worker (POST /api/v1/workers) and ask with its identity",
            )
        )
    elif not caller.worker_owned:
        out.append(
            Blocker(
                ReasonCode.NOT_WORKER_OWNER,
                f"worker {caller.worker} was registered by another caller",
                "register a worker of your own with this token",
            )
        )
    elif caller.worker_status is WorkerStatus.STALE:
        out.append(
            Blocker(
                ReasonCode.WORKER_STALE,
                f"worker {caller.worker} has not heartbeaten within one lease term; it holds"
                " nothing",
                "heartbeat the worker (POST /api/v1/workers/heartbeat), then acquire again",
            )
        )
    return out


def _review_blockers(facts: CapabilityFacts) -> list[Blocker]:
    out = state_blockers(facts.pull)
    bot = facts.bot_login
    if not out and bot and facts.pull.author.lower() == bot.lower():
        out.append(
            Blocker(
                ReasonCode.AUTHOR_IS_BOT,
                f"the pull request was opened by the bot's own login {bot};"
                " an author cannot approve its own pull request",
                "have another reviewer review it",
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
                ReasonCode.LEASE_HELD,
                f"the {role} lease is held by {lease.holder} until {iso(lease.expires_at)}",
                f"wait until {iso(lease.expires_at)} or its release, then acquire it",
                holder=lease.holder,
                expires_at=lease.expires_at,
            )
        ]
    if not same_sha(lease.head_sha, facts.pull.head_sha):
        return [
            Blocker(
                ReasonCode.LEASE_NOT_HELD,
                f"your {role} lease is pinned to {lease.head_sha}, not the head"
                f" {facts.pull.head_sha}",
                f"acquire the {role} lease at {facts.pull.head_sha}",
            )
        ]
    return []


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
    blockers = _caller_blockers(facts) + _lease_blockers(facts)
    if facts.action is Action.MERGE:
        # The one merge-readiness answer (core.merge.merge_readiness) at the head: what a
        # merge is refused with and what the state comment and status page show.
        blockers += merge_readiness(facts.merge_facts, facts.configured_checks).blockers
    else:
        blockers += _review_blockers(facts)
    ordered = in_order(blockers)
    next_action = ordered[0].next_action if ordered else _next_step(facts)
    pr = f"{facts.forge}:{facts.pull.owner}/{facts.pull.name}#{facts.number}"
    return Capability(
        action=facts.action,
        pr=pr,
        worker=facts.caller.worker,
        head_sha=facts.pull.head_sha,
        blockers=ordered,
        next_action=next_action,
    )
