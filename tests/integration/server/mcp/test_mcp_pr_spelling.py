"""One PR reference in every MCP tool: ``pr: "FORGE:OWNER/REPO#N"`` is the spelling every
schema documents; ``forge``, ``repo`` and ``number`` are still read, by every tool that names
a PR. Called over ``/mcp`` of the real server with the official client, against the forge
simulator; descriptions are plain text (no reStructuredText markup)."""

from __future__ import annotations

import json
import re
from typing import Any

from mcp import Client

from reviewbot.server.mcp_schema import pull_style
from reviewbot.server.mcp_tools import TOOLS
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, World, set_check

FORGE = "gitea"
MARKUP = re.compile(r"``|:(func|class|meth|mod|data|attr):`")
PR_TOOLS = sorted(t.name for t in TOOLS if pull_style(t.input) is not None)


def split(number: int) -> dict[str, Any]:
    return {"forge": FORGE, "repo": REPO, "number": number}


async def register(client: Client) -> str:
    answer = ok(
        await client.call_tool(
            "register_worker", {"name": "w", "client": "test", "session_id": "s", "role": "merger"}
        )
    )
    return str(answer["worker_identity"])


async def test_every_tool_documents_pr_and_plain_text(world: World) -> None:
    expected = {
        "review_pr",
        "explain",
        "pr_state",
        "acquire_lease",
        "heartbeat_lease",
        "release_lease",
        "merge_pr",
        "list_leases",
        "resolve_capability",
        "lease_history",
        "queue_enqueue",
        "queue_dequeue",
    }
    assert set(PR_TOOLS) == expected
    async with mcp_http(world.base, world.token("read,review,lease,merge")) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    for name, tool in listed.items():
        text = json.dumps(tool.input_schema) + (tool.description or "")
        assert not MARKUP.search(text), (name, MARKUP.search(text))
        if name not in expected:
            continue
        props = tool.input_schema["properties"]
        assert next(iter(props)) == "pr", name
        assert "FORGE:OWNER/REPO#N" in props["pr"]["description"]
        assert all(props[f].get("deprecated") for f in ("forge", "repo", "number")), name
        for example in tool.input_schema.get("examples", []):
            assert not {"forge", "number"} & set(example), (name, example)


async def test_both_spellings_give_one_answer(world: World) -> None:
    w = world
    pull = w.sim.open_pr(FORGE, REPO, author="alice")
    set_check(w, FORGE, pull.head_sha, "success")
    await w.settle()
    ref = f"{FORGE}:{REPO}#{pull.number}"
    async with mcp_http(w.base, w.token("read,lease,merge")) as client:
        worker = await register(client)
        for tool, extra in (
            ("explain", {}),
            ("pr_state", {}),
            ("list_leases", {}),
            ("lease_history", {}),
            ("resolve_capability", {"role": "merge", "worker": worker}),
        ):
            by_pr = ok(await client.call_tool(tool, {"pr": ref, **extra}))
            by_fields = ok(await client.call_tool(tool, {**split(pull.number), **extra}))
            shouting = ok(await client.call_tool(tool, {"pr": ref.upper(), **extra}))
            assert by_pr == by_fields == shouting, tool

        # A lease taken by pr, renewed by fields, released by pr: one lease throughout.
        lease = ok(
            await client.call_tool(
                "acquire_lease",
                {"pr": ref, "role": "merger", "worker_identity": worker, "head_sha": pull.head_sha},
            )
        )
        claim = {"role": "merger", "worker_identity": worker, "epoch": lease["epoch"]}
        renewed = ok(await client.call_tool("heartbeat_lease", {**split(pull.number), **claim}))
        assert renewed["epoch"] == lease["epoch"]
        listed = ok(await client.call_tool("list_leases", {"pr": ref, "live": True}))
        assert [entry["epoch"] for entry in listed["leases"]] == [lease["epoch"]]
        ok(await client.call_tool("release_lease", {"pr": ref, **claim}))


async def test_malformed_or_doubled_references_are_refused(world: World) -> None:
    w = world
    for tool in PR_TOOLS:
        # A token per tool: the refused calls count against its write rate limits.
        async with mcp_http(w.base, w.token("read,review,lease,merge")) as client:
            for args in (
                {"pr": f"{FORGE}:{REPO}#1", **split(1)},  # both spellings at once
                {"pr": "acme/api#1"},  # no forge
                {"pr": "nosuch:acme/api#1"},
                {"pr": "gitea:acme/api#0"},
                {"pr": "gitea:" + "a" * 400 + "/b#1"},
                {"pr": 12},
                {"pr": ["gitea:acme/api#1"]},
            ):
                code, detail = refused(await client.call_tool(tool, args))
                assert code == "invalid_request", (tool, args, code, detail)
    async with mcp_http(w.base, w.token("read")) as client:
        code, detail = refused(await client.call_tool("explain", {"pr": "acme/api#1"}))
        assert "gitea:acme/api#1" in detail and "github:acme/api#1" in detail
        code, _ = refused(await client.call_tool("pr_state", {"forge": FORGE, "repo": REPO}))
        assert code == "invalid_request"


async def test_a_bound_token_is_refused_another_repository_in_either_spelling(
    world: World,
) -> None:
    w = world
    bound = w.token("read", repo=f"{FORGE}:{REPO}")
    async with mcp_http(w.base, bound) as client:
        for args in (
            {"pr": f"{FORGE}:acme/other#1"},
            {"forge": FORGE, "repo": "acme/other", "number": 1},
            {"pr": "github:ACME/API#1"},
        ):
            for tool in ("explain", "pr_state", "lease_history"):
                code, _ = refused(await client.call_tool(tool, args))
                assert code == "repo_not_allowed", (tool, args, code)
