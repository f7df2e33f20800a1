"""Rate limits per token and route class on every write path, against a real server over
HTTP (REST, Crew and MCP) with a fake clock: a caller past its bucket is answered 429
``rate_limited`` with ``Retry-After`` (an MCP tool error with the same code), the bucket
refills with the clock, and neither another token nor another route class is touched."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import RateLimitSettings
from reviewbot.core.quota import RouteClass
from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.tools import SESSIONS
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.server_support import Running, make_settings, running_server
from tests.support.clock import FakeClock

BURST = 3
PER_S = 0.5  # one call every 2 s once the burst is spent
LIMITS = {f"{c.value}_{k}": v for c in RouteClass for k, v in (("burst", BURST), ("per_s", PER_S))}

# Every write path, with the scope it needs and the class its calls count against.
WRITE_ROUTES = [
    ("/api/v1/reviews", "review", RouteClass.REVIEW),
    ("/webhooks/crew", "review", RouteClass.REVIEW),
    ("/api/v1/workers", "lease", RouteClass.LEASE),
    ("/api/v1/workers/heartbeat", "lease", RouteClass.LEASE),
    ("/api/v1/leases/acquire", "lease", RouteClass.LEASE),
    ("/api/v1/leases/heartbeat", "lease", RouteClass.LEASE),
    ("/api/v1/leases/release", "lease", RouteClass.LEASE),
    ("/api/v1/merges", "merge", RouteClass.MERGE),
    ("/api/v1/tools/query_workflow_db", "db:read", RouteClass.TOOLS),
    ("/api/v1/tools/mutate_workflow_db", "db:write", RouteClass.TOOLS),
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def server(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Running]:
    settings = make_settings(tmp_path / "data", rate_limits=LIMITS)
    async with running_server(settings, forges={}, run_workers=False, clock=clock) as running:
        yield running


async def post(srv: Running, path: str, token: str, body: Any = None) -> tuple[int, Any, str]:
    headers = {"Authorization": f"Bearer {token}"}
    async with srv.http.post(srv.base + path, json=body or {}, headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After", "")


@pytest.mark.parametrize(("path", "scope", "route"), WRITE_ROUTES)
async def test_every_write_route_is_limited_per_token(
    server: Running, clock: FakeClock, path: str, scope: str, route: RouteClass
) -> None:
    token = server.token(scope)
    for _ in range(BURST):  # bodies the route refuses (400) still count: each was a call
        status, body, _ = await post(server, path, token)
        assert status != 429, body
    status, body, retry_after = await post(server, path, token)
    assert (status, body["error"], retry_after) == (429, "rate_limited", "2"), body
    assert body["retry_after_s"] == 2 and f"{route.value} calls" in body["detail"]
    # Another token has a bucket of its own; this one refills with the clock.
    status, _, _ = await post(server, path, server.token(scope))
    assert status != 429
    clock.now += 1.9
    assert (await post(server, path, token))[0] == 429
    clock.now += 0.1
    assert (await post(server, path, token))[0] != 429
    assert (await post(server, path, token))[0] == 429


async def test_each_route_class_has_its_own_bucket(server: Running) -> None:
    token = server.token("review,lease,merge")
    for _ in range(BURST + 1):
        await post(server, "/api/v1/leases/acquire", token)
    assert (await post(server, "/api/v1/workers", token))[0] == 429  # the same class
    assert (await post(server, "/api/v1/reviews", token))[0] != 429
    assert (await post(server, "/api/v1/merges", token))[0] != 429
    # Reads are never limited.
    for _ in range(3 * BURST):
        status, _ = await server.get("/api/v1/leases", server.token("read"))
        assert status == 200


async def test_mcp_write_tools_are_limited_with_the_rest_routes(server: Running) -> None:
    token = server.token("review,lease,merge,db:read,read")
    review = {"forge": "gitea", "repo": "acme/api", "number": 1}
    async with mcp_http(server.base, token) as client:
        # The REST route and the MCP tool share the token's review bucket.
        assert (await post(server, "/api/v1/reviews", token, review))[0] == 202
        for _ in range(BURST - 1):
            ok(await client.call_tool("review_pr", review))
        code, detail = refused(await client.call_tool("review_pr", review))
        assert code == "rate_limited" and "try again in 2 s" in detail
        worker = {"name": "w", "client": "c", "session_id": "s", "role": "merger"}
        ok(await client.call_tool("register_worker", worker))  # the lease class is untouched
        # Every tool that writes counts, whatever its arguments (refused ones too).
        for name, arguments in (("register_worker", worker), ("heartbeat_lease", {}),
                                ("merge_pr", {})):  # fmt: skip
            for _ in range(BURST):
                await client.call_tool(name, arguments)
            code, _ = refused(await client.call_tool(name, arguments))
            assert code == "rate_limited", name
        for _ in range(BURST):
            ok(await client.call_tool("query_workflow_db", {"sql": "SELECT 1"}))
        code, _ = refused(await client.call_tool("query_workflow_db", {"sql": "SELECT 1"}))
        assert code == "rate_limited"
        ok(await client.call_tool("explain", {"forge": "gitea", "repo": "acme/api", "number": 1}))


async def test_a_reviewer_session_is_limited_on_the_tools_route(server: Running) -> None:
    sessions = server.app[SESSIONS]
    paths = WorkflowPaths.from_settings(server.service.settings)
    run = sessions.open_run("run-1", db_access=DBAccess.READ, tools=run_tools(paths, sessions))
    session = sessions.issue_token(run.id, ttl_s=600)
    query = {"arguments": {"sql": "SELECT 1"}}
    for _ in range(BURST):
        status, body, _ = await post(server, "/api/v1/tools/query_workflow_db", session, query)
        assert status == 200, body
    status, body, retry_after = await post(server, "/api/v1/tools/query_workflow_db", session)
    assert (status, body["error"], retry_after) == (429, "rate_limited", "2")
    assert "session run-1" in body["detail"]


async def test_the_default_review_limit_admits_its_burst_then_its_rate(tmp_path: Path) -> None:
    clock = FakeClock()
    defaults = RateLimitSettings()
    settings = make_settings(tmp_path / "data")
    async with running_server(settings, forges={}, run_workers=False, clock=clock) as srv:
        token = srv.token("review")
        body = {"forge": "gitea", "repo": "acme/api", "number": 1}
        admitted = 0
        for _ in range(200):  # 200 calls at one instant: the burst gets through
            admitted += (await post(srv, "/api/v1/reviews", token, body))[0] == 202
        assert admitted == defaults.review_burst
        admitted = 0
        for _ in range(60):  # then a minute of one call a second: the rate gets through
            clock.now += 1
            admitted += (await post(srv, "/api/v1/reviews", token, body))[0] == 202
        assert admitted == int(60 * defaults.review_per_s)


async def test_reads_answered_from_the_forge_are_limited_too(
    server: Running, clock: FakeClock
) -> None:
    # Each is one or more requests on the bot's own forge quota (no forge is configured here:
    # each ends forge_not_configured, after it was counted).
    token = server.token("read")
    path = "/api/v1/capability?pr=gitea:acme/api%231&role=merge"
    headers = {"Authorization": f"Bearer {token}"}
    async with mcp_http(server.base, token) as client:
        for _ in range(BURST - 1):
            async with server.http.get(server.base + path, headers=headers) as resp:
                assert resp.status != 429
        code, detail = refused(
            await client.call_tool("pr_state", {"forge": "gitea", "repo": "acme/api", "number": 1})
        )
        assert code == "forge_not_configured", detail
        async with server.http.get(server.base + path, headers=headers) as resp:
            body = await resp.json()
            assert (resp.status, body["error"]) == (429, "rate_limited"), body
            assert resp.headers["Retry-After"] == "2"
        code, _ = refused(
            await client.call_tool(
                "resolve_capability", {"pr": "gitea:acme/api#1", "role": "merge"}
            )
        )
        assert code == "rate_limited"
        # Reads from the store are not limited.
        ok(await client.call_tool("explain", {"forge": "gitea", "repo": "acme/api", "number": 1}))
    clock.now += 2.0
    async with server.http.get(server.base + path, headers=headers) as resp:
        assert resp.status != 429
