"""The simulator's real git: clone and push over smart HTTP with each forge's credentials,
push webhooks, pull requests on pushed branches, merges and mergeability computed by git."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.sim.git_support import Hooks, call, clone, git

REPO = "acme/api"


def _api(server: SimServer, forge: str) -> str:
    base = server.github_api_url if forge == "github" else server.gitea_api_url
    return f"{base}/repos/{REPO}"


async def _clone_url(server: SimServer, forge: str, token: str) -> str:
    status, body = await call("GET", _api(server, forge), token)
    assert status == 200
    url = body["clone_url"]
    assert isinstance(url, str) and url.startswith(server.base_url)
    return url


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_clone_url_of_the_repository_json_clones_with_a_token(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    url = await _clone_url(gserver, forge, token)
    user = "x-access-token" if forge == "github" else "alice"
    work = await clone(url, tmp_path / "work", token, user=user)
    assert (work.path / "README.md").read_text() == "# api\n"
    head = (await work.run("rev-parse", "HEAD")).out.strip()
    assert head == gsim.repo(forge, REPO).branches["main"]
    info = gsim.git_of(gsim.repo(forge, REPO))
    assert info is not None and info.commit_info(head).parents == []


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_clone_and_push_without_valid_credentials_are_refused(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    url = await _clone_url(gserver, forge, token)
    refused = await git("clone", "-q", url, str(tmp_path / "anon"), cwd=tmp_path, check=False)
    assert refused.code != 0 and not (tmp_path / "anon").exists()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/info/refs?service=git-upload-pack") as response,
    ):
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Basic")
    bad = await git(
        "clone", "-q", url, str(tmp_path / "bad"), cwd=tmp_path, token="wrong", check=False
    )
    assert bad.code != 0
    work = await clone(url, tmp_path / "work", token, user="alice")
    await work.commit({"a.txt": "a\n"}, "a")
    anonymous = await git("push", "-q", "origin", "HEAD:refs/heads/x", cwd=work.path, check=False)
    assert anonymous.code != 0
    assert "x" not in gsim.repo(forge, REPO).branches


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_push_by_a_read_only_user_is_refused(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "reader")
    gsim.set_permission(forge, REPO, "reader", "read")
    work = await clone(await _clone_url(gserver, forge, token), tmp_path / "w", token, "reader")
    await work.commit({"a.txt": "a\n"}, "a")
    refused = await work.push("topic", check=False)
    assert refused.code != 0
    assert "403" in refused.err or "denied" in refused.err.lower()
    assert "topic" not in gsim.repo(forge, REPO).branches
    assert gsim.git_of(gsim.repo(forge, REPO)) is not None


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_push_moves_the_branch_fires_push_and_opens_a_pr_on_it(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, hooks: Hooks, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    gsim.set_webhook(forge, hooks.url)
    token = gsim.add_user(forge, "alice")
    work = await clone(await _clone_url(gserver, forge, token), tmp_path / "w", token, "alice")
    first = await work.commit({"src/a.py": "a = 1\n"}, "Add a")
    await work.push("topic")
    await gsim.settle()
    (push,) = hooks.of("push")
    assert push["ref"] == "refs/heads/topic"
    assert push["before"] == "0" * 40 and push["after"] == first
    assert push["head_commit"]["id"] == first
    assert push["commits"][-1]["added"] == ["src/a.py"]
    assert push["repository"]["full_name"] == REPO
    assert push["sender"]["login"] == "alice"
    pusher = push["pusher"]
    assert pusher.get("name", pusher.get("login")) == "alice"

    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gserver.base_url}/_sim/pulls",
            json={"forge": forge, "repo": REPO, "author": "alice", "head_ref": "topic"},
        ) as response,
    ):
        assert response.status == 201
        opened = await response.json()
    assert opened["head_sha"] == first
    number = opened["number"]

    second = await work.commit({"src/a.py": "a = 2\n"}, "Change a")
    await work.push("topic")
    await gsim.settle()
    again = hooks.of("push")[-1]
    assert (again["before"], again["after"]) == (first, second)
    assert again["commits"][-1]["modified"] == ["src/a.py"]
    pull = gsim.pull(forge, REPO, number)
    assert pull.head_sha == second and pull.commits == [first, second]
    status, body = await call("GET", f"{_api(gserver, forge)}/pulls/{number}", token)
    assert status == 200 and body["head"]["sha"] == second
    if forge == "github":
        fetched = await work.run("ls-remote", "origin", f"refs/pull/{number}/head")
        assert fetched.out.split()[0] == second


async def test_merges_endpoint_makes_a_merge_commit_that_a_fetch_sees(
    gsim: Simulator, gserver: SimServer, tmp_path: Path
) -> None:
    gsim.create_repo("github", REPO)
    token = gsim.add_user("github", "alice")
    url = await _clone_url(gserver, "github", token)
    work = await clone(url, tmp_path / "w", token)
    feature = await work.commit({"feature.txt": "f\n"}, "Feature")
    await work.push("feature")
    await work.run("checkout", "-q", "-B", "other", "origin/main")
    other = await work.commit({"other.txt": "o\n"}, "Other")
    await work.push("main")

    merges = f"{_api(gserver, 'github')}/merges"
    status, body = await call("POST", merges, token, {"base": "main", "head": "feature"})
    assert status == 201
    merged = body["sha"]
    assert [p["sha"] for p in body["parents"]] == [other, feature]
    await work.run("fetch", "-q", "origin")
    assert (await work.run("rev-parse", "origin/main")).out.strip() == merged
    parents = (await work.run("show", "-s", "--format=%P", merged)).out.split()
    assert parents == [other, feature]
    tree = (await work.run("ls-tree", "--name-only", merged)).out.split()
    assert {"README.md", "feature.txt", "other.txt"} <= set(tree)

    status, body = await call("POST", merges, token, {"base": "main", "head": "feature"})
    assert (status, body) == (204, None)  # nothing left to merge

    await work.run("checkout", "-q", "-B", "left", merged)
    await work.commit({"README.md": "left\n"}, "Left")
    await work.push("left")
    await work.run("checkout", "-q", "-B", "right", merged)
    await work.commit({"README.md": "right\n"}, "Right")
    await work.push("right")
    status, _ = await call("POST", merges, token, {"base": "left", "head": "right"})
    assert status == 409
    status, body = await call("POST", merges, token, {"base": "nope", "head": "right"})
    assert status == 404 and body["message"] == "Base does not exist"
    assert "documentation_url" in body
    status, body = await call("POST", merges, token, {"base": "main", "head": "nope"})
    assert status == 404 and body["message"] == "Head does not exist"


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_conflicting_pull_requests_are_reported_not_mergeable(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    work = await clone(await _clone_url(gserver, forge, token), tmp_path / "w", token, "alice")
    for branch, text in (("left", "left\n"), ("right", "right\n")):
        await work.run("checkout", "-q", "-B", branch, "origin/main")
        await work.commit({"README.md": text}, branch)
        await work.push(branch)
    left = gsim.open_pr(forge, REPO, "alice", head_ref="left")
    right = gsim.open_pr(forge, REPO, "alice", head_ref="right")
    api = _api(gserver, forge)
    for number in (left.number, right.number):
        status, body = await call("GET", f"{api}/pulls/{number}", token)
        assert status == 200 and body["mergeable"] is True

    if forge == "github":
        status, _ = await call("PUT", f"{api}/pulls/{left.number}/merge", token, {})
    else:
        status, _ = await call("POST", f"{api}/pulls/{left.number}/merge", token, {"Do": "merge"})
    assert status == 200
    status, body = await call("GET", f"{api}/pulls/{right.number}", token)
    assert status == 200 and body["mergeable"] is False
    if forge == "github":
        assert body["mergeable_state"] == "dirty"
        status, _ = await call("PUT", f"{api}/pulls/{right.number}/merge", token, {})
    else:
        status, _ = await call("POST", f"{api}/pulls/{right.number}/merge", token, {"Do": "merge"})
    assert status == 405
    # The scenario override still wins (fault tests rely on it).
    gsim.set_mergeable(forge, REPO, right.number, True)
    status, body = await call("GET", f"{api}/pulls/{right.number}", token)
    assert body["mergeable"] is True


@pytest.mark.parametrize(
    ("forge", "method", "parents"),
    [
        ("github", "merge", 2),
        ("github", "squash", 1),
        ("github", "rebase", 1),
        ("gitea", "merge", 2),
        ("gitea", "squash", 1),
        ("gitea", "rebase", 1),
        ("gitea", "rebase-merge", 2),
        ("gitea", "fast-forward-only", 1),
    ],
)
async def test_pr_merges_make_real_commits_and_move_the_base(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str, method: str, parents: int
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    pull = gsim.open_pr(forge, REPO, "bob", head_ref="change")
    gsim.push(forge, REPO, pull.number, message="Second")
    api = _api(gserver, forge)
    if forge == "github":
        merge = {"merge_method": method}
        status, _ = await call("PUT", f"{api}/pulls/{pull.number}/merge", token, merge)
    else:
        status, _ = await call("POST", f"{api}/pulls/{pull.number}/merge", token, {"Do": method})
    assert status == 200
    state = gsim.repo(forge, REPO)
    landed = state.branches["main"]
    assert pull.merge_commit_sha == landed
    work = await clone(await _clone_url(gserver, forge, token), tmp_path / "w", token, "alice")
    assert (await work.run("rev-parse", "HEAD")).out.strip() == landed
    assert len((await work.run("show", "-s", "--format=%P", landed)).out.split()) == parents
    assert (work.path / f"changes/pr-{pull.number}.txt").read_text() == "Change\nSecond\n"
    if method in ("rebase", "rebase-merge"):
        log = (await work.run("log", "--format=%s", "HEAD")).out.split("\n")
        assert "Second" in log and "Change" in log


async def test_named_fake_head_shas_stay_virtual_commits(gsim: Simulator) -> None:
    gsim.create_repo("github", REPO)
    pull = gsim.open_pr("github", REPO, "alice", head_sha="a" * 40)
    state = gsim.repo("github", REPO)
    assert pull.head_sha == "a" * 40 and state.branches["feature"] == "a" * 40
    assert not gsim.is_real(state, pull.head_sha)
    assert gsim.pull_mergeable(state, pull) is True
    new = gsim.push("github", REPO, pull.number, sha="b" * 40)
    assert new == "b" * 40 and pull.head_sha == new and pull.commits == ["a" * 40, "b" * 40]
    assert gsim.api_merge_github(state, pull.number, "alice", sha=None, method="merge").merged


async def test_large_pushes_and_gzipped_fetch_negotiations_stream_through(
    gsim: Simulator, gserver: SimServer, tmp_path: Path
) -> None:
    """A push over git's postBuffer goes chunked; a fetch with many local commits sends a
    gzip-compressed negotiation: both must reach http-backend whole."""
    gsim.create_repo("github", REPO)
    token = gsim.add_user("github", "alice")
    work = await clone(await _clone_url(gserver, "github", token), tmp_path / "w", token)
    big = os.urandom(3 * 1024 * 1024).hex()  # incompressible: the pack stays over 1 MiB
    sha = await work.commit({"big.txt": big}, "Big")
    pushed = await work.run("-c", "http.postBuffer=65536", "push", "origin", "HEAD:refs/heads/big")
    assert pushed.code == 0
    assert gsim.repo("github", REPO).branches["big"] == sha

    await work.run("checkout", "-q", "-B", "local", "origin/main")
    for i in range(60):  # many haves: a negotiation body well over 1 KiB, sent gzipped
        await work.commit({f"local/{i}.txt": f"{i}\n"}, f"Local {i}")
    other = await clone(await _clone_url(gserver, "github", token), tmp_path / "o", token)
    fresh = await other.commit({"fresh.txt": "fresh\n"}, "Fresh")
    await other.push("fresh")
    fetched = await work.run("-c", "protocol.version=2", "fetch", "origin", "fresh")
    assert fetched.code == 0
    assert (await work.run("rev-parse", "FETCH_HEAD")).out.strip() == fresh


def test_scenario_pushes_move_only_their_pull_request(gsim: Simulator) -> None:
    """Scenarios open pull requests on the default head name ("feature") freely: each keeps
    its own commits, and a scenario push reaches only the pull request it names."""
    gsim.create_repo("gitea", REPO)
    first = gsim.open_pr("gitea", REPO, "alice")
    second = gsim.open_pr("gitea", REPO, "bob")
    assert first.head_sha != second.head_sha
    before = second.head_sha
    pushed = gsim.push("gitea", REPO, first.number)
    assert first.head_sha == pushed and second.head_sha == before
    assert len(first.commits) == 2 and second.commits == [before]
    state = gsim.repo("gitea", REPO)
    git = gsim.git_of(state)
    assert git is not None
    assert git.ref(f"refs/pull/{first.number}/head") == pushed
    assert git.ref(f"refs/pull/{second.number}/head") == before
    assert not any(m.ref.endswith("/main") for m in gsim.ref_moves)


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_pull_requests_files_are_what_git_says_it_changes(
    gsim: Simulator, gserver: SimServer, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    pull = gsim.open_pr(forge, REPO, "alice", head_ref="change")
    gsim.push(forge, REPO, pull.number, files={"src/a.py": "a = 1\nb = 2\n"})
    status, files = await call("GET", f"{_api(gserver, forge)}/pulls/{pull.number}/files", token)
    assert status == 200
    rows = {f["filename"]: (f["status"], f["additions"], f["deletions"]) for f in files}
    assert rows == {"changes/pr-1.txt": ("added", 1, 0), "src/a.py": ("added", 2, 0)}


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_statuses_of_a_pushed_commit_that_is_no_tip_are_found(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    gsim.create_repo(forge, REPO)
    token = gsim.add_user(forge, "alice")
    work = await clone(await _clone_url(gserver, forge, token), tmp_path / "w", token, "alice")
    inner = await work.commit({"a.txt": "a\n"}, "Inner")
    await work.commit({"b.txt": "b\n"}, "Tip")
    await work.push("topic")
    gsim.set_status(forge, REPO, inner, "ci/test", "success")
    status, body = await call("GET", f"{_api(gserver, forge)}/commits/{inner}/status", token)
    assert status == 200 and body["state"] == "success"
    status, _ = await call("GET", f"{_api(gserver, forge)}/commits/{'e' * 40}/status", token)
    assert status == 404


@pytest.mark.git  # what a simulator made without git= does outside the suite
def test_the_git_folder_is_made_with_the_first_repository_and_removed_on_close() -> None:
    sim = Simulator()
    assert sim.git_root is None
    sim.create_repo("github", REPO)
    root = sim.git_root
    assert root is not None and (root / "github").is_dir()
    sim.close()
    assert not root.exists()
    assert Simulator(git=False).create_repo("gitea", REPO).commits  # named SHAs, no folder
