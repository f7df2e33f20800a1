"""The simulator's state and the helpers every part of it shares."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import shutil
import tempfile
import weakref
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from reviewbot.sim.checks import protection_for
from reviewbot.sim.clock import Clock, system_clock
from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.faults import Faults
from reviewbot.sim.git import ZERO_SHA, FileChange, GitRepo, Person
from reviewbot.sim.records import Delivery, RequestRecord
from reviewbot.sim.state import (
    FORGES,
    RefMove,
    SimApp,
    SimComment,
    SimCommit,
    SimInlineComment,
    SimInstallation,
    SimInstallationToken,
    SimPull,
    SimRepo,
    SimReview,
    SimUser,
    WebhookTarget,
)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_forge(forge: str) -> str:
    if forge not in FORGES:
        raise ScenarioError(f"unknown forge {forge!r} (github or gitea)")
    return forge


# Whether a simulator made without saying ``git=`` backs its repositories with git. The
# suite sets it off (tests/conftest.py) except for tests marked ``git``: a git repository
# per simulated repository costs subprocesses most tests never look at.
GIT_BY_DEFAULT = True


class SimCore:
    """In-memory state for both forges, the request log, fault rules and webhook targets."""

    def __init__(
        self,
        clock: Clock | None = None,
        base_url: str = "http://127.0.0.1",
        sha_seed: str = "",
        git: bool | None = None,
    ) -> None:
        """``git`` (the default, :data:`GIT_BY_DEFAULT`) backs every repository with a bare
        git repository in a folder of the simulator's own (removed by :meth:`close`, or when
        the simulator is collected), served over smart HTTP at its ``clone_url``: commits,
        merges and mergeability are git's own, and a commit's SHA follows from its content
        and the clock. ``git=False`` keeps commits as named SHAs only.

        ``sha_seed`` makes this simulator's named SHAs (virtual commits, and every commit
        without git) its own (default: the same SHAs every run); a simulator whose PRs may
        meet a store that outlived an earlier simulator (``serve --sim``) passes a fresh
        one."""
        self.clock: Clock = clock or system_clock
        self.sha_seed = sha_seed
        self.base_url = base_url.rstrip("/")
        self.faults = Faults()
        self.requests: list[RequestRecord] = []
        self.deliveries: list[Delivery] = []
        self.webhooks: dict[str, WebhookTarget] = {}
        self.users: dict[str, dict[str, SimUser]] = {f: {} for f in FORGES}
        self.repos: dict[str, dict[str, SimRepo]] = {f: {} for f in FORGES}
        self.apps: dict[int, SimApp] = {}
        self.installations: dict[int, SimInstallation] = {}
        self._tokens: dict[str, dict[str, str]] = {f: {} for f in FORGES}  # hash -> login
        # GitHub fine-grained tokens: hash -> granted permissions (absent: a classic token)
        self._token_permissions: dict[str, dict[str, str]] = {}
        self._installation_tokens: dict[str, SimInstallationToken] = {}
        self._ids = itertools.count(1001)
        self._shas = itertools.count(1)
        self.version = "1.25.4"  # Gitea version answered by /version
        self.clock_offset = 0.0  # time skipped ahead of a clock that is not a manual one
        self.git_root: Path | None = None
        self._git: dict[int, GitRepo] = {}
        self.ref_moves: list[RefMove] = []  # every branch move, oldest first
        self._unsent: list[RefMove] = []  # moves whose push webhook is not sent yet
        self._tasks: set[asyncio.Task[None]] = set()
        self.push_listeners: list[Callable[[RefMove], None]] = []
        self.push_locks: dict[int, asyncio.Lock] = {}  # repository id -> its receive-pack
        self.git = GIT_BY_DEFAULT if git is None else git
        self._cleanup: weakref.finalize[Any, Any] | None = None

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        return float(self.clock()) + self.clock_offset

    def next_id(self) -> int:
        return next(self._ids)

    def new_sha(self, forge: str, repo: str) -> str:
        text = f"{self.sha_seed}{forge}:{repo}:{next(self._shas)}"
        return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324

    @property
    def github_api_url(self) -> str:
        return f"{self.base_url}/github"

    @property
    def gitea_url(self) -> str:
        return f"{self.base_url}/gitea"

    def close(self) -> None:
        """Remove the git repositories' folder (a simulator without git has none)."""
        if self._cleanup is not None:
            self._cleanup()

    def _git_folder(self) -> Path:
        """The folder of the git repositories, made with the first one (a simulator that
        never makes a repository leaves nothing behind)."""
        if self.git_root is None:
            root = Path(tempfile.mkdtemp(prefix="reviewbot-sim-git-"))
            self.git_root = root
            self._cleanup = weakref.finalize(self, shutil.rmtree, root, True)
        return self.git_root

    def clear_requests(self) -> None:
        self.requests.clear()

    def requests_for(self, forge: str, method: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.requests
            if r.forge == forge and (method is None or r.method == method.upper())
        ]

    # ------------------------------------------------------------------ users and tokens
    def add_user(
        self,
        forge: str,
        login: str,
        token: str | None = None,
        bot: bool = False,
        permissions: dict[str, str] | None = None,
    ) -> str:
        """Create (or fetch) a user and give it an API token; returns the token.

        ``permissions`` makes a GitHub token a fine-grained one with that permission set
        (``{"pull_requests": "write", ...}``); without it the token is a classic one, which
        acts with the user's role alone."""
        check_forge(forge)
        user = self.users[forge].get(login)
        if user is None:
            user = SimUser(
                id=self.next_id(),
                login=login,
                bot=bot,
                created_at=self.now(),
                email=f"{login}@example.invalid",
                full_name=login,
            )
            self.users[forge][login] = user
        if token is None:
            digest = hashlib.sha1(f"{forge}:{login}:{user.id}".encode()).hexdigest()  # noqa: S324
            token = f"ghp_{digest[:36]}" if forge == "github" else digest
        self._tokens[forge][token_hash(token)] = login
        if permissions is not None:
            self._token_permissions[token_hash(token)] = dict(permissions)
        return token

    def token_permissions(self, token: str) -> dict[str, str] | None:
        """A GitHub fine-grained token's permission set; ``None`` for a classic token."""
        return self._token_permissions.get(token_hash(token))

    def user(self, forge: str, login: str) -> SimUser:
        check_forge(forge)
        user = self.users[forge].get(login)
        if user is None:
            self.add_user(forge, login)
            user = self.users[forge][login]
        return user

    def login_for_token(self, forge: str, token: str) -> str | None:
        return self._tokens[forge].get(token_hash(token))

    def revoke_token(self, forge: str, token: str) -> None:
        self._tokens[forge].pop(token_hash(token), None)

    # ------------------------------------------------------------------ repositories
    def create_repo(
        self, forge: str, repo: str, default_branch: str = "main", private: bool = False
    ) -> SimRepo:
        check_forge(forge)
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ScenarioError(f"repository must be OWNER/NAME, got {repo!r}")
        if repo.lower() in self.repos[forge]:
            raise ScenarioError(f"{forge}:{repo} exists")
        self.user(forge, owner)
        now = self.now()
        state = SimRepo(
            id=self.next_id(),
            forge=forge,
            owner=owner,
            name=name,
            default_branch=default_branch,
            created_at=now,
            private=private,
        )
        if self.git:
            path = self._git_folder() / forge / f"{state.id}.git"
            self._git[state.id] = GitRepo.init(path, default_branch)
        root = self._commit(state, owner, "Initial commit", [], files={"README.md": f"# {name}\n"})
        state.branches[default_branch] = root.sha
        self._move_git_ref(state, f"refs/heads/{default_branch}", root.sha)
        state.permissions[owner] = "admin"
        # Keyed case-insensitively: both forges find a repository in any casing and
        # answer with its own spelling.
        self.repos[forge][repo.lower()] = state
        return state

    def rename_repo(self, forge: str, repo: str, new_full_name: str) -> SimRepo:
        """Rename or transfer a repository: a new OWNER/NAME, the same numeric id."""
        state = self.repo(forge, repo)
        owner, _, name = new_full_name.partition("/")
        if not owner or not name or "/" in name:
            raise ScenarioError(f"repository must be OWNER/NAME, got {new_full_name!r}")
        if new_full_name.lower() in self.repos[forge] and new_full_name.lower() != repo.lower():
            raise ScenarioError(f"{forge}:{new_full_name} exists")
        self.user(forge, owner)
        del self.repos[forge][repo.lower()]
        state.owner, state.name = owner, name
        self.repos[forge][new_full_name.lower()] = state
        return state

    def repo(self, forge: str, repo: str) -> SimRepo:
        check_forge(forge)
        state = self.repos[forge].get(repo.lower())
        if state is None:
            raise ScenarioError(f"no repository {forge}:{repo}")
        return state

    def find_repo(self, forge: str, owner: str, name: str) -> SimRepo | None:
        return self.repos[forge].get(f"{owner}/{name}".lower())

    def set_permission(self, forge: str, repo: str, login: str, permission: str) -> None:
        if permission not in ("admin", "write", "read", "none"):
            raise ScenarioError(f"unknown permission {permission!r}")
        self.user(forge, login)
        self.repo(forge, repo).permissions[login] = permission

    def permission(self, repo: SimRepo, login: str) -> str:
        """Every known user may write unless told otherwise (a team of collaborators)."""
        if login in repo.permissions:
            return repo.permissions[login]
        return "write" if login in self.users[repo.forge] else "none"

    def may_merge_gitea(self, repo: SimRepo, branch: str, user: str) -> bool:
        """Gitea's ``IsUserAllowedToMerge``: write access, and on a protected branch with a
        merge whitelist, a place on it (``services/pull/check.go``)."""
        if self.permission(repo, user) not in ("admin", "write"):
            return False
        protection = protection_for(repo, branch)
        whitelist = protection.merge_whitelist if protection is not None else None
        return whitelist is None or user in whitelist

    # ------------------------------------------------------------------ commits and refs
    def git_of(self, repo: SimRepo) -> GitRepo | None:
        return self._git.get(repo.id)

    def is_real(self, repo: SimRepo, sha: str | None) -> bool:
        """Whether ``sha`` is a commit in the repository's git store (not a virtual one)."""
        commit = repo.commits.get(sha or "")
        return commit is not None and commit.real

    def person(self, forge: str, login: str) -> Person:
        user = self.user(forge, login)
        return Person(user.full_name or login, user.email or f"{login}@example.invalid", self.now())

    def _commit(
        self,
        repo: SimRepo,
        author: str,
        message: str,
        parents: list[str],
        files: dict[str, str] | None = None,
        tree: str | None = None,
    ) -> SimCommit:
        """A new commit: a real one (``files`` over the first parent's tree, or ``tree``)
        when the repository has git and every parent is real, else a named SHA."""
        git = self.git_of(repo)
        if git is not None and all(self.is_real(repo, p) for p in parents):
            if tree is None:
                base = repo.commits[parents[0]].tree_sha if parents else None
                tree = git.write_tree(files or {}, base)
            who = self.person(repo.forge, author)
            sha = git.commit_tree(tree, parents, message, who, who)
            return self.record_git_commit(repo, sha)
        sha = self.new_sha(repo.forge, repo.full_name)
        commit = SimCommit(
            sha=sha,
            message=message,
            parents=parents,
            author=author,
            created_at=self.now(),
            tree_sha=hashlib.sha1(f"tree:{sha}".encode()).hexdigest(),  # noqa: S324
        )
        repo.commits[sha] = commit
        return commit

    def record_git_commit(self, repo: SimRepo, sha: str) -> SimCommit:
        """Know a commit of the git store (pushed, or made here) as a :class:`SimCommit`."""
        known = repo.commits.get(sha)
        if known is not None and known.real:
            return known
        git = self.git_of(repo)
        assert git is not None
        info = git.commit_info(sha)
        login = next(
            (u.login for u in self.users[repo.forge].values() if u.email == info.email),
            info.author,
        )
        commit = SimCommit(
            sha=info.sha,
            message=info.message.rstrip("\n"),
            parents=info.parents,
            author=login,
            created_at=info.when,
            tree_sha=info.tree,
            real=True,
            email=info.email,
        )
        repo.commits[info.sha] = commit
        return commit

    def _add_commit(
        self,
        repo: SimRepo,
        sha: str | None,
        author: str,
        message: str,
        parent: str,
        files: dict[str, str] | None = None,
    ) -> str:
        """A commit on top of ``parent``: a new one, or the one named ``sha`` (a commit of
        the git store when it is one, else a virtual commit known by that name only)."""
        if sha is None:
            return self._commit(repo, author, message, [parent], files=files).sha
        git = self.git_of(repo)
        if git is not None and sha not in repo.commits and git.has_commit(sha):
            return self.record_git_commit(repo, sha).sha
        if sha not in repo.commits:
            repo.commits[sha] = SimCommit(
                sha=sha,
                message=message,
                parents=[parent],
                author=author,
                created_at=self.now(),
                tree_sha=hashlib.sha1(f"tree:{sha}".encode()).hexdigest(),  # noqa: S324
            )
        return sha

    def _move_git_ref(self, repo: SimRepo, ref: str, sha: str | None) -> None:
        """Keep the git store's ref in step (a virtual commit leaves it where it was)."""
        git = self.git_of(repo)
        if git is None:
            return
        if sha is None:
            git.delete_ref(ref)
        elif self.is_real(repo, sha):
            git.update_ref(ref, sha)

    def set_branch(
        self,
        repo: SimRepo,
        branch: str,
        sha: str | None,
        pusher: str,
        *,
        forced: bool = False,
        follow: bool = True,
        announce: bool = True,
    ) -> None:
        """Create, move (``sha``) or delete (``None``) a branch: in the model, in git, in
        the pull requests whose head it is, and announced as a push."""
        before = repo.branches.get(branch)
        if sha is None:
            repo.branches.pop(branch, None)
        else:
            repo.branches[branch] = sha
        self._move_git_ref(repo, f"refs/heads/{branch}", sha)
        if sha is not None and follow and self.git_of(repo) is not None:
            self._follow_head(repo, branch, sha)
        if sha is not None and repo.forge == "github" and self.git_of(repo) is not None:
            self._merged_by_push(repo, branch, sha, pusher)
        self.note_ref_move(
            repo, f"refs/heads/{branch}", before, sha, pusher, forced=forced, announce=announce
        )

    def _merged_by_push(self, repo: SimRepo, branch: str, sha: str, pusher: str) -> None:
        """GitHub marks an open pull request merged when its head commit reaches its base
        branch by any push ("If you push the pull request's commits to the base branch
        yourself, GitHub marks the pull request merged": GitHub docs, "About pull request
        merges"); the commit the base moved to is its merge commit."""
        for pull in repo.pulls.values():
            if pull.base != branch or not pull.open or pull.merged:
                continue
            if not (self.is_real(repo, pull.head_sha) and self.is_real(repo, sha)):
                continue
            if self.is_ancestor(repo, pull.head_sha, sha):
                self.mark_merged(pull, pusher, sha)

    def mark_merged(self, pull: SimPull, user: str, merge_sha: str) -> None:
        """The pull request is merged by ``user`` with ``merge_sha`` (and so closed)."""
        now = self.now()
        pull.merged = True
        pull.merged_at = now
        pull.merged_by = user
        pull.merge_commit_sha = merge_sha
        pull.state = "closed"
        pull.closed_at = now
        pull.updated_at = now
        pull.auto_merge_scheduled = None

    def _follow_head(self, repo: SimRepo, branch: str, sha: str) -> None:
        """Open pull requests' heads follow their branch."""
        for pull in repo.pulls.values():
            if pull.head_ref == branch and pull.open and pull.head_sha != sha:
                self.follow_pull(repo, pull, sha)

    def follow_pull(self, repo: SimRepo, pull: SimPull, sha: str) -> None:
        """Make ``sha`` the pull request's head (GitHub's and Gitea's ``refs/pull/N/head``
        too); its commits are those the head adds to the base."""
        pull.head_sha = sha
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, sha) and self.is_real(repo, pull.base_sha):
            base = repo.branches.get(pull.base, pull.base_sha)
            new = git.commits_between(base, sha) if self.is_real(repo, base) else [sha]
            for c in new:
                self.record_git_commit(repo, c)
            pull.commits = new or [sha]
        elif sha not in pull.commits:
            pull.commits.append(sha)
        pull.updated_at = self.now()
        self._move_git_ref(repo, f"refs/pull/{pull.number}/head", sha)

    def note_ref_move(
        self,
        repo: SimRepo,
        ref: str,
        before: str | None,
        after: str | None,
        pusher: str,
        *,
        forced: bool = False,
        announce: bool = True,
    ) -> None:
        """Tell the listeners (CI) of a branch move; in a git-backed repository also record
        it and, with ``announce``, send its ``push`` webhook (as both forges do for any
        branch update, pushes and merges alike). Scenario calls do not announce: as ever,
        a scenario sends only the deliveries it asks for."""
        if before == after:
            return
        move = RefMove(
            forge=repo.forge,
            repo=repo.full_name,
            ref=ref,
            before=before or ZERO_SHA,
            after=after or ZERO_SHA,
            pusher=pusher,
            forced=forced,
        )
        for listener in list(self.push_listeners):
            listener(move)
        if self.git_of(repo) is None:
            return  # without git, branch moves stay silent as they always were
        self.ref_moves.append(move)
        if announce and repo.forge in self.webhooks:
            self._unsent.append(move)
            self.spawn(self.send_pushes())

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run a coroutine in the background when there is a running loop (the scenario API
        is synchronous; its webhooks are not)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work.close()
            return
        task = loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send_pushes(self) -> None:
        from reviewbot.sim.webhooks import deliver_push  # the webhooks module builds on this one

        while self._unsent:
            move = self._unsent.pop(0)
            await deliver_push(self, move)

    async def settle(self) -> None:
        """Wait until every background webhook delivery has been sent."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def resolve(self, repo: SimRepo, ref: str) -> str | None:
        """The commit a branch name, a tag or a commit SHA names (``None``: nothing)."""
        if ref in repo.branches:
            return repo.branches[ref]
        if ref in repo.commits:
            return ref
        git = self.git_of(repo)
        if git is None:
            return None
        # Only names git would take as a ref or a full SHA (never an option, never a range).
        plain = (
            not ref.startswith("-") and ".." not in ref and not any(c in ref for c in " ~^:?*[\\")
        )
        sha = git.ref(ref) if plain else None
        return self.record_git_commit(repo, sha).sha if sha else None

    def _ancestors(self, repo: SimRepo, sha: str) -> list[str]:
        """``sha`` and every commit before it that the model knows, nearest first."""
        seen: list[str] = []
        todo = [sha]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.append(current)
            commit = repo.commits.get(current)
            if commit is not None:
                todo.extend(commit.parents)
        return seen

    def is_ancestor(self, repo: SimRepo, ancestor: str, descendant: str) -> bool:
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, ancestor) and self.is_real(repo, descendant):
            return git.is_ancestor(ancestor, descendant)
        return ancestor in self._ancestors(repo, descendant)

    def merge_base(self, repo: SimRepo, a: str, b: str) -> str | None:
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, a) and self.is_real(repo, b):
            found = git.merge_base(a, b)
            return self.record_git_commit(repo, found).sha if found else None
        mine = self._ancestors(repo, b)
        return next((c for c in self._ancestors(repo, a) if c in mine), None)

    def commits_between(self, repo: SimRepo, exclude: str, include: str) -> list[str]:
        """Commits reachable from ``include`` and not from ``exclude``, oldest first."""
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, exclude) and self.is_real(repo, include):
            shas = git.commits_between(exclude, include)
            for sha in shas:
                self.record_git_commit(repo, sha)
            return shas
        excluded = set(self._ancestors(repo, exclude))
        return [c for c in reversed(self._ancestors(repo, include)) if c not in excluded]

    def changed_paths(self, repo: SimRepo, a: str, b: str) -> list[tuple[str, str]]:
        """``(status letter, path)`` of each file that differs (none for virtual commits)."""
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, a) and self.is_real(repo, b):
            return git.file_statuses(a, b)
        return []

    def file_changes(self, repo: SimRepo, a: str, b: str) -> list[FileChange]:
        """Each file that differs, with its blob and line counts (none for virtual commits)."""
        git = self.git_of(repo)
        if git is not None and self.is_real(repo, a) and self.is_real(repo, b):
            return git.file_changes(a, b)
        return []

    def pull_changes(self, repo: SimRepo, pull: SimPull) -> list[FileChange] | None:
        """What the pull request changes, from git: its head against the merge base with
        the base branch (the base it was opened on, once merged); ``None`` for virtual
        commits."""
        base = pull.base_sha if pull.merged else repo.branches.get(pull.base, pull.base_sha)
        if not (self.is_real(repo, base) and self.is_real(repo, pull.head_sha)):
            return None
        merge_base = self.merge_base(repo, base, pull.head_sha)
        if merge_base is None:
            return None
        return self.file_changes(repo, merge_base, pull.head_sha)

    def pull_mergeable(self, repo: SimRepo, pull: SimPull) -> bool:
        """Whether the head merges into the base without conflict: git's answer
        (``merge-tree --write-tree``) unless a scenario set it, or when a side is virtual."""
        if pull.mergeable_set is not None:
            return pull.mergeable_set
        git = self.git_of(repo)
        base = repo.branches.get(pull.base, pull.base_sha)
        if git is None or not (self.is_real(repo, base) and self.is_real(repo, pull.head_sha)):
            return pull.mergeable
        return git.merge_tree(base, pull.head_sha) is not None

    def pull(self, forge: str, repo: str, number: int) -> SimPull:
        pull = self.repo(forge, repo).pulls.get(number)
        if pull is None:
            raise ScenarioError(f"no pull request {forge}:{repo}#{number}")
        return pull

    def _store_review(
        self,
        pull: SimPull,
        user: str,
        state: str,
        body: str,
        commit_id: str,
        comments: list[SimInlineComment],
    ) -> SimReview:
        now = self.now()
        review = SimReview(
            id=self.next_id(),
            user=user,
            state=state,
            body=body,
            commit_id=commit_id,
            submitted_at=None if state == "PENDING" else now,
            updated_at=now,
            comments=comments,
        )
        pull.reviews.append(review)
        return review

    def find_comment(self, repo: SimRepo, comment_id: int) -> SimComment | None:
        for pull in repo.pulls.values():
            for comment in pull.comments:
                if comment.id == comment_id:
                    return comment
        return None
