"""Automerge: the bot's own merger takes approved, green PRs over, one at a time per branch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.leases import Role
from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import REPO, bot_world, set_check

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def merge_path(number: int | str) -> str:
    return f"/repos/{REPO}/pulls/{number}/merge"


@FORGES
async def test_two_prs_into_one_branch_merge_one_at_a_time(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"automerge": True}) as w:
        prs = [w.sim.open_pr(forge, REPO, author="alice", head_ref=f"feature-{i}") for i in (1, 2)]
        for pr in prs:
            set_check(w, forge, pr.head_sha, "success")
        numbers = [pr.number for pr in prs]
        heads = {pr.number: pr.head_sha for pr in prs}
        seen: list[tuple[str, ...]] = []  # which PRs were merged when a merge call arrived

        def observe() -> None:
            seen.append(tuple(str(n) for n in numbers if w.sim.pull(forge, REPO, n).merged))

        # Slow merges widen the window in which two unserialised merges would overlap.
        w.sim.faults.add(
            forge=forge,
            method="PUT" if forge == "github" else "POST",
            path=merge_path("*"),
            delay=0.2,
            times=2,
            before=observe,
        )
        await asyncio.gather(
            *(w.sim.deliver_pull_request(forge, REPO, n, action="opened") for n in numbers)
        )
        await w.settle()

        for n in numbers:
            live = w.sim.pull(forge, REPO, n)
            assert live.merged, f"#{n} was not merged"
            assert len(w.merge_requests(forge, n)) == 1
            record = w.api.merges.merge_of(forge, REPO, n)
            assert record is not None
            assert record.head_sha == heads[n]
            assert record.merge_commit_sha == live.merge_commit_sha
            assert record.holder == w.api.worker
            # the bot's own approval at the head is what permitted it
            assert [(r.state, r.commit_id) for r in w.bot_reviews(forge, n)] == [
                ("APPROVED", heads[n])
            ]
        # one at a time: the second merge call came after the first PR had merged
        assert len(seen) == 2
        assert seen[0] == ()
        assert len(seen[1]) == 1
        # and the second PR was read again between the two merge calls
        calls = [(i, r) for i, r in enumerate(w.sim.requests) if r.path.endswith("/merge")]
        (first_i, _), (second_i, second) = calls
        second_number = int(second.path.split("/")[-2])
        reread = [
            r
            for r in w.sim.requests[first_i + 1 : second_i]
            if (r.method == "GET" and r.path == f"/repos/{REPO}/pulls/{second_number}")
            or (r.operation_id == "graphql" and r.body["variables"]["number"] == second_number)
        ]
        assert reread, "the second PR was not checked again after the first merge"
        # the merger lease is released on both
        for n in numbers:
            leases = w.api.leases.list_leases(forge=forge, repo=REPO, number=n, live_only=True)
            assert leases == []


async def test_a_human_approval_with_green_checks_is_merged(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "gitea"
    # No required checks: the bot posts no review of its own, so only bob's approval counts.
    async with bot_world(
        tmp_path, sim, sim_server, required=(), rules={"automerge": True, "merge_method": "squash"}
    ) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        await w.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await w.settle()
        assert not w.sim.pull(forge, REPO, pr.number).merged
        assert w.merge_requests(forge, pr.number) == []
        # a PR that is not ready costs no merger lease
        assert w.api.leases.list_leases(forge=forge, role=Role.MERGER) == []

        review = w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
        await w.sim.deliver_pull_request_review(forge, REPO, pr.number, review.id)
        await w.settle()
        live = w.sim.pull(forge, REPO, pr.number)
        assert live.merged
        (call,) = w.merge_requests(forge, pr.number)
        body: Any = call.body
        assert body["Do"] == "squash" and body["head_commit_id"] == pr.head_sha


async def test_without_automerge_nothing_is_merged(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "github"
    async with bot_world(tmp_path, sim, sim_server) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        set_check(w, forge, pr.head_sha, "success")
        await w.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await w.settle()
        assert [r.state for r in w.bot_reviews(forge, pr.number)] == ["APPROVED"]
        assert not w.sim.pull(forge, REPO, pr.number).merged
        assert w.merge_requests(forge, pr.number) == []
