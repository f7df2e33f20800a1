"""``whoami`` on every path (``GET /api/v1/whoami``, the MCP tool over HTTP with both official
SDK clients, ``reviewbot token whoami``): the calling token's name, scopes and repository
binding, read from the store at the call, so a rescoped token answers its new scopes at once
and a revoked one is refused; no argument can make it show another token."""

from __future__ import annotations

import json
from typing import Any

from reviewbot.store.tokens import list_tokens, rescope_token, revoke_token
from tests.integration import ts_mcp_support as ts
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import World
from tests.integration.process_support import run_reviewbot

FIELDS = {"id", "name", "prefix", "scopes", "repo", "created_at", "revoked_at"}


def named(w: World, token: str) -> Any:
    (info,) = [t for t in list_tokens(w.db) if token.startswith(t.prefix) and t.active]
    return info


async def test_whoami_answers_the_live_token_on_rest_and_mcp(world: World) -> None:
    w = world
    token = w.token("lease", repo="gitea:Acme/Api")
    info = named(w, token)
    status, body = await w.call("GET", "/api/v1/whoami", token)
    assert status == 200 and set(body) == FIELDS
    assert (body["name"], body["scopes"], body["repo"]) == (info.name, ["lease"], "gitea:acme/api")
    assert body["revoked_at"] is None and token not in str(body)
    async with mcp_http(w.base, token) as client:
        # Listed for a token of any scope: it needs none.
        assert "whoami" in {t.name for t in (await client.list_tools()).tools}
        assert ok(await client.call_tool("whoami", {})) == body
    async with ts.ts_http(w.base, token) as client:
        assert ts.ok(await client.call("whoami", {})) == body

        # Rescoped: the next call answers the new scopes and binding, on every path.
        rescope_token(w.db, info.name, scopes="read,merge", repo=None)
        status, body = await w.call("GET", "/api/v1/whoami", token)
        assert (status, body["scopes"], body["repo"]) == (200, ["read", "merge"], None)
        assert ts.ok(await client.call("whoami", {})) == body
        async with mcp_http(w.base, token) as py:
            assert ok(await py.call_tool("whoami", {})) == body

        # Revoked: refused at once (401 before any MCP processing), naming the refusal.
        revoke_token(w.db, info.name, now=1_767_225_700.0)
        assert '"error": "unauthorized"' in (await client.call("whoami", {}))["exception"]
    status, body = await w.call("GET", "/api/v1/whoami", token)
    assert (status, body["error"]) == (401, "unauthorized")


async def test_no_argument_shows_another_tokens_identity(world: World) -> None:
    w = world
    mine, theirs = w.token("read"), w.token("merge,lease", repo="gitea:acme/other")
    other = named(w, theirs)
    for query in (f"?name={other.name}", f"?id={other.id}", f"?token={theirs}"):
        status, body = await w.call("GET", "/api/v1/whoami" + query, mine)
        assert (status, body["error"]) == (400, "invalid_request"), query
        assert other.name not in str(body) and theirs not in str(body)
    status, body = await w.call("GET", "/api/v1/whoami", None)
    assert (status, body["error"]) == (401, "unauthorized")
    status, body = await w.call("GET", "/api/v1/whoami", "rbt_" + "x" * 500)
    assert (status, body["error"]) == (401, "unauthorized")
    async with mcp_http(w.base, mine) as client:
        for arguments in ({"name": other.name}, {"id": other.id}, {"token": theirs}):
            code, detail = refused(await client.call_tool("whoami", arguments))
            assert code == "invalid_request" and other.name not in detail, arguments
        assert ok(await client.call_tool("whoami", {}))["name"] != other.name


async def test_the_command_line_whoami_reads_the_store_now(world: World) -> None:
    w = world
    token = w.token("read", repo="gitea:acme/api")
    info = named(w, token)
    env = {"REVIEWBOT_DATA_DIR": str(w.settings.data_dir), "REVIEWBOT_TOKEN": token}
    done = run_reviewbot("token", "whoami", "--json", cwd=w.settings.data_dir, env=env)
    assert done.returncode == 0, done.stderr
    status, body = await w.call("GET", "/api/v1/whoami", token)
    assert (status, json.loads(done.stdout)) == (200, body)
    assert body["name"] == info.name

    done = run_reviewbot(
        "token", "rescope", info.name, "--scopes", "review", cwd=w.settings.data_dir, env=env
    )
    assert done.returncode == 0, done.stderr
    done = run_reviewbot("token", "whoami", cwd=w.settings.data_dir, env=env)
    assert done.returncode == 0 and "scopes review, every repository" in done.stdout

    revoke_token(w.db, info.name, now=1_767_225_700.0)
    done = run_reviewbot("token", "whoami", cwd=w.settings.data_dir, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert f"unauthorized: token {info.name!r} was revoked" in done.stderr
    done = run_reviewbot(
        "token", "whoami", cwd=w.settings.data_dir, env={**env, "REVIEWBOT_TOKEN": ""}
    )
    assert done.returncode == 1 and "REVIEWBOT_TOKEN" in done.stderr
