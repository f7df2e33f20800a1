"""Claims renewed by a real ``python -m reviewbot serve`` while long work runs.

An external reviewer that outlasts the review job's claim term (``leases.lease_s``) several
times runs once and the head gets one review: the job keeps its claim, so the resume loop
does not start a second run. On PostgreSQL with two replicas, a gate held up by the forge for
longer than ``delivery_claim_s`` keeps its claim: the other replica never gates the delivery
a second time, and it gets one decision and one review job. The test holds the slow part
itself (a file the reviewer waits for, a forge request held by the simulator) and releases
it once the claim has been renewed past terms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store import decisions, journal
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.process_support import ServeProcess, serve_process
from tests.integration.review_support import (
    APPROVED,
    REPO,
    SECRET,
    START_S,
    bot_env,
    outbox_rows,
    prepare_sim,
    stop_bot,
    wait_for,
)
from tests.integration.runtime.review.test_review_external import writable_by_reviewers
from tests.integration.runtime.review.test_review_intent import bot_reviews, jobs
from tests.integration.server.test_server_crash import write_config
from tests.integration.server_support import GITHUB_SECRET, sim_world

pytestmark = pytest.mark.slow

LEASE_S = 2.0  # the review job's claim term (bot_env)
CLAIM_S = 2.0  # the replicas' delivery claim term: short, so the test waits seconds


def replica(
    config: Path, data_dir: Path, url: str
) -> contextlib.AbstractAsyncContextManager[ServeProcess]:
    env = {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_DATABASE_URL": url,
        "REVIEWBOT_WORKERS": "2",
        "REVIEWBOT_DELIVERY_CLAIM_S": str(CLAIM_S),
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    return serve_process(cwd=data_dir, env=env)


# Counts its runs, then waits for the release file the test creates.
WAITING_REVIEWER = """\
import os, sys, time
folder = os.path.dirname(os.path.abspath(sys.argv[1]))
with open(sys.argv[1], "a") as runs:
    runs.write(os.environ["VAR_HEAD_SHA"] + "\\n")
while not os.path.exists(os.path.join(folder, "release")):
    time.sleep(0.05)
print("[]")
"""


def config_with_reviewer(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the configuration, the reviewer's runs file, its release file)."""
    folder = tmp_path / "reviewers"
    folder.mkdir()
    writable_by_reviewers(folder)
    script = folder / "waits.py"
    script.write_text(WAITING_REVIEWER)
    runs = folder / "waits.runs"
    command = shlex.join([sys.executable, str(script), str(runs)])
    entry = f"{{ command = {json.dumps(command)}, grants = [{{ path = {json.dumps(str(folder))}"
    entry += ', mode = "rw" }] }'
    config = tmp_path / "with-reviewer.toml"  # bot_env writes reviewbot.toml
    config.write_text(
        "".join(f'[repos."{f}:{REPO}"]\nreviewers = [{entry}]\n' for f in ("github", "gitea"))
    )
    return config, runs, folder / "release"


def runs_of(runs: Path) -> list[str]:
    return runs.read_text().split() if runs.exists() else []


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_reviewer_outlasting_the_job_claim_runs_once_and_reviews_once(
    tmp_path: Path, forge: str
) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        config, runs, release = config_with_reviewer(tmp_path)
        env = {**bot_env(tmp_path, sim_server, prepare_sim(sim)), "REVIEWBOT_CONFIG": str(config)}
        assert float(env["REVIEWBOT_LEASES__LEASE_S"]) == LEASE_S
        pr = sim.open_pr(forge, REPO, author="alice")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        async with serve_process(cwd=tmp_path, env=env, start_s=START_S) as bot:
            try:
                sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
                await sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
                await wait_for(lambda: runs_of(runs) == [pr.head_sha], "the reviewer to start")

                # The reviewer holds the job past three claim terms: the claim is renewed. (The
                # start-up sweep may gate the head too: its job waits for the same PR meanwhile,
                # and is renewed as well.)
                def renewed() -> bool:
                    return all(
                        j["claim_until"] > j["created_at"] + 3 * LEASE_S for j in jobs(tmp_path)
                    )

                await wait_for(renewed, "the job's claim renewed past three terms")
                release.touch()
                await wait_for(
                    lambda: (
                        {j["status"] for j in jobs(tmp_path)} == {"done"}
                        and [r["status"] for r in outbox_rows(tmp_path)] == ["posted"]
                    ),
                    "the review",
                )
            finally:
                release.touch()
                await stop_bot(bot)
    assert runs_of(runs) == [pr.head_sha]  # one reviewer run, never a second
    # Once the reviewer started, the job was never taken over (a second run would show in
    # ``runs``). Its attempts are not pinned: on a loaded machine a 2 s first term may lapse
    # between the gate and the job's start, and the job is then started once, elsewhere.
    assert {(j["head_sha"], j["status"], j["last_error"]) for j in jobs(tmp_path)} == {
        (pr.head_sha, "done", None)
    }
    reviews = bot_reviews(sim, forge, pr.number)
    assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]


async def test_replicas_a_gate_held_by_the_forge_past_its_claim_is_gated_once(
    tmp_path: Path, postgres_store_url: str
) -> None:
    config = tmp_path / "reviewbot.toml"
    async with sim_world(tmp_path / "sim-data") as world:
        write_config(world, config)
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        held, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            held.set()
            await release.wait()

        # The gate's read of the PR (GitHub's GraphQL query) is held by the forge (answered
        # slowly, within timeouts).
        slow = world.sim.faults.add(forge="github", method="POST", path="/graphql", before=hold)
        url = postgres_store_url
        db = open_store(WorkflowPaths(tmp_path / "reader", None, url))
        try:
            async with (
                replica(config, tmp_path / "a", url) as a,
                replica(config, tmp_path / "b", url),
            ):
                world.sim.set_webhook(
                    "github", url=a.base + "/webhooks/github", secret=GITHUB_SECRET
                )
                sent = await world.sim.deliver_pull_request("github", "acme/api", pr.number)
                assert sent.status == 202
                await asyncio.wait_for(held.wait(), 30)
                first = journal.get_delivery(db, sent.id)
                assert first is not None and first.status == "processing"
                with db.read() as tx:
                    row = tx.one(
                        "SELECT claim_until FROM deliveries WHERE delivery_id = ?", (sent.id,)
                    )
                assert row is not None
                first_until = float(row["claim_until"])

                def renewed_or_taken() -> bool:
                    with db.read() as tx:
                        now = tx.one(
                            "SELECT claim_until, claimed_by, attempts FROM deliveries"
                            " WHERE delivery_id = ?",
                            (sent.id,),
                        )
                    assert now is not None
                    if now["claimed_by"] != first.claimed_by or int(now["attempts"]) > 1:
                        return True  # taken over: the assertions below say so
                    # Renewed so far that the first term has lapsed by the wall clock.
                    return bool(
                        now["claim_until"] > first_until + CLAIM_S and time.time() > first_until
                    )

                await wait_for(renewed_or_taken, "the claim renewed past its first term")
                release.set()

                def finished() -> bool:
                    stored = journal.get_delivery(db, sent.id)
                    return stored is not None and stored.status == "done"

                await wait_for(finished, "the delivery gated")
                stored = journal.get_delivery(db, sent.id)
                assert stored is not None
                assert (stored.attempts, stored.claimed_by) == (1, first.claimed_by)
                rows = decisions.for_delivery(db, sent.id)
                assert [r.decision for r in rows] == ["eligible"]
                with db.read() as tx:
                    review_jobs = tx.all("SELECT id FROM review_jobs")
                assert len(review_jobs) == 1  # one review intent, from the one gate
                assert slow.hits == 1
        finally:
            release.set()
            db.close()
