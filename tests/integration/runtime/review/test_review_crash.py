"""Crash recovery with a real ``python -m reviewbot serve`` process, and the review command.

``REVIEWBOT_TEST_CRASH_AT`` (test-only) makes the server exit with status 137 at a named
point, exactly as if it had been killed there:

- ``after_outbox``: the verdict and its outbox row are committed, nothing is posted yet;
- ``after_post``: the forge accepted the review, its id is not recorded yet.

After a restart the drainer resumes the pending row, and exactly one review exists.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from tests.integration.process_support import serve_process
from tests.integration.review_support import (
    APPROVED,
    BOT,
    REPO,
    START_S,
    bot_env,
    outbox_rows,
    prepare_sim,
    serve_until_crash,
    stop_bot,
    wait_for,
)

pytestmark = pytest.mark.slow


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
