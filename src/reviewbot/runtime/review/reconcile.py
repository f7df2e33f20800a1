"""The reconcile sweep: webhooks get lost, so the bot looks for itself.

Neither forge retries a failed delivery, and nothing arrives while the bot is down. Every
``reconcile_interval_s`` (and once at start) the sweep lists the open PRs of the configured
repositories (the ``[repos]`` keys, plus every repository a signed webhook named when
``[defaults]`` applies to all; keys are canonical, so no casing is swept twice) and:

- feeds a synthetic delivery (source ``sweep``) into the journal for every head that has no
  gate decision yet, so it goes through the same gate path as a webhook (its id is derived
  from the head, so two sweeps never queue the same head twice);
- re-evaluates heads whose latest review decision is still ``waiting`` (or failed to be
  evaluated), which is also how a missing check past its grace period gets reported;
- hands heads the bot approved to automerge (``consider_merge``), for a merge an earlier
  attempt left behind (its branch's merge lane was busy, the forge failed);
- polls the check results of the commits parts of this process registered for
  (:mod:`reviewbot.runtime.ingestion.listeners`) and hands their listeners what no webhook
  brought.

Replicas on one store never sweep one repository at once: each repository is swept under
its sweep lane (:mod:`reviewbot.runtime.lanes`); a replica that finds a repository's lane
held by another skips it and lists it under ``skipped`` in its report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.core.prstate import DecisionKind
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.progress import Progress, Write
from reviewbot.runtime.background import cancel_and_wait, repeat
from reviewbot.runtime.ingestion.listeners import CommitListeners
from reviewbot.runtime.lanes import Lane, Lanes, lane_name
from reviewbot.runtime.review.pipeline import REEVALUATE, ReviewPipeline, ReviewRequest
from reviewbot.store import decisions, repositories
from reviewbot.store.journal import NewDelivery
from reviewbot.store.reviews import ReviewStore

log = logging.getLogger(__name__)

SWEEP_SOURCE = "sweep"
SWEEP_EVENT = "review_request"
PROGRESS_INTERVAL_S = 10.0  # a sweep that takes longer logs where it is

Enqueue = Callable[[NewDelivery], Awaitable[bool]]
ConsiderMerge = Callable[[str, str, int], object]  # forge, repository, PR number


@dataclass
class SweepReport:
    repos: list[str] = field(default_factory=list)
    open_pulls: int = 0
    queued: list[str] = field(default_factory=list)  # delivery ids fed into the journal
    reevaluated: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Repositories another replica was sweeping: "forge:repo: swept by HOLDER".
    skipped: list[str] = field(default_factory=list)
    merge_considered: list[str] = field(default_factory=list)  # approved heads, to automerge
    # Check results of registered commits handed to their listeners: "LISTENER: CTX=STATE at SHA".
    listened: list[str] = field(default_factory=list)


def sweep_delivery(
    forge: str, repo: str, number: int, head_sha: str, received_at: float, *, retry: int = 0
) -> NewDelivery:
    """A synthetic delivery naming one PR head, read by the gate like an API request.
    ``retry``: how many times the gate met an error on this head before (the delivery id
    gains ``~N``, so a head whose earlier delivery ended in an error is taken up again)."""
    body = json.dumps(
        {"forge": forge, "repo": repo, "number": number, "head_sha": head_sha},
        sort_keys=True,
    ).encode()
    again = f"~{retry}" if retry else ""
    return NewDelivery(
        delivery_id=f"sweep:{forge}:{repo}#{number}@{head_sha}{again}",
        source=SWEEP_SOURCE,
        body=body,
        received_at=received_at,
        forge=forge,
        event=SWEEP_EVENT,
        headers={"Content-Type": "application/json"},
    )


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        store: ReviewStore,
        forges: Mapping[str, Forge],
        pipeline: ReviewPipeline,
        enqueue: Enqueue,
        *,
        clock: Clock = time.time,
        verify_merges: Callable[[], Awaitable[object]] | None = None,
        lanes: Lanes | None = None,
        consider_merge: ConsiderMerge | None = None,
        prune: Callable[[], Awaitable[object]] | None = None,
        listeners: CommitListeners | None = None,
        sweep_queues: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> None:
        """``sweep_queues``: a pass over every merge queue (its problems, as lines).
        ``verify_merges``: re-reads merges left unverified (the merger's). ``lanes``:
        each repository is swept under its lane (None: a lone process, no lanes).
        ``prune``: deletes what the retention settings no longer keep, after each sweep.
        ``listeners``: this process's commit listeners, whose registered SHAs are polled
        (in memory: no other replica knows them, so no lane is needed)."""
        self.listeners = listeners
        self.sweep_queues = sweep_queues
        self.prune = prune
        self.settings = settings
        self.lanes = lanes
        self.consider_merge = consider_merge
        self.verify_merges = verify_merges
        self.clock = clock
        self.store = store
        self.forges = forges
        self.pipeline = pipeline
        self.enqueue = enqueue
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0

    def repositories(self) -> list[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for key in self.settings.repos:
            forge, _, repo = key.partition(":")
            found.add((forge, repo))
        if self.settings.defaults is not None:
            # Only repositories a signed webhook named: an API call cannot grow the sweep.
            found |= repositories.signed_repos(self.store.db)
        return sorted(r for r in found if r[0] in self.forges)

    async def sweep(self, progress: Write | None = None) -> SweepReport:
        """One pass over the repositories; ``progress`` gets a line now and then when the
        pass takes long (see :class:`Progress`)."""
        report = SweepReport()
        repos = self.repositories()
        shown = (
            Progress(
                "reconcile sweep",
                len(repos),
                write=progress,
                min_interval_s=PROGRESS_INTERVAL_S,
                only_if_slow=True,
            )
            if progress is not None
            else None
        )
        for forge_name, repo in repos:
            report.repos.append(f"{forge_name}:{repo}")
            await self._sweep_in_lane(forge_name, repo, report)
            if shown is not None:
                shown.advance(
                    f"{forge_name}:{repo}; so far {report.open_pulls} open pull requests, "
                    f"{len(report.queued)} queued, {len(report.reevaluated)} re-evaluated"
                )
        if self.listeners is not None:
            polled = await self.listeners.poll(self.forges)
            report.listened += polled.handed
            report.errors += polled.errors
        if self.verify_merges is not None:
            try:
                await self.verify_merges()
            except ForgeError as exc:
                report.errors.append(f"unverified merges: {exc}")
        if self.sweep_queues is not None:
            report.errors += await self.sweep_queues()
        if self.prune is not None:
            await self.prune()
        self.sweeps += 1
        return report

    async def _sweep_in_lane(self, forge_name: str, repo: str, report: SweepReport) -> None:
        where = f"{forge_name}:{repo}"
        async with contextlib.AsyncExitStack() as stack:
            lane = None
            if self.lanes is not None:
                lane = await stack.enter_async_context(
                    self.lanes.hold(lane_name("sweep", forge_name, repo))
                )
                if not lane.held:
                    report.skipped.append(f"{where}: swept by {lane.busy_with}")
                    log.info("reconcile sweep: %s is being swept by %s", where, lane.busy_with)
                    return
            try:
                await self._sweep_repo(forge_name, repo, report, lane)
            except ForgeError as exc:
                report.errors.append(f"{where}: {exc}")
                log.warning("reconcile sweep of %s failed: %s", where, exc)

    async def _sweep_repo(
        self, forge_name: str, repo: str, report: SweepReport, lane: Lane | None = None
    ) -> None:
        forge = self.forges[forge_name]
        pulls = await forge.list_open_pulls(repo)
        report.open_pulls += len(pulls)
        gated = await self.store.run(decisions.gated_heads, self.store.db, forge_name, repo)
        for pull in pulls:
            if lane is not None and not lane.held:
                # Another replica may be sweeping it now: leave the rest to that one.
                report.errors.append(f"{forge_name}:{repo}: lost the sweep lane; stopped")
                return
            if pull.draft:
                continue
            head = (pull.number, pull.head_sha)
            if head not in gated.answered:
                now = self.clock()
                retry = gated.errored.get(head, 0)
                delivery = sweep_delivery(
                    forge_name, repo, pull.number, pull.head_sha, now, retry=retry
                )
                if await self.enqueue(delivery):
                    report.queued.append(delivery.delivery_id)
                continue
            latest = await self.store.run(self.store.latest_verdict, forge_name, repo, pull.number)
            if (
                self.consider_merge is not None
                and latest is not None
                and latest.head_sha == pull.head_sha
                and latest.decision == DecisionKind.APPROVE
            ):
                if self.consider_merge(forge_name, repo, pull.number) is not None:
                    report.merge_considered.append(f"{forge_name}:{repo}#{pull.number}")
                continue
            # Only heads the pipeline already took up: a head the gate skipped stays skipped.
            if (
                latest is None
                or latest.head_sha != pull.head_sha
                or latest.decision not in REEVALUATE
            ):
                continue
            request = ReviewRequest(
                forge=forge_name,
                repo=repo,
                number=pull.number,
                head_sha=pull.head_sha,
                source=SWEEP_SOURCE,
                event=SWEEP_EVENT,
                pull=pull,
            )
            await self.pipeline.handle(request)
            report.reevaluated.append(f"{forge_name}:{repo}#{pull.number}")

    def start(self) -> None:
        if self._task is None:
            loop = repeat(
                self._sweep_and_report,
                self.settings.reconcile_interval_s,
                log,
                "reconcile sweep failed",
            )
            self._task = asyncio.create_task(loop, name="reconcile-sweep")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _sweep_and_report(self) -> None:
        report = await self.sweep(progress=log.info)
        if report.queued or report.reevaluated or report.listened:
            log.info(
                "reconcile sweep: %d queued, %d re-evaluated, %d results handed to listeners",
                len(report.queued),
                len(report.reevaluated),
                len(report.listened),
            )


class QueueHead:
    """A merger's re-review hook: the head a PR moved to is queued through the gate, like a
    head a sweep found (the server's way; the command line reviews it in process)."""

    def __init__(self, enqueue: Enqueue, clock: Clock) -> None:
        self.enqueue = enqueue
        self.clock = clock

    async def __call__(self, forge: str, repo: str, number: int, head: str) -> object:
        now = self.clock()
        return await self.enqueue(sweep_delivery(forge, repo, number, head, now))
