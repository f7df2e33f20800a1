"""Deliveries through the real server to recorded decisions, against the forge simulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.runtime.ingestion.gate_runner import EligiblePull
from tests.integration.server_support import (
    Running,
    SimWorld,
    point_webhooks,
    running_server,
    sim_world,
)


class Harness:
    def __init__(self, world: SimWorld, server: Running, eligible: list[EligiblePull]) -> None:
        self.world = world
        self.sim = world.sim
        self.server = server
        self.eligible = eligible


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    eligible: list[EligiblePull] = []

    async def on_eligible(event: EligiblePull) -> None:
        eligible.append(event)

    async with (
        sim_world(tmp_path / "data") as world,
        running_server(world.settings, on_eligible=on_eligible) as server,
    ):
        point_webhooks(world, server)
        yield Harness(world, server, eligible)


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_opened_pr_is_eligible_and_the_hook_hears_it(h: Harness, forge: str) -> None:
    pr = h.sim.open_pr(forge, "acme/api", author="alice")
    delivery = await h.sim.deliver_pull_request(forge, "acme/api", pr.number, action="opened")
    assert delivery.status == 202
    rows = await h.server.decisions_of(delivery.id)
    assert [(r.decision, r.reason_code) for r in rows] == [("eligible", "eligible")]
    assert (rows[0].forge, rows[0].repo, rows[0].number) == (forge, "acme/api", pr.number)
    assert rows[0].head_sha == pr.head_sha
    assert [e.pull.number for e in h.eligible] == [pr.number]
    assert h.eligible[0].decision.id == rows[0].id


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_redelivery_and_semantic_replay_act_once(h: Harness, forge: str) -> None:
    pr = h.sim.open_pr(forge, "acme/api", author="alice")
    first = await h.sim.deliver_pull_request(forge, "acme/api", pr.number, action="opened")
    await h.server.wait_done(first.id)
    # Same id (GitHub's redelivery): answered duplicate, nothing new recorded.
    same = await h.server.post(
        f"/webhooks/{forge}", first.body, {**first.headers, "Content-Type": "application/json"}
    )
    assert same == (200, {"delivery_id": first.id, "status": "duplicate"})
    # New id, same event (Gitea's manual replay): recorded as duplicate_delivery.
    headers = dict(first.headers)
    for key in list(headers):
        if key.lower().endswith("-delivery"):
            headers[key] = "replayed-" + first.id
    status, body = await h.server.post(f"/webhooks/{forge}", first.body, headers)
    assert status == 202, body
    rows = await h.server.decisions_of("replayed-" + first.id)
    assert [(r.decision, r.reason_code) for r in rows] == [("skip", "duplicate_delivery")]
    assert first.id in rows[0].detail
    assert len(h.eligible) == 1  # one action in all
    assert len(await h.server.decisions_of(first.id)) == 1


async def test_every_blocking_reason_is_recorded(h: Harness) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice", draft=True, base="main")
    delivery = await h.sim.deliver_pull_request("github", "acme/api", pr.number, action="opened")
    h.sim.push("github", "acme/api", pr.number)  # the head moves before the worker reads it
    rows = await h.server.decisions_of(delivery.id)
    assert rows[0].decision == "skip"
    codes = {r.code for r in rows[0].reasons}
    assert {"pr_draft"} <= codes
    assert not h.eligible


async def test_head_moved_is_never_acted_on(h: Harness) -> None:
    pr = h.sim.open_pr("gitea", "acme/api", author="alice")
    opened = await h.sim.deliver_pull_request("gitea", "acme/api", pr.number)
    await h.server.wait_done(opened.id)
    h.sim.push("gitea", "acme/api", pr.number)
    # A late delivery about the old head (another action, so not a replay of the first).
    late = json.loads(opened.body)
    late["action"] = "reopened"
    body = json.dumps(late).encode()
    status, _ = await h.server.gitea("pull_request", body, delivery_id="late-one")
    assert status == 202
    rows = await h.server.decisions_of("late-one")
    assert "head_moved" in [r.code for r in rows[0].reasons]


async def test_status_event_gates_each_open_pr_at_that_head(h: Harness) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice", head_ref="one")
    h.sim.set_status("github", "acme/api", pr.head_sha, context="ci/test", state="success")
    delivery = await h.sim.deliver_status("github", "acme/api")
    rows = await h.server.decisions_of(delivery.id)
    assert [(r.number, r.decision) for r in rows] == [(pr.number, "eligible")]


async def test_status_for_a_sha_without_open_prs_is_recorded(h: Harness) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice")
    h.sim.set_status("github", "acme/api", pr.head_sha, context="ci/test", state="success")
    h.sim.push("github", "acme/api", pr.number)
    delivery = await h.sim.deliver_status("github", "acme/api")
    rows = await h.server.decisions_of(delivery.id)
    assert [r.reason_code for r in rows] == ["no_open_pull_requests"]


async def test_unknown_pr_is_pr_not_found(h: Harness) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice")
    delivery = await h.sim.deliver_pull_request("github", "acme/api", pr.number)
    payload: dict[str, Any] = json.loads(delivery.body)
    payload["number"] = payload["pull_request"]["number"] = 999
    status, _ = await h.server.github(
        "pull_request", json.dumps(payload).encode(), delivery_id="ghost"
    )
    assert status == 202
    rows = await h.server.decisions_of("ghost")
    assert [(r.decision, r.reason_code) for r in rows] == [("error", "pr_not_found")]


@pytest.mark.parametrize(("status", "code"), [(401, "forge_auth_failed"), (422, "forge_error")])
async def test_forge_error_is_recorded_with_status(h: Harness, status: int, code: str) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice")
    h.sim.faults.add(
        forge="github",
        method="GET",
        path=f"/repos/acme/api/pulls/{pr.number}",
        status=status,
        times=10,
    )
    # the GraphQL read of the PR first: a 401 stands, anything else is read again over REST
    h.sim.faults.add(forge="github", method="POST", path="/graphql", status=status, times=10)
    delivery = await h.sim.deliver_pull_request("github", "acme/api", pr.number)
    rows = await h.server.decisions_of(delivery.id)
    assert rows[0].decision == "error"
    assert rows[0].reason_code == code
    assert str(status) in rows[0].detail
    stored = await h.server.wait_done(delivery.id)
    assert stored.status == "failed"


async def test_comment_command_needs_write_access(h: Harness) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice")
    by_reader = h.sim.add_comment("github", "acme/api", pr.number, "mallory", "/reviewbot review")
    denied = await h.sim.deliver_issue_comment("github", "acme/api", pr.number, by_reader.id)
    rows = await h.server.decisions_of(denied.id)
    assert "permission_denied" in [r.code for r in rows[0].reasons]
    by_writer = h.sim.add_comment("github", "acme/api", pr.number, "alice", "/reviewbot review")
    allowed = await h.sim.deliver_issue_comment("github", "acme/api", pr.number, by_writer.id)
    rows = await h.server.decisions_of(allowed.id)
    assert rows[0].decision == "eligible"


async def test_unconfigured_repository_is_skipped_with_the_reason(tmp_path: Path) -> None:
    async with (
        sim_world(tmp_path / "data", defaults=None) as world,
        running_server(world.settings) as server,
    ):
        point_webhooks(world, server)
        pr = world.sim.open_pr("gitea", "acme/api", author="alice")
        delivery = await world.sim.deliver_pull_request("gitea", "acme/api", pr.number)
        rows = await server.decisions_of(delivery.id)
        assert [r.code for r in rows[0].reasons] == ["repo_not_configured"]


async def test_explain_api_shows_the_decisions(h: Harness) -> None:
    pr = h.sim.open_pr("gitea", "acme/api", author="alice")
    delivery = await h.sim.deliver_pull_request("gitea", "acme/api", pr.number)
    await h.server.wait_done(delivery.id)
    token = h.server.token("read")
    status, body = await h.server.get(f"/api/v1/deliveries/{delivery.id}", token)
    assert status == 200
    assert body["status"] == "done"
    assert [d["decision"] for d in body["decisions"]] == ["eligible"]
    status, body = await h.server.get(
        f"/api/v1/decisions?forge=gitea&repo=acme/api&number={pr.number}", token
    )
    assert status == 200
    assert [d["delivery_id"] for d in body["decisions"]] == [delivery.id]
    assert body["reviews"] == []  # a PR's answer carries its review verdicts (none here)


async def test_mixed_deliveries_with_the_hook_never_fail_a_batch(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    pr = h.sim.open_pr("github", "acme/api", author="alice")
    ping = json.dumps({"zen": "z", "hook_id": 1}).encode()
    await h.server.github("ping", ping, delivery_id="mixed-ping")
    await h.server.github("pull_request", b'{"action": "opened"}', delivery_id="mixed-bad")
    delivery = await h.sim.deliver_pull_request("github", "acme/api", pr.number)
    for delivery_id in ("mixed-ping", "mixed-bad", delivery.id):
        stored = await h.server.wait_done(delivery_id)
        assert stored.attempts == 1
    await h.server.settle()
    assert [e.delivery_id for e in h.eligible] == [delivery.id]
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
