"""A bot-owned bare clone of one repository, driven through the ``git`` program.

It builds what a forge's API cannot: merge commits on Gitea/Forgejo, which has no server-side
merge of two refs, and the plain push that moves a branch there when the server has no
fast-forward endpoint. A push is never forced, so the remote accepts it only as a
fast-forward of the branch: that refusal is the compare-and-swap.

* The clone lives under the data folder (``<data_dir>/git/<forge>/<owner>/<name>.git``,
  :attr:`reviewbot.config.Settings.git_dir`), is
  fetched incrementally, and may be deleted at any time: the next use makes it again.
* The token reaches git only through its environment, as an ``http.extraHeader`` given by
  ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_0``/``GIT_CONFIG_VALUE_0``: never in argv (visible to
  every local user in ``ps``), in the remote URL (stored in the clone's config) or in a log
  line. git's own messages are scrubbed of it before they reach an error.
* git runs with no system or user configuration and never prompts. Merges need git 2.38 or
  newer (``git merge-tree --write-tree``: a merge without a working tree).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from reviewbot.core.redact import HIDDEN
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    MergeConflict,
    NotFastForward,
    NotFound,
    PermissionDenied,
    Unsupported,
)

log = logging.getLogger(__name__)

# Every branch, and the heads of pull requests where the forge publishes them
# (``refs/pull/N/head`` on GitHub and Gitea), so a PR's head commit is at hand.
FETCH_REFSPECS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/pull/*/head:refs/remotes/pull/*")
# Environment variables git may inherit: nothing else of the bot's environment (which holds
# its other secrets) reaches the child.
INHERITED = ("PATH", "LANG", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "NO_PROXY")
UNREACHED = ("could not resolve host", "failed to connect", "connection refused", "timed out")
# A 401 with prompts off: git asks for a user name it may not prompt for.
REFUSED = ("returned error: 401", "authentication failed", "could not read username")
NON_FAST_FORWARD = ("non-fast-forward", "fetch first", "stale info", "[rejected]")


@dataclass(frozen=True)
class GitResult:
    returncode: int
    stdout: str
    stderr: str


def clone_path(git_root: Path, forge: str, repo: str) -> Path:
    """Where the clone of ``repo`` (``OWNER/NAME``) on ``forge`` lives."""
    owner, _, name = repo.partition("/")
    for part in (owner, name):
        # Names come from configuration and webhooks: never a path outside the root.
        if not part or part in (".", "..") or "/" in part or "\\" in part:
            raise ValueError(f"repository {repo!r}: expected OWNER/NAME")
    return git_root / forge / owner.lower() / f"{name.lower()}.git"


def remote_url(base: str, repo: str) -> str:
    """``BASE/OWNER/NAME.git`` with any credentials dropped from ``base``."""
    parts = urlsplit(base.rstrip("/"))
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc, path=f"{parts.path}/{repo}.git"))


class GitClone:
    """The clone of one repository; one operation at a time (one lock per clone)."""

    def __init__(
        self,
        path: Path,
        url: str,
        *,
        username: str,
        token: str,
        author: tuple[str, str] = ("reviewbot", "reviewbot@localhost"),
        git: str = "git",
    ) -> None:
        if not token:
            raise ValueError("a git clone needs the forge token")
        self.path = path
        self.url = url
        self._secret = token
        basic = base64.b64encode(f"{username}:{token}".encode()).decode()
        self._auth = {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        }
        self._basic = basic
        self._author = author
        self._git = git
        self._lock = asyncio.Lock()

    # -- what the forges use ----------------------------------------------------------

    async def merge(self, branch: str, sha: str, message: str) -> tuple[str, str | None]:
        """``(tip, merge)``: the branch's current commit, and a new merge commit of ``sha``
        into it (first parent the tip), or ``None`` when the tip already contains ``sha``.
        Nothing is pushed."""
        async with self._lock:
            await self._fetch()
            tip = await self._resolve(f"refs/remotes/origin/{branch}", f"branch {branch}")
            await self._have_commit(sha)
            if await self._is_ancestor(sha, tip):
                return tip, None
            merged = await self._run("merge-tree", "--write-tree", "--no-messages", tip, sha)
            if merged.returncode == 1:
                raise MergeConflict(
                    f"{sha[:12]} does not merge cleanly into {branch}", operation="merge_into"
                )
            self._check(merged, "merge_into")
            tree = merged.stdout.split("\n", 1)[0].strip()
            name, email = self._author
            identity = {
                "GIT_AUTHOR_NAME": name,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": name,
                "GIT_COMMITTER_EMAIL": email,
            }
            made = await self._run(
                "commit-tree", tree, "-p", tip, "-p", sha, "-F", "-", stdin=message, env=identity
            )
            self._check(made, "merge_into")
            return tip, made.stdout.strip()

    async def push(self, sha: str, branch: str, *, operation: str) -> None:
        """Set ``branch`` on the remote to ``sha``, never forced: the remote refuses anything
        but a fast-forward (:class:`NotFastForward`)."""
        async with self._lock:
            await self._ensure()
            await self._have_commit(sha)
            # No leading "+": a plain push, which the remote takes only as a fast-forward.
            pushed = await self._run(
                "push",
                "--porcelain",
                "--quiet",
                "origin",
                f"{sha}:refs/heads/{branch}",
                remote=True,
            )
            if pushed.returncode != 0:
                said = f"{pushed.stdout}\n{pushed.stderr}"
                if any(hint in said for hint in NON_FAST_FORWARD):
                    raise NotFastForward(
                        f"{branch} is not an ancestor of {sha[:12]} (the remote refused the push)",
                        operation=operation,
                    )
                self._check(pushed, operation)
            await self._run(
                "update-ref", f"refs/remotes/origin/{branch}", sha
            )  # what the remote now holds

    async def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        async with self._lock:
            await self._have_commit(ancestor)
            await self._have_commit(descendant)
            return await self._is_ancestor(ancestor, descendant)

    async def changed_files(self, base: str, head: str) -> tuple[str, ...]:
        """Paths changed on ``head``'s side since it and ``base`` diverged."""
        async with self._lock:
            await self._have_commit(base)
            await self._have_commit(head)
            found = await self._run("diff", "--name-only", "-z", "--no-renames", f"{base}...{head}")
            self._check(found, "compare")
            return tuple(p for p in found.stdout.split("\0") if p)

    # -- plumbing ---------------------------------------------------------------------

    async def _ensure(self) -> None:
        """Make the clone when it is missing (or was left half-made)."""
        if (self.path / "HEAD").is_file() and (self.path / "config").is_file():
            return
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._check(
            await self._run("init", "--quiet", "--bare", str(self.path), bare=False), "clone"
        )
        self._check(await self._run("config", "remote.origin.url", self.url), "clone")

    async def _fetch(self) -> None:
        await self._ensure()
        fetched = await self._run(
            "fetch", "--quiet", "--prune", "--no-tags", "origin", *FETCH_REFSPECS, remote=True
        )
        self._check(fetched, "fetch")

    async def _have_commit(self, sha: str) -> None:
        """The commit is in the clone: fetched once more when it is not, else ``NotFound``."""
        await self._ensure()
        if await self._exists(sha):
            return
        await self._fetch()
        if not await self._exists(sha):
            raise NotFound(f"commit {sha[:12]} is not on the forge", status=None, operation="git")

    async def _exists(self, rev: str) -> bool:
        found = await self._run("cat-file", "-e", f"{rev}^{{commit}}")
        return found.returncode == 0

    async def _resolve(self, ref: str, what: str) -> str:
        found = await self._run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode != 0:
            raise NotFound(f"{what} is not on the forge", operation="git")
        return found.stdout.strip()

    async def _is_ancestor(self, ancestor: str, descendant: str) -> bool:
        found = await self._run("merge-base", "--is-ancestor", ancestor, descendant)
        if found.returncode not in (0, 1):
            self._check(found, "compare")
        return found.returncode == 0

    async def _run(
        self,
        *args: str,
        remote: bool = False,
        bare: bool = True,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> GitResult:
        argv = [self._git, *(["--git-dir", str(self.path)] if bare else []), *args]
        child_env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        child_env.update(
            GIT_TERMINAL_PROMPT="0",
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_ASKPASS="",
            LC_ALL="C",
        )
        if remote:
            child_env.update(self._auth)
        child_env.update(env or {})
        log.debug("git %s", " ".join(args))
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=child_env,
            )
        except FileNotFoundError:
            raise Unsupported(
                f"the {self._git!r} program is not installed (ref operations need git)",
                operation="git",
            ) from None
        out, err = await process.communicate((stdin or "").encode())
        result = GitResult(
            process.returncode if process.returncode is not None else -1,
            self._scrub(out.decode(errors="replace")),
            self._scrub(err.decode(errors="replace")),
        )
        if result.returncode != 0:
            log.debug("git %s: exit %d: %s", args[0], result.returncode, result.stderr.strip())
        return result

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, HIDDEN).replace(self._basic, HIDDEN)

    def _check(self, result: GitResult, operation: str) -> None:
        if result.returncode == 0:
            return
        said = (result.stderr.strip() or result.stdout.strip() or "no message")[-500:]
        lowered = said.lower()
        kind: type[ForgeError] = ForgeError
        if any(hint in lowered for hint in UNREACHED) or "returned error: 5" in lowered:
            kind = ForgeUnavailable
        elif any(hint in lowered for hint in REFUSED):
            kind = AuthenticationFailed
        elif "returned error: 403" in lowered or "permission" in lowered:
            kind = PermissionDenied
        elif "returned error: 404" in lowered or "not found" in lowered:
            kind = NotFound
        raise kind(f"git {operation}: {said}", operation=operation)
