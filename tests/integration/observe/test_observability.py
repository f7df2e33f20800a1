"""What an operator watches: a real ``serve`` (a process, JSON logs) against the simulator.

One story (a webhook with the wrong secret, a PR approved and automerged through a GitHub
App, a lease granted, refused and released over the API) must leave one findable line per
step in the log, no secret anywhere in it, and move every counter on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reviewbot.sim import SimServer, Simulator
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.server_support import WAIT_S

GITHUB_SECRET = "github-hook-secret-5f1c"
GITEA_SECRET = "gitea-hook-secret-9a2e"
REPO = "acme/api"
CONFIG = """
[repos."github:acme/api"]
required_checks = ["ci/test"]
automerge = true
"""


async def until(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def make_token(cwd: Path, env: dict[str, str], name: str, scopes: str) -> str:
    done = run_reviewbot("token", "create", "--name", name, "--scopes", scopes, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    match = re.search(r"rbt_\S+", done.stdout)
    assert match is not None, done.stdout
    return match.group(0)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return found


def value(scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str):
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, lab), v in scrape.items() if n == name and wanted <= lab)


def world(sim: Simulator, sim_server: SimServer, tmp_path: Path) -> tuple[dict[str, str], str]:
    """A GitHub App installed on acme/api, a Gitea token, both webhook secrets configured."""
    app_id, key = sim.create_github_app(bot_login="reviewbot[bot]")
    sim.add_user("github", "alice")
    sim.create_repo("github", REPO, default_branch="main")
    sim.set_permission("github", REPO, "alice", "write")
    sim.install_app(app_id, REPO)
    gitea_token = sim.add_user("gitea", "reviewbot", bot=True)
    key_file = tmp_path / "app.pem"
    key_file.write_text(key)
    (tmp_path / "reviewbot.toml").write_text(CONFIG)
    env = {
        "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
        "REVIEWBOT_GITHUB__APP_ID": str(app_id),
        "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH": str(key_file),
        "REVIEWBOT_GITHUB__WEBHOOK_SECRET": GITHUB_SECRET,
        "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
        "REVIEWBOT_GITEA__TOKEN": gitea_token,
        "REVIEWBOT_GITEA__WEBHOOK_SECRET": GITEA_SECRET,
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
    }
    return env, key


async def post_json(
    http: aiohttp.ClientSession, url: str, token: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def lease_story(http: aiohttp.ClientSession, base: str, token: str, head: str) -> None:
    """Worker A holds PR 2's merger lease; worker B is refused; A releases it."""
    identities = []
    for name in ("agent-a", "agent-b"):
        status, body = await post_json(
            http,
            base + "/api/v1/workers",
            token,
            {"name": name, "client": "test", "session_id": name, "role": "merger"},
        )
        assert status in (200, 201), body
        identities.append(body["worker_identity"])
    target = {"forge": "github", "repo": REPO, "number": 2, "role": "merger"}
    status, held = await post_json(
        http,
        base + "/api/v1/leases/acquire",
        token,
        {**target, "worker_identity": identities[0], "head_sha": head},
    )
    assert status in (200, 201), held
    status, refused = await post_json(
        http,
        base + "/api/v1/leases/acquire",
        token,
        {**target, "worker_identity": identities[1], "head_sha": head},
    )
    assert status == 409 and refused["error"] == "lease_held", refused
    status, released = await post_json(
        http,
        base + "/api/v1/leases/release",
        token,
        {**target, "worker_identity": identities[0], "epoch": held["epoch"]},
    )
    assert status == 200, released


def log_lines(log: str) -> list[dict[str, Any]]:
    """Every line of the log is one JSON object (the one plain line is the stop notice)."""
    events = []
    for line in log.splitlines():
        if line == "reviewbot: stopped":
            continue
        events.append(json.loads(line))
    return events


def find(events: list[dict[str, Any]], msg: str, **keys: Any) -> dict[str, Any]:
    for event in events:
        if event.get("msg") == msg and all(event.get(k) == v for k, v in keys.items()):
            return event
    shown = "\n".join(json.dumps(e) for e in events)
    raise AssertionError(f"no {msg!r} line with {keys} in the log:\n{shown}")


@pytest.mark.slow
async def test_a_served_story_is_logged_line_by_line_and_counted(tmp_path: Path) -> None:
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        env, app_key = world(sim, sim_server, tmp_path)
        async with (
            serve_process("--log-format", "json", cwd=tmp_path, env=env) as server,
            aiohttp.ClientSession() as http,
        ):
            # The server made the store (its migrations are logged); tokens are added to it.
            metrics_token = await asyncio.to_thread(make_token, tmp_path, env, "prom", "metrics")
            lease_token = await asyncio.to_thread(make_token, tmp_path, env, "agent", "lease")
            # 1. A delivery signed with the wrong secret is refused, and says why.
            body = b'{"zen": "wrong secret"}'
            wrong = hmac.new(b"not-the-secret", body, hashlib.sha256).hexdigest()
            headers = {
                "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": "wrong-secret-1",
                "X-Hub-Signature-256": f"sha256={wrong}",
                "Content-Type": "application/json",
            }
            async with http.post(server.base + "/webhooks/github", data=body, headers=headers) as r:
                assert r.status == 401

            # 2. A PR is approved once CI passes, and automerged.
            sim.set_webhook("github", url=server.base + "/webhooks/github", secret=GITHUB_SECRET)
            pr = sim.open_pr("github", REPO, author="alice")
            other = sim.open_pr("github", REPO, author="alice")
            assert other.number == 2
            assert (await sim.deliver_pull_request("github", REPO, pr.number)).status == 202
            status = sim.set_status("github", REPO, pr.head_sha, "ci/test", "success")
            assert (await sim.deliver_status("github", REPO, status.id)).status == 202
            pull = sim.pull("github", REPO, pr.number)
            await until(lambda: pull.merged, "the automerge")

            # 3. Leases over the API: granted, refused, released.
            await lease_story(http, server.base, lease_token, other.head_sha)

            # 4. The scrape: anonymous callers get nothing, the token's holder every series.
            async with http.get(server.base + "/metrics") as resp:
                assert resp.status == 401
            auth = {"Authorization": f"Bearer {metrics_token}"}
            async with http.get(server.base + "/metrics", headers=auth) as resp:
                assert resp.status == 200
                scrape = samples(await resp.text())
            log = await server.stop()
    (tmp_path / "serve.log").write_text(log)  # kept for a person reading a failure

    moved = {
        "refused for its signature": value(
            scrape, "reviewbot_deliveries_refused_total", source="github", reason="bad_signature"
        ),
        "accepted": value(scrape, "reviewbot_deliveries_accepted_total", source="github"),
        "gated eligible": value(
            scrape, "reviewbot_decisions_total", stage="gate", decision="eligible"
        ),
        "review decisions": value(scrape, "reviewbot_decisions_total", stage="review"),
        "approvals posted": value(scrape, "reviewbot_reviews_posted_total", verdict="approve"),
        "merged": value(scrape, "reviewbot_merges_total", forge="github", outcome="merged"),
        "lease grants": value(scrape, "reviewbot_lease_grants_total", role="merger"),
        "lease refusals": value(
            scrape, "reviewbot_lease_refusals_total", role="merger", reason="lease_held"
        ),
        "lease releases": value(scrape, "reviewbot_lease_releases_total", role="merger"),
        "forge calls": value(scrape, "reviewbot_forge_calls_total", forge="github", status="200"),
        "acks timed": value(scrape, "reviewbot_ack_latency_seconds_count", source="github"),
        "reviews timed": value(scrape, "reviewbot_delivery_to_review_seconds_count"),
        "process": value(scrape, "process_cpu_seconds_total"),
    }
    assert all(v > 0 for v in moved.values()), moved
    assert ("reviewbot_queue_depth", frozenset()) in scrape
    assert ("reviewbot_review_jobs_pending", frozenset()) in scrape
    for (name, labels), _ in scrape.items():  # no PR, SHA or repository as a label
        assert not {"repo", "pr", "number", "head", "sha"} & {k for k, _ in labels}, name

    events = log_lines(log)
    refused = find(events, "delivery refused", source="github", path="/webhooks/github")
    assert refused["reason_codes"] == ["signature_invalid"] and refused["level"] == "warning"
    assert refused["delivery_id"] == "wrong-secret-1"
    received = find(events, "delivery received", forge="github", event="pull_request")
    assert received["delivery_id"] and received["duration_ms"] >= 0
    gated = find(events, "gated", decision="eligible", pr=pr.number, repo=REPO)
    assert gated["head"] == pr.head_sha and gated["forge"] == "github"
    reviewed = find(events, "reviewed", decision="approve", pr=pr.number, head=pr.head_sha)
    assert reviewed["review_id"] and reviewed["worker"] and reviewed["epoch"]
    merged = find(events, "merged", decision="merged", pr=pr.number, head=pr.head_sha)
    assert merged["worker"] and merged["epoch"] and merged["duration_ms"] >= 0
    find(events, "lease granted", role="merger", pr=2)
    assert find(events, "lease refused", pr=2)["reason_codes"] == ["lease_held"]
    find(events, "lease released", role="merger", pr=2)
    assert any(e["msg"].startswith("migration applied") for e in events)

    # No secret of any kind, anywhere in what the process wrote.
    everything = log + "\n".join(json.dumps(e) for e in events)
    secrets = [GITHUB_SECRET, GITEA_SECRET, env["REVIEWBOT_GITEA__TOKEN"], metrics_token]
    secrets += [lease_token, *[line for line in app_key.splitlines() if len(line) > 20]]
    leaked = [s for s in secrets if s in everything]
    assert leaked == []
    assert "PRIVATE KEY" not in everything and "ghs_" not in everything
