"""Refusals every MCP client can read: the official Python SDK client and the official
TypeScript SDK client (the one MCP Inspector is built on, which checks every result against
the tool's ``outputSchema``) both see the code and detail of every refusal of ``pr_state``
and ``resolve_capability``, over HTTP to the real server and over stdio.

An error result carries the code and detail as text and no structured content: an error
body there does not match the tool's output schema, and the TypeScript client would answer a
schema error instead of the refusal.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import pytest

from reviewbot.workflowdb.access import DBAccess
from tests.integration import ts_mcp_support as ts
from tests.integration.mcp_support import mcp_http, mcp_stdio, refused
from tests.integration.merge_support import REPO, World
from tests.integration.server.mcp import test_mcp_stdio
from tests.integration.server.mcp.test_mcp_stdio import Local

FORGE = "gitea"
local = test_mcp_stdio.local  # the stdio tests' data folder and configuration


@dataclass(frozen=True)
class Case:
    tool: str
    arguments: dict[str, Any]
    token: str  # which token calls: "read", "lease" (no read scope), "bound"
    code: str


def cases(number: int) -> list[Case]:
    """Every refusal of the two read tools: scope, binding, a malformed or doubled PR, an
    unknown field, a value over its bound, a PR the forge does not have."""
    own = f"{FORGE}:{REPO}#{number}"
    cases = []
    for tool, extra in (("pr_state", {}), ("resolve_capability", {"role": "merge"})):
        cases += [
            Case(tool, {"pr": own, **extra}, "lease", "missing_scope"),
            Case(tool, {"pr": f"{FORGE}:acme/other#1", **extra}, "bound", "repo_not_allowed"),
            Case(tool, {"pr": "acme/api#1", **extra}, "read", "invalid_request"),
            Case(tool, {"pr": own, "forge": FORGE, **extra}, "read", "invalid_request"),
            Case(tool, {"pr": own, "unknown": 1, **extra}, "read", "invalid_request"),
            Case(tool, {"pr": own + "9" * 400, **extra}, "read", "invalid_request"),
            Case(tool, {"pr": f"{FORGE}:{REPO}#99999", **extra}, "read", "pr_not_found"),
        ]
    cases.append(
        Case("resolve_capability", {"pr": own, "role": "admin"}, "read", "invalid_request")
    )
    return cases


def tokens(w: World) -> dict[str, str]:
    return {
        "read": w.token("read"),
        "lease": w.token("lease"),
        "bound": w.token("read", repo=f"{FORGE}:{REPO}"),
    }


async def test_every_refusal_of_the_read_tools_is_readable_by_both_sdk_clients(
    world: World,
) -> None:
    pr = world.sim.open_pr(FORGE, REPO, author="alice")
    by_token = tokens(world)
    seen_ts: dict[int, tuple[str, str]] = {}
    seen_py: dict[int, tuple[str, str]] = {}
    all_cases = cases(pr.number)
    for kind, token in by_token.items():
        mine = [(i, c) for i, c in enumerate(all_cases) if c.token == kind]
        async with ts.ts_http(world.base, token) as client:
            for i, case in mine:
                seen_ts[i] = ts.refused(await client.call(case.tool, case.arguments))
        async with mcp_http(world.base, token) as py:
            for i, case in mine:
                seen_py[i] = refused(await py.call_tool(case.tool, case.arguments))
    for i, case in enumerate(all_cases):
        assert seen_ts[i][0] == case.code, (case, seen_ts[i])
        assert seen_ts[i] == seen_py[i], case  # one code, one detail, whichever client
        assert seen_ts[i][1], case


async def test_the_typescript_client_still_checks_successful_results(world: World) -> None:
    # Removing the error body from structured content leaves successes as they were: the
    # SDK validates them against the output schema and they pass.
    pr = world.sim.open_pr(FORGE, REPO, author="alice")
    async with ts.ts_http(world.base, world.token("read")) as client:
        state = ts.ok(await client.call("pr_state", {"pr": f"{FORGE}:{REPO}#{pr.number}"}))
        assert state["head_sha"] == pr.head_sha
        answer = ts.ok(
            await client.call(
                "resolve_capability", {"pr": f"{FORGE}:{REPO}#{pr.number}", "role": "review"}
            )
        )
        assert answer["pr"] == f"{FORGE}:{REPO}#{pr.number}"


@pytest.mark.slow
async def test_both_clients_read_the_refusals_over_stdio(local: Local, sim: Any) -> None:
    pr = sim.open_pr(FORGE, REPO, author="alice")
    own = f"{FORGE}:{REPO}#{pr.number}"
    asks = [
        ("pr_state", {"pr": f"{FORGE}:{REPO}#99999"}, "pr_not_found"),
        ("pr_state", {"pr": "acme/api#1"}, "invalid_request"),
        ("resolve_capability", {"pr": f"{FORGE}:acme/x#1", "role": "merge"}, "repo_not_allowed"),
        ("resolve_capability", {"pr": own, "role": "admin"}, "invalid_request"),
    ]  # fmt: skip
    env = local.env_with(local.token("read", "stdio-reader", repo=f"{FORGE}:{REPO}"))
    command = (sys.executable, "-m", "reviewbot", "mcp", "--stdio", "--no-workers")
    async with ts.ts_client("stdio", *command, env=ts.node_env(env)) as client:
        from_ts = [ts.refused(await client.call(tool, args)) for tool, args, _ in asks]
    async with mcp_stdio(env, "--no-workers") as py:
        from_py = [refused(await py.call_tool(tool, args)) for tool, args, _ in asks]
    assert [code for code, _ in from_ts] == [code for _, _, code in asks]
    assert from_ts == from_py


async def test_a_refused_session_call_over_mcp_is_logged_with_owner_and_parent(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = world.service.sessions
    sessions.open_run("run-log", db_access=DBAccess.READ_WRITE)  # registered no tool
    step = sessions.open_child("run-log", "reviewer-1")
    token = sessions.issue_token(step.id, ttl_s=600)
    with caplog.at_level("WARNING"):
        async with mcp_http(world.base, token) as client:
            code, _ = refused(await client.call_tool("mutate_workflow_db", {"sql": "SELECT 1"}))
    assert code == "not_session_owner"
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    (mcp_line,) = [line for line in lines if line.startswith("mcp call refused")]
    (tool_line,) = [line for line in lines if line.startswith("tool call refused")]
    for line in (mcp_line, tool_line):
        assert "owner=run-log" in line and "parent=run-log" in line, line
        assert "code=not_session_owner" in line, line
    assert "caller=session:run-log/reviewer-1" in mcp_line
    assert "caller=run-log/reviewer-1" in tool_line
