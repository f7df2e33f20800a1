"""A repository without rules: the webhook path and ``reviewbot review`` say the same
(``skip repo_not_configured``), and neither posts anything, state comment included.

The server runs on loopback against the forge simulator and takes the forge's webhook;
``reviewbot review`` and ``reviewbot explain`` run as real processes on the same store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reviewbot.config import RepoRules
from tests.integration.process_support import run_reviewbot
from tests.integration.server_support import (
    GITEA_SECRET,
    GITHUB_SECRET,
    point_webhooks,
    running_server,
    sim_world,
)


@pytest.mark.parametrize("forge", ["gitea", "github"])
async def test_every_entry_path_stays_silent_on_a_repository_without_rules(
    tmp_path: Path, forge: str
) -> None:
    data = tmp_path / "data"
    rules = {"gitea:acme/api": RepoRules(), "github:acme/api": RepoRules()}
    async with sim_world(data, defaults=None, repos=rules) as world:
        sim = world.sim
        sim.create_repo(forge, "acme/elsewhere", default_branch="main")
        sim.set_permission(forge, "acme/elsewhere", "alice", "write")
        pr = sim.open_pr(forge, "acme/elsewhere", author="alice")
        async with running_server(world.settings) as server:
            point_webhooks(world, server)
            delivery = await sim.deliver_pull_request(forge, "acme/elsewhere", pr.number)
            (gated,) = await server.decisions_of(delivery.id)
            assert (gated.decision, gated.reason_code) == ("skip", "repo_not_configured")
            sim.clear_requests()

            (tmp_path / "reviewbot.toml").write_text(
                '[repos."gitea:acme/api"]\n[repos."github:acme/api"]\n'
            )
            s = world.settings
            env = {
                "REVIEWBOT_DATA_DIR": str(data),
                "REVIEWBOT_GITEA__URL": str(s.gitea.url),
                "REVIEWBOT_GITEA__TOKEN": str(s.gitea.token),
                "REVIEWBOT_GITEA__WEBHOOK_SECRET": GITEA_SECRET,
                "REVIEWBOT_GITEA__BOT_LOGIN": "reviewbot",
                "REVIEWBOT_GITHUB__API_URL": str(s.github.api_url),
                "REVIEWBOT_GITHUB__TOKEN": str(s.github.token),
                "REVIEWBOT_GITHUB__WEBHOOK_SECRET": GITHUB_SECRET,
                "REVIEWBOT_GITHUB__BOT_LOGIN": "reviewbot",
            }
            # Another casing of the name is the same repository, still without rules.
            ref = f"{forge}:Acme/ELSEWHERE#{pr.number}"
            done = run_reviewbot("review", ref, "--json", cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            decision = answer["decision"]
            assert (decision["decision"], decision["reason_code"]) == (
                "skip",
                "repo_not_configured",
            )
            assert answer["outbox"] == [] and not answer.get("state_comment"), answer

            live = sim.pull(forge, "acme/elsewhere", pr.number)
            assert live.reviews == [] and live.comments == []
            assert [r for r in sim.requests if r.method != "GET"] == []

            # explain shows the same reason from both paths.
            done = run_reviewbot("explain", ref, cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stderr
            assert done.stdout.count("[repo_not_configured]") == 2, done.stdout
