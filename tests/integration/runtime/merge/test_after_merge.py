"""After-merge actions on both forges, over real HTTP against the simulator: with the
repository's rules on, a merge deletes the PR's head branch and closes the issues its
description closes (never another PR it names, nor another repository's issue), each action
recorded and shown by ``explain``; with the rules off (the default) nothing happens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import REPO, Merger, World, bot_world, set_check

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])
RULES = {"delete_head_branch_after_merge": True, "close_linked_issues_after_merge": True}


@pytest.fixture
async def tidy(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> AsyncIterator[World]:
    async with bot_world(tmp_path, sim, sim_server, rules=RULES) as w:
        yield w


async def merge_green(w: World, forge: str, *, body: str, head_ref: str = "feature") -> Any:
    pr = w.sim.open_pr(forge, REPO, author="alice", body=body, head_ref=head_ref)
    set_check(w, forge, pr.head_sha, "success")
    w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    m = Merger(w)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, merged = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200 and merged["merged"] is True, merged
    return pr, merged, m


@FORGES
async def test_the_head_branch_is_deleted_and_the_linked_issues_closed(
    tidy: World, forge: str
) -> None:
    w = tidy
    bug, other_bug, done = (w.sim.open_issue(forge, REPO, "carol") for _ in range(3))
    w.sim.repo(forge, REPO).issues[done.number].state = "closed"
    other_pr = w.sim.open_pr(forge, REPO, author="carol", head_ref="other")
    body = (
        f"Fixes #{bug.number}\n\nCLOSES: #{done.number}, resolves {REPO}#{other_pr.number}; "
        f"see #{other_bug.number}; fixes elsewhere/repo#{other_bug.number}"
    )
    pr, merged, m = await merge_green(w, forge, body=body)

    repo = w.sim.repo(forge, REPO)
    assert "feature" not in repo.branches and "main" in repo.branches
    assert repo.issues[bug.number].state == "closed"
    assert repo.issues[other_bug.number].state == "open"  # named, but not closed by keyword
    assert w.sim.pull(forge, REPO, other_pr.number).state == "open"  # a PR is never closed
    shown = {(a["kind"], a["target"]): (a["result"], a["detail"]) for a in merged["after_merge"]}
    assert shown == {
        ("delete_head_branch", "feature"): ("done", "deleted"),
        ("close_issue", f"#{bug.number}"): ("done", "closed"),
        ("close_issue", f"#{done.number}"): ("skipped", "the issue was closed already"),
        ("close_issue", f"#{other_pr.number}"): (
            "skipped",
            "it is a pull request, not an issue: left as it is",
        ),
    }
    # explain shows each action, and merging again does nothing twice
    status, explained = await w.call(
        "GET", f"/api/v1/decisions?forge={forge}&repo={REPO}&number={pr.number}", m.token
    )
    assert status == 200, explained
    first = explained["after_merge"][0]
    assert (first["kind"], first["result"]) == ("delete_head_branch", "done")
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, again = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert again["already_merged"] is True and "after_merge" not in again


@FORGES
async def test_a_protected_head_branch_is_left_and_the_failure_recorded(
    tidy: World, forge: str
) -> None:
    w = tidy
    repo = w.sim.repo(forge, REPO)
    w.sim.set_branch(repo, "release", repo.branches["main"], "alice")
    w.sim.require_checks(forge, REPO, "release", ["ci/test"])
    _, merged, _ = await merge_green(w, forge, body="", head_ref="release")
    (action,) = merged["after_merge"]
    assert (action["kind"], action["result"]) == ("delete_head_branch", "failed"), action
    assert "release" in w.sim.repo(forge, REPO).branches


@FORGES
async def test_off_by_default(world: World, forge: str) -> None:
    w = world
    bug = w.sim.open_issue(forge, REPO, "carol")
    _, merged, _ = await merge_green(w, forge, body=f"Fixes #{bug.number}")
    assert "after_merge" not in merged
    assert "feature" in w.sim.repo(forge, REPO).branches
    assert w.sim.repo(forge, REPO).issues[bug.number].state == "open"
