"""``delivery.json`` read in the documented order: whichever path a review came by (a Crew
call, the REST API, MCP's ``review_pr``, a GitHub or a Gitea webhook), a step that reads the
file as the docs say (``variables``, then ``payload.args`` and the flat payload keys, then
the forge event in the payload, then ``VAR_*``) finds the pull request in the place of that
path, and a Crew call's arguments at ``payload.args``, not ``payload.payload.args``.

The real server, the simulator over HTTP, real SQLite and a reviewer as a real subprocess
that keeps a copy of its delivery file.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from reviewbot.ingress.envelope import FIELD_NAMES, read_envelope
from reviewbot.store.tokens import create_token
from tests.integration.mcp_support import mcp_http, ok
from tests.integration.review_support import REPO, Bot, running_bot
from tests.integration.runtime.review.test_review_external import (
    COPIES_ITS_DELIVERY_FILE,
    read_json,
    reviewer,
    runs_of,
    with_reviewers,
)

FORGES = ("github", "gitea")


def token(bot: Bot) -> str:
    plain, _ = create_token(
        bot.store.db, name=f"t-{uuid.uuid4().hex[:8]}", scopes="review", repo=None, now=0.0
    )
    return plain


async def post(bot: Bot, path: str, body: dict[str, Any]) -> None:
    import aiohttp  # only here: the other paths need no client of their own

    headers = {"Authorization": f"Bearer {token(bot)}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(bot.base_url + path, json=body, headers=headers) as resp,
    ):
        assert resp.status in (200, 202), await resp.text()


def without_the_bots_fields(document: dict[str, Any]) -> dict[str, Any]:
    """The delivery file without the PR fields the bot itself adds to ``variables``: what is
    left is what the delivery carried, read in the documented order."""
    kept = {k: v for k, v in document["variables"].items() if k not in FIELD_NAMES}
    return {**document, "variables": kept}


async def delivered(tmp_path: Path, send: str, forge: str) -> tuple[dict[str, Any], Any]:
    command, runs = reviewer(tmp_path, "reader", COPIES_ITS_DELIVERY_FILE)
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        if send == "webhook":
            await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        elif send == "crew":
            envelope = {
                "variables": {"note": "from the planner"},
                "payload": {
                    "function": "review_pull_request",
                    "args": {
                        "forge": forge,
                        "repository": REPO,
                        "pr": pr.number,
                        "head_sha": pr.head_sha,
                    },
                    "from": "planner-agent",
                    "call_id": f"call-{forge}",
                },
            }
            await post(bot, "/webhooks/crew", envelope)
        elif send == "api":
            body = {"forge": forge, "repo": REPO, "number": pr.number, "head_sha": pr.head_sha}
            await post(bot, "/api/v1/reviews", body)
        else:
            async with mcp_http(bot.base_url, token(bot)) as client:
                ok(await client.call_tool("review_pr", {"pr": f"{forge}:{REPO}#{pr.number}"}))
        await bot.settle()
        assert runs_of(runs) == [pr.head_sha]
        return read_json(Path(f"{runs}.delivery.json")), pr


@pytest.mark.parametrize("forge", FORGES)
async def test_a_crew_calls_arguments_are_where_the_read_order_finds_them(
    tmp_path: Path, forge: str
) -> None:
    document, pr = await delivered(tmp_path, "crew", forge)
    assert document["source"] == "crew"
    # The call itself is the payload: its arguments at payload.args.
    assert document["payload"] == {
        "function": "review_pull_request",
        "args": {"forge": forge, "repository": REPO, "pr": pr.number, "head_sha": pr.head_sha},
        "from": "planner-agent",
        "call_id": f"call-{forge}",
    }
    # The envelope's own inputs stay in variables, beside the PR the bot resolved.
    assert document["variables"] == {
        "note": "from the planner",
        "forge": forge,
        "owner": "acme",
        "repo": "api",
        "number": pr.number,
        "head_sha": pr.head_sha,
    }
    found = read_envelope(without_the_bots_fields(document), configured_forges=FORGES)
    assert (found.forge, found.owner, found.name, found.number, found.head_sha) == (
        forge,
        "acme",
        "api",
        pr.number,
        pr.head_sha,
    )
    assert found.origins["number"] == "payload.args.pr"
    # With the bot's fields the file resolves to the same PR, without a contradiction.
    whole = read_envelope(document, configured_forges=FORGES)
    assert (whole.number, whole.head_sha) == (pr.number, pr.head_sha)


@pytest.mark.parametrize(
    ("send", "forge", "repo_from"),
    [
        ("api", "gitea", "payload.repo"),  # the body's flat keys
        ("mcp", "github", "payload.repo"),
        ("webhook", "github", "payload.repository"),  # the forge event in the payload
        ("webhook", "gitea", "payload.repository"),
    ],
)
async def test_every_other_path_is_read_in_the_documented_order(
    tmp_path: Path, send: str, forge: str, repo_from: str
) -> None:
    document, pr = await delivered(tmp_path, send, forge)
    found = read_envelope(
        without_the_bots_fields(document),
        configured_forges=FORGES,
        headers=document["headers"] or None,
    )
    assert (found.forge, found.owner, found.name, found.number) == (
        forge,
        "acme",
        "api",
        pr.number,
    )
    assert found.origins["repo"] == repo_from, found.read_from()
    assert found.origins["number"] == "payload.number", found.read_from()
