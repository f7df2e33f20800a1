"""``reviewbot serve --sim``: the try-it path, followed literally, ends in an approval and a merge.

The test reads the steps ``serve --sim`` prints, runs each ``curl`` line as the HTTP request it
describes and each reviewbot line, exactly as printed (``python -m reviewbot ...`` or
``.../dev reviewbot ...``, the way the server was started), as a command in the same
directory, and checks on the simulator that the bot approved the pull request at its head and
merged it; then it signs in to the status page with the printed commands.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import REPO_ROOT
from tests.integration.curl_support import curl
from tests.integration.process_support import clean_env, serve_process
from tests.integration.server_support import WAIT_S


def printed_steps(lines: list[str], reviewbot: str) -> list[list[str]]:
    """The commands of each numbered step (``  # N. ...`` then ``  curl``/``  REVIEWBOT``),
    then those under the status page's line as one more step. Any other indented line fails
    the test: a printed command must be one the user can type."""
    steps: list[list[str]] = []
    for line in lines:
        if re.match(r"  # \d+\. ", line) or line.startswith("reviewbot: status page at "):
            steps.append([])
        elif line.startswith(("  curl ", f"  {reviewbot} ")):
            assert steps, f"a command before the first step: {line!r}"
            steps[-1].append(line.strip())
        else:
            assert not line.startswith("  "), f"not a command as started: {line!r}"
    return steps


def run_printed(command: str, reviewbot: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a printed reviewbot line as typed in ``cwd``, with no REVIEWBOT_* variable set."""
    assert command.startswith(f"{reviewbot} "), command
    return subprocess.run(
        shlex.split(command),
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def run_until(command: str, reviewbot: str, cwd: Path, until: str) -> str:
    """Run a printed reviewbot line until its output shows ``until`` (the bot works
    asynchronously after a webhook's 202, as a person re-running the command would see)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        done = await asyncio.to_thread(run_printed, command, reviewbot, cwd)
        # Before the first decision, explain exits 1: nothing is known yet.
        if (done.returncode == 0 and until in done.stdout) or time.monotonic() > deadline:
            assert done.returncode == 0, done.stderr
            return done.stdout
        await asyncio.sleep(0.1)


PYTHON_M = f"{shlex.quote(sys.executable)} -m reviewbot"
DEV = f"{REPO_ROOT / 'dev'} reviewbot"


@pytest.mark.parametrize(
    ("command", "reviewbot"),
    [(None, PYTHON_M), ([str(REPO_ROOT / "dev"), "reviewbot"], DEV)],
    ids=["python-m", "dev"],
)
async def test_the_printed_steps_reach_an_approval_and_a_merge(
    tmp_path: Path, command: Sequence[str] | None, reviewbot: str
) -> None:
    async with serve_process("--sim", cwd=tmp_path, command=command) as serve:
        printed = "\n".join(serve.printed)
        assert 'required_checks = ["ci/*"], automerge = true' in printed
        assert "docs/simulator.md" in printed
        assert f"status page at {serve.base}/" in printed
        steps = printed_steps(serve.printed, reviewbot)
        assert len(steps) == 5, printed
        opened, waiting, ci_passes, merged, sign_in = steps
        async with aiohttp.ClientSession() as http:
            # 1. a pull request, and its webhook accepted by the bot
            status, pull = await curl(http, opened[0])
            assert (status, pull["number"], pull["author"]) == (201, 1, "alice")
            head = pull["head_sha"]
            status, delivery = await curl(http, opened[1])
            assert (status, delivery["status"]) == (200, 202), delivery

            # 2. the bot waits for the required checks and says which
            (explain,) = waiting
            out = await run_until(explain, reviewbot, tmp_path, until="WAITING")
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
            out = await run_until(explain, reviewbot, tmp_path, until="was merged")
            assert f"was merged at {head[:12]} as {pull['merge_commit_sha'][:12]}" in out, out
            assert "1 required check passed" in out and "1 required checks" not in out, out
            # The status webhook's delivery id explains the review and the merge it led to.
            by_id = f"{explain.rsplit(' ', 1)[0]} {delivery['id']}"
            out = await run_until(by_id, reviewbot, tmp_path, until="led to the merge")
            assert f"It led to the merge of gitea:acme/demo#1 at {head[:12]}" in out, out
            assert "APPROVE" in out, out

            # 5. a read token, and a link that opens the status page's sign-in form
            create, link = sign_in
            made = run_printed(create, reviewbot, tmp_path)
            assert made.returncode == 0, made.stderr
            linked = run_printed(link, reviewbot, tmp_path)
            assert linked.returncode == 0, linked.stderr
            url = linked.stdout.splitlines()[0]
            assert url.startswith(f"{serve.base}/login?link="), linked.stdout
            async with http.get(url) as form:
                assert form.status == 200
                assert 'name="link"' in await form.text()
        # The merge ended the merger's lease; automerge letting go of it after is no refusal.
        log = await serve.stop()
        assert "automerged gitea:acme/demo#1" in log, log[-2000:]
        assert "lease refused" not in log, log[-2000:]


async def test_a_second_start_prints_only_the_link_for_the_token_it_made(tmp_path: Path) -> None:
    for expected in (2, 1):
        async with serve_process("--sim", cwd=tmp_path) as serve:
            *_, sign_in = printed_steps(serve.printed, PYTHON_M)
            assert len(sign_in) == expected, serve.printed
            for command in sign_in:
                done = run_printed(command, PYTHON_M, tmp_path)
                assert done.returncode == 0, done.stderr
            await serve.stop()


def refusal_recipe() -> list[str]:
    """The commands of docs/simulator.md's permission_denied recipe, in order."""
    text = (REPO_ROOT / "docs" / "simulator.md").read_text()
    section = text[text.index("### Try a refusal") : text.index("## An empty simulator")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for line in block.splitlines() if line.strip()]


async def test_the_documented_permission_denied_recipe_works(tmp_path: Path) -> None:
    async with serve_process("--sim", cwd=tmp_path) as serve:
        sim = serve.printed[0].split("forge simulator at ", 1)[1].split()[0]
        opened, *_ = printed_steps(serve.printed, PYTHON_M)
        *curls, explain = refusal_recipe()
        assert explain.startswith("reviewbot explain ")
        async with aiohttp.ClientSession() as http:
            for line in opened:  # step 1: the pull request
                status, _ = await curl(http, line)
                assert status in (200, 201)
            for line in curls:
                status, answer = await curl(http, line.replace("$SIM", sim))
                assert status in (200, 201), (line, answer)
                if "/_sim/deliver " in line:
                    assert answer["status"] == 202, answer
        command = PYTHON_M + explain.removeprefix("reviewbot")
        out = await run_until(command, PYTHON_M, tmp_path, until="[permission_denied]")
        assert "/reviewbot review by alice, who has read access; it needs write access" in out, out
