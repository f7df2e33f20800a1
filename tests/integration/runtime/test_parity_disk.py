"""What the parity gate reads from disk each time it compares: the package's files are hashed
again, and git asked again, only when their time stamps moved, and a file changed too
recently for its stamps to be trusted is always read. Real files and a real git checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reviewbot.runtime import parity

LATER_S = 60.0  # a wall clock this far ahead: every file looks settled


def later() -> float:
    return time.time() + LATER_S


def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "repo" / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.sql").write_text("SELECT 1;\n")
    (pkg / "notes.txt").write_text("not code\n")
    return pkg


def test_an_unchanged_package_is_hashed_once(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    watch = parity.DiskWatch(later)
    first = watch.code_hash(pkg)
    assert first == parity.code_hash(pkg)
    for _ in range(5):
        assert watch.code_hash(pkg) == first
    assert watch.hashed == 1


def test_each_kind_of_change_is_seen(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    watch = parity.DiskWatch(later)
    before = watch.code_hash(pkg)

    (pkg / "notes.txt").write_text("still not code\n")  # not a source file: no new hash
    assert watch.code_hash(pkg) == before and watch.hashed == 1

    (pkg / "a.py").write_text("x = 10\n")  # edited in place
    edited = watch.code_hash(pkg)
    assert edited == parity.code_hash(pkg) != before

    replacement = pkg / "a.py.new"  # replaced by rename, same size, old times put back
    replacement.write_text("x = 11\n")
    times = os.stat(pkg / "a.py")
    os.utime(replacement, ns=(times.st_atime_ns, times.st_mtime_ns))
    os.replace(replacement, pkg / "a.py")
    replaced = watch.code_hash(pkg)
    assert replaced == parity.code_hash(pkg) != edited

    (pkg / "sub" / "c.py").write_text("")  # a new file
    added = watch.code_hash(pkg)
    assert added != replaced
    (pkg / "sub" / "c.py").unlink()  # and gone again
    assert watch.code_hash(pkg) == replaced
    assert watch.hashed == 5


def test_a_file_changed_just_now_is_read_every_time(tmp_path: Path) -> None:
    # With the real clock the files were written moments ago: a second write within the
    # same tick of the file system's clock could leave every stamp alike, so nothing is
    # kept and an edit of the same size is still seen.
    pkg = package(tmp_path)
    watch = parity.DiskWatch()
    before = watch.code_hash(pkg)
    (pkg / "a.py").write_text("x = 2\n")
    assert watch.code_hash(pkg) != before
    assert watch.hashed == 2


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    """Commit everything in ``repo`` (made a checkout on first use); the new commit."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_is_asked_again_only_when_head_moved(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    repo = pkg.parent
    first = commit_all(repo, "one")

    watch = parity.DiskWatch(later)
    assert watch.git_commit(pkg) == first
    asked = watch.asked_git
    for _ in range(5):
        assert watch.git_commit(pkg) == first
    assert watch.asked_git == asked

    (repo / "README").write_text("docs\n")  # a commit on the branch (loose ref)
    second = commit_all(repo, "two")
    assert watch.git_commit(pkg) == second

    git(repo, "pack-refs", "--all")  # the branch only in packed-refs, then moved back
    git(repo, "reset", "-q", "--hard", first)
    assert watch.git_commit(pkg) == first

    git(repo, "checkout", "-q", "--detach", second)  # HEAD itself holds the commit
    assert watch.git_commit(pkg) == second
    assert watch.asked_git == asked + 3


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_runtime_report_says_the_checkout_moved(tmp_path: Path) -> None:
    # No configuration file to compare with (no reload): only the code and the commit.
    pkg = package(tmp_path)
    repo = pkg.parent
    commit_all(repo, "one")
    watch = parity.DiskWatch(later)
    boot = parity.Boot(
        version="0",
        commit=watch.git_commit(pkg),
        code_hash=watch.code_hash(pkg),
        config_hash="",
        config={},
        started_at=0.0,
        package_dir=pkg,
        disk=watch,
    )
    assert parity.disk_report(boot, (None, None), {}).reasons == ()
    (repo / "README").write_text("docs\n")
    commit_all(repo, "docs only")
    moved = parity.disk_report(boot, (None, None), {})
    assert moved.code_changed is False
    assert moved.reasons == (f"the checkout moved from {boot.commit} to {moved.commit_on_disk}",)
