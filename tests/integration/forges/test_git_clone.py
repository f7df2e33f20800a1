"""The bot's git clone against real bare repositories served over HTTP with Basic auth."""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import Settings
from reviewbot.forges.errors import (
    AuthenticationFailed,
    MergeConflict,
    NotFastForward,
    NotFound,
    Unsupported,
)
from reviewbot.forges.factory import make_forge
from reviewbot.forges.git_clone import GitClone, clone_path, remote_url
from reviewbot.forges.gitea import GiteaForge
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.support.git_http import GitServer, commit_file, git, serving

TOKEN = "s3cret-t0ken-value"
REPO = "acme/api"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working copy with one commit on ``main``."""
    work = tmp_path / "work"
    git("init", "--quiet", "--initial-branch=main", str(work))
    commit_file(work, "README", "hello\n", "first")
    return work


@pytest.fixture
def server(tmp_path: Path, work: Path) -> Iterator[GitServer]:
    with serving(tmp_path / "served", username="reviewbot", password=TOKEN) as server:
        server.create(REPO, work)
        yield server


def make_clone(tmp_path: Path, server: GitServer, token: str = TOKEN) -> GitClone:
    return GitClone(
        clone_path(tmp_path / "data" / "git", "gitea", REPO),
        remote_url(server.url, REPO),
        username="reviewbot",
        token=token,
        author=("reviewbot", "reviewbot@noreply.example.test"),
    )


def branch_off(work: Path, name: str, path: str, text: str) -> str:
    """A commit on a new branch ``name`` from ``main``; the working copy is back on main."""
    git("checkout", "--quiet", "-b", name, "main", cwd=work)
    sha = commit_file(work, path, text, f"change {path}")
    git("checkout", "--quiet", "main", cwd=work)
    return sha


async def test_a_merge_commit_is_built_and_landed_by_a_plain_push(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    feature = branch_off(work, "feature", "src/a.py", "a = 1\n")
    server.push(REPO, work, "feature:refs/heads/feature")
    main = commit_file(work, "docs/b.md", "b\n", "docs")
    server.push(REPO, work, "main:refs/heads/main")
    clone = make_clone(tmp_path, server)

    tip, merge = await clone.merge("main", feature, "Merge feature")
    assert tip == main and merge is not None
    assert server.ref(REPO, "refs/heads/main") == main  # nothing pushed yet
    await clone.push(merge, "main", operation="merge_into")

    assert server.ref(REPO, "refs/heads/main") == merge
    bare = str(server.bare(REPO))
    assert git("--git-dir", bare, "log", "-1", "--format=%P", merge).split() == [main, feature]
    assert git("--git-dir", bare, "log", "-1", "--format=%s|%an|%cn", merge) == (
        "Merge feature|reviewbot|reviewbot"
    )
    files = git("--git-dir", bare, "ls-tree", "-r", "--name-only", merge).split()
    assert files == ["README", "docs/b.md", "src/a.py"]


async def test_merging_a_commit_the_branch_has_makes_nothing(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    main = server.ref(REPO, "refs/heads/main")
    clone = make_clone(tmp_path, server)
    assert await clone.merge("main", main, "Merge") == (main, None)


async def test_a_conflict_is_named_and_leaves_the_branch(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    theirs = branch_off(work, "feature", "README", "theirs\n")
    server.push(REPO, work, "feature:refs/heads/feature")
    main = commit_file(work, "README", "ours\n", "ours")
    server.push(REPO, work, "main:refs/heads/main")
    clone = make_clone(tmp_path, server)
    with pytest.raises(MergeConflict):
        await clone.merge("main", theirs, "Merge")
    assert server.ref(REPO, "refs/heads/main") == main


async def test_a_push_that_is_not_a_fast_forward_is_refused(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    first = server.ref(REPO, "refs/heads/main")
    side = branch_off(work, "side", "x", "x\n")
    server.push(REPO, work, "side:refs/heads/side")
    moved = commit_file(work, "y", "y\n", "y")
    server.push(REPO, work, "main:refs/heads/main")
    clone = make_clone(tmp_path, server)

    with pytest.raises(NotFastForward):
        await clone.push(side, "main", operation="fast_forward")
    assert server.ref(REPO, "refs/heads/main") == moved

    # A fast-forward goes through: ``side`` grows from ``first``, so moving it to a
    # descendant of ``moved`` is one.
    assert await clone.is_ancestor(first, moved)
    assert not await clone.is_ancestor(side, moved)
    await clone.push(moved, "side2", operation="fast_forward")  # a new branch
    assert server.ref(REPO, "refs/heads/side2") == moved


async def test_compare_helpers_read_the_clone(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    base = server.ref(REPO, "refs/heads/main")
    git("mv", "README", "README.md", cwd=work)
    git("commit", "--quiet", "-m", "rename", cwd=work)
    head = commit_file(work, "src/new.py", "n\n", "new")
    server.push(REPO, work, "main:refs/heads/main")
    clone = make_clone(tmp_path, server)
    assert await clone.changed_files(base, head) == ("README", "README.md", "src/new.py")
    assert await clone.changed_files(head, base) == ()


async def test_a_commit_the_forge_does_not_have_is_not_found(
    tmp_path: Path, server: GitServer
) -> None:
    clone = make_clone(tmp_path, server)
    with pytest.raises(NotFound):
        await clone.merge("main", "0" * 40, "Merge")
    with pytest.raises(NotFound):
        await clone.merge("nope", server.ref(REPO, "refs/heads/main"), "Merge")


async def test_the_clone_is_remade_after_it_was_deleted(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    clone = make_clone(tmp_path, server)
    main = server.ref(REPO, "refs/heads/main")
    assert await clone.merge("main", main, "m") == (main, None)
    assert clone.path == tmp_path / "data" / "git" / "gitea" / "acme" / "api.git"
    shutil.rmtree(clone.path)
    feature = branch_off(work, "feature", "f", "f\n")
    server.push(REPO, work, "feature:refs/heads/feature")
    tip, merge = await clone.merge("main", feature, "m")
    assert tip == main and merge is not None
    # Half-made (no config): thrown away and made again.
    (clone.path / "config").unlink()
    assert (await clone.merge("main", main, "m")) == (main, None)


async def test_a_refused_token_is_authentication_failed(tmp_path: Path, server: GitServer) -> None:
    clone = make_clone(tmp_path, server, token="wrong")
    with pytest.raises(AuthenticationFailed) as caught:
        await clone.merge("main", "0" * 40, "m")
    assert "wrong" not in str(caught.value)


async def test_the_token_is_never_in_argv_the_url_the_config_or_a_log_line(
    tmp_path: Path,
    work: Path,
    server: GitServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spawned: list[tuple[tuple[str, ...], dict[str, str]]] = []
    real = asyncio.create_subprocess_exec

    async def recording(*argv: str, **kw: Any) -> asyncio.subprocess.Process:
        spawned.append((tuple(argv), dict(kw.get("env") or {})))
        return await real(*argv, **kw)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", recording)
    caplog.set_level(logging.DEBUG)
    feature = branch_off(work, "feature", "f", "f\n")
    server.push(REPO, work, "feature:refs/heads/feature")
    side = branch_off(work, "side", "g", "g\n")
    server.push(REPO, work, "side:refs/heads/side")
    clone = make_clone(tmp_path, server)

    _, merge = await clone.merge("main", feature, "m")
    assert merge is not None
    await clone.push(merge, "main", operation="merge_into")
    with pytest.raises(NotFastForward):
        await clone.push(side, "main", operation="fast_forward")

    assert spawned
    for argv, env in spawned:
        assert all(TOKEN not in arg for arg in argv), argv
        # Only network commands carry credentials, and only in the header variable.
        holding = sorted(k for k, v in env.items() if _encodes(TOKEN, v))
        assert holding in ([], ["GIT_CONFIG_VALUE_0"]), (argv, holding)
        if holding:
            assert argv[3] in ("fetch", "push"), argv
    assert any(_encodes(TOKEN, env.get("GIT_CONFIG_VALUE_0", "")) for _, env in spawned)
    assert TOKEN not in clone.url
    config = (clone.path / "config").read_text()
    assert TOKEN not in config and not _encodes(TOKEN, config)
    assert caplog.records
    for record in caplog.records:
        assert not _encodes(TOKEN, record.getMessage())
    # The server saw the credentials on every request.
    assert server.authorizations and all(a.startswith("Basic ") for a in server.authorizations)


def _encodes(token: str, text: str) -> bool:
    """``text`` holds the token, plainly or inside a Basic credential."""
    if token in text:
        return True
    for word in text.split():
        try:
            if token in base64.b64decode(word, validate=True).decode(errors="ignore"):
                return True
        except ValueError:
            continue
    return False


async def test_missing_git_is_unsupported(tmp_path: Path, server: GitServer) -> None:
    clone = GitClone(
        tmp_path / "c.git", remote_url(server.url, REPO), username="u", token=TOKEN, git="no-git"
    )
    with pytest.raises(Unsupported):
        await clone.merge("main", "0" * 40, "m")


def test_clone_paths_stay_under_the_root(tmp_path: Path) -> None:
    assert clone_path(tmp_path, "gitea", "Acme/API") == tmp_path / "gitea" / "acme" / "api.git"
    for bad in ("../x", "acme/..", "acme", "a/b/c"):
        with pytest.raises(ValueError):
            clone_path(tmp_path, "gitea", bad)
    assert remote_url("https://bot:pw@git.example.test/sub/", REPO) == (
        "https://git.example.test/sub/acme/api.git"
    )


async def test_gitea_merges_and_pushes_through_the_clone(
    tmp_path: Path, work: Path, server: GitServer
) -> None:
    """The Gitea adapter's git side: a merge commit made in its clone and landed by a plain
    push where the server has no fast-forward endpoint."""
    feature = branch_off(work, "feature", "f", "f\n")
    server.push(REPO, work, "feature:refs/heads/feature")
    main = server.ref(REPO, "refs/heads/main")
    forge = GiteaForge(
        url=server.url,
        token=TOKEN,
        bot_login="reviewbot",
        git_root=tmp_path / "data" / "git",
        fast_forward_api=False,
    )
    try:
        ops = forge.ref_ops()
        merged = await ops.merge_into(REPO, "main", feature, "Merge feature")
        assert merged.created and server.ref(REPO, "refs/heads/main") == merged.sha
        again = await ops.merge_into(REPO, "main", feature, "Merge feature")
        assert (again.sha, again.created) == (merged.sha, False)
        with pytest.raises(NotFastForward):
            await ops.fast_forward(REPO, "main", main)
        await ops.fast_forward(REPO, "feature", merged.sha)
        assert server.ref(REPO, "refs/heads/feature") == merged.sha
        assert (tmp_path / "data" / "git" / "gitea" / "acme" / "api.git" / "HEAD").is_file()
    finally:
        await forge.aclose()


def test_gitea_without_a_clone_folder_says_ref_ops_are_unsupported() -> None:
    forge = GiteaForge(url="https://gitea.example.test", token=TOKEN)
    with pytest.raises(Unsupported, match="git clone"):
        forge.ref_ops()


async def test_the_configured_gitea_adapter_clones_under_the_data_folder(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        gitea={"url": "https://gitea.example.test", "token": TOKEN, "bot_login": "reviewbot"},
    )
    assert settings.git_dir == WorkflowPaths.from_settings(settings).git_dir
    assert settings.git_dir == tmp_path / "data" / "git"
    forge = make_forge(settings, "gitea")
    try:
        assert isinstance(forge, GiteaForge)
        clone = await forge._clone(REPO)
        assert clone.path == tmp_path / "data" / "git" / "gitea" / "acme" / "api.git"
        assert clone.url == "https://gitea.example.test/acme/api.git"
    finally:
        await forge.aclose()
