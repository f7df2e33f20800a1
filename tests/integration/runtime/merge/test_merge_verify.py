"""A merge is recorded only when the forge confirms it (merged flag and merge commit).

The forge answers the merge call, then the re-read fails or shows the PR unmerged: the
attempt stays ``unverified``, nothing is recorded as merged, the merger lease stays held, a
second call of the holder never sends the merge again, and the reconcile sweep records the
merge once the forge shows it.
"""

from __future__ import annotations

from typing import Any

import pytest

from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.runtime.review.reconcile import Reconciler
from tests.integration.merge_support import REPO, Merger, World, green_approved_pr

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def sweeper(w: World) -> Reconciler:
    assert w.service.review is not None
    return Reconciler(
        w.settings,
        w.service.review.store,
        w.service.forges,
        w.service.review.pipeline,
        w.service.journal.append if w.service.journal else _no_enqueue,
        clock=w.service.clock,
        verify_merges=w.api.merger.verify_unverified,
    )


async def _no_enqueue(_: Any) -> bool:
    return False


def after_the_merge_call(w: World, forge: str, number: int, then: Any) -> None:
    """Run ``then`` as the merge call arrives (before the forge handles it)."""
    w.sim.faults.add(
        forge=forge,
        method="PUT" if forge == "github" else "POST",
        path=f"/repos/{REPO}/pulls/{number}/merge",
        status=None,
        before=then,
    )


async def assert_unverified_and_held(w: World, m: Merger, forge: str, pr: Any, epoch: int) -> None:
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 409 and body["error"] == "merge_unverified", body
    assert [a.status for a in w.api.merges.attempts(forge, REPO, pr.number)] == ["unverified"]
    assert w.api.merges.merge_of(forge, REPO, pr.number) is None
    lease = await m.lease(forge, pr.number)
    assert lease["holder"] == m.identity and lease["epoch"] == epoch
    assert lease["phase"] == "claimed"
    # The holder calls again: the PR is read, the merge is not sent a second time.
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 409 and body["error"] == "merge_unverified", body
    assert len(w.merge_requests(forge, pr.number)) == 1


async def assert_the_sweep_records_it(w: World, m: Merger, forge: str, pr: Any) -> None:
    await sweeper(w).sweep()
    live = w.sim.pull(forge, REPO, pr.number)
    record = w.api.merges.merge_of(forge, REPO, pr.number)
    assert record is not None and record.merge_commit_sha == live.merge_commit_sha
    assert [a.status for a in w.api.merges.attempts(forge, REPO, pr.number)] == ["merged"]
    assert (await m.lease(forge, pr.number))["phase"] == "released"
    assert len(w.merge_requests(forge, pr.number)) == 1


def pull_reads(forge: str, number: int) -> list[tuple[str, str]]:
    """Where the bot reads the PR: its REST route, and on GitHub first its GraphQL query."""
    rest = ("GET", f"/repos/{REPO}/pulls/{number}")
    return [("POST", "/graphql"), rest] if forge == "github" else [rest]


@FORGES
async def test_a_failed_re_read_leaves_the_merge_unverified_until_the_sweep(
    world: World, forge: str
) -> None:
    pr = green_approved_pr(world, forge)
    after_the_merge_call(
        world,
        forge,
        pr.number,
        lambda: [
            world.sim.faults.add(forge=forge, method=method, path=path, status=502, times=None)
            for method, path in pull_reads(forge, pr.number)
        ],
    )
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    await assert_unverified_and_held(world, m, forge, pr, epoch)
    assert world.sim.pull(forge, REPO, pr.number).merged  # it did merge; we could not see it

    world.sim.faults.clear()
    await assert_the_sweep_records_it(world, m, forge, pr)


@FORGES
async def test_a_re_read_showing_it_unmerged_records_nothing(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge)
    hidden: dict[str, Any] = {}

    def lag() -> None:
        # A replica behind the primary: reads show the PR open and unmerged for a while.
        live = world.sim.pull(forge, REPO, pr.number)
        if live.merged:
            hidden.update(
                merged=live.merged, at=live.merged_at, sha=live.merge_commit_sha, state=live.state
            )
            live.merged, live.merged_at, live.merge_commit_sha = False, None, None
            live.state = "open"

    after_the_merge_call(
        world,
        forge,
        pr.number,
        lambda: [
            world.sim.faults.add(forge=forge, method=method, path=path, times=None, before=lag)
            for method, path in pull_reads(forge, pr.number)
        ],
    )
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    await assert_unverified_and_held(world, m, forge, pr, epoch)

    world.sim.faults.clear()
    live = world.sim.pull(forge, REPO, pr.number)
    live.merged, live.merged_at = hidden["merged"], hidden["at"]
    live.merge_commit_sha, live.state = hidden["sha"], hidden["state"]
    await assert_the_sweep_records_it(world, m, forge, pr)


async def _sent_then_stopped(w: World, m: Merger, forge: str, pr: Any, epoch: int) -> int:
    """What a process leaves when it stops between the merge call and recording the
    answer: a ``sending`` attempt, and a PR the forge merged at the pin."""
    claim = LeaseClaim(LeaseTarget(forge, REPO, pr.number, Role.MERGER), m.identity, epoch)
    attempt = w.api.merges.begin(claim, pr.head_sha, "merge")
    await w.service.forges[forge].merge(REPO, pr.number, head_sha=pr.head_sha)
    return attempt


@FORGES
async def test_a_merge_whose_sender_stopped_before_recording_it_is_adopted_by_the_sweep(
    world: World, forge: str
) -> None:
    pr = green_approved_pr(world, forge)
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    await _sent_then_stopped(world, m, forge, pr, epoch)

    # While its sender holds the lease, the call may still be in flight: left alone.
    await sweeper(world).sweep()
    assert [a.status for a in world.api.merges.attempts(forge, REPO, pr.number)] == ["sending"]
    assert world.api.merges.merge_of(forge, REPO, pr.number) is None

    # The sender is gone: its lease ends (here released; a lapse reads the same).
    await m.release(forge, pr.number, epoch)
    await sweeper(world).sweep()
    live = world.sim.pull(forge, REPO, pr.number)
    record = world.api.merges.merge_of(forge, REPO, pr.number)
    assert record is not None and record.merge_commit_sha == live.merge_commit_sha
    assert [a.status for a in world.api.merges.attempts(forge, REPO, pr.number)] == ["merged"]
    assert len(world.merge_requests(forge, pr.number)) == 1  # the sweep never sends one


async def test_a_left_behind_attempt_the_forge_never_merged_ends_unknown(world: World) -> None:
    forge = "github"
    pr = green_approved_pr(world, forge)
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    claim = LeaseClaim(LeaseTarget(forge, REPO, pr.number, Role.MERGER), m.identity, epoch)
    world.api.merges.begin(claim, pr.head_sha, "merge")  # stopped before the call
    await m.release(forge, pr.number, epoch)
    await sweeper(world).sweep()
    [attempt] = world.api.merges.attempts(forge, REPO, pr.number)
    assert attempt.status == "unknown" and "stopped before recording" in attempt.detail
    assert world.api.merges.merge_of(forge, REPO, pr.number) is None
    assert world.merge_requests(forge, pr.number) == []
