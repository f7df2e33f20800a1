"""Transient store write errors under a real ``serve``: the operating system refuses the
server's file writes (its file-size limit, lowered with ``prlimit``), so SQLite fails every
write with an I/O error as on a failing or full disk. While it lasts, no delivery is
acknowledged that was not stored, and ``/readyz`` names ``store_writable``; once it clears,
every acknowledged delivery is gated, each head reviewed once, and the pool is whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.faults.support import (
    REPO,
    all_finished,
    assert_every_acked_delivery_finished,
    assert_one_review_per_head,
    every_head_reviewed,
    review_jobs_settled,
    unreviewed,
    wait_for,
    wait_ready,
    world,
)

pytestmark = pytest.mark.slow


async def test_disk_errors_lose_nothing_acknowledged_and_health_says_so(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        pulls = []
        for i in range(8):
            forge = ("github", "gitea")[i % 2]
            # One delivery during the fault outgrows SQLite's page cache (3 MB of PR text):
            # its insert spills mid-transaction, and SQLite rolls the transaction back itself.
            body = "x" * 3_000_000 if i == 5 else ""
            pr = w.sim.open_pr(forge, REPO, author="alice", body=body)
            w.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
            pulls.append((forge, pr))
        async with w.serving() as bot:
            before = [await w.sim.deliver_pull_request(f, REPO, pr.number) for f, pr in pulls[:4]]
            assert {d.status for d in before} == {202}

            bot.limit_file_size(0)  # the disk fails: no file of the server grows any more
            status, body = await w.get(bot, "/readyz")
            assert status == 503, body
            assert "store_writable" in body["failing"], body
            (check,) = [c for c in body["checks"] if c["name"] == "store_writable"]
            assert "disk I/O error" in check["detail"] or "full" in check["detail"], check

            during = await asyncio.gather(
                *(w.sim.deliver_pull_request(f, REPO, pr.number) for f, pr in pulls[4:])
            )
            # Not stored, so not acknowledged: the forge is told to deliver again.
            refused = [d for d in during if d.status != 202]
            assert refused, "the disk fault refused nothing"
            assert all(
                d.status == 503 and b"store_unavailable" in d.response_body for d in refused
            ), [(d.status, d.response_body) for d in during]
            status, _ = await w.get(bot, "/healthz")
            assert status in (200, 503)  # it answers; reads still work or it says why

            bot.limit_file_size(None)  # the disk is back
            await wait_ready(w, bot)
            again = [
                await w.sim.deliver_pull_request(d.forge, REPO, d.payload["number"])
                for d in refused
            ]
            assert {d.status for d in again} <= {202}
            acked = [d.id for d in before + during + again if d.status == 202]
            await wait_for(lambda: all_finished(w, acked), "every acknowledged delivery")
            await wait_for(lambda: review_jobs_settled(w), "the reviews")
            await wait_for(
                lambda: every_head_reviewed(w, pulls),
                "a review at every head",
                explain=lambda: unreviewed(w, pulls),
            )
            status, body = await w.get(bot, "/readyz")
            assert status == 200, body
            (workers,) = [c for c in body["checks"] if c["name"] == "workers_alive"]
            assert workers["ok"], workers
        assert_every_acked_delivery_finished(w, acked)
        assert_one_review_per_head(w, pulls)
