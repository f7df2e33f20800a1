"""The forge calls of the after-merge actions against the simulator, which refuses them as
the forges do (sim/permissions.py, sim/issues_api.py, sim/refs_api.py): who may close an
issue, what an App needs for it, and which branches may not be deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import Settings
from reviewbot.core.after_merge import Closing
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, PermissionDenied
from reviewbot.service import configured_forges
from reviewbot.sim import SimServer, Simulator
from tests.support.store_fixtures import seeded

REPO = "acme/api"
FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def forge_as(tmp_path: Path, sim_server: SimServer, forge: str, token: str) -> Forge:
    section = (
        {"github": {"api_url": sim_server.github_api_url, "token": token}}
        if forge == "github"
        else {"gitea": {"url": sim_server.gitea_url, "token": token}}
    )
    settings = Settings(data_dir=seeded(tmp_path / "data"), **section)  # type: ignore[arg-type]
    return configured_forges(settings)[forge]


@FORGES
async def test_who_may_close_an_issue(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    sim.create_repo(forge, REPO)
    writer = sim.add_user(forge, "writer")
    reader = sim.add_user(forge, "reader")
    sim.set_permission(forge, REPO, "reader", "read")
    theirs = sim.open_issue(forge, REPO, "reader")
    other = sim.open_issue(forge, REPO, "carol")
    pull = sim.open_pr(forge, REPO, author="carol")

    as_reader = forge_as(tmp_path, sim_server, forge, reader)
    with pytest.raises(PermissionDenied):
        await as_reader.close_issue(REPO, other.number)  # neither its author nor a writer
    assert sim.repo(forge, REPO).issues[other.number].state == "open"
    # the author of an issue may close it with read access
    assert await as_reader.close_issue(REPO, theirs.number) is Closing.CLOSED

    as_writer = forge_as(tmp_path, sim_server, forge, writer)
    assert await as_writer.close_issue(REPO, other.number) is Closing.CLOSED
    assert await as_writer.close_issue(REPO, other.number) is Closing.ALREADY_CLOSED
    assert await as_writer.close_issue(REPO, pull.number) is Closing.NOT_AN_ISSUE
    assert sim.pull(forge, REPO, pull.number).state == "open"
    with pytest.raises(ForgeError):
        await as_writer.close_issue(REPO, 999)  # no such issue


async def test_a_github_app_needs_the_issues_permission_to_close_one(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    """The documented permissions (docs/github-app.md) hold no Issues permission: closing
    linked issues needs Issues (write) granted on top."""
    sim.create_repo("github", REPO)
    issue = sim.open_issue("github", REPO, "carol")
    app_id, key = sim.create_github_app(bot_login="reviewbot-app[bot]")
    sim.install_app(app_id, REPO)
    (tmp_path / "app.pem").write_text(key)
    settings = Settings(
        data_dir=seeded(tmp_path / "data"),
        github={  # type: ignore[arg-type]
            "api_url": sim_server.github_api_url,
            "app_id": app_id,
            "private_key_path": str(tmp_path / "app.pem"),
        },
    )
    app = configured_forges(settings)["github"]
    with pytest.raises(PermissionDenied) as refused:
        await app.close_issue(REPO, issue.number)
    assert "issues" in str(refused.value).lower()
    assert sim.repo("github", REPO).issues[issue.number].state == "open"


@FORGES
async def test_protected_and_default_branches_are_not_deleted(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    sim.create_repo(forge, REPO, default_branch="main")
    writer = sim.add_user(forge, "writer")
    repo = sim.repo(forge, REPO)
    sim.set_branch(repo, "release", repo.branches["main"], "writer")
    sim.require_checks(forge, REPO, "release", ["ci/test"])
    sim.set_branch(repo, "topic", repo.branches["main"], "writer")
    as_writer = forge_as(tmp_path, sim_server, forge, writer)

    with pytest.raises(ForgeError):
        await as_writer.delete_branch(REPO, "release")
    assert "release" in repo.branches
    assert await as_writer.branch_head(REPO, "topic") == repo.branches["main"]
    await as_writer.delete_branch(REPO, "topic")
    assert await as_writer.branch_head(REPO, "topic") is None
    # Both refuse the default branch itself: GitHub 422 ("Delete a reference"), Gitea 403
    # (routers/api/v1/repo/branch.go DeleteBranch).
    with pytest.raises(ForgeError) as refused:
        await as_writer.delete_branch(REPO, "main")
    assert refused.value.status == (422 if forge == "github" else 403)
    assert "main" in repo.branches
