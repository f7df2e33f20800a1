"""A server killed (SIGKILL) after acknowledging deliveries loses none and repeats none.

The forge hangs, so the acknowledged deliveries are queued or mid-gate when the process is
killed; the restarted server resumes them, and each ends in exactly one decision.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from reviewbot.store import decisions, journal
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.process_support import serve_process
from tests.integration.server_support import (
    GITHUB_SECRET,
    WAIT_S,
    SimWorld,
    make_settings,
    sim_world,
)

pytestmark = pytest.mark.slow

N = 6


def write_config(world: SimWorld, path: Path, defaults: str = "required_checks = []\n") -> None:
    """A ``reviewbot.toml`` for the simulator's GitHub, with ``defaults`` as its rules."""
    gh = world.settings.github
    assert gh.token is not None
    path.write_text(
        "[github]\n"
        f'api_url = "{gh.api_url}"\n'
        f'token = "{gh.token.get_secret_value()}"\n'
        f'webhook_secret = "{GITHUB_SECRET}"\n'
        'bot_login = "reviewbot"\n'
        "[defaults]\n" + defaults
    )


def serve_env(config: Path, data_dir: Path) -> dict[str, str]:
    return {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_WORKERS": "2",
    }


async def test_sigkill_after_ack_then_restart_processes_each_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "reviewbot.toml"
    async with sim_world(data_dir) as world:
        write_config(world, config)
        pulls = [
            world.sim.open_pr("github", "acme/api", author="alice", head_ref=f"b{i}")
            for i in range(N)
        ]
        # the forge hangs: nothing can be gated before the kill (GraphQL read, then REST)
        world.sim.faults.add(forge="github", method="POST", path="/graphql", delay=120.0, times=100)
        for pr in pulls:
            world.sim.faults.add(
                forge="github",
                method="GET",
                path=f"/repos/acme/api/pulls/{pr.number}",
                delay=120.0,
                times=100,
            )
        acknowledged: list[str] = []
        async with serve_process(cwd=tmp_path, env=serve_env(config, data_dir)) as bot:
            world.sim.set_webhook("github", url=bot.base + "/webhooks/github", secret=GITHUB_SECRET)
            for pr in pulls:
                delivery = await world.sim.deliver_pull_request("github", "acme/api", pr.number)
                assert delivery.status == 202
                acknowledged.append(delivery.id)
            os.kill(bot.proc.pid, signal.SIGKILL)

        db = open_store(make_settings(data_dir))
        try:
            states = {journal.get_delivery(db, d).status for d in acknowledged}  # type: ignore[union-attr]
            assert states <= {"queued", "processing"}
            assert all(decisions.count_for_delivery(db, d) == 0 for d in acknowledged)
        finally:
            db.close()

        world.sim.faults.clear()
        async with serve_process(cwd=tmp_path, env=serve_env(config, data_dir)):
            db = open_store(make_settings(data_dir))
            try:
                async with asyncio.timeout(WAIT_S):
                    while True:
                        done = [
                            journal.get_delivery(db, d).status in ("done", "failed")  # type: ignore[union-attr]
                            for d in acknowledged
                        ]
                        if all(done):
                            break
                        await asyncio.sleep(0.05)
                for delivery_id in acknowledged:
                    rows = decisions.for_delivery(db, delivery_id)
                    assert [r.decision for r in rows] == ["eligible"], delivery_id
            finally:
                db.close()
