"""Review requests at an unchanged head, against a real server over HTTP and the forge
simulator, with a fake clock: a burst of requests (REST, MCP ``review_pr``, Crew) for one PR
is one evaluation and one state comment, not one evaluation and one comment edit each; the
head is judged again once ``review_request_dedupe_s`` has passed, and a forge event still
re-evaluates as before."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from reviewbot.server.app import create_app
from reviewbot.service import Parts, Service, build_service
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.tokens import create_token
from tests.integration.mcp_support import mcp_http, ok
from tests.integration.review_support import (
    BOT,
    REPO,
    make_settings,
    prepare_sim,
)
from tests.integration.server_support import WAIT_S
from tests.support.clock import FakeClock

FORGE = "gitea"
WINDOW_S = 60.0
UNLIMITED = {f"{c}_per_s": 0 for c in ("review", "lease", "merge", "tools")}


@dataclass
class World:
    sim: Simulator
    service: Service
    base: str
    http: aiohttp.ClientSession
    clock: FakeClock
    token: str

    async def settle(self) -> None:
        """Until every delivery is gated and reviewed (the review runs in the gate's hook)."""
        assert self.service.pool is not None
        await asyncio.wait_for(self.service.pool.wait_idle(), WAIT_S)

    def evaluations(self, number: int) -> list[str]:
        assert self.service.review is not None
        found = self.service.review.store.decisions(FORGE, REPO, number)
        return [d.decision for d in reversed(found) if d.decision not in ("posted",)]

    def writes(self) -> list[Any]:
        return [r for r in self.sim.requests_for(FORGE) if r.method != "GET"]

    def reads_of(self, route_part: str) -> int:
        return sum(1 for r in self.sim.requests_for(FORGE, "GET") if route_part in r.route)

    def bot_comments(self, number: int) -> list[Any]:
        return [c for c in self.sim.pull(FORGE, REPO, number).comments if c.user == BOT]

    async def request(self, path: str, body: dict[str, Any]) -> int:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(self.base + path, json=body, headers=headers) as resp:
            return resp.status


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    sim = Simulator()
    clock = FakeClock()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        settings = make_settings(
            tmp_path / "data",
            sim_server,
            tokens,
            review_request_dedupe_s=WINDOW_S,
            rate_limits=UNLIMITED,  # the dedupe alone, not the rate limit, is measured here
        )
        service = build_service(
            settings, parts=Parts.SERVE & ~Parts.RECONCILE, clock=clock, shutdown_grace_s=2.0
        )
        runner = web.AppRunner(create_app(service), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        sim.set_webhook(FORGE, url=f"{base}/webhooks/{FORGE}", secret="s3cret")
        try:
            assert service.db is not None
            token, _ = create_token(
                service.db, name="agent", scopes="review", repo=None, now=clock.now
            )
            async with aiohttp.ClientSession() as http:
                yield World(sim, service, base, http, clock, token)
        finally:
            with contextlib.suppress(Exception):
                await runner.cleanup()


def crew(number: int, call_id: str) -> dict[str, Any]:
    return {
        "variables": {"forge": FORGE, "repo": REPO, "number": number},
        "payload": {"function": "review", "call_id": call_id},
    }


async def test_a_burst_of_requests_at_an_unchanged_head_is_one_evaluation(world: World) -> None:
    pr = world.sim.open_pr(FORGE, REPO, author="alice")
    world.sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", "pending")
    world.sim.clear_requests()
    review = {"forge": FORGE, "repo": REPO, "number": pr.number}

    assert await world.request("/api/v1/reviews", review) == 202
    await world.settle()
    assert world.evaluations(pr.number) == ["waiting"]
    (comment,) = world.bot_comments(pr.number)
    first_writes = len(world.writes())
    assert first_writes == 1  # the state comment, created
    checks_read = world.reads_of("/status")

    for n in range(120):
        assert await world.request("/api/v1/reviews", review) == 202
        assert await world.request("/webhooks/crew", crew(pr.number, f"call-{n}")) == 202
    async with mcp_http(world.base, world.token) as client:
        for _ in range(40):
            ok(await client.call_tool("review_pr", review))
    await world.settle()

    # 280 more requests: one evaluation in all, no other check read, no write at all.
    assert world.evaluations(pr.number) == ["waiting"]
    assert world.reads_of("/status") == checks_read
    assert len(world.writes()) == first_writes
    (same,) = world.bot_comments(pr.number)
    assert same.body == comment.body

    # Once the window has passed, a request judges the head again (a check webhook may have
    # been lost); the next burst is again one evaluation.
    world.clock.now += WINDOW_S
    for _ in range(20):
        assert await world.request("/api/v1/reviews", review) == 202
    await world.settle()
    assert world.evaluations(pr.number) == ["waiting", "waiting"]
    assert world.reads_of("/status") == 2 * checks_read


async def requested(world: World, check: str) -> tuple[Any, dict[str, Any]]:
    """A new PR whose ci/test is ``check``, reviewed once on request: it and the request."""
    pr = world.sim.open_pr(FORGE, REPO, author="alice")
    world.sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", check)
    review = {"forge": FORGE, "repo": REPO, "number": pr.number}
    assert await world.request("/api/v1/reviews", review) == 202
    await world.settle()
    return pr, review


async def test_an_approved_head_is_never_evaluated_again_on_request(world: World) -> None:
    pr, review = await requested(world, "success")
    assert world.evaluations(pr.number) == ["approve"]
    world.sim.clear_requests()
    world.clock.now += 10 * WINDOW_S
    for _ in range(30):
        assert await world.request("/api/v1/reviews", {**review, "head_sha": pr.head_sha}) == 202
    await world.settle()
    assert world.evaluations(pr.number) == ["approve"]
    assert world.writes() == []


async def test_a_check_event_still_reevaluates_a_waiting_head(world: World) -> None:
    pr, review = await requested(world, "pending")
    status = world.sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", "success")
    await world.sim.deliver_status(FORGE, REPO, status.id)
    await world.settle()
    assert world.evaluations(pr.number) == ["waiting", "approve"]
    # A new head is a new evaluation, whatever the window.
    world.sim.push(FORGE, REPO, pr.number)
    new_head = world.sim.pull(FORGE, REPO, pr.number).head_sha
    world.sim.set_status(FORGE, REPO, new_head, "ci/test", "pending")
    assert await world.request("/api/v1/reviews", review) == 202
    await world.settle()
    assert world.evaluations(pr.number) == ["waiting", "approve", "superseded", "waiting"]
