"""What a repository-bound or low-scope token could still do through review requests, lease
targets and DB-tool parameters, each against a real server over HTTP: learn or take another
repository's Crew call ids, reach a renamed repository through its old name, store bodies far
beyond a review request's size, grow the lease tables with made-up targets, or get a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reviewbot.runtime.reviewers.tools import MutateArgs
from reviewbot.store import repositories
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.tools_support import tool

RULES = {"gitea:acme/api": {}, "gitea:acme/codename-x": {}}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    settings = make_settings(tmp_path / "data", repos=RULES, defaults=None)
    async with running_server(settings, forges={}, run_workers=False) as srv:
        yield srv


def crew(repo: str, call_id: str, padding: int = 0) -> bytes:
    envelope: dict[str, Any] = {
        "variables": {"forge": "gitea", "repository": repo, "number": 1},
        "payload": {"function": "review_pr", "call_id": call_id},
    }
    return json.dumps(envelope).encode() + b" " * padding


async def post(srv: Running, path: str, body: bytes, token: str) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return await srv.post(path, body, headers)


async def test_a_bound_token_can_neither_probe_nor_take_another_repositorys_crew_ids(
    server: Running,
) -> None:
    theirs = server.token("review")  # the integration of every repository
    status, body = await post(server, "/webhooks/crew", crew("acme/other", "call-7"), theirs)
    assert (status, body["delivery_id"]) == (202, "call-7")
    bound = server.token("review", repo="gitea:acme/api")
    # Probing a seen id and an unseen one answers alike: its own, new delivery each time.
    for call_id in ("call-7", "call-8"):
        status, body = await post(server, "/webhooks/crew", crew("acme/api", call_id), bound)
        assert (status, body["status"]) == (202, "queued"), body
        assert body["delivery_id"] == f"{call_id}@gitea:acme/api"
    # The id it used first is still free for the other repository's own later call.
    status, body = await post(server, "/webhooks/crew", crew("acme/other", "call-8"), theirs)
    assert (status, body["status"], body["delivery_id"]) == (202, "queued", "call-8")
    # Its own redelivery is still one delivery.
    status, body = await post(server, "/webhooks/crew", crew("acme/api", "call-8"), bound)
    assert (status, body["status"]) == (200, "duplicate")


@pytest.mark.parametrize("path", ["/api/v1/reviews", "/webhooks/crew"])
async def test_a_token_bound_to_a_renamed_repositorys_old_name_does_not_reach_it(
    server: Running, path: str
) -> None:
    await server.db.run(
        lambda: repositories.observe(
            server.db,
            forge="gitea",
            repo="acme/secret-old",
            display_name="acme/secret-old",
            forge_id=77,
            signed=True,
            seen_at=1.0,
        )
    )
    await server.db.run(
        lambda: repositories.observe(
            server.db,
            forge="gitea",
            repo="acme/codename-x",
            display_name="acme/codename-x",
            forge_id=77,
            signed=True,
            seen_at=2.0,
        )
    )
    bound = server.token("review", repo="gitea:acme/secret-old")
    if path == "/webhooks/crew":
        body = crew("acme/secret-old", "c-1")
    else:
        body = json.dumps({"forge": "gitea", "repo": "acme/secret-old", "number": 1}).encode()
    status, answer = await post(server, path, body, bound)
    assert (status, answer["error"]) == (403, "repo_not_allowed"), answer
    assert server.stored_ids() == []


@pytest.mark.parametrize("path", ["/api/v1/reviews", "/webhooks/crew"])
async def test_a_review_request_is_bounded_far_below_a_webhook(server: Running, path: str) -> None:
    token = server.token("review")
    if path == "/webhooks/crew":
        body = crew("acme/api", "c-big", padding=1024 * 1024)
    else:
        body = json.dumps({"forge": "gitea", "repo": "acme/api", "number": 1}).encode()
        body += b" " * (1024 * 1024)
    status, answer = await post(server, path, body, token)
    assert status == 413, answer
    assert server.stored_ids() == []


async def test_leases_only_on_the_bots_own_repositories(server: Running) -> None:
    token = server.token("lease")
    status, worker = await post(
        server,
        "/api/v1/workers",
        json.dumps({"name": "agent", "client": "t", "session_id": "s", "role": "merger"}).encode(),
        token,
    )
    assert status == 201, worker
    target = {
        "forge": "gitea",
        "number": 10**15,
        "role": "merger",
        "worker_identity": worker["worker_identity"],
        "head_sha": "a" * 40,
    }
    status, answer = await post(
        server,
        "/api/v1/leases/acquire",
        json.dumps({**target, "repo": "ghost/repo0"}).encode(),
        token,
    )
    assert (status, answer["error"]) == (404, "repo_not_configured"), answer
    with server.db.read() as tx:
        assert tx.all("SELECT * FROM lease_epochs") == []
    status, answer = await post(
        server, "/api/v1/leases/acquire", json.dumps({**target, "repo": "acme/api"}).encode(), token
    )
    assert status == 200, answer


async def test_an_integer_past_64_bits_is_a_bad_argument_not_a_500(server: Running) -> None:
    token = server.token("db:read,db:write")
    for value in (2**64, -(2**63) - 1):
        status, body = await tool(
            server, token, "query_workflow_db", {"sql": "SELECT ?", "params": [value]}
        )
        assert status == 400 and "64-bit" in json.dumps(body), body
    status, body = await tool(
        server, token, "query_workflow_db", {"sql": "SELECT ?", "params": [2**63 - 1]}
    )
    assert status == 200 and body["result"]["rows"] == [[2**63 - 1]], body
    # mutate takes its parameters through the same check.
    with pytest.raises(ValidationError, match="64-bit"):
        MutateArgs(sql="DELETE FROM t WHERE id = ?", params=[2**64])
