"""The process stops at the worst moments of a burst, on a real ``serve``: kill -9 after the
gate and at each later step of a review, and SIGTERM while an external reviewer outlasts the
shutdown grace. After the restarts every acknowledged delivery is finished and each head has
exactly one review: never lost, never posted twice."""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.faults.support import (
    REPO,
    acked_ids,
    all_finished,
    assert_every_acked_delivery_finished,
    assert_one_review_per_head,
    review_jobs_settled,
    start,
    stop,
    wait_for,
    world,
)

pytestmark = pytest.mark.slow

CRASH = "REVIEWBOT_TEST_CRASH_AT"  # the process exits 137 there, as if killed


async def test_kill_9_at_each_step_of_a_burst_then_one_review_per_head(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        pulls = []
        for i in range(6):
            forge = ("github", "gitea")[i % 2]
            pr = w.sim.open_pr(forge, REPO, author="alice")
            w.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
            pulls.append((forge, pr))
        sent = []
        for crash_at in ("after_gate", "after_outbox", "after_post"):
            bot = await start(w.env | {CRASH: crash_at})
            w.point_webhooks(bot)
            try:
                # The burst goes on while the process dies: what it answered 202 is kept.
                for forge, pr in pulls:
                    sent.append(await w.sim.deliver_pull_request(forge, REPO, pr.number))
                    if bot.proc.returncode is not None:
                        break
                assert await asyncio.wait_for(bot.proc.wait(), 30) == 137
            finally:
                await stop(bot)
        acked = acked_ids(sent)
        assert acked
        async with w.serving():
            await wait_for(lambda: all_finished(w, acked), "every acknowledged delivery")
            await wait_for(lambda: review_jobs_settled(w), "the resumed reviews")
            # Heads whose every delivery was refused are reviewed by the next delivery.
            for forge, pr in pulls:
                if not w.bot_reviews(forge, pr.number):
                    acked += acked_ids([await w.sim.deliver_pull_request(forge, REPO, pr.number)])
            await wait_for(lambda: all_finished(w, acked), "the deliveries sent again")
            await wait_for(lambda: review_jobs_settled(w), "the last reviews")
        assert_every_acked_delivery_finished(w, acked)
        assert_one_review_per_head(w, pulls)


# Runs once per start of the server: the first run hangs far past the grace, later ones
# approve at once. Each run appends a line to the file it is given.
SLOW_ONCE = """\
import os, sys, time
runs = sys.argv[1]
first = not os.path.exists(runs)
with open(runs, "a") as f:
    f.write(os.environ.get("VAR_HEAD_SHA", "?") + "\\n")
if first:
    time.sleep(60)
print("[]")
"""


async def test_sigterm_while_a_reviewer_outlasts_the_grace_then_one_review(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "reviewer"
    folder.mkdir()
    script = folder / "slow_once.py"
    script.write_text(SLOW_ONCE)
    runs = folder / "runs"
    command = shlex.join([sys.executable, str(script), str(runs)])
    rules = (
        f"reviewers = [{{command = {command!r}, grants = "
        f"[{{path = {str(folder)!r}, mode = 'rw'}}]}}]"
    )
    grace = 1.0
    async with world(tmp_path, rules=rules, settings={"REVIEWBOT_SANDBOX": "off"}) as w:
        pr = w.sim.open_pr("gitea", REPO, author="alice")
        w.sim.set_status("gitea", REPO, pr.head_sha, "ci/test", "success")
        bot = await start(w.env, "--shutdown-grace", str(grace))
        w.point_webhooks(bot)
        try:
            delivery = await w.sim.deliver_pull_request("gitea", REPO, pr.number)
            assert delivery.status == 202
            await wait_for(runs.exists, "the reviewer to start")
            stopping = time.monotonic()
            bot.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(bot.proc.wait(), 30)
            took = time.monotonic() - stopping
        finally:
            await stop(bot)
        # It stopped within the grace (plus the time to close), not after the reviewer.
        assert took < grace + 5.0, took
        assert w.bot_reviews("gitea", pr.number) == []
        # Still claimable (the start-up sweep may have queued a job for the head too).
        jobs = w.rows("SELECT status, head_sha FROM review_jobs")
        assert jobs and {(j["status"], j["head_sha"]) for j in jobs} == {("queued", pr.head_sha)}

        async with w.serving():
            await wait_for(lambda: review_jobs_settled(w), "the resumed review")
            await wait_for(lambda: bool(w.bot_reviews("gitea", pr.number)), "the review")
        assert_every_acked_delivery_finished(w, [delivery.id])
        assert_one_review_per_head(w, [("gitea", pr)])
        assert len(runs.read_text().split()) == 2  # cut short once, run again once
