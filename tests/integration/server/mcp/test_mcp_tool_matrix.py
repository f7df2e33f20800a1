"""Every tool, from every entry path, for every kind of caller: reachable where it should be,
refused (for authority, with the REST code) everywhere else.

The tools are enumerated, never listed by hand: the MCP registry (``mcp_tools.TOOLS``) and
the session tools a run registers (``run_tools``). A tool added to either is in this matrix
with the example arguments of its registration, so a tool nobody can reach, or one that a
wrong caller can reach, fails here. The entry paths:

* ``mcp-http``: ``POST /mcp`` with the official client;
* ``mcp-stdio``: the server object ``reviewbot mcp --stdio`` serves (in process; the
  transport itself is tested in ``test_mcp_stdio.py``), after its start-up token check;
* ``rest``: the tool's REST route (the tools route for session tools), where it has one.

"Reachable" means the call was not refused for authority; a domain answer (no such PR, an
unknown worker, a lease held) still proves the caller got through to the tool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from mcp import Client

from reviewbot.core.errors import ReviewbotError
from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.mcp_registry import (
    SESSION_EXAMPLES,
    SESSION_NEEDS,
    SESSION_TOOLS,
)
from reviewbot.server.mcp_schema import pr_spellings
from reviewbot.server.mcp_stdio import check_stdio_token, stdio_server_for
from reviewbot.server.mcp_tools import TOOLS
from reviewbot.sim import SimServer, Simulator
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.mcp_support import mcp_http, refused
from tests.integration.merge_support import World, bot_world

# Refusals for who the caller is, as opposed to what it asked for.
AUTHORITY = {
    "unauthorized",
    "invalid_session_token",
    "missing_scope",
    "repo_not_allowed",
    "not_session_owner",
    "permission_denied",
    "not_worker_owner",
}

# The REST route of each MCP tool (the same shared action answers both), or None.
REST: dict[str, tuple[str, str] | None] = {
    "review_pr": ("POST", "/api/v1/reviews"),
    "register_worker": ("POST", "/api/v1/workers"),
    "worker_heartbeat": ("POST", "/api/v1/workers/heartbeat"),
    "acquire_lease": ("POST", "/api/v1/leases/acquire"),
    "heartbeat_lease": ("POST", "/api/v1/leases/heartbeat"),
    "release_lease": ("POST", "/api/v1/leases/release"),
    "leave_lease_line": ("POST", "/api/v1/leases/leave"),
    "merge_pr": ("POST", "/api/v1/merges"),
    "list_leases": ("GET", "/api/v1/leases"),
    "explain": ("GET", "/api/v1/decisions"),
    "pr_state": None,  # MCP only for now
    "resolve_capability": ("GET", "/api/v1/capability"),
    "lease_history": ("GET", "/api/v1/leases/history"),
    "runtime": ("GET", "/api/v1/runtime"),
    "whoami": ("GET", "/api/v1/whoami"),
    "watch_pr": ("POST", "/api/v1/leases/watch"),
    "queue_enqueue": ("POST", "/api/v1/queue/enqueue"),
    "queue_status": ("GET", "/api/v1/queue"),
    "queue_dequeue": ("POST", "/api/v1/queue/dequeue"),
    "queue_predict": ("POST", "/api/v1/queue/predict"),
    "queue_control": ("POST", "/api/v1/queue/control"),
}
ALL_SCOPES = "read,review,lease,merge,db:read,db:write"


@dataclass(frozen=True)
class Kind:
    """A kind of caller: a token with scopes (maybe bound), or a session with DB access."""

    name: str
    scopes: str | None = None
    repo: str | None = None
    session: DBAccess | None = None


KINDS = [
    *(Kind(f"token:{s}", scopes=s) for s in ALL_SCOPES.split(",")),
    Kind("token:bound", scopes=ALL_SCOPES, repo="gitea:acme/api"),
    Kind("session:read-write", session=DBAccess.READ_WRITE),
    Kind("session:read", session=DBAccess.READ),
]


def expected(tool: str, kind: Kind, entry: str) -> bool:
    """Whether ``kind`` may reach ``tool`` through ``entry``: the rule the matrix checks."""
    registered = TOOLS.get(tool)
    if kind.session is not None:
        if entry == "mcp-stdio" or registered is not None:
            return False  # a session lives in its server; it carries no scopes
        return SESSION_NEEDS[tool] <= kind.session
    assert kind.scopes is not None
    scopes = kind.scopes.split(",")
    if registered is not None:
        return registered.scope is None or registered.scope in scopes
    if kind.repo is not None or tool not in ("query_workflow_db", "mutate_workflow_db"):
        return False  # an API token's call session holds only these two, never when bound
    need = "db:write" if tool == "mutate_workflow_db" else "db:read"
    return need in scopes or (need == "db:read" and "db:write" in scopes)


def all_tools(w: World) -> list[str]:
    sessions = w.service.sessions
    session_tools = [t.name for t in run_tools(WorkflowPaths.from_settings(w.settings), sessions)]
    assert set(session_tools) == set(SESSION_TOOLS)  # every session tool is known to MCP
    return [t.name for t in TOOLS] + session_tools


def arguments(tool: str) -> dict[str, Any]:
    registered = TOOLS.get(tool)
    return dict(registered.example if registered is not None else SESSION_EXAMPLES[tool])


@pytest.fixture
async def world(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> AsyncIterator[World]:
    async with bot_world(tmp_path, sim, sim_server) as w:
        paths = WorkflowPaths.from_settings(w.settings)
        (paths.migrations_dir / "site_0001_notes.sql").write_text(
            "CREATE TABLE IF NOT EXISTS notes (body TEXT);\n"
        )
        with w.db.write() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)")
        yield w


def credential(w: World, kind: Kind) -> str:
    if kind.session is None:
        assert kind.scopes is not None
        return w.token(kind.scopes, repo=kind.repo)
    sessions = w.service.sessions
    paths = WorkflowPaths.from_settings(w.settings)
    run = sessions.open_run(
        f"run-{kind.name}", db_access=kind.session, tools=run_tools(paths, sessions)
    )
    step = sessions.open_child(run.id, "agent")
    return sessions.issue_token(step.id, ttl_s=600)


def outcome(result: Any) -> str | None:
    """The refusal code of an MCP result, or None when it ran."""
    if not result.is_error:
        return None
    return refused(result)[0]


async def over_mcp(client: Client, tools: list[str]) -> dict[str, str | None]:
    listed = {t.name for t in (await client.list_tools()).tools}
    found = {}
    for tool in tools:
        found[tool] = outcome(await client.call_tool(tool, arguments(tool)))
        # What a caller is shown is what it may call.
        assert (tool in listed) == (found[tool] not in AUTHORITY), (tool, found[tool], listed)
    return found


async def over_rest(w: World, token: str, tool: str) -> str | None:
    if tool in SESSION_TOOLS:
        method, path, body = "POST", f"/api/v1/tools/{tool}", {"arguments": arguments(tool)}
    else:
        route = REST[tool]
        if route is None:
            return "no_route"
        method, path = route
        registered = TOOLS.get(tool)
        assert registered is not None
        # The example names its PR as pr; the REST twin reads the spelling it reads.
        body = pr_spellings(registered.input, arguments(tool))
        if method == "GET":
            path += "?" + urlencode({k: str(v).lower() for k, v in body.items()})
    status, answer = await w.call(method, path, token, body if method == "POST" else None)
    return None if status < 400 else str(answer["error"])


async def test_every_tool_is_reachable_somewhere_and_refused_elsewhere(world: World) -> None:
    tools = all_tools(world)
    assert set(REST) == {t.name for t in TOOLS}  # a new tool says where its REST route is
    seen: dict[tuple[str, str, str], str | None] = {}
    for kind in KINDS:
        token = credential(world, kind)
        async with mcp_http(world.base, token) as client:
            for tool, code in (await over_mcp(client, tools)).items():
                seen[tool, kind.name, "mcp-http"] = code
        try:
            await check_stdio_token(world.service, token)
        except ReviewbotError as exc:
            for tool in tools:
                seen[tool, kind.name, "mcp-stdio"] = exc.code
        else:
            async with Client(stdio_server_for(world.service, token)) as client:
                for tool, code in (await over_mcp(client, tools)).items():
                    seen[tool, kind.name, "mcp-stdio"] = code
        for tool in tools:
            rest = await over_rest(world, token, tool)
            seen[tool, kind.name, "rest"] = rest
            mcp = seen[tool, kind.name, "mcp-http"]
            if rest != "no_route" and (rest in AUTHORITY or mcp in AUTHORITY):
                # A refusal for authority is one on both entry paths, with the same code for
                # a token (the REST routes do not know session tokens: ``unauthorized``)...
                assert rest in AUTHORITY and mcp in AUTHORITY, (tool, kind.name, rest, mcp)
                assert kind.session is not None or rest == mcp, (tool, kind.name, rest, mcp)

    wrong = []
    for (tool, kind_name, entry), code in seen.items():
        if code == "no_route":
            continue
        kind = next(k for k in KINDS if k.name == kind_name)
        reached = code not in AUTHORITY
        if reached != expected(tool, kind, entry if entry != "rest" else "mcp-http"):
            wrong.append((tool, kind_name, entry, code))
    assert not wrong, wrong
    for tool in tools:  # ...and every tool is reachable somewhere, refused somewhere
        codes = [code for (t, _, _), code in seen.items() if t == tool and code != "no_route"]
        assert any(c not in AUTHORITY for c in codes), f"{tool} is reachable from nowhere"
        assert any(c in AUTHORITY for c in codes), f"{tool} is refused to no caller"
