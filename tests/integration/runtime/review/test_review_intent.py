"""The durable review intent, with a real ``python -m reviewbot serve`` process.

The gate's eligible decision and its review job are committed together; a process that stops
before the review is done (kill -9 at each step, or SIGTERM while the review waits on the
forge longer than the shutdown grace) leaves the job claimable, and the next start reviews
the head: exactly one review per head, on both forges.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseStore
from tests.integration.process_support import serve_process
from tests.integration.review_support import (
    APPROVED,
    BOT,
    REPO,
    SECRET,
    START_S,
    bot_env,
    outbox_rows,
    prepare_sim,
    serve_until_crash,
    stop_bot,
    wait_for,
)

pytestmark = pytest.mark.slow

FORGES = ("github", "gitea")


def jobs(tmp_path: Path) -> list[dict[str, Any]]:
    db = SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite")
    try:
        with db.read() as tx:
            return [dict(r) for r in tx.all("SELECT * FROM review_jobs ORDER BY id")]
    finally:
        db.close()


def bot_reviews(sim: Simulator, forge: str, number: int) -> list[Any]:
    return [r for r in sim.pull(forge, REPO, number).reviews if r.user == BOT]


async def restart_and_expect_one_review(
    tmp_path: Path, sim: Simulator, env: dict[str, str], forge: str, pr: Any
) -> None:
    async with serve_process(cwd=tmp_path, env=env, start_s=START_S) as bot:
        await wait_for(
            lambda: (
                bool(jobs(tmp_path))
                and all(j["status"] == "done" for j in jobs(tmp_path))
                and [r["status"] for r in outbox_rows(tmp_path)] == ["posted"]
            ),
            "the resumed review",
        )
        await stop_bot(bot)
    reviews = bot_reviews(sim, forge, pr.number)
    assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
    assert {(j["head_sha"], j["last_error"]) for j in jobs(tmp_path)} == {(pr.head_sha, None)}


@pytest.mark.parametrize("forge", FORGES)
async def test_a_review_blocked_by_a_dead_holders_lease_is_made_once_it_lapses(
    tmp_path: Path, forge: str
) -> None:
    """A process that died holding the PR's reviewer lease (a SIGTERM mid-review, a kill -9)
    leaves it for a lease term: a review job that meets it is tried again once its claim
    lapses, and the head is reviewed once; it is not finished as if another had reviewed."""
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        env = bot_env(tmp_path, sim_server, prepare_sim(sim))
        pr = sim.open_pr(forge, REPO, author="alice")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        leases = LeaseStore.open(SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite"))
        try:
            ghost = leases.workers.register(
                "dead-replica", client="test", session_id="1", role=Role.REVIEWER.value
            )
            target = LeaseTarget(forge, REPO, pr.number, Role.REVIEWER)
            leases.acquire(target, ghost.identity, pr.head_sha, ttl_s=3.0)
        finally:
            leases.db.close()
            leases.close()
        async with serve_process(cwd=tmp_path, env=env, start_s=START_S) as bot:
            sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
            await sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
            await wait_for(
                lambda: [r["status"] for r in outbox_rows(tmp_path)] == ["posted"],
                "the review after the dead holder's lease lapsed",
            )
            await stop_bot(bot)
        reviews = bot_reviews(sim, forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]


@pytest.mark.parametrize("crash_at", ["after_gate", "after_outbox", "after_post"])
@pytest.mark.parametrize("forge", FORGES)
async def test_kill_9_at_each_step_then_one_review(
    tmp_path: Path, forge: str, crash_at: str
) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        env = bot_env(tmp_path, sim_server, prepare_sim(sim))
        pr = sim.open_pr(forge, REPO, author="alice")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")

        await serve_until_crash(tmp_path, sim, env, forge, pr.number, crash_at)

        # The start-up sweep may gate the head too: a job per eligible decision, one review.
        left = [j for j in jobs(tmp_path) if j["status"] == "queued"]
        assert left and {(j["number"], j["head_sha"]) for j in left} == {(pr.number, pr.head_sha)}
        if crash_at == "after_gate":
            assert outbox_rows(tmp_path) == [] and bot_reviews(sim, forge, pr.number) == []
        await restart_and_expect_one_review(tmp_path, sim, env, forge, pr)


@pytest.mark.parametrize("forge", FORGES)
async def test_sigterm_while_the_review_outlasts_the_grace_then_one_review(
    tmp_path: Path, forge: str
) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        env = bot_env(tmp_path, sim_server, prepare_sim(sim))
        pr = sim.open_pr(forge, REPO, author="alice")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        # The review's reads hang longer than the shutdown grace: the check reads over REST,
        # and on GitHub the one GraphQL read (and the REST reads it would fall back to).
        path = f"/repos/{REPO}/commits/*"
        slow = sim.faults.add(forge=forge, method="GET", path=path, times=None, delay=20.0)
        if forge == "github":
            slow = sim.faults.add(
                forge=forge, method="POST", path="/graphql", times=None, delay=20.0
            )

        async with serve_process(
            "--shutdown-grace", "0.5", cwd=tmp_path, env=env, start_s=START_S
        ) as bot:
            sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
            await sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
            await wait_for(lambda: slow.hits > 0 and bool(jobs(tmp_path)), "the review to start")
            bot.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(bot.proc.wait(), 15)

        # Nothing was posted or decided: the job waits, queued.
        assert [j["status"] for j in jobs(tmp_path)].count("queued") >= 1
        assert outbox_rows(tmp_path) == []
        assert bot_reviews(sim, forge, pr.number) == []
        sim.faults.clear()
        await restart_and_expect_one_review(tmp_path, sim, env, forge, pr)
