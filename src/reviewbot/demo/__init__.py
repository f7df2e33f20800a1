"""``reviewbot demo``: the forge simulator and the real bot, playing a scripted story.

:func:`run_demo` starts both on free loopback ports (the bot over a throw-away data dir,
or the one given), plays the seven steps of :mod:`reviewbot.demo.story` through real
signed webhooks, checks each outcome, and returns a :class:`DemoReport` with the summary
table and the ``reviewbot explain`` commands for the kept data dir.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TextIO

from reviewbot.core.errors import ReviewbotError
from reviewbot.demo.report import DemoReport, SummaryRow, explain_commands, summary_rows
from reviewbot.demo.story import FAULTS, Say, StepResult, Story
from reviewbot.demo.world import GITEA_CHECKS, GITEA_REPO, GITHUB_CHECKS, GITHUB_REPO, demo_world

__all__ = ["FAULTS", "DemoReport", "StepResult", "SummaryRow", "fresh_data_dir", "run_demo"]


class DataDirInUse(ReviewbotError, ValueError):
    """The demo needs an empty data dir: an earlier store would mix into its checks."""


def fresh_data_dir(data_dir: Path | None) -> Path:
    """The given dir (created; it must be empty) or a new one under the temp folder."""
    if data_dir is None:
        return Path(tempfile.mkdtemp(prefix="reviewbot-demo-"))
    data_dir = data_dir.expanduser().resolve()
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise DataDirInUse(f"data dir {data_dir} is not an empty directory; give a new one")
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir


async def run_demo(
    data_dir: Path, say: Say, *, fault: str | None = None, log: TextIO | None = None
) -> DemoReport:
    """Play the story; ``say`` receives each line as it happens, ``log`` the bot's log."""
    started = time.monotonic()
    async with demo_world(data_dir, log=log) as world:
        say("reviewbot demo: a forge simulator and the bot, talking only through HTTP.")
        say(
            f"  forge simulator  {world.sim_server.base_url}  (GitHub API under /github, "
            "Gitea under /gitea)"
        )
        say(
            f"  bot              {world.base_url}  (webhooks at /webhooks/github and "
            "/webhooks/gitea, signed with fresh secrets)"
        )
        say(f"  store            {world.settings.database_path}")
        say(
            f"  rules            github:{GITHUB_REPO} requires {' and '.join(GITHUB_CHECKS)}; "
            f"gitea:{GITEA_REPO} requires {' and '.join(GITEA_CHECKS)}"
        )
        story = Story(world, say, fault=fault)
        steps = await story.play()
        rows = summary_rows(world, story)
        report = DemoReport(
            ok=len(steps) == len(story.steps) and all(s.ok for s in steps),
            data_dir=data_dir,
            steps=steps,
            total_steps=len(story.steps),
            rows=rows,
            explain=[],
            seconds=0.0,
            sim_url=world.sim_server.base_url,
            bot_url=world.base_url,
        )
    report.explain = explain_commands(data_dir, rows)
    report.seconds = time.monotonic() - started
    return report
