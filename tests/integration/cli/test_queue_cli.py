"""``reviewbot queue`` as real processes against the git-backed forge simulator: enqueue at a
head builds the PR's car, a moved head is refused with its code, status shows the queue,
run lands the car once its CI passed, dequeue of a PR in no queue says so."""

from __future__ import annotations

import pytest

from reviewbot.sim import Simulator
from tests.integration.cli.test_merge_cli import Cli, cli  # noqa: F401 - the fixture
from tests.integration.merge_support import REPO, queued_repo

pytestmark = pytest.mark.git
CI_S = 600.0


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_enqueue_status_run_and_dequeue(cli: Cli, sim: Simulator, forge: str) -> None:  # noqa: F811
    queued_repo(sim, forge, CI_S)
    pull = sim.open_pr(forge, REPO, author="alice", head_ref="feature")
    sim.advance(CI_S)
    sim.submit_review(forge, REPO, pull.number, reviewer="bob", state="APPROVED")
    ref = f"{forge}:{REPO}#{pull.number}"

    code, out, err = await cli.run("queue", "enqueue", ref, "--head", "0" * 40)
    assert code == 1 and "head_moved" in err, (out, err)
    code, entry = await cli.json("queue", "enqueue", ref, "--head", pull.head_sha)
    assert code == 0, entry
    assert (entry["queued"], entry["head_sha"]) == (True, pull.head_sha)

    code, view = await cli.json("queue", "status", f"{forge}:{REPO}")
    assert code == 0, view
    assert [e["number"] for e in view["entries"]] == [pull.number]
    (car,) = view["cars"]
    assert car["status"] == "testing"

    sim.advance(CI_S)  # the car's CI passes
    code, report = await cli.json("queue", "run", f"{forge}:{REPO}")
    assert code == 0 and report["landed"] == [car["tested_sha"]], report
    assert sim.repo(forge, REPO).branches["main"] == car["tested_sha"]
    assert sim.pull(forge, REPO, pull.number).merged

    code, out, err = await cli.run("queue", "dequeue", ref)
    assert code == 1 and "not_queued" in err, (out, err)


async def test_pause_and_drain_from_the_command_line(cli: Cli, sim: Simulator) -> None:  # noqa: F811
    forge = "gitea"
    queued_repo(sim, forge, CI_S)
    pull = sim.open_pr(forge, REPO, author="alice", head_ref="feature")
    sim.advance(CI_S)
    sim.submit_review(forge, REPO, pull.number, reviewer="bob", state="APPROVED")
    ref = f"{forge}:{REPO}#{pull.number}"
    repo = f"{forge}:ACME/Api"  # any casing names the repository

    code, out, err = await cli.run("queue", "control", repo, "--base", "main")
    assert code != 0 and "--pause" in err, (out, err)
    code, out, err = await cli.run(
        "queue", "control", repo, "--base", "main", "--pause", "--resume"
    )
    assert code != 0, (out, err)
    code, paused = await cli.json("queue", "control", repo, "--base", "main", "--pause")
    assert code == 0 and (paused["repo"], paused["paused"]) == (REPO, True), paused
    code, out, err = await cli.run("queue", "enqueue", ref, "--head", pull.head_sha)
    assert code == 1 and "queue_paused" in err, (out, err)
    code, view = await cli.json("queue", "status", f"{forge}:{REPO}", "--base", "main")
    assert code == 0 and view["controls"]["main"]["paused"] is True, view

    code, now = await cli.json("queue", "control", repo, "--base", "main", "--resume", "--drain")
    assert code == 0 and (now["paused"], now["draining"]) == (False, True), now
    code, out, err = await cli.run("queue", "enqueue", ref, "--head", pull.head_sha)
    assert code == 1 and "queue_draining" in err, (out, err)
    code, now = await cli.json("queue", "control", repo, "--base", "main", "--no-drain")
    assert code == 0 and now["draining"] is False and now["set_by"] == "reviewbot queue control"
    code, entry = await cli.json("queue", "enqueue", ref, "--head", pull.head_sha)
    assert code == 0 and entry["queued"] is True, entry
