"""Ref operations of both adapters against the git-backed simulator over real HTTP.

Each test runs on GitHub (REST only), on Gitea with the fast-forward endpoint of newer
servers, and on Gitea without it (a plain push from the bot's clone). The repositories are
real git: branches, merges and refusals are git's own. Every request and answer is checked
against the forge's official description when the test ends.
"""

from __future__ import annotations

import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from reviewbot.forges.errors import (
    MergeConflict,
    NotFastForward,
    NotFound,
    PermissionDenied,
    RefExists,
)
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.refs import RefOps
from reviewbot.sim import ManualClock, SimServer, Simulator
from tests.integration.sim.git_support import Clone, clone
from tests.support.openapi import ForgeSpecs

REPO = "acme/api"
BOT = {"github": "reviewbot[bot]", "gitea": "reviewbot"}
TLS = ssl.create_default_context()

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


@dataclass
class Lines:
    """``main``'s first commit; ``ahead`` one commit on it; ``aside`` a sibling of ``ahead``
    touching another file; ``clash`` a sibling changing the file ``ahead`` changes."""

    root: str
    ahead: str
    aside: str
    clash: str


@dataclass
class RefWorld:
    forge_name: str
    sim: Simulator
    server: SimServer
    client: httpx.AsyncClient
    bot_token: str
    git_root: Path
    lines: Lines
    mode: str

    def adapter(self, token: str | None = None) -> GitHubForge | GiteaForge:
        if self.forge_name == "github":
            return GitHubForge(
                api_url=self.server.github_api_url,
                token=token or self.bot_token,
                client=self.client,
            )
        return GiteaForge(
            url=self.server.gitea_url,
            token=token or self.bot_token,
            client=self.client,
            git_root=self.git_root,
        )

    def ops(self, token: str | None = None) -> RefOps:
        return self.adapter(token).ref_ops()

    def tip(self, branch: str) -> str | None:
        return self.sim.repo(self.forge_name, REPO).branches.get(branch)

    def parents(self, sha: str) -> list[str]:
        return list(self.sim.repo(self.forge_name, REPO).commits[sha].parents)


async def _lines(work: Clone) -> Lines:
    root = (await work.run("rev-parse", "HEAD")).out.strip()
    ahead = await work.commit({"src/a.py": "a = 1\n"}, "Ahead")
    await work.push("ahead")
    await work.run("checkout", "-q", "-B", "aside", root)
    aside = await work.commit({"docs/b.md": "b\n"}, "Aside")
    await work.push("aside")
    await work.run("checkout", "-q", "-B", "clash", root)
    clash = await work.commit({"src/a.py": "a = 2\n"}, "Clash")
    await work.push("clash")
    return Lines(root, ahead, aside, clash)


@pytest.fixture(params=["github", "gitea-api", "gitea-push"])
async def world(
    request: pytest.FixtureRequest, forge_specs: ForgeSpecs, tmp_path: Path
) -> AsyncIterator[RefWorld]:
    forge_name, _, mode = str(request.param).partition("-")
    sim = Simulator(clock=ManualClock(), git=True)
    # The fast-forward update exists from Gitea 1.26 on; the push mode plays an older server.
    sim.version = "1.26.0" if request.param == "gitea-api" else "1.25.4"
    try:
        bot_token = sim.add_user(forge_name, BOT[forge_name], bot=True)
        alice = sim.add_user(forge_name, "alice")
        sim.create_repo(forge_name, REPO, default_branch="main")
        sim.set_permission(forge_name, REPO, BOT[forge_name], "write")
        sim.set_permission(forge_name, REPO, "alice", "write")
        async with (
            SimServer(sim, host="127.0.0.1", port=0) as server,
            httpx.AsyncClient(verify=TLS) as client,
        ):
            web = server.base_url + ("/web" if forge_name == "github" else "/gitea")
            work = await clone(f"{web}/{REPO}.git", tmp_path / "work", alice, "alice")
            lines = await _lines(work)
            yield RefWorld(
                forge_name, sim, server, client, bot_token, tmp_path / "git", lines, mode
            )
            await sim.settle()
        problems = forge_specs.check_records(sim.requests)
        assert problems == [], "\n".join(problems)
    finally:
        sim.close()


async def test_a_branch_is_created_at_a_commit_and_deleted(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    await ops.create_branch(REPO, "reviewbot/queue/main/1", lines.root)
    assert world.tip("reviewbot/queue/main/1") == lines.root
    with pytest.raises(RefExists):
        await ops.create_branch(REPO, "reviewbot/queue/main/1", lines.ahead)
    assert world.tip("reviewbot/queue/main/1") == lines.root
    await ops.delete_branch(REPO, "reviewbot/queue/main/1")
    assert world.tip("reviewbot/queue/main/1") is None
    with pytest.raises(NotFound):
        await ops.delete_branch(REPO, "reviewbot/queue/main/1")


async def test_a_branch_moves_only_by_fast_forward(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    await ops.create_branch(REPO, "q/1", lines.root)
    await ops.fast_forward(REPO, "q/1", lines.ahead)
    assert world.tip("q/1") == lines.ahead
    with pytest.raises(NotFastForward):
        await ops.fast_forward(REPO, "q/1", lines.aside)
    assert world.tip("q/1") == lines.ahead
    # Going back is not a fast-forward either.
    with pytest.raises(NotFastForward):
        await ops.fast_forward(REPO, "q/1", lines.root)
    assert world.tip("q/1") == lines.ahead
    # On Gitea the server's version picks the way: the branch update where it exists (1.26),
    # a plain push from the bot's clone where the server has no such route.
    puts = [r for r in world.sim.requests if r.method == "PUT" and "/branches/" in r.path]
    if world.forge_name == "gitea":
        assert bool(puts) == (world.mode == "api"), [(r.path, r.status) for r in puts]
        assert all(r.status != 405 for r in puts)


async def test_an_older_gitea_has_no_branch_update_route(world: RefWorld) -> None:
    if world.forge_name != "gitea":
        pytest.skip("Gitea's branch update (go-gitea/gitea#35951)")
    status = await _put_branch(world)
    assert status == (204 if world.mode == "api" else 405), (world.sim.version, status)
    if status == 405:
        # The route of a newer server: its description does not apply to this one.
        world.sim.requests.pop()


async def test_a_merge_commit_of_a_branch_and_a_commit(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    await ops.create_branch(REPO, "q/1", lines.ahead)
    merged = await ops.merge_into(REPO, "q/1", lines.aside, "Merge aside into q/1")
    assert merged.created and merged.sha not in (lines.ahead, lines.aside)
    assert world.tip("q/1") == merged.sha
    assert world.parents(merged.sha) == [lines.ahead, lines.aside]
    assert merged.onto == lines.ahead  # what the branch was at: the first parent
    again = await ops.merge_into(REPO, "q/1", lines.aside, "Merge aside into q/1")
    assert (again.sha, again.created, again.onto) == (merged.sha, False, merged.sha)
    # The tested merge lands on main by fast-forward: main is at root, an ancestor.
    await ops.fast_forward(REPO, "main", merged.sha)
    assert world.tip("main") == merged.sha


async def test_a_conflicting_merge_is_named_and_moves_nothing(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    await ops.create_branch(REPO, "q/1", lines.ahead)
    with pytest.raises(MergeConflict):
        await ops.merge_into(REPO, "q/1", lines.clash, "Merge clash")
    assert world.tip("q/1") == lines.ahead


async def test_compare_says_ancestry(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    assert (await ops.compare(REPO, lines.root, lines.ahead)).base_is_ancestor
    assert (await ops.compare(REPO, lines.ahead, lines.ahead)).base_is_ancestor
    assert not (await ops.compare(REPO, lines.ahead, lines.aside)).base_is_ancestor
    assert not (await ops.compare(REPO, lines.ahead, lines.root)).base_is_ancestor


async def test_compare_lists_the_files_changed(world: RefWorld) -> None:
    ops, lines = world.ops(), world.lines
    assert (await ops.compare(REPO, lines.root, lines.ahead)).files == ("src/a.py",)
    assert (await ops.compare(REPO, lines.ahead, lines.aside)).files == ("docs/b.md",)
    assert (await ops.compare(REPO, lines.ahead, lines.root)).files == ()


async def test_read_access_cannot_move_refs(world: RefWorld) -> None:
    reader = world.sim.add_user(world.forge_name, "dana")
    world.sim.set_permission(world.forge_name, REPO, "dana", "read")
    ops, lines = world.ops(reader), world.lines
    with pytest.raises(PermissionDenied):
        await ops.create_branch(REPO, "q/1", lines.root)
    await world.ops().create_branch(REPO, "q/1", lines.root)
    with pytest.raises(PermissionDenied):
        await ops.fast_forward(REPO, "q/1", lines.ahead)
    with pytest.raises(PermissionDenied):
        await ops.merge_into(REPO, "q/1", lines.aside, "m")
    with pytest.raises(PermissionDenied):
        await ops.delete_branch(REPO, "q/1")
    assert world.tip("q/1") == lines.root


async def _put_branch(world: RefWorld) -> int:
    """The branch update sent by hand: a fast-forward of ``main`` to ``ahead``."""
    answer = await world.client.put(
        f"{world.server.gitea_url}/api/v1/repos/{REPO}/branches/main",
        json={"new_commit_id": world.lines.ahead},
        headers={"Authorization": f"token {world.bot_token}"},
    )
    return answer.status_code
