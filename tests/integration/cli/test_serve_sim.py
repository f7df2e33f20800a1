"""``reviewbot serve --sim``: the try-it path, followed literally, ends in an approval and a merge.

The test reads the steps ``serve --sim`` prints, runs each ``curl`` line as the HTTP request it
describes and each ``reviewbot`` line as a command in the same directory, and checks on the
simulator that the bot approved the pull request at its head and merged it.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from pathlib import Path

import aiohttp

from tests.integration.curl_support import curl
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.server_support import WAIT_S


def printed_steps(lines: list[str]) -> list[list[str]]:
    """The commands of each numbered step (``  # N. ...`` then ``  curl``/``  reviewbot``)."""
    steps: list[list[str]] = []
    for line in lines:
        if re.match(r"  # \d+\. ", line):
            steps.append([])
        elif line.startswith(("  curl ", "  reviewbot ")):
            assert steps, f"a command before the first step: {line!r}"
            steps[-1].append(line.strip())
    return steps


async def reviewbot(command: str, cwd: Path, until: str) -> str:
    """Run a printed ``reviewbot`` line until its output shows ``until`` (the bot works
    asynchronously after a webhook's 202, as a person re-running the command would see)."""
    argv = shlex.split(command)
    assert argv[0] == "reviewbot"
    deadline = time.monotonic() + WAIT_S
    while True:
        done = await asyncio.to_thread(run_reviewbot, *argv[1:], cwd=cwd)
        assert done.returncode == 0, done.stderr
        if until in done.stdout or time.monotonic() > deadline:
            return done.stdout
        await asyncio.sleep(0.1)


async def test_the_printed_steps_reach_an_approval_and_a_merge(tmp_path: Path) -> None:
    async with serve_process("--sim", cwd=tmp_path) as serve:
        printed = "\n".join(serve.printed)
        assert 'required_checks = ["ci/*"], automerge = true' in printed
        assert "docs/simulator.md" in printed
        steps = printed_steps(serve.printed)
        assert len(steps) == 4, printed
        opened, waiting, ci_passes, merged = steps
        async with aiohttp.ClientSession() as http:
            # 1. a pull request, and its webhook accepted by the bot
            status, pull = await curl(http, opened[0])
            assert (status, pull["number"], pull["author"]) == (201, 1, "alice")
            head = pull["head_sha"]
            status, delivery = await curl(http, opened[1])
            assert (status, delivery["status"]) == (200, 202), delivery

            # 2. the bot waits for the required checks and says which
            (explain,) = waiting
            out = await reviewbot(explain, tmp_path, until="WAITING")
            assert "WAITING" in out and "missing: ci/*" in out, out

            # 3. CI passes at the head, and the status webhook is accepted
            status, result = await curl(http, ci_passes[0])
            assert (status, result["sha"]) == (201, head)
            status, delivery = await curl(http, ci_passes[1])
            assert (status, delivery["status"]) == (200, 202), delivery

            # 4. an approval by the bot at exactly the head, then the merge (automerge)
            show, explain = merged
            deadline = time.monotonic() + WAIT_S
            while True:
                status, pull = await curl(http, show)
                if pull["merged"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert status == 200
            approvals = [
                (r["user"], r["state"], r["commit_id"])
                for r in pull["reviews"]
                if r["state"] == "APPROVED"
            ]
            assert approvals == [("reviewbot", "APPROVED", head)], pull["reviews"]
            assert (pull["merged"], pull["state"]) == (True, "closed"), pull
            assert pull["merge_commit_sha"]
            out = await reviewbot(explain, tmp_path, until="was merged")
            assert f"was merged at {head[:12]} as {pull['merge_commit_sha'][:12]}" in out, out
