"""Two real ``serve`` replicas on one PostgreSQL database, each handed one of two approved
PRs into the same base branch by webhook, with ``automerge = true``: the merges into the
branch run one at a time across the replicas (the second merge call arrives after the first
PR merged, and the second PR is read again after that merge), and no PR is merged twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from tests.integration.process_support import ServeProcess, serve_process
from tests.integration.server import test_server_crash as server_crash
from tests.integration.server_support import GITHUB_SECRET, WAIT_S, SimWorld, sim_world

pytestmark = pytest.mark.slow

FORGE = "github"
REPO = "acme/api"
# The first merge call is held at the forge until a second merge call into the branch
# arrives, or this long after the second PR's approval was posted: long enough for the other
# replica to start its merge attempt.
HOLD_S = 3.0


def write_config(world: SimWorld, path: Path) -> None:
    server_crash.write_config(world, path, 'required_checks = ["ci"]\nautomerge = true\n')


def replica(
    config: Path, data_dir: Path, url: str
) -> contextlib.AbstractAsyncContextManager[ServeProcess]:
    env = {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_DATABASE_URL": url,
        "REVIEWBOT_LOG_FORMAT": "json",
        # A long claim term: a replica looks for the other's deliveries only every few
        # seconds, so each gates (and merges) the PR whose webhook it acknowledged.
        "REVIEWBOT_DELIVERY_CLAIM_S": "120",
        # The first merge call is held at the forge until the second replica tries (up to
        # 4 * WAIT_S): the bot's own request timeout must outlast that hold. With the
        # default 10 s, a second replica slow to start (a loaded machine) let the held call
        # time out; the bot then read the PR unmerged and, as designed, sent the pinned merge
        # again later: three merge calls, none of them let in by the lane.
        "REVIEWBOT_FORGE_TIMEOUT_S": str(5 * WAIT_S),
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    return serve_process(cwd=data_dir, env=env)


async def test_two_replicas_merge_into_one_branch_one_at_a_time(
    tmp_path: Path, postgres_store_url: str
) -> None:
    config = tmp_path / "reviewbot.toml"
    async with sim_world(tmp_path / "sim-data") as world:
        write_config(world, config)
        sim = world.sim
        prs = [sim.open_pr(FORGE, REPO, author="alice", head_ref=f"feature-{i}") for i in (1, 2)]
        for pr in prs:
            sim.set_status(FORGE, REPO, pr.head_sha, "ci", "success")
        numbers = [pr.number for pr in prs]
        seen: list[tuple[int, ...]] = []  # which PRs were merged when a merge call arrived
        arrived = [asyncio.Event(), asyncio.Event()]

        async def second_is_trying() -> None:
            # The second PR's approval is posted; its automerge starts right after it.
            while True:
                if sim.pull(FORGE, REPO, numbers[1]).reviews:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(HOLD_S)

        async def hold_the_first() -> None:
            seen.append(tuple(n for n in numbers if sim.pull(FORGE, REPO, n).merged))
            arrived[min(len(seen), 2) - 1].set()
            if len(seen) == 1:  # until the second merge call arrives, or long after it could
                waits = [
                    asyncio.ensure_future(arrived[1].wait()),
                    asyncio.ensure_future(second_is_trying()),
                ]
                _, pending = await asyncio.wait(
                    waits, timeout=4 * WAIT_S, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()

        sim.faults.add(
            forge=FORGE,
            method="PUT",
            path=f"/repos/{REPO}/pulls/*/merge",
            times=None,
            before=hold_the_first,
        )
        url = postgres_store_url
        async with replica(config, tmp_path / "a", url) as a:
            # A reviews, approves and starts merging the first PR; while that merge call is
            # in flight, B starts (so it cannot take up A's delivery) and is handed the second.
            sim.set_webhook(FORGE, url=a.base + "/webhooks/github", secret=GITHUB_SECRET)
            sent = await sim.deliver_pull_request(FORGE, REPO, numbers[0])
            assert sent.status == 202
            await asyncio.wait_for(arrived[0].wait(), WAIT_S)
            async with replica(config, tmp_path / "b", url) as b:
                sim.set_webhook(FORGE, url=b.base + "/webhooks/github", secret=GITHUB_SECRET)
                sent = await sim.deliver_pull_request(FORGE, REPO, numbers[1])
                assert sent.status == 202
                async with asyncio.timeout(6 * WAIT_S):
                    while True:
                        if all(sim.pull(FORGE, REPO, n).merged for n in numbers):
                            break
                        await asyncio.sleep(0.05)
                # Any late attempt (an event of a merged PR) would have reached the forge by now.
                await asyncio.sleep(1.0)
                logs = {"a": await a.stop(), "b": await b.stop()}
        # Each replica merged the PR it was handed: the lane was contended across processes.
        assert f"automerged {FORGE}:{REPO}#{numbers[0]}/merger" in logs["a"]
        assert f"automerged {FORGE}:{REPO}#{numbers[1]}/merger" in logs["b"]
        # One at a time: the second merge call arrived after the first PR had merged ...
        assert seen == [(), (numbers[0],)]
        calls = [
            (i, r)
            for i, r in enumerate(sim.requests)
            if r.method == "PUT" and r.path.endswith("/merge")
        ]
        merged_by_call = [int(r.path.split("/")[-2]) for _, r in calls]
        assert merged_by_call == numbers  # in order, each PR's merge sent exactly once
        # ... and the second PR was read again between the two merge calls (over REST, or by
        # GitHub's one GraphQL read of the pull).
        (first_i, _), (second_i, _) = calls
        reread = [
            r
            for r in sim.requests[first_i + 1 : second_i]
            if (r.method == "GET" and r.path == f"/repos/{REPO}/pulls/{numbers[1]}")
            or (
                r.method == "POST"
                and r.path == "/graphql"
                and isinstance(r.body, dict)
                and (r.body.get("variables") or {}).get("number") == numbers[1]
            )
        ]
        assert reread, "the second PR was not checked again after the first merge"
