"""A merge call that times out: re-read the PR before anything else, never merge twice.

The merge path runs in process against the simulator over real HTTP with a short client
timeout; the store is a real SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.forges.factory import make_forge
from reviewbot.forges.http import RetryPolicy
from reviewbot.runtime.merge.merger import MergeError, Merger, MergeRequest
from reviewbot.server.errors import status_of
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.leases import LeaseStore
from reviewbot.store.merges import MergeStore
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.merge_support import REPO, bot_settings, prepare_sim, set_check

FORGE = "gitea"
MERGE_PATH = "/repos/acme/api/pulls/{}/merge"


@dataclass
class Parts:
    sim: Simulator
    merger: Merger
    leases: LeaseStore
    merges: MergeStore


@pytest.fixture
async def parts(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> AsyncIterator[Parts]:
    settings = bot_settings(tmp_path / "data", sim_server, prepare_sim(sim, ("ci/test",)))
    forge = make_forge(settings, FORGE, policy=RetryPolicy(timeout_s=0.5, backoff_s=0.01))
    db = open_store(settings)
    leases = LeaseStore.open(db, settings.leases)
    merges = MergeStore(db, leases, leases.clock)
    try:
        yield Parts(sim, Merger(settings, {FORGE: forge}, leases, merges), leases, merges)
    finally:
        leases.close()
        await forge.aclose()
        db.close()


def ready_pr(p: Parts) -> tuple[int, str]:
    pr = p.sim.open_pr(FORGE, REPO, author="alice")
    set_check(p.sim, FORGE, pr.head_sha, "success")
    p.sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    return pr.number, pr.head_sha


def request(p: Parts, number: int, head: str) -> MergeRequest:
    worker = p.leases.workers.register("t", client="t", session_id="s", role="merger").identity
    lease = p.leases.acquire(LeaseTarget(FORGE, REPO, number, Role.MERGER), worker, head)
    return MergeRequest(FORGE, REPO, number, head, worker, lease.epoch)


async def merge_calls(p: Parts, number: int, at_least: int) -> int:
    """Merge calls the simulator logged; a held answer is logged when it is finally sent."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        count = sum(1 for r in p.sim.requests if r.path == MERGE_PATH.format(number))
        if count >= at_least or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.05)


async def test_timed_out_after_the_forge_merged_is_recorded_once(parts: Parts) -> None:
    number, head = ready_pr(parts)
    parts.sim.faults.add(
        forge=FORGE,
        method="POST",
        path=MERGE_PATH.format(number),
        timeout=1.5,
        apply_then_fail=True,
    )
    outcome = await parts.merger.merge(request(parts, number, head))
    live = parts.sim.pull(FORGE, REPO, number)
    assert live.merged
    assert outcome.merged and outcome.recorded
    assert outcome.merge_commit_sha == live.merge_commit_sha
    assert await merge_calls(parts, number, 1) == 1
    record = parts.merges.merge_of(FORGE, REPO, number)
    assert record is not None and record.merge_commit_sha == live.merge_commit_sha


async def test_timed_out_without_merging_is_not_retried(parts: Parts) -> None:
    number, head = ready_pr(parts)
    parts.sim.faults.add(forge=FORGE, method="POST", path=MERGE_PATH.format(number), timeout=1.5)
    merge = request(parts, number, head)
    with pytest.raises(MergeError) as refused:
        await parts.merger.merge(merge)
    assert refused.value.code == "forge_unavailable"
    assert status_of(refused.value) == 503  # what the merge API answers
    assert not parts.sim.pull(FORGE, REPO, number).merged
    assert await merge_calls(parts, number, 1) == 1
    (attempt,) = parts.merges.attempts(FORGE, REPO, number)
    assert attempt.status == "unknown"
    # asking again starts from the live state and merges once
    outcome = await parts.merger.merge(merge)
    assert outcome.merged and await merge_calls(parts, number, 2) == 2
