"""Two real ``serve`` replicas on one PostgreSQL database, one killed with SIGKILL while it
holds claims: every acknowledged delivery is gated exactly once, by one of them, and the
survivor takes up the dead replica's deliveries when their claims lapse.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from reviewbot.store import decisions, journal
from reviewbot.store.database import Database
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import GITHUB_SECRET, WAIT_S, sim_world
from tests.integration.test_server_crash import write_config

pytestmark = pytest.mark.slow

PER_REPLICA = 4
CLAIM_S = 2.0  # the replicas' claim term: short, so the test waits seconds, not minutes


@asynccontextmanager
async def replica(config: Path, data_dir: Path, url: str) -> AsyncIterator[tuple[str, int]]:
    env = {
        **os.environ,
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_DATABASE_URL": url,
        "REVIEWBOT_WORKERS": "2",
        "REVIEWBOT_DELIVERY_CLAIM_S": str(CLAIM_S),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reviewbot",
        "serve",
        "--port",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        base = ""
        async with asyncio.timeout(WAIT_S):
            while not base:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError("the replica exited before listening")
                if "listening on " in line:
                    base = line.split("listening on ", 1)[1].split()[0]
        yield base, proc.pid
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def all_finished(db: Database, ids: list[str]) -> None:
    async with asyncio.timeout(WAIT_S):
        while True:
            states = [journal.get_delivery(db, d) for d in ids]
            if all(s is not None and s.status in ("done", "failed") for s in states):
                return
            await asyncio.sleep(0.05)


async def test_a_killed_replicas_deliveries_are_gated_once_by_the_survivor(
    tmp_path: Path, postgres_store_url: str
) -> None:
    config = tmp_path / "reviewbot.toml"
    async with sim_world(tmp_path / "sim-data") as world:
        write_config(world, config)
        pulls = [
            world.sim.open_pr("github", "acme/api", author="alice", head_ref=f"b{i}")
            for i in range(2 * PER_REPLICA)
        ]
        doomed, survivors = pulls[:PER_REPLICA], pulls[PER_REPLICA:]
        killed = asyncio.Event()

        async def hang() -> None:
            await killed.wait()

        for pr in doomed:  # the forge hangs for these: the first replica dies mid-gate
            # Held until the kill, not for a time: a read of these by the survivor (it claims
            # from the same queue) keeps its claim renewed, and must not wait out a timeout.
            world.sim.faults.add(
                forge="github",
                method="GET",
                path=f"/repos/acme/api/pulls/{pr.number}",
                before=hang,
                times=1,
            )
        url = postgres_store_url
        acknowledged: dict[str, str] = {}
        async with (
            replica(config, tmp_path / "a", url) as (base_a, pid_a),
            replica(config, tmp_path / "b", url) as (base_b, _),
        ):
            for base, batch in ((base_a, doomed), (base_b, survivors)):
                world.sim.set_webhook("github", url=base + "/webhooks/github", secret=GITHUB_SECRET)
                for pr in batch:
                    sent = await world.sim.deliver_pull_request("github", "acme/api", pr.number)
                    assert sent.status == 202
                    acknowledged[sent.id] = base
            db = open_store(WorkflowPaths(tmp_path / "reader", None, url))
            try:
                # The first replica has claimed its deliveries and hangs on the forge.
                theirs = [d for d, base in acknowledged.items() if base == base_a]
                async with asyncio.timeout(WAIT_S):
                    while True:
                        states = [journal.get_delivery(db, d) for d in theirs]
                        if all(s is not None and s.status == "processing" for s in states):
                            break
                        await asyncio.sleep(0.05)
                # Both replicas claim from the one queue: what the first holds when it dies is
                # what the survivor must take over once the claims lapse.
                with db.read() as tx:
                    held = tx.all(
                        "SELECT delivery_id, claimed_by FROM deliveries WHERE status = 'processing'"
                    )
                dead_holder = f"/pid-{pid_a}/"
                held_by_a = {
                    r["delivery_id"] for r in held if dead_holder in (r["claimed_by"] or "")
                }
                assert held_by_a  # the first replica was killed holding claims
                os.kill(pid_a, signal.SIGKILL)
                killed.set()
                # The survivor finishes its own, then the dead one's after their claims lapse.
                await all_finished(db, list(acknowledged))
                for delivery_id in acknowledged:
                    rows = decisions.for_delivery(db, delivery_id)
                    assert [r.decision for r in rows] == ["eligible"], delivery_id
                with db.read() as tx:
                    finished = tx.all("SELECT delivery_id, claimed_by FROM deliveries")
                taken_over = {r["delivery_id"]: r["claimed_by"] for r in finished}
                # Each claim the dead replica held was finished by the survivor.
                assert all(dead_holder not in (taken_over[d] or dead_holder) for d in held_by_a), (
                    taken_over
                )
            finally:
                killed.set()  # no held request outlives the test
                db.close()
