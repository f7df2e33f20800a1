"""``/mcp`` of a ``serve --role ingest`` or ``--role work`` process answers only the tools
whose HTTP twins that role serves: the others are refused ``wrong_role`` (and not listed),
as ``POST /api/v1/tools/...``, the lease API and ``POST /api/v1/reviews`` are."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, prepare_sim
from tests.integration.process_support import serve_process
from tests.integration.server.mcp.test_mcp_serve import new_token, serve_env

pytestmark = pytest.mark.slow
ALL_SCOPES = "read,review,lease,merge,db:read,db:write"
WORK_TOOLS = {
    "register_worker",
    "worker_heartbeat",
    "acquire_lease",
    "leave_lease_line",
    "heartbeat_lease",
    "release_lease",
    "merge_pr",
    "list_leases",
    "query_workflow_db",
    "mutate_workflow_db",
}


async def test_an_ingest_process_refuses_the_work_tools(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    tokens = prepare_sim(sim, ("ci/test",))
    env = serve_env(tmp_path, sim_server, tokens["gitea"])
    async with serve_process("--role", "ingest", cwd=tmp_path, env=env) as served:
        token = new_token(tmp_path, ALL_SCOPES, "agent")
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=30) as http:
            # The HTTP twin of the workflow-DB tools: refused, the body never read.
            answer = await http.post(
                f"{served.base}/api/v1/tools/query_workflow_db",
                headers=auth,
                json={"arguments": {"sql": "SELECT 1"}},
            )
            assert answer.status_code == 404
            assert answer.json()["error"] == "wrong_role"
        async with mcp_http(served.base, token) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed & WORK_TOOLS == set()
            assert "review_pr" in listed
            for name, arguments in (
                ("query_workflow_db", {"sql": "SELECT name FROM sqlite_master"}),
                ("mutate_workflow_db", {"sql": "DELETE FROM notes"}),
                ("register_worker", {"name": "agent", "client": "t", "session_id": "s"}),
                ("list_leases", {}),
            ):
                code, detail = refused(await client.call_tool(name, arguments))
                assert code == "wrong_role", (name, detail)
                assert "--role work" in detail
            # What the ingest role does serve still answers.
            queued = ok(
                await client.call_tool("review_pr", {"forge": "gitea", "repo": REPO, "number": 1})
            )
            assert queued["status"] == "queued"
        await served.stop()


async def test_a_work_process_refuses_review_requests_over_mcp(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    tokens = prepare_sim(sim, ("ci/test",))
    env = serve_env(tmp_path, sim_server, tokens["gitea"])
    async with serve_process("--role", "work", cwd=tmp_path, env=env) as served:
        token = new_token(tmp_path, ALL_SCOPES, "agent")
        async with mcp_http(served.base, token) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert "review_pr" not in listed
            assert listed >= WORK_TOOLS
            arguments = {"forge": "gitea", "repo": REPO, "number": 1}
            code, detail = refused(await client.call_tool("review_pr", arguments))
            assert code == "wrong_role"
            assert "--role ingest" in detail
            assert ok(await client.call_tool("query_workflow_db", {"sql": "SELECT 1"}))
        await served.stop()
