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
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.core.merge import PrFacts, merge_blockers
from reviewbot.core.models import RepoRef, repo_key
from reviewbot.core.prstate import DecisionKind
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.runtime.lanes import Lane, Lanes, lane_name
from reviewbot.runtime.merge.facts import read_pr_facts
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
            # Only the pull here: its base branch names the lane; the rest is read inside it.
            pull = (await read_pr_facts(forge, repo, number, merge=False)).pull
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
        facts = await read_pr_facts(forge, repo, number)
        pull = facts.pull
        if pull.merged or pull.state != "open" or pull.draft:
            return None
        target = LeaseTarget(forge_name, repo, number, Role.MERGER)
        if not self._looks_mergeable(forge_name, repo, facts):
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
            # A successful merge already ended the lease: that is no refused release.
            with contextlib.suppress(LeaseRefused):
                await self.leases.run(self.leases.release_unless_ended, lease.claim)
        self.outcomes.append(outcome)
        if outcome.merged:
            log.info("automerged %s at %s: %s", target, pull.head_sha, outcome.merge_commit_sha)
        return outcome

    def _looks_mergeable(self, forge_name: str, repo: str, facts: PrFacts) -> bool:
        """The merge rules without a lease: no lease is taken for a PR that is not ready."""
        rules = self.settings.rules_for(RepoRef.parse(repo, forge=forge_name)) or RepoRules()
        target = LeaseTarget(forge_name, repo, facts.pull.number, Role.MERGER)
        blockers = merge_blockers(facts, rules.required_checks)
        named = {ReasonCode.PERMISSION_DENIED, ReasonCode.PROTECTION_UNREADABLE}
        if named & {b.code for b in blockers}:
            # Not a PR waiting for its turn: the bot's own credentials stand in the way.
            summary = "; ".join(f"{b.code.value}: {b.detail}" for b in blockers)
            log.warning("automerge of %s not attempted: %s", target, summary)
        return not blockers
