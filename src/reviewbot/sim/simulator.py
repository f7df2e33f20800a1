"""The simulator's state and scenario API (synchronous, deterministic); webhooks are async."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from reviewbot.sim.checks import (
    gitea_checks_pass,
    github_blocking_check,
    protection_for,
)
from reviewbot.sim.clock import Clock, system_clock
from reviewbot.sim.errors import ApiError, ScenarioError
from reviewbot.sim.faults import Faults
from reviewbot.sim.records import RequestRecord
from reviewbot.sim.state import (
    FORGES,
    SimApp,
    SimCheckRun,
    SimCheckSuite,
    SimComment,
    SimCommit,
    SimInlineComment,
    SimInstallation,
    SimInstallationToken,
    SimProtection,
    SimPull,
    SimRepo,
    SimReview,
    SimStatus,
    SimUser,
    WebhookTarget,
)

if TYPE_CHECKING:
    from reviewbot.sim.webhooks import Delivery

INSTALLATION_TOKEN_TTL = 3600.0
# The app that owns check runs created without naming one (GitHub Actions' real id).
DEFAULT_CHECKS_APP_ID = 15368

_GITHUB_REVIEW_STATES = {
    "APPROVE": "APPROVED",
    "APPROVED": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "CHANGES_REQUESTED": "CHANGES_REQUESTED",
    "COMMENT": "COMMENTED",
    "COMMENTED": "COMMENTED",
}
_GITEA_REVIEW_STATES = {
    "APPROVE": "APPROVED",
    "APPROVED": "APPROVED",
    "REQUEST_CHANGES": "REQUEST_CHANGES",
    "CHANGES_REQUESTED": "REQUEST_CHANGES",
    "COMMENT": "COMMENT",
    "COMMENTED": "COMMENT",
}
GITEA_KNOWN_EVENTS = ("APPROVED", "REQUEST_CHANGES", "COMMENT", "PENDING")


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _check_forge(forge: str) -> str:
    if forge not in FORGES:
        raise ScenarioError(f"unknown forge {forge!r} (github or gitea)")
    return forge


class Simulator:
    """In-memory state for both forges, the request log, fault rules and webhook targets."""

    def __init__(self, clock: Clock | None = None, base_url: str = "http://127.0.0.1") -> None:
        self.clock: Clock = clock or system_clock
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
        self._installation_tokens: dict[str, SimInstallationToken] = {}
        self._ids = itertools.count(1001)
        self._shas = itertools.count(1)
        self.version = "1.25.4"  # Gitea version answered by /version

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        return float(self.clock())

    def next_id(self) -> int:
        return next(self._ids)

    def new_sha(self, forge: str, repo: str) -> str:
        return hashlib.sha1(f"{forge}:{repo}:{next(self._shas)}".encode()).hexdigest()  # noqa: S324

    @property
    def github_api_url(self) -> str:
        return f"{self.base_url}/github"

    @property
    def gitea_url(self) -> str:
        return f"{self.base_url}/gitea"

    def clear_requests(self) -> None:
        self.requests.clear()

    def requests_for(self, forge: str, method: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.requests
            if r.forge == forge and (method is None or r.method == method.upper())
        ]

    # ------------------------------------------------------------------ users and tokens
    def add_user(self, forge: str, login: str, token: str | None = None, bot: bool = False) -> str:
        """Create (or fetch) a user and give it an API token; returns the token."""
        _check_forge(forge)
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
        self._tokens[forge][_hash(token)] = login
        return token

    def user(self, forge: str, login: str) -> SimUser:
        _check_forge(forge)
        user = self.users[forge].get(login)
        if user is None:
            self.add_user(forge, login)
            user = self.users[forge][login]
        return user

    def login_for_token(self, forge: str, token: str) -> str | None:
        return self._tokens[forge].get(_hash(token))

    def revoke_token(self, forge: str, token: str) -> None:
        self._tokens[forge].pop(_hash(token), None)

    # ------------------------------------------------------------------ repositories
    def create_repo(
        self, forge: str, repo: str, default_branch: str = "main", private: bool = False
    ) -> SimRepo:
        _check_forge(forge)
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ScenarioError(f"repository must be OWNER/NAME, got {repo!r}")
        if repo in self.repos[forge]:
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
        root = self._commit(state, owner, "Initial commit", [])
        state.branches[default_branch] = root.sha
        state.permissions[owner] = "admin"
        self.repos[forge][repo] = state
        return state

    def repo(self, forge: str, repo: str) -> SimRepo:
        _check_forge(forge)
        state = self.repos[forge].get(repo)
        if state is None:
            raise ScenarioError(f"no repository {forge}:{repo}")
        return state

    def find_repo(self, forge: str, owner: str, name: str) -> SimRepo | None:
        return self.repos[forge].get(f"{owner}/{name}")

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

    def _commit(self, repo: SimRepo, author: str, message: str, parents: list[str]) -> SimCommit:
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

    def _add_commit(
        self, repo: SimRepo, sha: str | None, author: str, message: str, parent: str
    ) -> str:
        if sha is None:
            return self._commit(repo, author, message, [parent]).sha
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

    # ------------------------------------------------------------------ pull requests
    def open_pr(
        self,
        forge: str,
        repo: str,
        author: str,
        base: str = "main",
        head_ref: str = "feature",
        title: str = "Change",
        body: str = "",
        draft: bool = False,
        labels: Sequence[str] = (),
        head_sha: str | None = None,
    ) -> SimPull:
        state = self.repo(forge, repo)
        self.user(forge, author)
        if base not in state.branches:
            raise ScenarioError(f"no branch {base!r} in {forge}:{repo}")
        base_sha = state.branches[base]
        sha = self._add_commit(state, head_sha, author, title, base_sha)
        state.branches[head_ref] = sha
        now = self.now()
        pull = SimPull(
            number=state.next_number,
            id=self.next_id(),
            repo=repo,
            forge=forge,
            title=title,
            body=body,
            author=author,
            base=base,
            head_ref=head_ref,
            head_sha=sha,
            base_sha=base_sha,
            created_at=now,
            updated_at=now,
            draft=draft,
            labels=list(labels),
            commits=[sha],
        )
        state.next_number += 1
        state.pulls[pull.number] = pull
        return pull

    def pull(self, forge: str, repo: str, number: int) -> SimPull:
        pull = self.repo(forge, repo).pulls.get(number)
        if pull is None:
            raise ScenarioError(f"no pull request {forge}:{repo}#{number}")
        return pull

    def push(
        self, forge: str, repo: str, number: int, sha: str | None = None, message: str = "Update"
    ) -> str:
        """A new head commit on the PR's branch; returns its SHA."""
        state = self.repo(forge, repo)
        pull = self.pull(forge, repo, number)
        new = self._add_commit(state, sha, pull.author, message, pull.head_sha)
        pull.head_sha = new
        pull.commits.append(new)
        pull.updated_at = self.now()
        state.branches[pull.head_ref] = new
        return new

    def update_pr(
        self,
        forge: str,
        repo: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        draft: bool | None = None,
        labels: Sequence[str] | None = None,
        state: str | None = None,
        base: str | None = None,
    ) -> SimPull:
        pull = self.pull(forge, repo, number)
        if title is not None:
            pull.title = title
        if body is not None:
            pull.body = body
        if draft is not None:
            pull.draft = draft
        if labels is not None:
            pull.labels = list(labels)
        if base is not None:
            pull.base = base
        if state is not None:
            if state not in ("open", "closed"):
                raise ScenarioError("state must be open or closed")
            pull.state = state
            pull.closed_at = self.now() if state == "closed" else None
        pull.updated_at = self.now()
        return pull

    def set_mergeable(self, forge: str, repo: str, number: int, mergeable: bool) -> None:
        self.pull(forge, repo, number).mergeable = mergeable

    # ------------------------------------------------------------------ CI results
    def set_status(
        self,
        forge: str,
        repo: str,
        sha: str,
        context: str,
        state: str,
        target_url: str | None = None,
        description: str | None = None,
        creator: str | None = None,
    ) -> SimStatus:
        allowed = (
            ("error", "failure", "pending", "success")
            if forge == "github"
            else ("pending", "success", "error", "failure", "warning", "skipped")
        )
        if state not in allowed:
            raise ScenarioError(f"{forge} status state must be one of {', '.join(allowed)}")
        repository = self.repo(forge, repo)
        who = creator or repository.owner
        self.user(forge, who)
        now = self.now()
        status = SimStatus(
            id=self.next_id(),
            sha=sha,
            context=context,
            state=state,
            target_url=target_url,
            description=description,
            creator=who,
            created_at=now,
            updated_at=now,
        )
        repository.statuses.append(status)
        self._run_scheduled_merges(repository)
        return status

    def set_check_run(
        self,
        repo: str,
        sha: str,
        name: str,
        status: str = "completed",
        conclusion: str | None = "success",
        details_url: str | None = None,
        app_id: int | None = None,
    ) -> SimCheckRun:
        """GitHub only: create the check run, or update the app's run of that name at ``sha``."""
        if status not in ("queued", "in_progress", "completed"):
            raise ScenarioError("status must be queued, in_progress or completed")
        if status == "completed" and conclusion is None:
            raise ScenarioError("a completed check run needs a conclusion")
        if status != "completed":
            conclusion = None
        repository = self.repo("github", repo)
        app = app_id or DEFAULT_CHECKS_APP_ID
        now = self.now()
        suite = next((s for s in repository.check_suites if s.sha == sha and s.app_id == app), None)
        if suite is None:
            branch = next((b for b, head in repository.branches.items() if head == sha), None)
            suite = SimCheckSuite(
                id=self.next_id(),
                sha=sha,
                app_id=app,
                head_branch=branch,
                created_at=now,
                updated_at=now,
            )
            repository.check_suites.append(suite)
        suite.updated_at = now
        for run in repository.check_runs:
            if run.sha == sha and run.name == name and run.app_id == app:
                run.status = status
                run.conclusion = conclusion
                run.details_url = details_url or run.details_url
                run.completed_at = now if status == "completed" else None
                return run
        run = SimCheckRun(
            id=self.next_id(),
            sha=sha,
            name=name,
            status=status,
            conclusion=conclusion,
            details_url=details_url,
            app_id=app,
            suite_id=suite.id,
            started_at=now,
            completed_at=now if status == "completed" else None,
        )
        repository.check_runs.append(run)
        return run

    def require_checks(
        self,
        forge: str,
        repo: str,
        branch: str,
        contexts: Sequence[str],
        *,
        strict: bool = False,
        enable_status_check: bool = True,
        app_id: int | None = None,
        required_approvals: int = 0,
    ) -> SimProtection:
        """Branch protection with required checks (GitHub names; Gitea glob patterns)."""
        repository = self.repo(forge, repo)
        now = self.now()
        protection = SimProtection(
            branch=branch,
            contexts=list(contexts),
            checks=[(c, app_id) for c in contexts],
            strict=strict,
            enable_status_check=enable_status_check,
            required_approvals=required_approvals,
            created_at=now,
            updated_at=now,
        )
        repository.protections[branch] = protection
        return protection

    def remove_protection(self, forge: str, repo: str, branch: str) -> None:
        self.repo(forge, repo).protections.pop(branch, None)

    # ------------------------------------------------------------------ reviews and comments
    def submit_review(
        self,
        forge: str,
        repo: str,
        number: int,
        reviewer: str,
        state: str,
        commit_sha: str | None = None,
        body: str = "",
    ) -> SimReview:
        """A human's submitted review (either forge's spelling of the state is accepted)."""
        table = _GITHUB_REVIEW_STATES if forge == "github" else _GITEA_REVIEW_STATES
        stored = table.get(state.upper())
        if stored is None:
            raise ScenarioError(f"unknown review state {state!r}")
        pull = self.pull(forge, repo, number)
        self.user(forge, reviewer)
        return self._store_review(pull, reviewer, stored, body, commit_sha or pull.head_sha, [])

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

    def add_comment(self, forge: str, repo: str, number: int, user: str, body: str) -> SimComment:
        pull = self.pull(forge, repo, number)
        self.user(forge, user)
        now = self.now()
        comment = SimComment(
            id=self.next_id(), number=number, user=user, body=body, created_at=now, updated_at=now
        )
        pull.comments.append(comment)
        return comment

    def find_comment(self, repo: SimRepo, comment_id: int) -> SimComment | None:
        for pull in repo.pulls.values():
            for comment in pull.comments:
                if comment.id == comment_id:
                    return comment
        return None

    def api_create_review(
        self,
        repo: SimRepo,
        number: int,
        user: str,
        *,
        event: str | None,
        body: str,
        commit_id: str | None,
        comments: list[dict[str, Any]],
    ) -> SimReview:
        """A review created through the API, with each forge's rules for ``event``."""
        pull = self._api_pull(repo, number)
        commit = commit_id or pull.head_sha
        if commit not in repo.commits:
            raise ApiError(422, "Unprocessable Entity", errors=["Commit not found"])
        inline = [
            SimInlineComment(
                id=self.next_id(),
                path=str(c.get("path", "")),
                body=str(c.get("body", "")),
                line=c.get("line", c.get("new_position")),
                position=c.get("position"),
                side=c.get("side"),
            )
            for c in comments
        ]
        if repo.forge == "github":
            state = "PENDING" if not event else _GITHUB_REVIEW_STATES.get(event)
            if state is None or (event and event not in ("APPROVE", "REQUEST_CHANGES", "COMMENT")):
                raise ApiError(422, "Unprocessable Entity", errors=[f"Invalid event {event!r}"])
            if user == pull.author and state in ("APPROVED", "CHANGES_REQUESTED"):
                verb = "approve" if state == "APPROVED" else "request changes on"
                raise ApiError(
                    422, "Unprocessable Entity", errors=[f"Can not {verb} your own pull request"]
                )
            if state in ("CHANGES_REQUESTED", "COMMENTED") and not body and not inline:
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    errors=[f"Review body is required for {event}"],
                )
            if state == "PENDING":
                self._drop_pending(pull, user)
            return self._store_review(pull, user, state, body, commit, inline)
        # Gitea: any event it does not know, GitHub's APPROVE included, is a PENDING review.
        known = event or "PENDING"
        state = known if known in GITEA_KNOWN_EVENTS else "PENDING"
        needs_body = known in ("REQUEST_CHANGES", "COMMENT") or known not in GITEA_KNOWN_EVENTS
        if needs_body and not body and not inline:
            raise ApiError(422, f"review event {known} requires a body or comments")
        if user == pull.author and state in ("APPROVED", "REQUEST_CHANGES"):
            what = "approve" if state == "APPROVED" else "reject"
            raise ApiError(422, f"{what} your own pull is not allowed")
        return self._store_review(pull, user, state, body, commit, inline)

    def _drop_pending(self, pull: SimPull, user: str) -> None:
        for review in pull.reviews:
            if review.user == user and review.state == "PENDING":
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    errors=["User can only have one pending review per pull request"],
                )

    def api_submit_pending(
        self, repo: SimRepo, number: int, review_id: int, user: str, event: str, body: str
    ) -> SimReview:
        pull = self._api_pull(repo, number)
        review = self.api_review(pull, review_id)
        if review.state != "PENDING" or review.user != user:
            raise ApiError(422, "Unprocessable Entity", errors=["Review is not pending"])
        table = _GITHUB_REVIEW_STATES if repo.forge == "github" else _GITEA_REVIEW_STATES
        allowed = (
            ("APPROVE", "REQUEST_CHANGES", "COMMENT")
            if repo.forge == "github"
            else ("APPROVED", "REQUEST_CHANGES", "COMMENT")
        )
        if event not in allowed:
            raise ApiError(422, "Unprocessable Entity", errors=[f"Invalid event {event!r}"])
        review.state = table[event]
        review.body = body or review.body
        review.submitted_at = self.now()
        review.updated_at = self.now()
        if repo.forge == "gitea":
            review.commit_id = pull.head_sha  # Gitea records the current head on submit
        return review

    def api_dismiss(self, repo: SimRepo, number: int, review_id: int) -> SimReview:
        pull = self._api_pull(repo, number)
        review = self.api_review(pull, review_id)
        if repo.forge == "github":
            if review.state not in ("APPROVED", "CHANGES_REQUESTED"):
                raise ApiError(
                    422, "Unprocessable Entity", errors=["Can not dismiss a commented review"]
                )
            review.state = "DISMISSED"
        else:
            if review.state not in ("APPROVED", "REQUEST_CHANGES"):
                raise ApiError(
                    422,
                    "not need to dismiss this review because it's type is not Approve or change request",  # noqa: E501
                )
            review.dismissed = True
        review.updated_at = self.now()
        return review

    def api_review(self, pull: SimPull, review_id: int) -> SimReview:
        for review in pull.reviews:
            if review.id == review_id:
                return review
        raise ApiError(404, "Not Found")

    def _api_pull(self, repo: SimRepo, number: int) -> SimPull:
        pull = repo.pulls.get(number)
        if pull is None:
            raise ApiError(404, "Not Found")
        return pull

    # ------------------------------------------------------------------ merges
    def api_merge_github(
        self, repo: SimRepo, number: int, user: str, *, sha: str | None, method: str
    ) -> SimPull:
        pull = self._api_pull(repo, number)
        if self.permission(repo, user) not in ("admin", "write"):
            raise ApiError(403, "Resource not accessible by integration")
        if not pull.open or pull.merged:
            raise ApiError(405, "Pull Request is not mergeable")
        if sha is not None and sha != pull.head_sha:
            raise ApiError(409, "Head branch was modified. Review and try the merge again.")
        if not pull.mergeable or pull.draft:
            raise ApiError(405, "Pull Request is not mergeable")
        protection = protection_for(repo, pull.base)
        if protection is not None:
            blocking = github_blocking_check(repo, protection, pull.head_sha)
            if blocking is not None:
                raise ApiError(405, blocking)
            self._check_approvals(repo, pull, protection)
        self._do_merge(repo, pull, user, method)
        return pull

    def api_merge_gitea(
        self,
        repo: SimRepo,
        number: int,
        user: str,
        *,
        do: str,
        head_commit_id: str,
        when_checks_succeed: bool,
    ) -> int:
        """Returns the success status: 200 merged, 201 scheduled (auto-merge)."""
        pull = self._api_pull(repo, number)
        if pull.merged:
            raise ApiError(405, "The PR is already merged")
        if not pull.open:
            raise ApiError(405, "The PR is closed")
        if self.permission(repo, user) not in ("admin", "write"):
            raise ApiError(405, "User not allowed to merge PR")
        # Gitea compares head_commit_id only when it is non-empty.
        if head_commit_id and head_commit_id != pull.head_sha:
            raise ApiError(409, "head out of date")
        protection = protection_for(repo, pull.base)
        checks_ok = protection is None or gitea_checks_pass(repo, protection, pull.head_sha)
        if when_checks_succeed and not checks_ok:
            pull.auto_merge_scheduled = do
            return 201
        if pull.draft:
            raise ApiError(405, "The PR is a work in progress")
        if not pull.mergeable:
            raise ApiError(405, "Please try again later")
        if not checks_ok:
            raise ApiError(405, "Not all required status checks successful")
        if protection is not None:
            self._check_approvals(repo, pull, protection)
        self._do_merge(repo, pull, user, do)
        return 200

    def _check_approvals(self, repo: SimRepo, pull: SimPull, protection: SimProtection) -> None:
        if protection.required_approvals <= 0:
            return
        latest: dict[str, SimReview] = {}
        for review in pull.reviews:
            if review.state != "PENDING":
                latest[review.user] = review
        approvals = sum(
            1
            for r in latest.values()
            if r.state == "APPROVED" and not r.dismissed and r.user != pull.author
        )
        if approvals < protection.required_approvals:
            if repo.forge == "github":
                raise ApiError(
                    405,
                    f"At least {protection.required_approvals} approving review is required "
                    "by reviewers with write access.",
                )
            raise ApiError(405, "Does not have enough approvals")

    def _do_merge(self, repo: SimRepo, pull: SimPull, user: str, method: str) -> None:
        base_head = repo.branches.get(pull.base, pull.base_sha)
        if method == "fast-forward-only":
            merge_sha = pull.head_sha
        else:
            parents = (
                [base_head, pull.head_sha] if method in ("merge", "rebase-merge") else [base_head]
            )
            merge_sha = self._commit(repo, user, f"Merge pull request #{pull.number}", parents).sha
        now = self.now()
        repo.branches[pull.base] = merge_sha
        pull.merged = True
        pull.merged_at = now
        pull.merged_by = user
        pull.merge_commit_sha = merge_sha
        pull.state = "closed"
        pull.closed_at = now
        pull.updated_at = now
        pull.auto_merge_scheduled = None

    def _run_scheduled_merges(self, repo: SimRepo) -> None:
        """Gitea's auto-merge: merges at whatever the head is once checks pass."""
        for pull in repo.pulls.values():
            if pull.auto_merge_scheduled is None or not pull.open:
                continue
            protection = protection_for(repo, pull.base)
            if protection is None or gitea_checks_pass(repo, protection, pull.head_sha):
                self._do_merge(repo, pull, pull.author, pull.auto_merge_scheduled)

    # ------------------------------------------------------------------ GitHub Apps
    def create_github_app(
        self, bot_login: str = "reviewbot[bot]", name: str | None = None, owner: str = "acme"
    ) -> tuple[int, str]:
        """Register an app and its bot user; returns ``(app_id, private_key_pem)``."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        public_pem = (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        slug = bot_login.removesuffix("[bot]")
        self.user("github", owner)
        self.add_user("github", bot_login, token=f"unused-{slug}-{self.next_id()}", bot=True)
        app = SimApp(
            id=self.next_id(),
            slug=slug,
            name=name or slug,
            owner=owner,
            bot_login=bot_login,
            public_key_pem=public_pem,
            created_at=self.now(),
        )
        self.apps[app.id] = app
        return app.id, private_pem

    def install_app(self, app_id: int, repo: str) -> int:
        """Install the app on ``repo`` (one installation per account); returns its id."""
        if app_id not in self.apps:
            raise ScenarioError(f"no app {app_id}")
        state = self.repo("github", repo)
        for installation in self.installations.values():
            if installation.app_id == app_id and installation.account == state.owner:
                installation.repos.add(repo)
                return installation.id
        installation = SimInstallation(
            id=self.next_id(),
            app_id=app_id,
            account=state.owner,
            repos={repo},
            created_at=self.now(),
        )
        self.installations[installation.id] = installation
        return installation.id

    def issue_installation_token(self, installation: SimInstallation) -> tuple[str, float]:
        token = (
            "ghs_" + hashlib.sha256(f"{installation.id}:{self.next_id()}".encode()).hexdigest()[:36]
        )
        expires_at = self.now() + INSTALLATION_TOKEN_TTL
        self._installation_tokens[_hash(token)] = SimInstallationToken(
            token_hash=_hash(token), installation_id=installation.id, expires_at=expires_at
        )
        return token, expires_at

    def installation_for_token(self, token: str) -> SimInstallationToken | None:
        return self._installation_tokens.get(_hash(token))

    # ------------------------------------------------------------------ webhooks
    def set_webhook(self, forge: str, url: str, secret: str | None = None) -> None:
        _check_forge(forge)
        self.webhooks[forge] = WebhookTarget(url=url, secret=secret)

    async def deliver_pull_request(
        self, forge: str, repo: str, number: int, action: str = "opened", **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_pull_request(self, forge, repo, number, action, **kw)

    async def deliver_pull_request_review(
        self, forge: str, repo: str, number: int, review_id: int | None = None, **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_pull_request_review(
            self, forge, repo, number, review_id, **kw
        )

    async def deliver_status(
        self, forge: str, repo: str, status_id: int | None = None, **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_status(self, forge, repo, status_id, **kw)

    async def deliver_check_run(
        self, repo: str, check_run_id: int | None = None, action: str = "completed", **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_check_run(self, repo, check_run_id, action, **kw)

    async def deliver_check_suite(
        self, repo: str, sha: str, action: str = "completed", **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_check_suite(self, repo, sha, action, **kw)

    async def deliver_issue_comment(
        self, forge: str, repo: str, number: int, comment_id: int | None = None, **kw: Any
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_issue_comment(self, forge, repo, number, comment_id, **kw)

    async def deliver_raw(
        self,
        forge: str,
        event: str,
        payload: dict[str, Any] | bytes,
        headers_override: dict[str, str] | None = None,
        event_type: str | None = None,
    ) -> Delivery:
        from reviewbot.sim import webhooks

        return await webhooks.deliver_raw(
            self, forge, event, payload, headers_override=headers_override, event_type=event_type
        )

    async def redeliver(self, delivery: Delivery) -> Delivery:
        """GitHub redelivers with the same delivery id; a Gitea manual replay gets a new one."""
        from reviewbot.sim import webhooks

        return await webhooks.redeliver(self, delivery)
