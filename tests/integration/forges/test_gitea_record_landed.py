"""Gitea's "mark as manually merged" (``Do: manually-merged`` with ``MergeCommitID``), which
the merge queue sends for each pull request of a landed car, against the simulator over real
HTTP. Gitea refuses it unless the repository allows manual merges (off on a new repository)
and unless the commit is on the base branch (go-gitea/gitea services/pull/merge.go
``MergedManually``); the adapter says which refusal it was."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from reviewbot.forges.errors import NotMergeable
from reviewbot.forges.gitea import GiteaForge
from reviewbot.sim import SimServer, Simulator

REPO = "acme/api"
TLS = ssl.create_default_context()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as c:
        yield c


def landed_pull(sim: Simulator) -> tuple[str, int, str]:
    """A writer's token and a pull request whose head the base branch moved to (as a queue
    landing leaves it), still open; returns the token, its number and the landed commit."""
    token = sim.add_user("gitea", "reviewbot", bot=True)
    sim.create_repo("gitea", REPO, default_branch="main")
    sim.set_permission("gitea", REPO, "reviewbot", "write")
    pull = sim.open_pr("gitea", REPO, author="alice")
    repo = sim.repo("gitea", REPO)
    sim.set_branch(repo, "main", pull.head_sha, "reviewbot")
    return token, pull.number, pull.head_sha


def adapter(server: SimServer, client: httpx.AsyncClient, token: str, tmp_path: Path) -> GiteaForge:
    return GiteaForge(url=server.gitea_url, token=token, client=client, git_root=tmp_path)


async def test_a_repository_without_manual_merges_refuses_and_the_error_says_so(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    token, number, sha = landed_pull(sim)
    ops = adapter(sim_server, client, token, tmp_path).ref_ops()
    with pytest.raises(NotMergeable) as refused:
        await ops.record_landed(REPO, number, sha)
    assert "allow_manual_merge" in str(refused.value)
    assert not sim.pull("gitea", REPO, number).merged

    sim.repo("gitea", REPO).allow_manual_merge = True
    await ops.record_landed(REPO, number, sha)
    pulled = sim.pull("gitea", REPO, number)
    assert pulled.merged and pulled.merge_commit_sha == sha


async def test_a_commit_not_on_the_base_branch_is_refused(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    token, number, _ = landed_pull(sim)
    sim.repo("gitea", REPO).allow_manual_merge = True
    other = sim.open_pr("gitea", REPO, author="alice", head_ref="other")
    ops = adapter(sim_server, client, token, tmp_path).ref_ops()
    with pytest.raises(NotMergeable) as refused:
        await ops.record_landed(REPO, number, other.head_sha)  # never reached main
    assert refused.value.status == 409
    assert "allow_manual_merge" not in str(refused.value)
    assert not sim.pull("gitea", REPO, number).merged
