"""Crash recovery with a real ``python -m reviewbot serve`` process, and the review command.

``REVIEWBOT_TEST_CRASH_AT`` (test-only) makes the server exit with status 137 at a named
point, exactly as if it had been killed there:

- ``after_outbox``: the verdict and its outbox row are committed, nothing is posted yet;
- ``after_post``: the forge accepted the review, its id is not recorded yet.

After a restart the drainer resumes the pending row, and exactly one review exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import SQLiteDatabase
from tests.integration.process_support import ServeProcess, clean_env, serve_process
from tests.integration.runtime.review.test_review_pipeline import (
    APPROVED,
    BOT,
    REPO,
    SECRET,
    prepare_sim,
)

pytestmark = pytest.mark.slow
# A serve starts in seconds, but in tens of them on a loaded machine running two at once.
START_S = 60.0


def bot_env(tmp_path: Path, sim_server: SimServer, tokens: dict[str, str]) -> dict[str, str]:
    config = tmp_path / "reviewbot.toml"
    config.write_text(f'[repos."github:{REPO}"]\n[repos."gitea:{REPO}"]\n')
    return clean_env(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
            "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_LEASES__LEASE_S": "2",
            "REVIEWBOT_LEASES__RENEW_S": "1.5",
            "REVIEWBOT_LEASES__RETRY_S": "1",
            "REVIEWBOT_WORKERS": "2",
        }
    )


async def serve_until_crash(
    tmp_path: Path, sim: Simulator, env: dict[str, str], forge: str, number: int, crash_at: str
) -> None:
    """A serve that exits as if killed at ``crash_at`` (status 137) once the PR's webhook
    has arrived."""
    crashing = {**env, "REVIEWBOT_TEST_CRASH_AT": crash_at}
    async with serve_process(cwd=tmp_path, env=crashing, start_s=START_S) as bot:
        sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
        await sim.deliver_pull_request(forge, REPO, number, action="opened")
        assert await asyncio.wait_for(bot.proc.wait(), 30) == 137


async def stop_bot(bot: ServeProcess) -> None:
    """SIGTERM; one that takes over 15 s is killed as the block ends (nothing after it
    depends on a graceful stop, and a loaded machine may stop slowly)."""
    bot.proc.terminate()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(bot.proc.wait(), 15)


def outbox_rows(tmp_path: Path) -> list[dict[str, Any]]:
    db = SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite")
    try:
        with db.read() as tx:
            return [dict(r) for r in tx.all("SELECT * FROM review_outbox ORDER BY id")]
    finally:
        db.close()


async def wait_for(predicate: Any, what: str, limit_s: float = 40.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("forge", "crash_at"),
    [
        ("github", "after_outbox"),
        ("github", "after_post"),
        ("gitea", "after_outbox"),
        ("gitea", "after_post"),
    ],
)
async def test_crash_and_restart_leave_exactly_one_review(
    tmp_path: Path, forge: str, crash_at: str
) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        env = bot_env(tmp_path, sim_server, tokens)
        pr = sim.open_pr(forge, REPO, author="alice")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")

        await serve_until_crash(tmp_path, sim, env, forge, pr.number, crash_at)

        (row,) = outbox_rows(tmp_path)
        assert row["status"] == "pending" and row["forge_review_id"] is None
        posted_before = [r for r in sim.pull(forge, REPO, pr.number).reviews if r.user == BOT]
        assert len(posted_before) == (1 if crash_at == "after_post" else 0)

        async with serve_process(cwd=tmp_path, env=env, start_s=START_S) as bot:
            await wait_for(lambda: outbox_rows(tmp_path)[0]["status"] != "pending", "the drain")
            await stop_bot(bot)

        reviews = [r for r in sim.pull(forge, REPO, pr.number).reviews if r.user == BOT]
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        (row,) = outbox_rows(tmp_path)
        assert row["status"] == "posted" and row["forge_review_id"] == reviews[0].id


async def test_review_command_posts_once_and_reports_it(tmp_path: Path) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        env = bot_env(tmp_path, sim_server, tokens)
        pr = sim.open_pr("gitea", REPO, author="alice")
        sim.set_status("gitea", REPO, pr.head_sha, "ci/test", "success")

        ref = f"gitea:{REPO}#{pr.number}"

        async def review(*args: str) -> tuple[int, str]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reviewbot",
                "review",
                *args,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode is not None
            return proc.returncode, out.decode() + err.decode()

        code, out = await review(ref, "--json")
        assert code == 0, out
        result = json.loads(out)
        assert result["decision"]["decision"] == "approve"
        assert result["decision"]["head_sha"] == pr.head_sha
        assert [(r["verdict"], r["status"]) for r in result["outbox"]] == [("approve", "posted")]
        assert result["state_comment"] == "created"

        code, out = await review(ref)
        assert code == 0, out
        assert f"gitea:{REPO}#{pr.number} at {pr.head_sha[:12]}: approve" in out
        assert "posted: approve posted as review" in out
        reviews = [r for r in sim.pull("gitea", REPO, pr.number).reviews if r.user == BOT]
        assert len(reviews) == 1
        assert len([c for c in sim.pull("gitea", REPO, pr.number).comments if c.user == BOT]) == 1

        mine = sim.open_pr("gitea", REPO, author=BOT, head_ref="bot-change")
        sim.set_status("gitea", REPO, mine.head_sha, "ci/test", "success")
        code, out = await review(f"gitea:{REPO}#{mine.number}", "--json")
        assert code == 0, out
        result = json.loads(out)
        assert result["decision"]["decision"] == "author_is_bot"
        assert result["outbox"] == []
        assert sim.pull("gitea", REPO, mine.number).reviews == []

        code, out = await review(f"gitea:{REPO}")
        assert code == 1
        assert out.strip() == (
            f"reviewbot: not a PR reference 'gitea:{REPO}': expected FORGE:OWNER/REPO#NUMBER"
        )
