"""Bearer tokens on the API and the Crew endpoint: scopes, revocation, repository binding."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reviewbot.store.tokens import revoke_token
from tests.integration.server_support import Running, SimWorld, running_server, sim_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[SimWorld, Running]]:
    async with sim_world(tmp_path / "data") as w, running_server(w.settings) as server:
        yield w, server


async def post_json(
    server: Running, path: str, data: object, token: str | None
) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return await server.post(path, json.dumps(data).encode(), headers)


async def test_review_request_is_queued_and_gated(world: tuple[SimWorld, Running]) -> None:
    w, server = world
    pr = w.sim.open_pr("gitea", "acme/api", author="alice")
    token = server.token("review")
    status, body = await post_json(
        server,
        "/api/v1/reviews",
        {"forge": "gitea", "repo": "acme/api", "number": pr.number},
        token,
    )
    assert status == 202, body
    assert body["status"] == "queued"
    rows = await server.decisions_of(str(body["delivery_id"]))
    assert [(r.decision, r.number, r.head_sha) for r in rows] == [
        ("eligible", pr.number, pr.head_sha)
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"forge": "gitea", "repo": "acme/api"}, "number"),
        ({"forge": "gitea", "repo": "acme", "number": 1}, "repo"),
        ({"forge": "svn", "repo": "acme/api", "number": 1}, "forge"),
        ({"forge": "gitea", "repo": "acme/api", "number": 1, "head_sha": "xyz"}, "head_sha"),
    ],
)
async def test_invalid_review_request_is_400_naming_the_field(
    world: tuple[SimWorld, Running], data: dict[str, object], field: str
) -> None:
    _, server = world
    status, body = await post_json(server, "/api/v1/reviews", data, server.token("review"))
    assert status == 400
    assert body["error"] == "invalid_request"
    assert field in str(body["detail"])


async def test_wrong_scope_is_403_naming_the_scope(world: tuple[SimWorld, Running]) -> None:
    _, server = world
    status, body = await post_json(
        server,
        "/api/v1/reviews",
        {"forge": "gitea", "repo": "acme/api", "number": 1},
        server.token("read"),
    )
    assert status == 403
    assert body["error"] == "missing_scope"
    assert "'review'" in str(body["detail"])
    status, body = await server.get("/api/v1/decisions", server.token("review"))
    assert status == 403 and "'read'" in str(body["detail"])


async def test_unknown_missing_and_revoked_tokens_are_401(world: tuple[SimWorld, Running]) -> None:
    _, server = world
    data = {"forge": "gitea", "repo": "acme/api", "number": 1}
    assert (await post_json(server, "/api/v1/reviews", data, None))[0] == 401
    assert (await post_json(server, "/api/v1/reviews", data, "rbt_not-a-token"))[0] == 401
    token = server.token("review", name="short-lived")
    revoke_token(server.db, "short-lived", now=1_767_312_000.0)
    status, body = await post_json(server, "/api/v1/reviews", data, token)
    assert status == 401
    assert "revoked" in str(body["detail"])
    assert server.stored_ids() == []


async def test_repository_binding_is_checked(world: tuple[SimWorld, Running]) -> None:
    w, server = world
    pr = w.sim.open_pr("gitea", "acme/api", author="alice")
    bound = server.token("review,read", repo="gitea:acme/api")
    other = {"forge": "github", "repo": "acme/api", "number": pr.number}
    status, body = await post_json(server, "/api/v1/reviews", other, bound)
    assert status == 403
    assert body["error"] == "repo_not_allowed"
    assert "gitea:acme/api" in str(body["detail"])
    mine = {"forge": "gitea", "repo": "acme/api", "number": pr.number}
    status, body = await post_json(server, "/api/v1/reviews", mine, bound)
    assert status == 202
    delivery_id = str(body["delivery_id"])
    await server.wait_done(delivery_id)
    assert (await server.get(f"/api/v1/deliveries/{delivery_id}", bound))[0] == 200
    status, _ = await server.get("/api/v1/decisions?forge=github&repo=acme/api", bound)
    assert status == 403
    status, body = await server.get("/api/v1/decisions", bound)  # defaults to its repository
    assert status == 200 and body["decisions"]


async def test_crew_call_is_gated(world: tuple[SimWorld, Running]) -> None:
    w, server = world
    pr = w.sim.open_pr("github", "acme/api", author="alice")
    envelope = {
        "variables": {"forge": "github", "repository": "acme/api", "number": pr.number},
        "payload": {"function": "review_pr", "args": {}, "from": "agent-7", "call_id": "c-1"},
    }
    token = server.token("review")
    status, body = await post_json(server, "/webhooks/crew", envelope, token)
    assert (status, body["delivery_id"]) == (202, "c-1")
    rows = await server.decisions_of("c-1")
    assert rows[0].decision == "eligible"
    again = await post_json(server, "/webhooks/crew", envelope, token)
    assert again == (200, {"delivery_id": "c-1", "status": "duplicate"})


async def test_crew_envelope_without_pr_number_is_400_and_recorded(
    world: tuple[SimWorld, Running],
) -> None:
    _, server = world
    envelope = {
        "variables": {"forge": "github", "repository": "acme/api"},
        "payload": {"function": "review_pr", "args": {}, "from": "agent-7", "call_id": "c-2"},
    }
    status, body = await post_json(server, "/webhooks/crew", envelope, server.token("review"))
    assert status == 400
    assert body["error"] == "delivery_unresolved"
    assert "number" in str(body["detail"])
    rows = await server.decisions_of("c-2")
    assert [(r.decision, r.reason_code) for r in rows] == [("error", "delivery_unresolved")]
    assert "number" in rows[0].detail


async def test_crew_without_token_is_401(world: tuple[SimWorld, Running]) -> None:
    _, server = world
    status, body = await post_json(server, "/webhooks/crew", {"payload": {}}, None)
    assert status == 401 and body["error"] == "unauthorized"
    assert server.stored_ids() == []


async def test_unknown_delivery_is_404(world: tuple[SimWorld, Running]) -> None:
    _, server = world
    status, body = await server.get("/api/v1/deliveries/nope", server.token("read"))
    assert (status, body["error"]) == (404, "not_found")
