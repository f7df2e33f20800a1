"""Reading the facts :func:`reviewbot.core.capability.resolve_capability` decides on.

One live read of the PR through :func:`reviewbot.runtime.merge.facts.read_pr_facts` (for a
merge with its reviews, the required checks of its base and the results of its head: the
reader the merger uses), the lease of the role as seen now, and the worker's record.
The API route, the command line and MCP tools call :func:`read_capability`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from reviewbot.config import RepoRules, Settings
from reviewbot.core.capability import (
    Action,
    CallerFacts,
    Capability,
    CapabilityFacts,
    resolve_capability,
)
from reviewbot.core.errors import Refused
from reviewbot.core.leases import Lease, LeaseTarget, Role, WorkerOwner, WorkerStatus
from reviewbot.core.models import PullRef, RepoRef
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.runtime.merge.facts import read_pr_facts
from reviewbot.store.leases import LeaseStore

ROLE_OF: dict[Action, Role] = {Action.REVIEW: Role.REVIEWER, Action.MERGE: Role.MERGER}


@dataclass(frozen=True)
class Caller:
    """Who asks: a token's scopes and binding, and who it is as a worker owner."""

    scopes: frozenset[str]
    binding: str | None
    owner: WorkerOwner


async def read_capability(
    *,
    action: Action,
    pr: PullRef,
    worker: str | None,
    caller: Caller,
    forges: Mapping[str, Forge],
    leases: LeaseStore,
    settings: Settings,
) -> Capability:
    """The capability of ``caller`` (and ``worker``) on ``pr`` now.

    Raises :class:`Refused` only when the facts cannot be read (``forge_not_configured``,
    ``pr_not_found``, ``forge_unavailable``...); everything else is a blocker of the answer.
    """
    forge = forges.get(pr.forge)
    if forge is None:
        raise Refused(f"{pr.forge} is not configured", code=ReasonCode.FORGE_NOT_CONFIGURED.value)
    repo = pr.full_name
    try:
        if action is Action.MERGE:
            facts = await read_pr_facts(forge, repo, pr.number)
            bot_login = None
        else:
            # A review is judged on the pull alone (and who the bot is).
            facts, bot_login = await asyncio.gather(
                read_pr_facts(forge, repo, pr.number, merge=False), forge.bot_login()
            )
    except ForgeError as exc:
        raise Refused(str(exc), code=reason_for(exc).value) from None
    rules = settings.rules_for(RepoRef.parse(repo, forge=pr.forge)) or RepoRules()
    target = LeaseTarget(pr.forge, repo, pr.number, ROLE_OF[action])

    status, owned, lease, now = await leases.run(_store_facts, leases, target, worker, caller)
    answer = CapabilityFacts(
        action=action,
        forge=pr.forge,
        repo=repo,
        number=pr.number,
        caller=CallerFacts(caller.scopes, caller.binding, worker, status, owned),
        pull=facts.pull,
        reviews=facts.reviews,
        protection=facts.protection,
        configured_checks=rules.required_checks,
        results=facts.results,
        lease=lease,
        bot_login=bot_login,
        now=now,
        missing_permission=facts.missing_permission,
    )
    return resolve_capability(answer)


def _store_facts(
    leases: LeaseStore, target: LeaseTarget, worker: str | None, caller: Caller
) -> tuple[WorkerStatus | None, bool, Lease | None, float]:
    """The worker's status and owner, and the lease as seen now (blocking)."""
    status: WorkerStatus | None = None
    owned = True
    if worker is not None:
        status = leases.workers.status(worker)
        owner = leases.workers.owner(worker)
        owned = owner is None or owner.same_as(caller.owner)
    return status, owned, leases.get(target), leases.clock()
