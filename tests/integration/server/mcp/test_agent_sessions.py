"""Whole agent sessions against a real ``reviewbot serve``, one driven by the official
TypeScript SDK client and one by the official Python SDK client: whoami, acquire the merger
lease waiting in the PR's line behind another agent that holds it, receive the grant (made
by the line when the holder releases) as a notification on the stream, resolve the
capability, merge at the pinned head, and read the code of every refusal met on the way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration import ts_mcp_support as ts
from tests.integration.mcp_support import mcp_http
from tests.integration.mcp_support import refused as py_refused
from tests.integration.merge_support import REPO, prepare_sim, set_check
from tests.integration.process_support import ServeProcess, serve_process
from tests.integration.server.mcp.test_mcp_serve import new_token, serve_env

pytestmark = pytest.mark.slow
FORGE = "gitea"


class Session(Protocol):
    """One agent's MCP client: ``call`` answers ``(result, None)`` or ``(None, code)``;
    ``notes`` are the events received as notifications on the stream."""

    notes: list[dict[str, Any]]
    detail: str  # of the last refusal

    async def call(
        self, tool: str, args: dict[str, Any], *, progress: bool = False
    ) -> tuple[dict[str, Any] | None, str | None]: ...


class PySession:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.notes: list[dict[str, Any]] = []
        self.detail = ""

    async def call(
        self, tool: str, args: dict[str, Any], *, progress: bool = False
    ) -> tuple[dict[str, Any] | None, str | None]:
        async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
            self.notes.append(json.loads(message or "{}"))

        result = await self.client.call_tool(
            tool, args, progress_callback=on_progress if progress else None
        )
        if result.is_error:
            code, self.detail = py_refused(result)
            return None, code
        assert isinstance(result.structured_content, dict)
        return result.structured_content, None


class TsSession:
    def __init__(self, client: ts.TsClient) -> None:
        self.client = client
        self.detail = ""

    @property
    def notes(self) -> list[dict[str, Any]]:
        return [
            json.loads(n["params"]["message"])
            for n in self.client.notifications
            if n["method"] == "notifications/progress"
        ]

    async def call(
        self, tool: str, args: dict[str, Any], *, progress: bool = False
    ) -> tuple[dict[str, Any] | None, str | None]:
        answer = await self.client.call(tool, args, progress=progress)
        if answer.get("isError"):
            code, self.detail = ts.refused(answer)
            return None, code
        return ts.ok(answer), None


@asynccontextmanager
async def session(kind: str, base: str, token: str) -> AsyncIterator[Session]:
    if kind == "python":
        async with mcp_http(base, token) as client:
            yield PySession(client)
    else:
        async with ts.ts_http(base, token) as client:
            yield TsSession(client)


async def rest(
    served: ServeProcess, method: str, path: str, token: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, served.base + path, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as resp,
    ):
        return resp.status, await resp.json()


async def agent_session(
    kind: str, served: ServeProcess, sim: Simulator, tmp_path: Path, pr: Any
) -> list[str]:
    """One agent's session; answers the refusal codes it read, in order."""
    ref = f"{FORGE}:{REPO}#{pr.number}"
    head = pr.head_sha
    other_token = new_token(tmp_path, "lease,merge,read", f"other-{kind}")
    token = new_token(tmp_path, "lease,merge,read", f"agent-{kind}")
    seen: list[str] = []
    # Another agent holds the merger lease at the approved head.
    status, other = await rest(
        served, "POST", "/api/v1/workers", other_token,
        {"name": "other", "client": "other-agent", "session_id": "o-1", "role": "merger"},
    )  # fmt: skip
    assert status == 201
    target = {"forge": FORGE, "repo": REPO, "number": pr.number, "role": "merger"}
    status, held = await rest(
        served, "POST", "/api/v1/leases/acquire", other_token,
        {**target, "worker_identity": other["worker_identity"], "head_sha": head},
    )  # fmt: skip
    assert status == 200, held

    async with session(kind, served.base, token) as agent:
        me, _ = await agent.call("whoami", {})
        assert me is not None and me["name"] == f"agent-{kind}"
        assert set(me["scopes"]) == {"lease", "merge", "read"} and me["repo"] is None
        worker, _ = await agent.call(
            "register_worker",
            {"name": f"agent-{kind[:2]}", "client": f"{kind}-sdk", "session_id": "s-1",
             "role": "merger"},
        )  # fmt: skip
        assert worker is not None
        mine = worker["worker_identity"]

        # Behind the other agent: it joins the PR's line (wait_s 0 answers at once) and is
        # refused lease_held with its place in line.
        _, code = await agent.call(
            "acquire_lease",
            {"pr": ref, "role": "merger", "worker_identity": mine, "head_sha": head, "wait_s": 0},
        )
        seen.append(str(code))
        assert "you are 1st in line" in agent.detail, agent.detail
        capability, _ = await agent.call(
            "resolve_capability", {"pr": ref, "role": "merge", "worker": mine}
        )
        assert capability is not None and capability["allowed"] is False
        seen += [c for c in capability["codes"] if c == "lease_held"]
        # Merging without the lease, and reading a PR spelled without its forge.
        _, code = await agent.call(
            "merge_pr", {"pr": ref, "head_sha": head, "worker_identity": mine, "epoch": 1}
        )
        seen.append(str(code))
        _, code = await agent.call("pr_state", {"pr": f"{REPO}#{pr.number}"})
        seen.append(str(code))

        # Watch for the grant while the other agent hands the lease over.
        first, _ = await agent.call(
            "watch_pr", {"pr": ref, "role": "merger", "worker_identity": mine, "wait_s": 0}
        )
        assert first is not None and first["events"] == []

        async def hand_over() -> None:
            await asyncio.sleep(0)
            status, _ = await rest(
                served, "POST", "/api/v1/leases/release", other_token,
                {**target, "worker_identity": other["worker_identity"], "epoch": held["epoch"]},
            )  # fmt: skip
            assert status == 200  # the line grants the lease to its first waiter

        wait = {"pr": ref, "role": "merger", "worker_identity": mine, "wait_s": 60}
        (watched, _), _ = await asyncio.gather(
            agent.call("watch_pr", {**wait, "cursor": first["cursor"]}, progress=True),
            hand_over(),
        )
        assert watched is not None
        assert [e["event"] for e in watched["events"]] == ["lease_granted"], watched
        assert agent.notes == watched["events"]  # told on the stream first
        epoch = watched["events"][0]["epoch"]

        capability, _ = await agent.call(
            "resolve_capability", {"pr": ref, "role": "merge", "worker": mine}
        )
        assert capability is not None and capability["allowed"] is True, capability
        # A merge at a head other than the pinned one is refused; at the pinned head it lands.
        _, code = await agent.call(
            "merge_pr", {"pr": ref, "head_sha": "0" * 40, "worker_identity": mine, "epoch": epoch}
        )
        seen.append(str(code))
        merged, _ = await agent.call(
            "merge_pr", {"pr": ref, "head_sha": head, "worker_identity": mine, "epoch": epoch}
        )
        assert merged is not None and merged["merged"] is True
    live = sim.pull(FORGE, REPO, pr.number)
    assert live.merged and merged["merge_commit_sha"] == live.merge_commit_sha
    return seen


@pytest.mark.parametrize("kind", ["typescript", "python"])
async def test_an_agent_session_from_whoami_to_the_merge(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, kind: str
) -> None:
    if kind == "typescript":
        ts.ts_client_or_skip()
    tokens = prepare_sim(sim, ("ci/test",))
    pr = sim.open_pr(FORGE, REPO, author="alice")
    set_check(sim, FORGE, pr.head_sha, "success")
    sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    env = serve_env(tmp_path, sim_server, tokens[FORGE])
    async with serve_process(cwd=tmp_path, env=env) as served:
        seen = await agent_session(kind, served, sim, tmp_path, pr)
    assert seen == [
        "lease_held",  # acquire behind the other agent
        "lease_held",  # resolve_capability's blocker
        "lease_not_held",  # merge without the lease
        "invalid_request",  # a PR named without its forge
        "head_unknown",  # merge at a head that is not the PR's (one the forge does not know)
    ]
