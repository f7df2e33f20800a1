"""``resolve_capability``, ``lease_history`` and ``runtime`` over MCP with the official client,
against ``/mcp`` of the real server, the forge simulator and a real SQLite store.

Each tool answers what its REST route answers (they call one function), refuses what the
route refuses with the same code, and a bound token is refused before the forge is asked.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from mcp import Client

from reviewbot.store.tokens import create_token
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, World, set_check

FORGE = "gitea"


def named_token(w: World, name: str, scopes: str, repo: str | None = None) -> str:
    plain, _ = create_token(w.db, name=name, scopes=scopes, repo=repo, now=1_767_225_600.0)
    return plain


async def register(client: Client, name: str) -> str:
    answer = ok(
        await client.call_tool(
            "register_worker",
            {"name": name, "client": "test", "session_id": "s", "role": "merger"},
        )
    )
    identity: str = answer["worker_identity"]
    return identity


def target(number: int) -> dict[str, Any]:
    return {"forge": FORGE, "repo": REPO, "number": number, "role": "merger"}


def codes(answer: dict[str, Any]) -> set[str]:
    return {b["code"] for b in answer["blockers"]}


async def rest(w: World, path: str, token: str, **query: str) -> tuple[int, dict[str, Any]]:
    return await w.call("GET", f"{path}?{urllib.parse.urlencode(query)}", token)


async def test_capability_allowed_then_every_reason_at_once(world: World) -> None:
    w = world
    pr = w.sim.open_pr(FORGE, REPO, author="alice")
    set_check(w, FORGE, pr.head_sha, "success")
    w.sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    await w.settle()
    ref = f"{FORGE}:{REPO}#{pr.number}"
    mine, theirs = w.token("lease,merge,read"), w.token("lease,merge,read")
    async with mcp_http(w.base, mine) as me, mcp_http(w.base, theirs) as other:
        my_worker, their_worker = await register(me, "me"), await register(other, "other")
        ask = {"pr": ref, "role": "merge", "worker": my_worker}

        answer = ok(await me.call_tool("resolve_capability", ask))
        assert (answer["allowed"], answer["codes"], answer["head_sha"]) == (True, [], pr.head_sha)
        assert answer["next_action"].startswith(f"acquire the merger lease at {pr.head_sha}")
        status, by_rest = await rest(w, "/api/v1/capability", mine, **ask)
        assert (status, by_rest) == (200, answer)  # one function answers both

        # Another worker takes the lease, then the head moves past the approval.
        lease = ok(
            await other.call_tool(
                "acquire_lease",
                {**target(pr.number), "worker_identity": their_worker, "head_sha": pr.head_sha},
            )
        )
        new_head = w.sim.push(FORGE, REPO, pr.number)
        answer = ok(await me.call_tool("resolve_capability", ask))
        assert answer["allowed"] is False
        assert {"lease_held", "head_moved", "checks_not_green"} <= codes(answer), answer
        (held,) = [b for b in answer["blockers"] if b["code"] == "lease_held"]
        assert (held["holder"], held["expires_at"]) == (their_worker, lease["expires_at"])
        assert str(lease["epoch"]) not in held["detail"].split()  # never the fencing token
        (moved,) = [b for b in answer["blockers"] if b["code"] == "head_moved"]
        assert new_head in moved["detail"] and pr.head_sha[:12] in moved["detail"]
        assert all(b["next_action"] for b in answer["blockers"])
        assert answer["next_action"] == answer["blockers"][0]["next_action"]
        status, by_rest = await rest(w, "/api/v1/capability", mine, **ask)
        assert (status, by_rest) == (200, answer)


async def test_a_bound_token_is_refused_before_the_forge_is_asked(world: World) -> None:
    w = world
    w.sim.create_repo(FORGE, "acme/other", default_branch="main")
    other = w.sim.open_pr(FORGE, "acme/other", author="alice")
    own = w.sim.open_pr(FORGE, REPO, author="alice")
    bound = w.token("lease,merge,read", repo=f"{FORGE}:acme/api")
    async with mcp_http(w.base, bound) as client:
        before = len(w.sim.requests)
        for pr in (f"{FORGE}:ACME/Other#{other.number}", f"github:Acme/API#{own.number}"):
            ask = {"pr": pr, "role": "merge"}
            code, _ = refused(await client.call_tool("resolve_capability", ask))
            assert code == "repo_not_allowed", pr
            status, body = await rest(w, "/api/v1/capability", bound, **ask)
            assert (status, body["error"]) == (403, "repo_not_allowed")
            code, _ = refused(await client.call_tool("lease_history", {"pr": pr}))
            assert code == "repo_not_allowed", pr
        assert len(w.sim.requests) == before  # nothing was asked of the forge
        # Its own repository, in another casing, is the same one.
        answer = ok(
            await client.call_tool(
                "resolve_capability", {"pr": f"{FORGE}:ACME/Api#{own.number}", "role": "review"}
            )
        )
        assert answer["pr"] == f"{FORGE}:{REPO}#{own.number}"
        # A malformed PR, an unknown role, a worker over its bound, an unknown field.
        for bad in (
            {"pr": "acme/api#1", "role": "merge"},
            {"pr": f"{FORGE}:{REPO}#1", "role": "admin"},
            {"pr": f"{FORGE}:{REPO}#1", "role": "merge", "worker": "x" * 500},
            {"pr": f"{FORGE}:{REPO}#1", "role": "merge", "epoch": 3},
            {"pr": f"{FORGE}:{REPO}#1" + "9" * 400, "role": "merge"},
        ):
            code, _ = refused(await client.call_tool("resolve_capability", bad))
            assert code == "invalid_request", bad
    async with mcp_http(w.base, w.token("lease")) as client:
        code, _ = refused(await client.call_tool("resolve_capability", {"pr": "gitea:a/b#1"}))
        assert code == "missing_scope"  # before the arguments are looked at


async def test_lease_history_names_the_mcp_caller(world: World) -> None:
    w = world
    pr = w.sim.open_pr(FORGE, REPO, author="alice")
    token = named_token(w, "agent-mcp", "lease,read")
    async with mcp_http(w.base, token) as client:
        me = await register(client, "hist")
        lease = ok(
            await client.call_tool(
                "acquire_lease",
                {**target(pr.number), "worker_identity": me, "head_sha": pr.head_sha},
            )
        )
        claim = {**target(pr.number), "worker_identity": me, "epoch": lease["epoch"]}
        ok(await client.call_tool("heartbeat_lease", claim))
        ok(await client.call_tool("release_lease", {**claim, "reason": "abandoned"}))

        ref = f"{FORGE}:ACME/api#{pr.number}"
        history = ok(await client.call_tool("lease_history", {"pr": ref, "role": "merger"}))
        assert history["pr"] == f"{FORGE}:{REPO}#{pr.number}"
        rows = [(h["event"], h["reason"], h["holder"], h["epoch"]) for h in history["history"]]
        assert rows == [
            ("granted", "", me, lease["epoch"]),
            ("released", "abandoned", me, lease["epoch"]),
        ], rows
        assert history["history"][0]["renewed_at"] is not None  # the heartbeat, on the grant
        assert all("'agent-mcp'" in (h["actor"] or "") for h in history["history"])
        status, by_rest = await rest(w, "/api/v1/leases/history", token, pr=ref, role="merger")
        assert (status, by_rest) == (200, history)

        only_reviewer = ok(await client.call_tool("lease_history", {"pr": ref, "role": "reviewer"}))
        assert only_reviewer["history"] == []
        one = ok(await client.call_tool("lease_history", {"pr": ref, "limit": 1}))
        assert len(one["history"]) == 1
        for bad in ({"pr": ref, "role": "boss"}, {"pr": ref, "limit": 0}, {"pr": "x"}):
            code, _ = refused(await client.call_tool("lease_history", bad))
            assert code == "invalid_request", bad


async def test_runtime_over_mcp_is_the_rest_answer(world: World) -> None:
    w = world
    reader = w.token("read")
    async with mcp_http(w.base, reader) as client:
        answer = ok(await client.call_tool("runtime", {}))
    status, by_rest = await w.call("GET", "/api/v1/runtime", reader)
    assert (status, by_rest) == (200, answer)
    assert answer["restart_needed"] is False and answer["schema_version"] >= 14
    assert "config" in answer and answer["config_hash"]

    bound = w.token("read", repo=f"{FORGE}:acme/api")
    async with mcp_http(w.base, bound) as client:
        answer = ok(await client.call_tool("runtime", {}))
        assert "config" not in answer  # it names every repository
        code, _ = refused(await client.call_tool("runtime", {"verbose": True}))
        assert code == "invalid_request"
    async with mcp_http(w.base, w.token("lease")) as client:
        code, _ = refused(await client.call_tool("runtime", {}))
        assert code == "missing_scope"
