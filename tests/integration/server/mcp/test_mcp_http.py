"""The MCP entry path over streamable HTTP: the official ``mcp`` client against ``/mcp`` of
the real server, the forge simulator and a real SQLite store, all over loopback HTTP.

A merger session works end to end; every refusal carries the code the REST route answers
for the same call, and nothing is written when a call is refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import aiohttp
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from reviewbot.core.prstate import STATE_MARKER, parse_pr_state
from tests.integration.mcp_support import mcp_http, ok, refusal_body, refused
from tests.integration.merge_support import REPO, World, set_check

FORGE = "gitea"
READ_TOOLS = {
    "explain",
    "pr_state",
    "list_leases",
    "resolve_capability",
    "lease_history",
    "runtime",
    "whoami",
    "queue_status",
    "queue_predict",
}


def green_approved_pr(w: World, forge: str = FORGE) -> Any:
    pr = w.sim.open_pr(forge, REPO, author="alice")
    set_check(w, forge, pr.head_sha, "success")
    w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    return pr


class Agent:
    """A merger session speaking only MCP."""

    def __init__(self, client: Client, name: str = "agent") -> None:
        self.client = client
        self.name = name
        self.identity = ""

    async def call(self, tool: str, **arguments: Any) -> Any:
        return await self.client.call_tool(tool, arguments)

    async def register(self) -> str:
        body = ok(
            await self.call(
                "register_worker", name=self.name, client="test", session_id="s", role="merger"
            )
        )
        self.identity = body["worker_identity"]
        return self.identity

    def target(self, number: int, repo: str = REPO) -> dict[str, Any]:
        return {"forge": FORGE, "repo": repo, "number": number, "role": "merger"}

    async def acquire(self, number: int, head: str, repo: str = REPO) -> Any:
        return await self.call(
            "acquire_lease", **self.target(number, repo), worker_identity=self.identity,
            head_sha=head,
        )  # fmt: skip

    async def claim(self, tool: str, number: int, epoch: int) -> Any:
        return await self.call(
            tool, **self.target(number), worker_identity=self.identity, epoch=epoch
        )

    async def merge(self, number: int, head: str, epoch: int, repo: str = REPO) -> Any:
        return await self.call(
            "merge_pr", forge=FORGE, repo=repo, number=number, head_sha=head,
            worker_identity=self.identity, epoch=epoch,
        )  # fmt: skip


async def test_a_complete_merger_session_over_mcp(world: World) -> None:
    pr = green_approved_pr(world)
    token = world.token("lease,merge,read")
    async with mcp_http(world.base, token) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert {"register_worker", "acquire_lease", "merge_pr", "list_leases"} <= listed
        assert "review_pr" not in listed  # the token has no review scope
        agent = Agent(client)
        identity = await agent.register()
        beat = ok(await agent.call("worker_heartbeat", worker_identity=identity))
        assert beat["status"] == "live"
        lease = ok(await agent.acquire(pr.number, pr.head_sha))
        assert (lease["holder"], lease["head_sha"], lease["phase"]) == (
            identity,
            pr.head_sha,
            "claimed",
        )
        epoch = lease["epoch"]
        renewed = ok(await agent.claim("heartbeat_lease", pr.number, epoch))
        assert renewed["epoch"] == epoch and renewed["expires_at"] >= lease["expires_at"]

        merged = ok(await agent.merge(pr.number, pr.head_sha, epoch))
        live = world.sim.pull(FORGE, REPO, pr.number)
        assert live.merged and merged["merged"] is True
        assert merged["merge_commit_sha"] == live.merge_commit_sha
        assert merged["approvers"] == ["bob"]

        # The merger released the lease with the merge; releasing again changes nothing.
        listing = ok(await agent.call("list_leases", forge=FORGE, repo=REPO, number=pr.number))
        assert [x["phase"] for x in listing["leases"]] == ["released"]
        again = await agent.claim("release_lease", pr.number, epoch)
        if again.is_error:
            assert refused(again)[0] == "lease_not_held"
        else:
            assert ok(again)["phase"] == "released"
        assert len(world.merge_requests(FORGE, pr.number)) == 1


async def test_a_client_of_the_2025_protocol_is_served_too(world: World) -> None:
    # Most clients in use still open with the initialize handshake; stateless serving must
    # answer it as well as the per-request envelope of the newer revision.
    async with mcp_http(world.base, world.token("read"), mode="legacy") as client:
        assert client.protocol_version.startswith("2025-")
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
        assert ok(await client.call_tool("list_leases", {})) == {"leases": []}
        code, _ = refused(await client.call_tool("merge_pr", {}))
        assert code == "missing_scope"


async def test_no_token_is_401_before_any_mcp_processing(world: World) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer rbt_not-a-token"}, {"Authorization": "Basic x"}):
        async with world.http.post(
            world.base + "/mcp", json=initialize, headers={**headers, **auth}
        ) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"] == "unauthorized"
    with pytest.raises(Exception):  # noqa: B017 - the client surfaces the 401 its own way
        async with mcp_http(world.base, None) as client:
            await client.list_tools()


async def test_a_revoked_token_stops_at_its_next_request(world: World) -> None:
    token = world.token("read")
    async with mcp_http(world.base, token) as client:
        ok(await client.call_tool("list_leases", {}))
        with world.db.write() as tx:
            tx.execute("UPDATE api_tokens SET revoked_at = 1767225600.0 WHERE revoked_at IS NULL")
        with pytest.raises(MCPError):
            await client.call_tool("list_leases", {})


async def test_a_read_token_cannot_merge_or_lease(world: World) -> None:
    pr = green_approved_pr(world)
    owner = world.token("lease,merge")
    reader = world.token("read")
    async with mcp_http(world.base, owner) as client:
        agent = Agent(client)
        await agent.register()
        epoch = ok(await agent.acquire(pr.number, pr.head_sha))["epoch"]
    async with mcp_http(world.base, reader) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == READ_TOOLS
        thief = Agent(client)
        thief.identity = agent.identity
        code, detail = refused(await thief.merge(pr.number, pr.head_sha, epoch))
        assert code == "missing_scope" and "'merge'" in detail
        code, _ = refused(await thief.acquire(pr.number, pr.head_sha))
        assert code == "missing_scope"
    # The REST route answers the same code for the same call.
    status, body = await world.call(
        "POST", "/api/v1/merges", reader,
        {"forge": FORGE, "repo": REPO, "number": pr.number, "head_sha": pr.head_sha,
         "worker_identity": agent.identity, "epoch": epoch},
    )  # fmt: skip
    assert (status, body["error"]) == (403, "missing_scope")
    assert world.merge_requests(FORGE, pr.number) == []


@pytest.mark.parametrize("other", ["acme/other", "ACME/Other", "Acme/OTHER"])
async def test_a_bound_token_cannot_touch_another_repository(world: World, other: str) -> None:
    world.sim.create_repo(FORGE, "acme/other", default_branch="main")
    pr = world.sim.open_pr(FORGE, "acme/other", author="alice")
    token = world.token("lease,merge,read,db:read", repo=f"{FORGE}:acme/api")
    async with mcp_http(world.base, token) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert "query_workflow_db" not in listed  # a bound token gets no DB tools
        agent = Agent(client)
        await agent.register()
        code, detail = refused(await agent.acquire(pr.number, pr.head_sha, repo=other))
        assert code == "repo_not_allowed" and "gitea:acme/api" in detail
        code, _ = refused(await agent.merge(pr.number, pr.head_sha, 1, repo=other))
        assert code == "repo_not_allowed"
        code, _ = refused(
            await agent.call("list_leases", forge=FORGE, repo=other, number=pr.number)
        )
        assert code == "repo_not_allowed"
        code, _ = refused(await agent.call("pr_state", forge=FORGE, repo=other, number=1))
        assert code == "repo_not_allowed"
        code, _ = refused(await agent.call("query_workflow_db", sql="SELECT 1"))
        assert code == "repo_not_allowed"
        # Its own repository under another casing is its own.
        own = world.sim.open_pr(FORGE, REPO, author="alice")
        ok(await agent.acquire(own.number, own.head_sha, repo="ACME/Api"))
    assert world.service.leases is not None
    assert not [
        lease
        for lease in world.service.leases.list_leases(forge=FORGE, repo="acme/other")
        if lease.holder == agent.identity
    ]


async def test_another_tokens_worker_is_refused(world: World) -> None:
    pr = green_approved_pr(world)
    async with mcp_http(world.base, world.token("lease,merge")) as client:
        owner = Agent(client, "owner")
        await owner.register()
        epoch = ok(await owner.acquire(pr.number, pr.head_sha))["epoch"]
    async with mcp_http(world.base, world.token("lease,merge")) as client:
        other = Agent(client, "other")
        other.identity = owner.identity
        for result in (
            await other.call("worker_heartbeat", worker_identity=owner.identity),
            await other.acquire(pr.number, pr.head_sha),
            await other.claim("heartbeat_lease", pr.number, epoch),
            await other.claim("release_lease", pr.number, epoch),
            await other.merge(pr.number, pr.head_sha, epoch),
        ):
            assert refused(result)[0] == "not_worker_owner"
    assert world.merge_requests(FORGE, pr.number) == []


async def test_a_stale_epoch_and_a_moved_head_merge_nothing(world: World) -> None:
    pr = green_approved_pr(world)
    async with mcp_http(world.base, world.token("lease,merge")) as client:
        first, second = Agent(client, "first"), Agent(client, "second")
        await first.register()
        await second.register()
        old = ok(await first.acquire(pr.number, pr.head_sha))["epoch"]
        ok(await first.claim("release_lease", pr.number, old))
        new = ok(await second.acquire(pr.number, pr.head_sha))["epoch"]
        assert new > old
        for tool in ("heartbeat_lease", "release_lease"):
            code, _ = refused(await first.claim(tool, pr.number, old))
            assert code == "superseded"
        result = await first.merge(pr.number, pr.head_sha, old)
        code, detail = refused(result)
        assert code == "superseded" and second.identity in detail
        assert "epoch" not in refusal_body(result)  # the holder's stays private

        # The head moves under the lease: the lease pinned to the approved head no longer
        # covers the PR, and the merge is refused naming the new head (as over REST).
        moved = world.sim.push(FORGE, REPO, pr.number)
        code, detail = refused(await second.merge(pr.number, pr.head_sha, new))
        assert code == "lease_not_held" and moved in detail
        status, body = await world.call(
            "POST", "/api/v1/merges", world.token("merge"),
            {"forge": FORGE, "repo": REPO, "number": pr.number, "head_sha": pr.head_sha,
             "worker_identity": second.identity, "epoch": new},
        )  # fmt: skip
        assert (status, body["error"]) == (403, "not_worker_owner")  # another token's worker
    assert world.merge_requests(FORGE, pr.number) == []


async def test_huge_and_malformed_arguments_are_refused(world: World) -> None:
    token = world.token("lease,merge,read,review")
    async with mcp_http(world.base, token) as client:
        agent = Agent(client)
        await agent.register()
        for args in (
            {"forge": FORGE, "repo": "a/" + "b" * 100_000, "number": 1, "role": "merger"},
            {"forge": FORGE, "repo": REPO, "number": -1, "role": "merger"},
            {"forge": FORGE, "repo": REPO, "number": 1, "role": "owner"},
            {"forge": FORGE, "repo": REPO, "number": 1, "role": "merger", "extra": 1},
        ):
            result = await agent.call(
                "acquire_lease", **args, worker_identity=agent.identity, head_sha="a" * 40
            )
            assert refused(result)[0] == "invalid_request"
        code, _ = refused(await agent.call("review_pr", repo="not a repo", number=1))
        assert code == "invalid_request"
        code, _ = refused(await agent.call("no_such_tool"))
        assert code == "not_session_owner"
    # A body over the limit is refused before it reaches MCP, by its declared length...
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    huge = b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": "' + b"x" * (2 << 20)
    async with world.http.post(world.base + "/mcp", data=huge, headers=headers) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"] == "body_too_large"

    # ...and while reading one that declares none.
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * (64 << 10)

    async with (
        aiohttp.ClientSession() as http,
        http.post(world.base + "/mcp", data=chunks(), headers=headers) as resp,
    ):
        assert resp.status == 413


async def test_review_pr_is_journaled_gated_and_explained(world: World) -> None:
    pr = world.sim.open_pr(FORGE, REPO, author="alice")
    async with mcp_http(world.base, world.token("review,read")) as client:
        queued = ok(
            await client.call_tool(
                "review_pr", {"forge": FORGE, "repo": "ACME/API", "number": pr.number}
            )
        )
        assert queued["status"] == "queued" and queued["delivery_id"].startswith("mcp:")
        await world.settle()
        explained = ok(await client.call_tool("explain", {"delivery_id": queued["delivery_id"]}))
        assert explained["source"] == "mcp"
        assert [d["decision"] for d in explained["decisions"]] == ["eligible"]
        assert explained["decisions"][0]["repo"] == REPO
        by_pr = ok(
            await client.call_tool("explain", {"forge": FORGE, "repo": REPO, "number": pr.number})
        )
        assert queued["delivery_id"] in {d["delivery_id"] for d in by_pr["decisions"]}
        state = ok(
            await client.call_tool("pr_state", {"forge": FORGE, "repo": REPO, "number": pr.number})
        )
        assert state["state"] == "open" and state["head_sha"] == pr.head_sha
        assert state["state_comment"] and pr.head_sha[:12] in state["state_comment"]
        # The canonical fields are the ones the comment on the forge carries, key for key.
        await world.settle()
        posted = [
            c.body
            for c in world.sim.pull(FORGE, REPO, pr.number).comments
            if STATE_MARKER in c.body
        ]
        assert len(posted) == 1
        assert state["canonical"] == json.loads(json.dumps(asdict(parse_pr_state(posted[0]))))
        assert state["canonical"]["head_sha"] == pr.head_sha
        # The same delivery through the REST API: the same body.
        status, rest = await world.call(
            "GET", f"/api/v1/deliveries/{queued['delivery_id']}", world.token("read")
        )
        assert status == 200 and rest == explained


async def test_a_head_pushed_during_the_merge_is_refused_head_moved(world: World) -> None:
    pr = green_approved_pr(world)
    pushed: list[str] = []
    world.sim.faults.add(
        forge=FORGE,
        method="POST",
        path=f"/repos/{REPO}/pulls/{pr.number}/merge",
        before=lambda: pushed.append(world.sim.push(FORGE, REPO, pr.number)),
    )
    async with mcp_http(world.base, world.token("lease,merge")) as client:
        agent = Agent(client)
        await agent.register()
        epoch = ok(await agent.acquire(pr.number, pr.head_sha))["epoch"]
        result = await agent.merge(pr.number, pr.head_sha, epoch)
    code, _ = refused(result)
    assert code == "head_moved" and refusal_body(result)["new_head"] == pushed[0]
    assert not world.sim.pull(FORGE, REPO, pr.number).merged
