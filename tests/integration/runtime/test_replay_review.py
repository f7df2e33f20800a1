"""``reviewbot replay`` as a process: it says it only re-gates; ``--review`` also reviews.

The simulator serves Gitea over loopback HTTP; the delivery is journalled by ``gate
--delivery`` (a step's delivery file), then replayed by separate ``reviewbot`` processes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.integration.process_support import run_reviewbot
from tests.integration.server_support import SimWorld, sim_world

REPO = "acme/api"


def environment(world: SimWorld, data_dir: Path) -> dict[str, str]:
    gitea = world.settings.gitea
    assert gitea.url is not None and gitea.token is not None
    return {
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_GITEA__URL": gitea.url,
        "REVIEWBOT_GITEA__TOKEN": gitea.token.get_secret_value(),
        "REVIEWBOT_GITEA__BOT_LOGIN": "reviewbot",
    }


async def reviewbot(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    # A thread: the simulator answering the process runs on this test's event loop.
    done = await asyncio.to_thread(run_reviewbot, *args, cwd=cwd, env=env)
    return done.returncode, done.stdout, done.stderr


async def test_replay_only_gates_and_says_so_and_review_posts_once(tmp_path: Path) -> None:
    (tmp_path / "reviewbot.toml").write_text(
        f'[repos."gitea:{REPO}"]\nrequired_checks = ["ci/*"]\n'
    )
    async with sim_world(tmp_path / "data") as world:
        env = environment(world, tmp_path / "data")
        pr = world.sim.open_pr("gitea", REPO, author="alice")
        world.sim.set_status("gitea", REPO, pr.head_sha, "ci/test", "success")
        delivery = tmp_path / "delivery.json"
        delivery.write_text(
            json.dumps(
                {
                    "delivery_id": "step-1",
                    "variables": {"forge": "gitea", "repository": REPO, "number": pr.number},
                    "payload": {"function": "review", "args": {}},
                }
            )
        )
        code, _, err = await reviewbot(
            "gate",
            "--delivery",
            str(delivery),
            "--out",
            str(tmp_path / "out"),
            cwd=tmp_path,
            env=env,
        )
        assert code == 0, err

        def bot_reviews() -> list[tuple[str, str]]:
            pull = world.sim.pull("gitea", REPO, pr.number)
            return [(r.state, r.commit_id) for r in pull.reviews if r.user == "reviewbot"]

        # The help and the output say that replay only gates.
        code, out, _ = await reviewbot("replay", "--help", cwd=tmp_path, env=env)
        assert code == 0 and "Only the gate" in out and "--review" in out
        code, out, err = await reviewbot("replay", "step-1", cwd=tmp_path, env=env)
        assert code == 0, err
        assert "ELIGIBLE" in out
        assert "Only the gate ran: no review was started" in out
        assert "--review" in out
        assert bot_reviews() == []

        # --review reviews the eligible delivery at the head the gate decided on.
        code, out, err = await reviewbot("replay", "step-1", "--review", cwd=tmp_path, env=env)
        assert code == 0, err
        assert f"review of gitea:{REPO}#{pr.number} at {pr.head_sha[:12]}: approve" in out, out
        assert "posted: approve posted as review" in out
        assert "Only the gate ran" not in out
        assert bot_reviews() == [("APPROVED", pr.head_sha)]

        # Again: the verdict stands, the review is never posted twice.
        code, out, err = await reviewbot(
            "replay", "step-1", "--review", "--json", cwd=tmp_path, env=env
        )
        assert code == 0, err
        (review,) = json.loads(out)["reviews"]
        assert review["decision"]["decision"] == "approve"
        assert [row["status"] for row in review["outbox"]] == ["posted"]
        assert bot_reviews() == [("APPROVED", pr.head_sha)]

        # A delivery the gate skips is not reviewed.
        world.sim.update_pr("gitea", REPO, pr.number, draft=True)
        code, out, err = await reviewbot("replay", "step-1", "--review", cwd=tmp_path, env=env)
        assert code == 0, err
        assert "pr_draft" in out and "review of" not in out
