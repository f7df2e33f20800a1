"""The git plumbing behind simulated repositories: one bare repository each, driven with
Debian's ``git`` as a subprocess (2.38+ for ``merge-tree --write-tree``).

Everything here is synchronous and fast (plumbing commands on tiny repositories); commit
dates come from the simulator's clock, so a scenario run on a manual clock makes the same
SHAs every time. No credential ever reaches an argument vector.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reviewbot.core.errors import ReviewbotError

ZERO_SHA = "0" * 40
GIT = "git"


class GitError(ReviewbotError):
    """A git command failed; ``stderr`` says why."""

    def __init__(self, args: list[str], code: int, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} exited {code}: {stderr.strip()}")
        self.exit_code = code
        self.stderr = stderr


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    when: float


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: list[str]
    author: str
    email: str
    when: float
    message: str


@dataclass(frozen=True)
class FileChange:
    status: str  # git's letter: A, M, D, T
    path: str
    blob: str
    additions: int
    deletions: int


def base_env() -> dict[str, str]:
    """An environment that ignores the machine's and user's git configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    return env


def client_env(user: str = "", token: str = "") -> dict[str, str]:
    """:func:`base_env` for a developer's ``git`` against a served simulator: it never
    prompts, commits as "Dev", and sends ``token`` (as ``user``) in an Authorization header
    taken from the environment, never from argv."""
    env = base_env()
    env.update(
        GIT_ASKPASS="/bin/false",
        GIT_AUTHOR_NAME="Dev",
        GIT_COMMITTER_NAME="Dev",
        GIT_AUTHOR_EMAIL="dev@example.invalid",
        GIT_COMMITTER_EMAIL="dev@example.invalid",
    )
    if token:
        basic = base64.b64encode(f"{user or 'x-access-token'}:{token}".encode()).decode()
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: Basic {basic}",
        )
    return env


@dataclass(frozen=True)
class ClientGitResult:
    code: int
    out: str
    err: str


async def client_git(
    *args: str,
    cwd: Path,
    user: str = "",
    token: str = "",
    env: Mapping[str, str] | None = None,
) -> ClientGitResult:
    """A developer's ``git`` (:func:`client_env`, plus ``env``) run as a subprocess without
    blocking the event loop, which may be the one serving the simulator it talks to."""
    process = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env={**client_env(user, token), **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return ClientGitResult(process.returncode or 0, out.decode(), err.decode())


class GitRepo:
    """One bare repository on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # merge-tree answers by (base tip, head): cache them, a tip never changes content.
        self._merges: dict[tuple[str, str], str | None] = {}

    # ------------------------------------------------------------------ running git
    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        full = base_env()
        full["GIT_DIR"] = str(self.path)
        if env:
            full.update(env)
        done = subprocess.run(  # noqa: S603 - fixed executable, no shell
            [GIT, *args], input=input, env=full, capture_output=True, check=False
        )
        if check and done.returncode != 0:
            raise GitError(list(args), done.returncode, done.stderr.decode(errors="replace"))
        return done

    def out(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
        return self.run(*args, input=input, env=env).stdout.decode().strip()

    @classmethod
    def init(cls, path: Path, default_branch: str) -> GitRepo:
        path.parent.mkdir(parents=True, exist_ok=True)
        repo = cls(path)
        repo.run("init", "--bare", "--quiet", f"--initial-branch={default_branch}", str(path))
        # http-backend serves receive-pack only when enabled; the simulator checks rights.
        repo.run("config", "http.receivepack", "true")
        repo.run("config", "uploadpack.allowAnySHA1InWant", "true")
        return repo

    # ------------------------------------------------------------------ objects
    def write_tree(self, files: dict[str, str], base_tree: str | None = None) -> str:
        """A tree: ``base_tree`` with ``files`` (path -> text) written over it."""
        with tempfile.TemporaryDirectory(prefix="sim-index-") as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if base_tree:
                self.run("read-tree", base_tree, env=env)
            for path, text in files.items():
                blob = self.out("hash-object", "-w", "--stdin", input=text.encode())
                self.run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            return self.out("write-tree", env=env)

    def commit_tree(
        self, tree: str, parents: list[str], message: str, author: Person, committer: Person
    ) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        env = {
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": f"@{int(author.when)} +0000",
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": f"@{int(committer.when)} +0000",
        }
        return self.out(*args, input=message.encode(), env=env)

    def has_commit(self, sha: str) -> bool:
        if len(sha) != 40:
            return False
        return self.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def commit_info(self, sha: str) -> CommitInfo:
        raw = self.out("show", "-s", "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%at%x00%B", sha)
        full, tree, parents, name, email, when, message = raw.split("\x00", 6)
        return CommitInfo(full, tree, parents.split(), name, email, float(when), message)

    def tree_of(self, sha: str) -> str:
        return self.out("rev-parse", f"{sha}^{{tree}}")

    # ------------------------------------------------------------------ refs
    def refs(self) -> dict[str, str]:
        """Every ref -> the commit it points at."""
        text = self.out("for-each-ref", "--format=%(refname) %(objectname)")
        pairs = (line.split(" ", 1) for line in text.splitlines() if line)
        return {name: sha for name, sha in pairs}

    def ref(self, name: str) -> str | None:
        done = self.run("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False)
        return done.stdout.decode().strip() or None if done.returncode == 0 else None

    def update_ref(self, name: str, new: str, old: str | None = None) -> bool:
        """Move ``name`` to ``new``; with ``old``, only if it still points there (compare and
        swap: ``ZERO_SHA`` for "must not exist")."""
        args = ["update-ref", name, new] + ([old] if old is not None else [])
        return self.run(*args, check=False).returncode == 0

    def delete_ref(self, name: str) -> bool:
        return self.run("update-ref", "-d", name, check=False).returncode == 0

    # ------------------------------------------------------------------ history
    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        done = self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        return done.returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        done = self.run("merge-base", a, b, check=False)
        return done.stdout.decode().strip() or None if done.returncode == 0 else None

    def count(self, exclude: str, include: str) -> int:
        return int(self.out("rev-list", "--count", f"{exclude}..{include}"))

    def commits_between(self, exclude: str, include: str) -> list[str]:
        """Commits reachable from ``include`` and not ``exclude``, oldest first."""
        text = self.out("rev-list", "--reverse", "--topo-order", f"{exclude}..{include}")
        return text.split()

    def changed_files(self, a: str, b: str) -> list[str]:
        return self.out("diff", "--name-only", "--no-renames", a, b).splitlines()

    def file_statuses(self, a: str, b: str) -> list[tuple[str, str]]:
        """``(status letter, path)`` for each file that differs between two commits."""
        text = self.out("diff", "--name-status", "--no-renames", a, b)
        rows = (line.split("\t", 1) for line in text.splitlines() if line)
        return [(status, path) for status, path in rows]

    def file_changes(self, a: str, b: str) -> list[FileChange]:
        """Each file that differs between two commits: status, blob, lines added/removed."""
        raw = self.out("diff", "--raw", "--no-renames", "--no-abbrev", a, b)
        counts: dict[str, tuple[int, int]] = {}
        for line in self.out("diff", "--numstat", "--no-renames", a, b).splitlines():
            plus, minus, name = line.split("\t", 2)
            # A binary file counts no lines ("-").
            counts[name] = (int(plus) if plus != "-" else 0, int(minus) if minus != "-" else 0)
        changes: list[FileChange] = []
        for line in raw.splitlines():
            meta, path = line.split("\t", 1)
            _, _, old_blob, new_blob, status = meta.split(" ")
            blob = old_blob if status == "D" else new_blob
            added, removed = counts.get(path, (0, 0))
            changes.append(FileChange(status[0], path, blob, added, removed))
        return changes

    def read_file(self, commit: str, path: str) -> str | None:
        done = self.run("cat-file", "blob", f"{commit}:{path}", check=False)
        return done.stdout.decode(errors="replace") if done.returncode == 0 else None

    # ------------------------------------------------------------------ merging
    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """The tree of merging two commits, or ``None`` when they conflict."""
        key = (ours, theirs)
        if key not in self._merges:
            done = self.run(
                "merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False
            )
            if done.returncode not in (0, 1):
                raise GitError(["merge-tree", ours, theirs], done.returncode, done.stderr.decode())
            first = done.stdout.decode().split("\n", 1)[0].strip()
            self._merges[key] = first if done.returncode == 0 else None
        return self._merges[key]

    def pick(self, commit: str, onto: str) -> str | None:
        """The tree of applying ``commit``'s own change onto ``onto`` (a cherry-pick's
        three-way merge with the commit's parent as base), or ``None`` on a conflict."""
        parents = self.commit_info(commit).parents
        base = parents[0] if parents else self.empty_tree()
        with tempfile.TemporaryDirectory(prefix="sim-index-") as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            done = self.run(
                "read-tree", "-m", "-i", "--aggressive", base, onto, commit, env=env, check=False
            )
            if done.returncode != 0:
                return None
            written = self.run("write-tree", env=env, check=False)
            return written.stdout.decode().strip() if written.returncode == 0 else None

    def empty_tree(self) -> str:
        return self.out("hash-object", "-t", "tree", "-w", "--stdin", input=b"")
