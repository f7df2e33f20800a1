"""The demo's summary: one row per pull request head, and the commands to dig deeper."""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reviewbot.demo.steps import short
from reviewbot.demo.story import StepResult, Story
from reviewbot.demo.world import BOT, GITEA_REPO, GITHUB_REPO, DemoWorld

NOTES = frozenset({"posted", "missing_reported"})  # posting notes, not policy outcomes
COLUMNS = ("PR", "head", "decision", "review", "merge")


@dataclass(frozen=True)
class SummaryRow:
    pr: str
    head: str
    decision: str
    review: str
    merge: str

    def cells(self) -> tuple[str, ...]:
        return (self.pr, self.head, self.decision, self.review, self.merge)


def summary_rows(world: DemoWorld, story: Story) -> list[SummaryRow]:
    """What the forge and the store show now, for every head the story created."""
    rows: list[SummaryRow] = []
    pulls = []
    if story.gh_number:
        pulls.append(("github", GITHUB_REPO, story.gh_number))
    if story.gitea_number:
        pulls.append(("gitea", GITEA_REPO, story.gitea_number))
    for forge, repo, number in pulls:
        pull = world.pull(forge, repo, number)
        decisions = [d for d in world.decisions(forge, repo, number) if d.decision not in NOTES]
        reviews = world.bot_reviews(forge, repo, number)
        for head in pull.commits:
            at_head = [d.decision for d in decisions if d.head_sha == head]
            if not at_head:
                continue
            posted = [r.state for r in reviews if r.commit_id == head]
            review = ", ".join(posted) or "none"
            if posted and head != pull.head_sha:
                review += " (old head)"
            merge = "-"
            if pull.merged and head == pull.head_sha:
                merge = f"merged as {short(pull.merge_commit_sha)}"
            rows.append(
                SummaryRow(f"{forge}:{repo}#{number}", short(head), at_head[-1], review, merge)
            )
    return rows


def render_table(rows: list[SummaryRow]) -> str:
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def reviewbot_command() -> str:
    """How to run this very reviewbot from a shell: ``reviewbot`` when that is the one on
    ``PATH``, else the script beside this interpreter (``./dev`` does not add it to
    ``PATH``), else ``python -m reviewbot``."""
    script = Path(sys.executable).parent / "reviewbot"
    found = shutil.which("reviewbot")
    if script.is_file():
        if found is not None and Path(found).resolve() == script.resolve():
            return "reviewbot"
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m reviewbot"


def explain_commands(data_dir: Path, rows: list[SummaryRow]) -> list[str]:
    prs = list(dict.fromkeys(row.pr for row in rows))
    env = f"REVIEWBOT_DATA_DIR={shlex.quote(str(data_dir))}"
    program = reviewbot_command()
    return [f"{env} {program} explain {shlex.quote(pr)}" for pr in prs]


@dataclass
class DemoReport:
    ok: bool
    data_dir: Path
    steps: list[StepResult]
    total_steps: int
    rows: list[SummaryRow]
    explain: list[str]
    seconds: float
    sim_url: str = ""
    bot_url: str = ""
    log_file: Path | None = None  # the bot's JSON log lines, when the command kept them

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "data_dir": str(self.data_dir),
            "steps": [s.to_json() for s in self.steps],
            "total_steps": self.total_steps,
            "summary": [asdict(r) for r in self.rows],
            "explain": self.explain,
            "seconds": round(self.seconds, 3),
            "simulator_url": self.sim_url,
            "bot_url": self.bot_url,
            "bot_login": BOT,
            "log_file": str(self.log_file) if self.log_file else None,
        }

    def render(self) -> str:
        done = sum(1 for s in self.steps if s.ok)
        lines = ["", "Summary", "", render_table(self.rows) if self.rows else "(no pull request)"]
        lines.append("")
        if self.ok:
            lines.append(f"All {self.total_steps} steps did what they said ({self.seconds:.1f} s).")
        else:
            failed = next((s for s in self.steps if not s.ok), None)
            which = f"step {failed.number} ({failed.title})" if failed else "a step"
            lines.append(f"{done} of {self.total_steps} steps did what they said; {which} did not.")
        lines.append(f"The bot's store is kept in {self.data_dir}. Dig into any pull request:")
        lines += [f"  {cmd}" for cmd in self.explain]
        if self.log_file is not None:
            lines.append(
                f"The bot's log (one JSON line per delivery, decision, review and merge): "
                f"{self.log_file}"
            )
        return "\n".join(lines)
