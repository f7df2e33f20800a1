"""Ref operations of both adapters: requests as sent, and every refusal as its named error."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import respx

from reviewbot.forges.errors import (
    ForgeUnavailable,
    MergeConflict,
    NotFastForward,
    NotFound,
    PermissionDenied,
    RefExists,
    Unsupported,
)
from reviewbot.forges.gitea import GiteaForge, has_fast_forward_api
from reviewbot.forges.github import GitHubForge

GH = "https://gh.example.test/api"
GH_REPO = f"{GH}/repos/acme/api"
GT = "https://gitea.example.test"
GT_REPO = f"{GT}/api/v1/repos/acme/api"
BASE, HEAD, NEW = "b" * 40, "c" * 40, "d" * 40
QUEUE = "reviewbot/queue/main/1"
TLS = ssl.create_default_context()


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as c:
        yield c


@pytest.fixture
def github(fake_time: FakeTime, client: httpx.AsyncClient) -> GitHubForge:
    return GitHubForge(
        api_url=GH, token="t0ken", client=client, sleep=fake_time.sleep, clock=fake_time
    )


@pytest.fixture
def gitea(fake_time: FakeTime, client: httpx.AsyncClient, tmp_path: Path) -> GiteaForge:
    return GiteaForge(
        url=GT,
        token="t0ken",
        bot_login="reviewbot",
        client=client,
        sleep=fake_time.sleep,
        clock=fake_time,
        git_root=tmp_path / "git",
    )


def body(route: respx.Route) -> object:
    return json.loads(route.calls.last.request.content)


# -- GitHub --------------------------------------------------------------------------


def test_github_offers_ref_ops(github: GitHubForge) -> None:
    assert github.ref_ops() is github


@respx.mock
async def test_github_creates_a_branch_at_a_commit(github: GitHubForge) -> None:
    route = respx.post(f"{GH_REPO}/git/refs").respond(
        201, json={"ref": f"refs/heads/{QUEUE}", "object": {"sha": BASE}}
    )
    await github.create_branch("acme/api", QUEUE, BASE)
    assert body(route) == {"ref": f"refs/heads/{QUEUE}", "sha": BASE}


@pytest.mark.parametrize(
    ("status", "message", "error"),
    [
        (422, "Reference already exists", RefExists),
        (422, "Object does not exist", NotFound),
        (404, "Not Found", NotFound),
        (403, "Resource not accessible by integration", PermissionDenied),
    ],
)
@respx.mock
async def test_github_branch_creation_refusals_are_named(
    github: GitHubForge, status: int, message: str, error: type[Exception]
) -> None:
    respx.post(f"{GH_REPO}/git/refs").respond(
        status,
        json={"message": message},
        headers={"x-accepted-github-permissions": "contents=write"} if status == 403 else {},
    )
    with pytest.raises(error) as info:
        await github.create_branch("acme/api", "x", BASE)
    if status == 403:
        assert "Contents (write)" in str(info.value)


@respx.mock
async def test_github_deletes_a_branch_whose_name_has_slashes(github: GitHubForge) -> None:
    route = respx.delete(f"{GH_REPO}/git/refs/heads/{QUEUE}").respond(204)
    await github.delete_branch("acme/api", QUEUE)
    assert route.call_count == 1
    respx.delete(f"{GH_REPO}/git/refs/heads/gone").respond(
        422, json={"message": "Reference does not exist"}
    )
    with pytest.raises(NotFound):
        await github.delete_branch("acme/api", "gone")


@respx.mock
async def test_github_fast_forward_never_forces(github: GitHubForge) -> None:
    route = respx.patch(f"{GH_REPO}/git/refs/heads/main").respond(
        200, json={"ref": "refs/heads/main", "object": {"sha": NEW}}
    )
    await github.fast_forward("acme/api", "main", NEW)
    assert body(route) == {"sha": NEW, "force": False}


@respx.mock
async def test_github_refused_fast_forward_is_not_fast_forward(github: GitHubForge) -> None:
    respx.patch(f"{GH_REPO}/git/refs/heads/main").respond(
        422, json={"message": "Update is not a fast forward"}
    )
    with pytest.raises(NotFastForward) as info:
        await github.fast_forward("acme/api", "main", NEW)
    assert info.value.status == 422 and info.value.operation == "fast_forward"


@respx.mock
async def test_github_fast_forward_is_not_retried_after_a_server_error(
    github: GitHubForge, fake_time: FakeTime
) -> None:
    route = respx.patch(f"{GH_REPO}/git/refs/heads/main").respond(502, json={"message": "bad"})
    with pytest.raises(ForgeUnavailable):
        await github.fast_forward("acme/api", "main", NEW)
    assert route.call_count == 1 and fake_time.sleeps == []


@respx.mock
async def test_github_merge_into_a_branch(github: GitHubForge) -> None:
    made = {"sha": NEW, "parents": [{"sha": BASE}, {"sha": HEAD}]}
    route = respx.post(f"{GH_REPO}/merges").respond(201, json=made)
    merged = await github.merge_into("acme/api", QUEUE, HEAD, "Merge #7")
    # onto: the branch's commit GitHub merged on, the merge commit's first parent
    assert (merged.sha, merged.created, merged.onto) == (NEW, True, BASE)
    assert body(route) == {"base": QUEUE, "head": HEAD, "commit_message": "Merge #7"}


@respx.mock
async def test_github_merge_of_a_contained_commit_reads_the_branch(github: GitHubForge) -> None:
    respx.post(f"{GH_REPO}/merges").respond(204)
    respx.get(f"{GH_REPO}/branches/main").respond(
        200, json={"name": "main", "commit": {"sha": BASE}, "protected": False}
    )
    merged = await github.merge_into("acme/api", "main", HEAD, "m")
    assert (merged.sha, merged.created, merged.onto) == (BASE, False, BASE)


@pytest.mark.parametrize(
    ("status", "error"), [(409, MergeConflict), (404, NotFound), (403, PermissionDenied)]
)
@respx.mock
async def test_github_merge_refusals_are_named(
    github: GitHubForge, status: int, error: type[Exception]
) -> None:
    respx.post(f"{GH_REPO}/merges").respond(status, json={"message": "Merge conflict"})
    with pytest.raises(error):
        await github.merge_into("acme/api", "main", HEAD, "m")


def _comparison(status: str, files: list[dict[str, str]]) -> dict[str, object]:
    return {"status": status, "ahead_by": 1, "behind_by": 0, "files": files, "commits": []}


@respx.mock
async def test_github_compare_reads_ancestry_and_files(github: GitHubForge) -> None:
    respx.get(f"{GH_REPO}/compare/{BASE}...{HEAD}").respond(
        200,
        json=_comparison(
            "ahead",
            [
                {"filename": "src/a.py", "status": "modified"},
                {"filename": "docs/new.md", "previous_filename": "docs/old.md"},
            ],
        ),
    )
    found = await github.compare("acme/api", BASE, HEAD)
    assert found.base_is_ancestor and found.files_complete
    assert found.files == ("src/a.py", "docs/new.md", "docs/old.md")


@pytest.mark.parametrize(
    ("status", "ancestor"), [("identical", True), ("behind", False), ("diverged", False)]
)
@respx.mock
async def test_github_compare_status_says_ancestry(
    github: GitHubForge, status: str, ancestor: bool
) -> None:
    respx.get(f"{GH_REPO}/compare/{BASE}...{HEAD}").respond(200, json=_comparison(status, []))
    assert (await github.compare("acme/api", BASE, HEAD)).base_is_ancestor is ancestor


@respx.mock
async def test_github_compare_is_retried_and_says_when_files_were_cut(
    github: GitHubForge, fake_time: FakeTime
) -> None:
    files = [{"filename": f"f{i}"} for i in range(300)]
    route = respx.get(f"{GH_REPO}/compare/{BASE}...{HEAD}")
    route.side_effect = [
        httpx.Response(503, json={"message": "busy"}),
        httpx.Response(200, json=_comparison("ahead", files)),
    ]
    found = await github.compare("acme/api", BASE, HEAD)
    assert route.call_count == 2 and fake_time.sleeps == [0.5]
    assert len(found.files) == 300 and not found.files_complete


# -- Gitea ---------------------------------------------------------------------------


def test_gitea_offers_ref_ops_with_a_clone_folder(gitea: GiteaForge) -> None:
    assert gitea.ref_ops() is gitea
    bare = GiteaForge(url=GT, token="t0ken")
    with pytest.raises(Unsupported, match="git clone"):
        bare.ref_ops()


@respx.mock
async def test_gitea_creates_a_branch_from_a_commit(gitea: GiteaForge) -> None:
    route = respx.post(f"{GT_REPO}/branches").respond(201, json={"name": QUEUE})
    await gitea.create_branch("acme/api", QUEUE, BASE)
    assert body(route) == {"new_branch_name": QUEUE, "old_ref_name": BASE}
    assert route.calls.last.request.headers["authorization"] == "token t0ken"


@pytest.mark.parametrize(
    ("status", "error"), [(409, RefExists), (404, NotFound), (403, PermissionDenied)]
)
@respx.mock
async def test_gitea_branch_creation_refusals_are_named(
    gitea: GiteaForge, status: int, error: type[Exception]
) -> None:
    respx.post(f"{GT_REPO}/branches").respond(status, json={"message": "The branch is archived"})
    with pytest.raises(error, match="archived"):
        await gitea.create_branch("acme/api", "x", BASE)


@respx.mock
async def test_gitea_deletes_a_branch_by_its_slashed_name(gitea: GiteaForge) -> None:
    route = respx.delete(f"{GT_REPO}/branches/{QUEUE}").respond(204)
    await gitea.delete_branch("acme/api", QUEUE)
    assert route.call_count == 1
    respx.delete(f"{GT_REPO}/branches/main").respond(403, json={"message": "branch protected"})
    with pytest.raises(PermissionDenied, match="branch protected"):
        await gitea.delete_branch("acme/api", "main")


@respx.mock
async def test_gitea_fast_forward_uses_the_branch_update_of_new_servers(
    gitea: GiteaForge,
) -> None:
    version = respx.get(f"{GT}/api/v1/version").respond(200, json={"version": "1.26.0"})
    route = respx.put(f"{GT_REPO}/branches/{QUEUE}").respond(204)
    await gitea.fast_forward("acme/api", QUEUE, NEW)
    await gitea.fast_forward("acme/api", QUEUE, NEW)
    assert body(route) == {"new_commit_id": NEW, "force": False}
    assert version.call_count == 1  # asked once per adapter


@pytest.mark.parametrize(
    ("status", "error"),
    [(409, NotFastForward), (404, NotFound), (403, PermissionDenied), (500, ForgeUnavailable)],
)
@respx.mock
async def test_gitea_fast_forward_refusals_are_named_and_never_retried(
    gitea: GiteaForge, fake_time: FakeTime, status: int, error: type[Exception]
) -> None:
    respx.get(f"{GT}/api/v1/version").respond(200, json={"version": "1.26.1"})
    route = respx.put(f"{GT_REPO}/branches/main").respond(
        status, json={"message": "The update is not a fast-forward."}
    )
    with pytest.raises(error):
        await gitea.fast_forward("acme/api", "main", NEW)
    assert route.call_count == 1 and fake_time.sleeps == []


@pytest.mark.parametrize(
    ("version", "has_it"),
    [
        ("1.26.0", True),
        ("1.26.0-rc1", True),
        ("1.27.2", True),
        ("2.0.0", True),
        ("1.25.3", False),
        ("1.26.0+dev-396-g3db3c058b3", False),  # a build of main: before or after, unknown
        ("11.0.1+gitea-1.22.0", False),  # Forgejo
        ("", False),
        ("development", False),
    ],
)
def test_the_fast_forward_endpoint_is_known_by_version(version: str, has_it: bool) -> None:
    assert has_fast_forward_api(version) is has_it


def _gitea_compare(*files: list[str]) -> dict[str, object]:
    commits = [
        {"sha": f"{i}" * 40, "files": [{"filename": f} for f in fs]} for i, fs in enumerate(files)
    ]
    return {"total_commits": len(commits), "commits": commits}


@respx.mock
async def test_gitea_compare_asks_both_ways(gitea: GiteaForge) -> None:
    respx.get(f"{GT_REPO}/compare/{HEAD}...{BASE}").respond(200, json=_gitea_compare())
    respx.get(f"{GT_REPO}/compare/{BASE}...{HEAD}").respond(
        200, json=_gitea_compare(["src/a.py"], ["src/a.py", "docs/b.md"])
    )
    found = await gitea.compare("acme/api", BASE, HEAD)
    assert found.base_is_ancestor and found.files == ("src/a.py", "docs/b.md")


@respx.mock
async def test_gitea_compare_of_diverged_commits(gitea: GiteaForge, fake_time: FakeTime) -> None:
    behind = respx.get(f"{GT_REPO}/compare/{HEAD}...{BASE}")
    behind.side_effect = [
        httpx.Response(502, json={"message": "bad gateway"}),
        httpx.Response(200, json=_gitea_compare(["x"])),
    ]
    respx.get(f"{GT_REPO}/compare/{BASE}...{HEAD}").respond(200, json=_gitea_compare(["y"]))
    found = await gitea.compare("acme/api", BASE, HEAD)
    assert not found.base_is_ancestor and found.files == ("y",)
    assert behind.call_count == 2 and fake_time.sleeps == [0.5]


@respx.mock
async def test_gitea_compare_of_a_missing_commit_is_not_found(gitea: GiteaForge) -> None:
    respx.get(f"{GT_REPO}/compare/{HEAD}...{BASE}").respond(404, json={"message": "not found"})
    with pytest.raises(NotFound):
        await gitea.compare("acme/api", BASE, HEAD)
