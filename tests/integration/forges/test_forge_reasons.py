"""Forge failures get the reason code that says what to fix, against the forge simulator.

``reviewbot review`` and ``reviewbot merge`` run in-process over real HTTP to the simulator
with a real SQLite store; webhooks go to a real server.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.sim import SimServer, Simulator
from tests.integration.server_support import (
    GITEA_SECRET,
    GITHUB_SECRET,
    running_server,
    sim_world,
)

REPO = "acme/api"


async def review(capsys: pytest.CaptureFixture[str], ref: str) -> dict[str, Any]:
    code = await asyncio.to_thread(main, ["review", ref, "--json"])
    out = capsys.readouterr().out
    assert code == 1, out  # an error decision
    decision: dict[str, Any] = json.loads(out)["decision"]
    return decision


def configure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    (tmp_path / "reviewbot.toml").write_text(f'[repos."github:{REPO}"]\n[repos."gitea:{REPO}"]\n')
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def prepare(sim: Simulator) -> dict[str, str]:
    tokens = {}
    for forge in ("github", "gitea"):
        tokens[forge] = sim.add_user(forge, "reviewbot", bot=True)
        sim.add_user(forge, "alice")
        sim.create_repo(forge, REPO, default_branch="main")
        sim.set_permission(forge, REPO, "alice", "write")
    return tokens


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed when the block ends: nothing listens


async def test_app_not_installed_on_the_repository(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    prepare(sim)
    app_id, key = sim.create_github_app(bot_login="reviewbot-app[bot]")  # never installed
    (tmp_path / "app.pem").write_text(key)
    pr = sim.open_pr("github", REPO, author="alice")
    configure(
        monkeypatch,
        tmp_path,
        REVIEWBOT_GITHUB__API_URL=sim_server.github_api_url,
        REVIEWBOT_GITHUB__APP_ID=str(app_id),
        REVIEWBOT_GITHUB__PRIVATE_KEY_PATH=str(tmp_path / "app.pem"),
    )
    decision = await review(capsys, f"github:{REPO}#{pr.number}")
    assert decision["reason_code"] == "app_not_installed"
    assert "app_installation" in decision["detail"]


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_refused_credentials_are_forge_auth_failed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
    forge: str,
) -> None:
    prepare(sim)
    pr = sim.open_pr(forge, REPO, author="alice")
    url = {"github": sim_server.github_api_url, "gitea": sim_server.gitea_url}[forge]
    key = "API_URL" if forge == "github" else "URL"
    configure(
        monkeypatch,
        tmp_path,
        **{
            f"REVIEWBOT_{forge.upper()}__{key}": url,
            f"REVIEWBOT_{forge.upper()}__TOKEN": "revoked-token",
        },
    )
    decision = await review(capsys, f"{forge}:{REPO}#{pr.number}")
    assert decision["reason_code"] == "forge_auth_failed"
    assert "401" in decision["detail"]


async def test_nothing_listening_is_forge_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(
        monkeypatch,
        tmp_path,
        REVIEWBOT_GITEA__URL=f"http://127.0.0.1:{closed_port()}",
        REVIEWBOT_GITEA__TOKEN="t",
        REVIEWBOT_GITEA__BOT_LOGIN="reviewbot",
    )
    decision = await review(capsys, f"gitea:{REPO}#1")
    assert decision["reason_code"] == "forge_unreachable"
    assert "connection failed" in decision["detail"]


@pytest.mark.parametrize("bot_login", [None, "reviewbot"])
async def test_url_that_is_not_the_api_is_forge_url_wrong(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
    bot_login: str | None,
) -> None:
    tokens = prepare(sim)
    pr = sim.open_pr("gitea", REPO, author="alice")
    env = {
        # A path under the simulator that is not Gitea: it answers a plain 404 page.
        "REVIEWBOT_GITEA__URL": sim_server.base_url + "/not-gitea",
        "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
    }
    if bot_login:
        env["REVIEWBOT_GITEA__BOT_LOGIN"] = bot_login
    configure(monkeypatch, tmp_path, **env)
    decision = await review(capsys, f"gitea:{REPO}#{pr.number}")
    assert decision["reason_code"] == "forge_url_wrong"


async def test_merge_at_a_sha_the_forge_does_not_know_is_head_unknown(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    tokens = prepare(sim)
    pr = sim.open_pr("github", REPO, author="alice")
    configure(
        monkeypatch,
        tmp_path,
        REVIEWBOT_GITHUB__API_URL=sim_server.github_api_url,
        REVIEWBOT_GITHUB__TOKEN=tokens["github"],
        REVIEWBOT_GITHUB__BOT_LOGIN="reviewbot",
    )
    code = await asyncio.to_thread(
        main,
        [
            "merge",
            f"github:{REPO}#{pr.number}",
            "--head",
            "0" * 40,
            "--client",
            "t",
            "--session-id",
            "s",
        ],
    )
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("reviewbot: head_unknown:"), err
    assert not sim.pull("github", REPO, pr.number).merged


@pytest.mark.parametrize(("sender", "endpoint"), [("gitea", "github"), ("github", "gitea")])
async def test_webhook_at_the_other_forges_endpoint_is_wrong_endpoint(
    tmp_path: Path, sender: str, endpoint: str
) -> None:
    async with sim_world(tmp_path / "data") as world, running_server(world.settings) as running:
        pr = world.sim.open_pr(sender, REPO, author="alice")
        # The sender's real webhook, signed with its own secret, at the wrong path.
        secret = GITEA_SECRET if sender == "gitea" else GITHUB_SECRET
        world.sim.set_webhook(sender, url=f"{running.base}/webhooks/{endpoint}", secret=secret)
        delivery = await world.sim.deliver_pull_request(sender, REPO, pr.number)
        assert delivery.status == 400
        body = json.loads(delivery.response_body)
        assert body["error"] == "wrong_endpoint"
        assert body["detail"] == (
            f"this is a {sender} webhook sent to /webhooks/{endpoint}; "
            f"point it at /webhooks/{sender}"
        )
        assert running.stored_ids() == []  # refused before anything was journalled
        assert 'reason="wrong_endpoint"' in await running.scrape()
