"""The ``/_sim`` control API: the scenario API over HTTP, as demos and other processes use it."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from reviewbot.sim import SimServer, Simulator


class Control:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def post(self, action: str, body: Any) -> tuple[int, Any]:
        async with self.session.post(f"{self.base}/_sim/{action}", json=body) as resp:
            return resp.status, await resp.json()

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.base}{path}") as resp:
            return resp.status, await resp.json(content_type=None)


@pytest.fixture
async def control(sim_server: SimServer) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        yield Control(session, sim_server.base_url)


async def test_scenario_over_http(sim: Simulator, control: Control) -> None:
    status, body = await control.post("users", {"forge": "gitea", "login": "bot"})
    assert status == 201 and body["token"]
    assert (await control.post("repos", {"forge": "gitea", "repo": "acme/api"}))[0] == 201
    status, pull = await control.post(
        "pulls", {"forge": "gitea", "repo": "acme/api", "author": "alice", "labels": ["x"]}
    )
    assert (status, pull["number"], pull["labels"]) == (201, 1, ["x"])
    _, pushed = await control.post("push", {"forge": "gitea", "repo": "acme/api", "number": 1})
    assert pushed["sha"] != pull["head_sha"]
    await control.post(
        "required-checks",
        {"forge": "gitea", "repo": "acme/api", "branch": "main", "contexts": ["ci/*"]},
    )
    await control.post(
        "statuses",
        {
            "forge": "gitea",
            "repo": "acme/api",
            "sha": pushed["sha"],
            "context": "ci/a",
            "state": "success",
        },
    )
    status, review = await control.post(
        "reviews",
        {
            "forge": "gitea",
            "repo": "acme/api",
            "number": 1,
            "reviewer": "carol",
            "state": "REQUEST_CHANGES",
            "body": "no",
        },
    )
    assert (status, review["state"], review["commit_id"]) == (201, "REQUEST_CHANGES", pushed["sha"])
    await control.post(
        "comments",
        {"forge": "gitea", "repo": "acme/api", "number": 1, "user": "alice", "body": "hi"},
    )
    await control.post(
        "mergeable", {"forge": "gitea", "repo": "acme/api", "number": 1, "mergeable": False}
    )
    status, summary = await control.get("/_sim/pulls/gitea/acme/api/1")
    assert status == 200
    assert (summary["head_sha"], summary["mergeable"]) == (pushed["sha"], False)
    assert [r["state"] for r in summary["reviews"]] == ["REQUEST_CHANGES"]
    assert [c["body"] for c in summary["comments"]] == ["hi"]
    assert sim.repo("gitea", "acme/api").protections["main"].contexts == ["ci/*"]
    status, health = await control.get("/_sim")
    assert status == 200 and health["repos"]["gitea"] == ["acme/api"]


async def test_github_app_check_runs_and_faults_over_http(
    sim: Simulator, control: Control, sim_server: SimServer
) -> None:
    _, body = await control.post("users", {"forge": "github", "login": "bot"})
    token = body["token"]
    await control.post("repos", {"forge": "github", "repo": "acme/api"})
    _, pull = await control.post("pulls", {"forge": "github", "repo": "acme/api", "author": "al"})
    status, run = await control.post(
        "check-runs",
        {"repo": "acme/api", "sha": pull["head_sha"], "name": "build", "conclusion": "failure"},
    )
    assert status == 201 and sim.repo("github", "acme/api").check_runs[0].id == run["id"]
    status, app = await control.post("apps", {"bot_login": "rb[bot]"})
    assert status == 201 and "PRIVATE KEY" in app["private_key_pem"]
    status, body = await control.post(
        "installations", {"app_id": app["app_id"], "repo": "acme/api"}
    )
    assert status == 201 and body["installation_id"] in sim.installations

    path = "/repos/acme/api/pulls/1"
    status, _ = await control.post(
        "faults", {"forge": "github", "method": "GET", "path": path, "status": 503, "times": 1}
    )
    assert status == 201
    url = f"{sim_server.github_api_url}{path}"
    headers = {"Authorization": f"token {token}"}
    async with control.session.get(url, headers=headers) as resp:
        assert resp.status == 503
    async with control.session.get(url, headers=headers) as resp:
        assert resp.status == 200
    _, log = await control.get("/_sim/requests?forge=github")
    assert [(r["operation_id"], r["status"], r["fault"]) for r in log] == [
        ("pulls/get", 503, True),
        ("pulls/get", 200, False),
    ]
    async with control.session.delete(f"{control.base}/_sim/requests") as resp:
        assert resp.status == 204
    assert sim.requests == []
    async with control.session.delete(f"{control.base}/_sim/faults") as resp:
        assert resp.status == 204


async def test_deliver_over_http(sim: Simulator, control: Control) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    try:
        await control.post("repos", {"forge": "github", "repo": "acme/api"})
        await control.post("pulls", {"forge": "github", "repo": "acme/api", "author": "al"})
        await control.post(
            "webhooks", {"forge": "github", "url": f"http://127.0.0.1:{port}/hook", "secret": "s"}
        )
        status, delivery = await control.post(
            "deliver",
            {
                "kind": "pull_request",
                "forge": "github",
                "repo": "acme/api",
                "number": 1,
                "action": "opened",
            },
        )
        assert (status, delivery["status"], delivery["event"]) == (200, 202, "pull_request")
        assert "X-Hub-Signature-256" not in delivery["headers"]  # secrets stay out of answers
        headers, body = received[0]
        expected = "sha256=" + hmac.new(b"s", body, hashlib.sha256).hexdigest()
        assert headers["X-Hub-Signature-256"] == expected
        assert headers["X-GitHub-Delivery"] == delivery["id"]
        _, deliveries = await control.get("/_sim/deliveries")
        assert [d["id"] for d in deliveries] == [delivery["id"]]
    finally:
        await runner.cleanup()


async def test_bad_control_requests_are_400_with_a_reason(control: Control) -> None:
    status, body = await control.post("repos", {"forge": "github"})
    assert (status, body["error"]) == (400, "bad_request")
    assert "'repo'" in body["detail"]
    status, body = await control.post("repos", {"forge": "bitbucket", "repo": "a/b"})
    assert status == 400 and "unknown forge" in body["detail"]
    status, body = await control.post(
        "pulls", {"forge": "github", "repo": "no/repo", "author": "a"}
    )
    assert status == 400 and "no repository" in body["detail"]
    status, body = await control.post("teleport", {})
    assert status == 404
    async with control.session.post(f"{control.base}/_sim/users", data=b"[1") as resp:
        assert resp.status == 400
    await control.post("repos", {"forge": "github", "repo": "acme/api"})
    await control.post("pulls", {"forge": "github", "repo": "acme/api", "author": "al"})
    status, body = await control.post(
        "deliver", {"kind": "pull_request", "repo": "acme/api", "number": 1}
    )
    assert status == 400 and "no webhook configured" in body["detail"]
    status, _ = await control.get("/_sim/pulls/github/acme/api/7")
    assert status == 404


async def test_results_can_name_the_pull_request_instead_of_its_head(
    sim: Simulator, control: Control
) -> None:
    # A person following the docs has a PR number at hand, not its head SHA.
    for forge in ("github", "gitea"):
        await control.post("repos", {"forge": forge, "repo": "acme/api"})
        await control.post("pulls", {"forge": forge, "repo": "acme/api", "author": "al"})
        head = sim.pull(forge, "acme/api", 1).head_sha
        status, body = await control.post(
            "statuses",
            {
                "forge": forge,
                "repo": "acme/api",
                "number": 1,
                "context": "ci/test",
                "state": "success",
            },
        )
        assert (status, body["sha"]) == (201, head)
        assert [s.sha for s in sim.repo(forge, "acme/api").statuses] == [head]
    status, _ = await control.post("check-runs", {"repo": "acme/api", "number": 1, "name": "build"})
    assert status == 201
    assert [r.sha for r in sim.repo("github", "acme/api").check_runs] == [
        sim.pull("github", "acme/api", 1).head_sha
    ]
    # an unknown PR, or neither a SHA nor a number, is a 400 naming what is wrong
    status, body = await control.post(
        "statuses",
        {"forge": "gitea", "repo": "acme/api", "number": 9, "context": "c", "state": "success"},
    )
    assert status == 400 and "no pull request gitea:acme/api#9" in body["detail"]
    status, body = await control.post(
        "statuses", {"forge": "gitea", "repo": "acme/api", "context": "c", "state": "success"}
    )
    assert status == 400 and "'sha'" in body["detail"]
