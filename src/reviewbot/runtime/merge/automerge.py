"""Automerge: the bot's own merger takes a PR over once it is approved and its checks are green.

Only for repositories whose rules say ``automerge = true``. The review pipeline calls
:meth:`AutoMerger.consider` after it handled an event of a PR (a review, a status, a check)
and when it posted an approval; the merge itself is the one merge path
(:meth:`reviewbot.runtime.merge.merger.Merger.merge`) under the merger lease, acquired at the live
head by this process's merger worker.

**One merge lane per (forge, repository, base branch)**: merges into the same branch run one
at a time, and each reads the PR again inside the lane, so the second PR is checked against
the state the first merge left (a moved base, a PR that became unmergeable). The lane is a
named lane in the store (:mod:`reviewbot.runtime.lanes`), so this holds across every replica
on the store: a replica waits up to ``wait_s`` for the lane, then logs and leaves the PR to
the next event or reconcile sweep; a replica that lost the lane before the merge call sends
nothing (``lane_lost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from reviewbot.config import RepoRules, Settings
from reviewbot.core.leases import Lease, LeaseClaim, LeaseTarget, Phase, Role
from reviewbot.core.merge import MergeAction, MergeInputs, decide
from reviewbot.core.models import RepoRef, repo_key
from reviewbot.core.prstate import DecisionKind
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.runtime.lanes import Lane, Lanes, lane_name
from reviewbot.runtime.merge.facts import read_merge_facts
from reviewbot.runtime.merge.merger import MergeError, MergeOutcome, Merger, MergeRequest
from reviewbot.store.leases import LeaseRefused, LeaseStore

log = logging.getLogger(__name__)

LANE_WAIT_S = 60.0  # how long a merge waits for its branch's lane before leaving the PR


class AutoMerger:
    def __init__(
        self,
        settings: Settings,
        forges: Mapping[str, Forge],
        merger: Merger,
        leases: LeaseStore,
        worker: str,
        lanes: Lanes,
        *,
        wait_s: float = LANE_WAIT_S,
    ) -> None:
        self.settings = settings
        self.forges = forges
        self.merger = merger
        self.leases = leases
        self.worker = worker
        self.lanes = lanes
        self.wait_s = wait_s
        self._tasks: set[asyncio.Task[MergeOutcome | None]] = set()
        self.outcomes: list[MergeOutcome] = []  # what this process merged or tried, in order

    def enabled(self, forge: str, repo: str) -> bool:
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge))
        return bool(rules is not None and rules.automerge and forge in self.forges)

    def consider(
        self, forge: str, repo: str, number: int
    ) -> asyncio.Task[MergeOutcome | None] | None:
        """Start a merge attempt of the PR in the background when its repository automerges."""
        if not self.enabled(forge, repo):
            return None
        task = asyncio.create_task(
            self.run(forge, repo, number), name=f"automerge {forge}:{repo}#{number}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def after_event(self, pull: Any) -> None:
        """After the review pipeline handled an event of ``pull``: try to merge it now."""
        task = self.consider(pull.forge, pull.ref.full_name, pull.number)
        if task is not None:
            await asyncio.wait({task})

    def on_outbox_finished(self, row: Any) -> None:
        """The drainer's hook: an approval was posted, so the PR may be mergeable now."""
        if (
            getattr(row, "status", None) == "posted"
            and getattr(row, "verdict", None) == DecisionKind.APPROVE
        ):
            self.consider(row.forge, row.repo, row.number)

    async def idle(self) -> None:
        """Until no automerge attempt is running."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def run(self, forge_name: str, repo: str, number: int) -> MergeOutcome | None:
        forge = self.forges[forge_name]
        try:
            pull = await forge.get_pull(repo, number)
        except ForgeError as exc:
            log.warning("automerge of %s:%s#%s: %s", forge_name, repo, number, exc)
            return None
        if pull.merged or pull.state != "open" or pull.draft:
            return None
        name = lane_name("merge", forge_name, repo_key(repo), pull.base_ref)
        try:
            async with self.lanes.hold(name, wait_s=self.wait_s) as lane:
                if not lane.held:
                    log.info(
                        "automerge of %s:%s#%s: the merge lane %s is still held by %s;"
                        " left for the next event or reconcile sweep",
                        forge_name,
                        repo,
                        number,
                        name,
                        lane.busy_with,
                    )
                    return None
                return await self._attempt(forge, forge_name, repo, number, lane)
        except (ForgeError, MergeError) as exc:
            log.warning("automerge of %s:%s#%s: %s", forge_name, repo, number, exc)
            return None
        except Exception:  # a background task: say what broke, never lose it silently
            log.exception("automerge of %s:%s#%s failed", forge_name, repo, number)
            return None

    async def _attempt(
        self, forge: Forge, forge_name: str, repo: str, number: int, lane: Lane
    ) -> MergeOutcome | None:
        # Read again inside the lane: an earlier merge into this branch may have changed it.
        pull = await forge.get_pull(repo, number)
        if pull.merged or pull.state != "open" or pull.draft:
            return None
        target = LeaseTarget(forge_name, repo, number, Role.MERGER)
        if not await self._looks_mergeable(forge, forge_name, repo, pull):
            return None
        try:
            lease = await self.leases.run(self.leases.acquire, target, self.worker, pull.head_sha)
        except LeaseRefused as exc:
            log.info("automerge of %s: %s", target, exc)
            return None
        try:
            outcome = await self.merger.merge(
                MergeRequest(
                    forge_name,
                    repo,
                    number,
                    pull.head_sha,
                    self.worker,
                    lease.epoch,
                    record_refusals=False,
                    fence=lambda: self.lanes.confirm(lane),
                )
            )
        finally:
            with contextlib.suppress(LeaseRefused):
                await self.leases.run(self.leases.release, lease.claim)
        self.outcomes.append(outcome)
        if outcome.merged:
            log.info("automerged %s at %s: %s", target, pull.head_sha, outcome.merge_commit_sha)
        return outcome

    async def _looks_mergeable(self, forge: Forge, forge_name: str, repo: str, pull: Any) -> bool:
        """The merge rules without a lease: no lease is taken for a PR that is not ready."""
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge_name)) or RepoRules()
        facts = await read_merge_facts(forge, repo, pull, pull.head_sha)
        target = LeaseTarget(forge_name, repo, pull.number, Role.MERGER)
        now = self.merger.clock()
        # A stand-in claim: only the forge-side rules matter here.
        stand_in = Lease(
            target, self.worker, 1, pull.head_sha, Phase.CLAIMED, 1.0, now, now, now + 1
        )
        decision = decide(
            MergeInputs(
                pull=pull,
                pin=pull.head_sha,
                reviews=facts.reviews,
                protection=facts.protection,
                configured_checks=rules.required_checks,
                results=facts.results,
                lease=stand_in,
                claim=LeaseClaim(target, self.worker, 1),
                now=now,
                missing_permission=facts.missing_permission,
            )
        )
        named = {ReasonCode.PERMISSION_DENIED.value, ReasonCode.PROTECTION_UNREADABLE.value}
        if named & set(decision.codes):
            # Not a PR waiting for its turn: the bot's own credentials stand in the way.
            log.warning("automerge of %s not attempted: %s", target, decision.summary())
        return decision.action is MergeAction.MERGE
