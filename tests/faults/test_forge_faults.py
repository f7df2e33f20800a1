"""The forge fails under a real ``serve``: 5xx, rate limits and timeouts on reads, and a
review the forge applied but whose answer never came back. Every acknowledged delivery ends
with a decision and each head has exactly one review. ``/readyz`` names a forge it cannot
reach, with its URL, and is ready again when the forge returns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from reviewbot.sim.records import Delivery
from tests.faults.support import (
    LIMIT_S,
    REPO,
    World,
    acked_ids,
    all_finished,
    assert_every_acked_delivery_finished,
    assert_one_review_per_head,
    review_jobs_settled,
    wait_for,
    wait_ready,
    world,
)

pytestmark = pytest.mark.slow


async def test_forge_errors_and_timeouts_lose_no_delivery_and_post_no_review_twice(
    tmp_path: Path,
) -> None:
    # The reconcile sweep gates again the heads whose delivery met a forge error.
    # The forge timeout is 1 s, so that the held answers below (1.5 s) time out.
    settings = {"REVIEWBOT_RECONCILE_INTERVAL_S": "1", "REVIEWBOT_FORGE_TIMEOUT_S": "1"}
    async with world(tmp_path, settings=settings) as w:
        pulls = []
        for i in range(10):
            forge = ("github", "gitea")[i % 2]
            pr = w.sim.open_pr(forge, REPO, author="alice")
            w.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
            pulls.append((forge, pr))
        faults = w.sim.faults
        for forge in ("github", "gitea"):
            # About one request in five fails: reads answer 502 / 503 / 429, or are held past
            # the client's 1 s timeout; one review is applied but its answer is a timeout,
            # another is applied and answered 502.
            faults.add(forge, "GET", f"/repos/{REPO}/pulls/*", status=502, times=3)
            faults.add(forge, "GET", f"/repos/{REPO}/pulls/*", status=503, times=1)
            faults.add(forge, "GET", f"/repos/{REPO}/commits/*", timeout=1.5, times=2)
            faults.add(forge, "GET", f"/repos/{REPO}/*", status=429, retry_after=0.1, times=2)
            faults.add(
                forge, "POST", f"/repos/{REPO}/pulls/*/reviews", apply_then_fail=True, timeout=1.5
            )
            faults.add(
                forge, "POST", f"/repos/{REPO}/pulls/*/reviews", apply_then_fail=True, status=502
            )
        async with w.serving():
            sent = [
                await acknowledged(w, await w.sim.deliver_pull_request(f, REPO, pr.number))
                for f, pr in pulls
            ]
            acked = acked_ids(sent)
            await wait_for(lambda: all_finished(w, acked), "every acknowledged delivery")
            await wait_for(lambda: review_jobs_settled(w), "the reviews")
            await wait_for(
                lambda: all(w.bot_reviews(f, pr.number) for f, pr in pulls), "a review per head"
            )
        injected = sum(rule.hits for rule in faults.rules)
        assert injected >= 12, [(r.method, r.path, r.hits) for r in faults.rules]
        assert_every_acked_delivery_finished(w, acked)
        assert_one_review_per_head(w, pulls)


async def acknowledged(w: World, delivery: Delivery) -> Delivery:
    """``delivery`` once the bot acknowledged it. The forges wait 10 s for an answer and do
    not retry; on a machine loaded enough to miss that, the delivery is sent again as an
    operator would from the forge's list of deliveries (at most twice)."""
    for _ in range(2):
        if delivery.status is not None and 200 <= delivery.status < 300:
            break
        delivery = await w.sim.redeliver(delivery)
    assert delivery.status is not None and 200 <= delivery.status < 300, (
        delivery.status,
        delivery.error,
        delivery.response_body[:300],
    )
    return delivery


async def test_readyz_says_which_forge_is_unreachable_until_it_returns(tmp_path: Path) -> None:
    # Probe answers are reused for a second here (ten by default): the outage shows sooner.
    probes = {"REVIEWBOT_FORGE_PROBE_TTL_S": "1"}
    async with world(tmp_path, settings=probes) as w, w.serving() as bot:
        body = await wait_ready(w, bot)
        forges = {c["name"]: c for c in body["checks"] if c["name"].startswith("forge_")}
        assert set(forges) == {"forge_github", "forge_gitea"}
        assert all("answers as reviewbot" in c["detail"] for c in forges.values()), forges

        await w.sim_server.stop()  # the bot_login is configured: only a live request can tell
        # A probe's answer is reused for forge_probe_ttl_s (anyone may ask /readyz, and each
        # probe spends the bot's rate limit): the outage shows within that time.
        deadline = time.monotonic() + LIMIT_S
        # Each forge's answer ages on its own, so one may fail before the other.
        both = {"forge_github", "forge_gitea"}
        while True:
            status, body = await w.get(bot, "/readyz")
            if set(body.get("failing", ())) == both or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert status == 503, body
        assert set(body["failing"]) == both, body
        details = {c["name"]: c["detail"] for c in body["checks"]}
        assert details["forge_github"].startswith(f"unreachable: {w.sim_server.github_api_url}")
        assert details["forge_gitea"].startswith(f"unreachable: {w.sim_server.gitea_url}")
        code, out = w.run_cli("doctor")
        assert code == 1 and "FAIL forge_github" in out and "unreachable" in out, out

        await w.sim_server.start()  # the same address again
        body = await wait_ready(w, bot)
        assert all(c["ok"] for c in body["checks"]), body
