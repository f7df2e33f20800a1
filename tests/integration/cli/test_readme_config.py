"""The README's configuration works as written: its TOML, a real ``serve``, the simulator."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

from reviewbot.sim import SimServer, Simulator
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.server_support import WAIT_S
from tests.support.paths import REPO_ROOT as ROOT

SECRET = "readme-webhook-secret"


def readme_config() -> str:
    """The TOML block of the README's "Configure it for real" section, as printed."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configure it for real", 1)[1]
    match = re.search(r"```toml\n(.*?)```", section, re.S)
    assert match, "the README lost its configuration example"
    return match.group(1)


async def until(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_readme_example_approves_and_merges_after_ci_test_succeeds(tmp_path: Path) -> None:
    toml = readme_config()
    assert 'required_checks = ["ci/*"]' in toml and "automerge = true" in toml
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        token = sim.add_user("gitea", "reviewbot", bot=True)
        sim.add_user("gitea", "alice")
        sim.create_repo("gitea", "acme/api", default_branch="main")
        sim.set_permission("gitea", "acme/api", "alice", "write")
        # The README's file exactly, with only the instance URL pointing at the simulator.
        config = toml.replace('"https://gitea.example.com"', f'"{sim_server.gitea_url}"')
        assert config != toml
        (tmp_path / "reviewbot.toml").write_text(config)
        env = {"REVIEWBOT_GITEA__TOKEN": token, "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET}
        async with serve_process(cwd=tmp_path, env=env) as server:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret=SECRET)
            pr = sim.open_pr("gitea", "acme/api", author="alice")
            assert (await sim.deliver_pull_request("gitea", "acme/api", pr.number)).status == 202
            status = sim.set_status("gitea", "acme/api", pr.head_sha, "ci/test", "success")
            assert (await sim.deliver_status("gitea", "acme/api", status.id)).status == 202

            pull = sim.pull("gitea", "acme/api", pr.number)
            await until(lambda: pull.merged, "the automerge")
            bot_reviews = [r for r in pull.reviews if r.user == "reviewbot"]
            assert [(r.state, r.commit_id) for r in bot_reviews] == [("APPROVED", pr.head_sha)]


async def test_configured_pattern_that_matched_nothing_is_named_in_the_decision(
    tmp_path: Path,
) -> None:
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        token = sim.add_user("gitea", "reviewbot", bot=True)
        sim.add_user("gitea", "alice")
        sim.create_repo("gitea", "acme/api", default_branch="main")
        config = readme_config().replace('"https://gitea.example.com"', f'"{sim_server.gitea_url}"')
        (tmp_path / "reviewbot.toml").write_text(config)
        env = {"REVIEWBOT_GITEA__TOKEN": token, "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET}
        async with serve_process(cwd=tmp_path, env=env) as server:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret=SECRET)
            pr = sim.open_pr("gitea", "acme/api", author="alice")
            status = sim.set_status("gitea", "acme/api", pr.head_sha, "build", "success")
            assert (await sim.deliver_status("gitea", "acme/api", status.id)).status == 202
            shown: list[str] = []

            async def waiting_decision() -> bool:
                done = await asyncio.to_thread(
                    run_reviewbot, "explain", f"gitea:acme/api#{pr.number}", cwd=tmp_path, env=env
                )
                shown[:] = [done.stdout]
                return "checks_pending" in done.stdout

            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not await waiting_decision():
                assert loop.time() < deadline, shown
                await asyncio.sleep(0.1)
            assert "missing: ci/*" in shown[0], shown[0]
