"""The merger's per-PR locks: an entry lives only while a merge of its PR holds or waits on
it, so a long-running process does not keep one per PR it ever merged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.forges.factory import make_forge
from reviewbot.runtime.merge.merger import Merger, MergeRequest
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.leases import LeaseStore
from reviewbot.store.merges import MergeStore
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.merge_support import REPO, bot_settings, prepare_sim, set_check

FORGE = "gitea"


@pytest.fixture
async def merger(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> AsyncIterator[tuple[Merger, LeaseStore]]:
    settings = bot_settings(tmp_path / "data", sim_server, prepare_sim(sim, ("ci/test",)))
    forge = make_forge(settings, FORGE)
    db = open_store(settings)
    leases = LeaseStore.open(db, settings.leases)
    try:
        yield Merger(settings, {FORGE: forge}, leases, MergeStore(db, leases, leases.clock)), leases
    finally:
        leases.close()
        await forge.aclose()
        db.close()


def ready_request(sim: Simulator, leases: LeaseStore, worker: str) -> MergeRequest:
    pr = sim.open_pr(FORGE, REPO, author="alice")
    set_check(sim, FORGE, pr.head_sha, "success")
    sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    lease = leases.acquire(LeaseTarget(FORGE, REPO, pr.number, Role.MERGER), worker, pr.head_sha)
    return MergeRequest(FORGE, REPO, pr.number, pr.head_sha, worker, lease.epoch)


async def test_merges_of_many_pulls_leave_no_lock_behind(
    merger: tuple[Merger, LeaseStore], sim: Simulator
) -> None:
    bot, leases = merger
    worker = leases.workers.register("m", client="t", session_id="s", role="merger").identity
    requests = [ready_request(sim, leases, worker) for _ in range(5)]
    # Sequentially, then all at once: either way the table empties when they finish.
    first = await bot.merge(requests[0])
    assert first.merged and len(bot.pull_locks) == 0
    outcomes = await asyncio.gather(*(bot.merge(r) for r in requests[1:]))
    assert all(o.merged for o in outcomes)
    assert len(bot.pull_locks) == 0
    assert await bot.verify_unverified() == [] and len(bot.pull_locks) == 0
