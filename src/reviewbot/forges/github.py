"""GitHub adapter: gidgethub on httpx, with token or GitHub App authentication.

gidgethub builds the requests (URL templates, headers, JSON) and decodes the answers;
every exchange goes through :class:`~reviewbot.forges.http.ForgeHttp`, which owns
retries, rate limits, ETags, accounting and the mapping of statuses to typed errors.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import gidgethub.httpx
import httpx

from reviewbot.core.access import AccessFacts
from reviewbot.core.after_merge import Closing
from reviewbot.core.clock import Clock
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    Comment,
    InlineComment,
    MergeResult,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewEvent,
    ReviewState,
    RulesGap,
)
from reviewbot.forges.app_auth import GitHubAppAuth
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    HeadMoved,
    MergeConflict,
    NotFastForward,
    NotFound,
    NotMergeable,
    PermissionDenied,
    RefExists,
    permission_named,
)
from reviewbot.forges.github_graphql import (
    PULL_READ,
    Gathered,
    GraphQLUnusable,
    Part,
    gather,
    variables,
)
from reviewbot.forges.http import (
    ErrorMap,
    ForgeHttp,
    ForgeWatcher,
    HttpAdapter,
    OnWait,
    RetryPolicy,
    Sleep,
    decode_json,
)
from reviewbot.forges.normalize import (
    as_dict,
    as_list,
    comment_of,
    commit_status,
    map_all,
    marked_comment,
    pull_snapshot,
    response_shape,
    review_of,
    split_repo,
)
from reviewbot.forges.refs import Comparison, MergeCommit, RefOps

log = logging.getLogger(__name__)

USER_AGENT = "reviewbot"
ACCEPT = "application/vnd.github+json"
PER_PAGE = 100
MAX_ITEMS = 1000  # a bound on every listing

REVIEW_EVENTS: dict[ReviewEvent, str] = {
    ReviewEvent.APPROVE: "APPROVE",
    ReviewEvent.REQUEST_CHANGES: "REQUEST_CHANGES",
    ReviewEvent.COMMENT: "COMMENT",
}
REVIEW_STATES: dict[str, ReviewState] = {
    "APPROVED": ReviewState.APPROVED,
    "CHANGES_REQUESTED": ReviewState.CHANGES_REQUESTED,
    "COMMENTED": ReviewState.COMMENTED,
    "DISMISSED": ReviewState.DISMISSED,
    "PENDING": ReviewState.PENDING,
}
CHECK_RUN_CONCLUSIONS: dict[str, CheckState] = {
    "success": CheckState.SUCCESS,
    "failure": CheckState.FAILURE,
    "neutral": CheckState.NEUTRAL,
    "cancelled": CheckState.CANCELLED,
    "skipped": CheckState.SKIPPED,
    "timed_out": CheckState.TIMED_OUT,
    "action_required": CheckState.ACTION_REQUIRED,
    "startup_failure": CheckState.FAILURE,
    "stale": CheckState.PENDING,  # GitHub marked it outdated: it must run again
}
MERGE_METHODS = ("merge", "squash", "rebase")
WORKFLOWS_DIR = ".github/workflows/"
WORKFLOW_HEADS_KEPT = 512  # PR heads whose "changes a workflow" answer is kept
# What each part of a branch's rules needs when GitHub does not say (a 404 says nothing).
NEEDED: dict[str, str] = {
    "rulesets": (
        "Metadata (read), or a token of an account that can read the repository (a GitHub "
        "Enterprise Server without repository rulesets has no such endpoint: configure "
        "required_checks there)"
    ),
    "branch": "Contents (read), or a token of an account that can read the repository",
    "branch_protection": (
        "Administration (read) for an App, or a token of an account with admin rights on the "
        "repository (GitHub shows protection to admins only)"
    ),
}
MERGE_ERRORS: ErrorMap = {409: HeadMoved, 405: NotMergeable}
# GitHub lists at most this many files in a comparison.
COMPARE_FILES_CAP = 300
# How long a GraphQL read of a pull serves the reads that follow it in the same task (the
# gate's read serves the evaluation, the pre-post check and the state comment).
READ_REUSE_S = 10.0
READS_KEPT = 64  # pulls whose read one task keeps
# After a GraphQL read failed (a server error, a refusal, a rate limit), reads go to REST for
# this long before GraphQL is asked again: a GraphQL outage costs no wait per read.
GRAPHQL_PAUSE_S = 60.0


@dataclass(frozen=True)
class _Call:
    operation: str
    errors: ErrorMap | None = None
    once: bool = False


@dataclass(frozen=True)
class _Auth:
    oauth_token: str | None = None
    jwt: str | None = None


@dataclass
class _Read:
    """One GraphQL read of a pull: each part ``None`` when it could not be read."""

    at: float
    pull: PullRequestSnapshot
    results: list[CheckResult] | None
    required: RequiredChecks | None
    reviews: list[Review] | None
    comments: list[Comment] | None
    viewer_permission: str | None = None  # a user token's role on the repository


_Reads = dict[tuple[str, int], _Read]


_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("github_call")


class _Client(gidgethub.httpx.GitHubAPI):
    """gidgethub with its transport replaced by the shared HTTP policy."""

    def __init__(self, http: ForgeHttp, base_url: str) -> None:
        # gidgethub types its client as httpx2's when that is installed (the mcp SDK brings
        # it); _request below replaces the transport, so the client's type does not matter.
        super().__init__(cast(Any, http.client), USER_AGENT, base_url=base_url)
        self._http = http

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        call = _CALL.get(_Call("unnamed"))
        result = await self._http.send(
            call.operation,
            method,
            url,
            headers=headers,
            body=body,
            errors=call.errors,
            once=call.once,
        )
        return result.status, result.headers, result.body

    async def sleep(self, seconds: float) -> None:
        await self._http.sleep(seconds)


class GitHubForge(HttpAdapter):
    """The :class:`~reviewbot.forges.base.Forge` for GitHub (or GitHub Enterprise)."""

    name = "github"

    def __init__(
        self,
        *,
        api_url: str = "https://api.github.com",
        token: str | None = None,
        app_auth: GitHubAppAuth | None = None,
        bot_login: str | None = None,
        client: httpx.AsyncClient | None = None,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
        on_wait: OnWait | None = None,
        watch: ForgeWatcher | None = None,
        graphql: bool = True,
    ) -> None:
        """``graphql``: read a pull with one GraphQL query (else REST only)."""
        if (token is None) == (app_auth is None):
            raise ValueError("GitHubForge needs exactly one of token or app_auth")
        self._token = token
        self._app = app_auth
        self._open_http(client, policy, sleep, clock, on_wait, watch)
        self.url = api_url.rstrip("/")
        self._gh = _Client(self._http, self.url)
        self._bot_login = bot_login
        self._workflow_heads: dict[tuple[str, int, str], bool] = {}
        self.graphql_url: str | None = graphql_endpoint(self.url) if graphql else None
        self.graphql_points: Counter[str] = Counter()  # GraphQL rate-limit points per operation
        self._graphql_paused_until = 0.0
        self._reading: dict[tuple[str, int], asyncio.Future[_Read | None]] = {}
        # The reads of the running task (each task, a delivery's gating and review, has its own).
        self._reads: contextvars.ContextVar[_Reads | None] = contextvars.ContextVar(
            f"github_reads_{id(self)}", default=None
        )

    # -- Forge -----------------------------------------------------------------------

    async def bot_login(self) -> str:
        if self._bot_login is None:
            if self._app is not None:
                app = await self._get("bot_login", "/app", {}, auth=_Auth(jwt=self._app.app_jwt()))
                with response_shape("bot_login"):
                    self._bot_login = f"{as_dict(app, 'bot_login')['slug']}[bot]"
            else:
                user = await self._get("bot_login", "/user", {}, auth=self._token_auth())
                with response_shape("bot_login"):
                    self._bot_login = str(as_dict(user, "bot_login")["login"])
        return self._bot_login

    async def probe(self) -> str:
        async def send(a: _Auth) -> Any:
            return await self._gh.getitem(
                "/app" if a.jwt else "/user",
                {},
                accept=ACCEPT,
                oauth_token=a.oauth_token,
                jwt=a.jwt,
            )

        auth = _Auth(jwt=self._app.app_jwt()) if self._app is not None else self._token_auth()
        data = await self._authed(_Call("probe", once=True), send, repo=None, auth=auth)
        with response_shape("probe"):
            found = as_dict(data, "probe")
            return f"{found['slug']}[bot]" if auth.jwt else str(found["login"])

    async def get_pull(
        self, repo: str, number: int, *, read_within_s: float = 0.0
    ) -> PullRequestSnapshot:
        """The pull, with one GraphQL read that also serves the evaluation's other reads
        (checks, rules, reviews, the state comment) in this task for ``READ_REUSE_S``; the
        pull itself is read anew unless this task read it within ``read_within_s``."""
        if read_within_s > 0:
            kept = self._kept(repo, number)
            if kept is not None and 0 <= self._http.clock() - kept.at <= read_within_s:
                return kept.pull
        read = await self._pull_read(repo, number, live=True)
        if read is not None:
            return read.pull
        return await self._rest_pull(repo, number)

    async def _rest_pull(self, repo: str, number: int) -> PullRequestSnapshot:
        owner, name = split_repo(repo)
        data = await self._get(
            "get_pull",
            "/repos/{owner}/{repo}/pulls/{pull_number}",
            {"owner": owner, "repo": name, "pull_number": number},
            repo=repo,
        )
        with response_shape("get_pull"):
            return self._snapshot(owner, name, as_dict(data, "get_pull"))

    async def list_open_pulls(self, repo: str) -> list[PullRequestSnapshot]:
        owner, name = split_repo(repo)
        items = await self._list(
            "list_open_pulls",
            "/repos/{owner}/{repo}/pulls{?state,per_page}",
            {"owner": owner, "repo": name, "state": "open", "per_page": PER_PAGE},
            repo=repo,
        )
        return map_all(items, lambda d: self._snapshot(owner, name, d), "list_open_pulls")

    async def pulls_for_sha(self, repo: str, sha: str) -> list[PullRequestSnapshot]:
        owner, name = split_repo(repo)
        items = await self._list(
            "pulls_for_sha",
            "/repos/{owner}/{repo}/commits/{commit_sha}/pulls{?per_page}",
            {"owner": owner, "repo": name, "commit_sha": sha, "per_page": PER_PAGE},
            repo=repo,
        )
        pulls = map_all(items, lambda d: self._snapshot(owner, name, d), "pulls_for_sha")
        return [p for p in pulls if p.state == "open" and p.head_sha == sha]

    async def required_checks(self, repo: str, branch: str) -> RequiredChecks:
        """The branch's rulesets and its classic protection; both apply on GitHub.

        Rulesets are read with Metadata (read). Classic protection is read from the branch
        itself (Contents or Metadata, read): ``protected`` and the protection summary with
        its required status checks. Only when the summary leaves the checks out is the
        protection endpoint asked, which needs Administration (read) and answers a
        non-admin user 404. A refusal there is a gap, never "not protected".

        A GraphQL read of a pull into ``branch`` in this task answers instead (its base's
        rules as a non-admin sees them, its rulesets, and the checks GitHub calls required).
        """
        read = await self._served(repo, lambda r: r.pull.base_ref == branch)
        if read is not None and read.required is not None:
            return read.required
        rulesets, classic = await asyncio.gather(
            self._ruleset_rules(repo, branch), self._classic_protection(repo, branch)
        )
        return rulesets.joined(classic)

    async def _ruleset_rules(self, repo: str, branch: str) -> RequiredChecks:
        owner, name = split_repo(repo)
        try:
            items = await self._list(
                "required_checks",
                "/repos/{owner}/{repo}/rules/branches/{branch}{?per_page}",
                {"owner": owner, "repo": name, "branch": branch, "per_page": PER_PAGE},
                repo=repo,
            )
        except (PermissionDenied, NotFound) as exc:
            # The PR was just read, so a 404 here is "not shown to us", not "no rules".
            return RequiredChecks(unreadable=(gap("rulesets", exc),))
        with response_shape("required_checks"):
            return ruleset_requirements([as_dict(i, "required_checks") for i in items])

    async def _classic_protection(self, repo: str, branch: str) -> RequiredChecks:
        owner, name = split_repo(repo)
        url_vars = {"owner": owner, "repo": name, "branch": branch}
        try:
            data = await self._get(
                "required_checks", "/repos/{owner}/{repo}/branches/{branch}", url_vars, repo=repo
            )
        except PermissionDenied as exc:
            return RequiredChecks(unreadable=(gap("branch", exc),))
        with response_shape("required_checks"):
            found = as_dict(data, "required_checks")
            if not found["protected"]:
                return RequiredChecks()
            summary = (found.get("protection") or {}).get("required_status_checks")
            if isinstance(summary, dict) and "contexts" in summary:
                checks = protection_requirements(summary)
                approvals = int(found.get("required_approving_review_count") or 0)
                return RequiredChecks(checks.names, required_approvals=approvals)
        try:
            data = await self._get(
                "required_checks",
                "/repos/{owner}/{repo}/branches/{branch}/protection",
                url_vars,
                repo=repo,
            )
        except (PermissionDenied, NotFound) as exc:
            # The branch says it is protected: a 404 here is GitHub hiding the protection
            # from an account that is not an admin.
            return RequiredChecks(unreadable=(gap("branch_protection", exc),))
        with response_shape("required_checks"):
            protection = as_dict(data, "required_checks")
            checks = protection_requirements(protection.get("required_status_checks") or {})
            approval_rule = protection.get("required_pull_request_reviews") or {}
            return RequiredChecks(
                checks.names,
                required_approvals=int(approval_rule.get("required_approving_review_count") or 0),
                code_owner_review=bool(approval_rule.get("require_code_owner_reviews")),
            )

    async def check_results(self, repo: str, sha: str) -> list[CheckResult]:
        read = await self._served(repo, lambda r: r.pull.head_sha == sha)
        if read is not None and read.results is not None:
            return list(read.results)
        owner, name = split_repo(repo)
        url_vars = {"owner": owner, "repo": name, "ref": sha, "per_page": PER_PAGE}
        statuses = await self._list(
            "check_results",
            "/repos/{owner}/{repo}/commits/{ref}/status{?per_page}",
            url_vars,
            repo=repo,
            iterable_key="statuses",
        )
        runs = await self._list(
            "check_results",
            "/repos/{owner}/{repo}/commits/{ref}/check-runs{?per_page}",
            url_vars,
            repo=repo,
            iterable_key="check_runs",
        )
        return map_all(statuses, _status, "check_results") + map_all(
            runs, _check_run, "check_results"
        )

    async def list_reviews(self, repo: str, number: int) -> list[Review]:
        read = await self._served(repo, lambda r: r.pull.number == number)
        if read is not None and read.reviews is not None:
            return list(read.reviews)
        owner, name = split_repo(repo)
        items = await self._list(
            "list_reviews",
            "/repos/{owner}/{repo}/pulls/{pull_number}/reviews{?per_page}",
            {"owner": owner, "repo": name, "pull_number": number, "per_page": PER_PAGE},
            repo=repo,
        )
        return map_all(items, _review, "list_reviews")

    async def submit_review(
        self,
        repo: str,
        number: int,
        *,
        commit_sha: str,
        event: ReviewEvent,
        body: str,
        comments: Sequence[InlineComment] = (),
    ) -> Review:
        owner, name = split_repo(repo)
        if not commit_sha:
            raise ValueError("a review is always pinned to a commit SHA")
        payload: dict[str, Any] = {
            "commit_id": commit_sha,
            "body": body,
            "event": REVIEW_EVENTS[ReviewEvent(event)],
        }
        if comments:
            payload["comments"] = [
                {"path": c.path, "line": c.line, "side": "RIGHT", "body": c.body} for c in comments
            ]
        known = self._read_reviews(repo, number)
        data = await self._write(
            "submit_review",
            "POST",
            "/repos/{owner}/{repo}/pulls/{pull_number}/reviews",
            {"owner": owner, "repo": name, "pull_number": number},
            payload,
            repo=repo,
            changes=(number, Part.REVIEWS),
        )
        with response_shape("submit_review"):
            review = _review(as_dict(data, "submit_review"))
        if known is not None:  # the reviews read before, and the one GitHub just answered
            self._keep_reviews(repo, number, [*known, review])
        return review

    async def merge(
        self, repo: str, number: int, *, head_sha: str, method: str = "merge"
    ) -> MergeResult:
        owner, name = split_repo(repo)
        if not head_sha:
            raise ValueError("a merge is always pinned to the head SHA")
        if method not in MERGE_METHODS:
            raise ValueError(f"merge method {method!r}: expected one of {', '.join(MERGE_METHODS)}")
        data = await self._write(
            "merge",
            "PUT",
            "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
            {"owner": owner, "repo": name, "pull_number": number},
            {"sha": head_sha, "merge_method": method},
            repo=repo,
            errors=MERGE_ERRORS,
        )
        with response_shape("merge"):
            result = as_dict(data, "merge")
            merged = bool(result.get("merged"))
            if not merged:
                raise NotMergeable(str(result.get("message") or "not merged"), operation="merge")
            return MergeResult(merged=True, merge_commit_sha=result.get("sha") or None)

    async def access(self, repo: str) -> AccessFacts:
        if self._app is not None:
            granted = await self._app.granted(repo, self)
            return AccessFacts("github", repo, "app", granted=granted)
        return AccessFacts("github", repo, "token", shown=await self._shown_permissions(repo))

    async def _shown_permissions(self, repo: str) -> dict[str, bool] | None:
        read = await self._served(repo, lambda r: r.viewer_permission is not None)
        if read is not None:  # the one read said the token's role: no second request
            return {"push": read.viewer_permission in ("ADMIN", "MAINTAIN", "WRITE")}
        owner, name = split_repo(repo)
        data = await self._get(
            "access", "/repos/{owner}/{repo}", {"owner": owner, "repo": name}, repo=repo
        )
        with response_shape("access"):
            shown = as_dict(data, "access").get("permissions")
            return {str(k): bool(v) for k, v in shown.items()} if isinstance(shown, dict) else None

    async def merge_permission(self, repo: str, pull: PullRequestSnapshot) -> str | None:
        """An App: Contents (write) from its installation's grants, and Workflows (write)
        when the PR changes ``.github/workflows/`` (GitHub refuses such a merge without
        it). A token: ``permissions.push`` of the repository as GitHub shows it to the
        token's account; a fine-grained token's own set is not readable, so GitHub's
        refusal of the merge names what it lacks."""
        if self._app is not None:
            granted = await self._app.granted(repo, self)
            if granted is not None and granted.get("contents") != "write":
                # The grants are those of the cached token: an operator may have granted
                # more since. Mint a new token once before refusing on them.
                self._app.forget_token(repo)
                granted = await self._app.granted(repo, self)
            if granted is None:
                return None
            if granted.get("contents") != "write":
                return "Contents (write) for the GitHub App (merging writes to the base branch)"
            if granted.get("workflows") != "write" and await self._changes_workflows(repo, pull):
                return (
                    "Workflows (write) for the GitHub App: the pull request changes "
                    f"{WORKFLOWS_DIR}, and GitHub refuses such a merge without it"
                )
            return None
        shown = await self._shown_permissions(repo)
        if shown is not None and shown.get("push") is False:
            return "write (push) access to the repository for the bot's account"
        return None

    async def _changes_workflows(self, repo: str, pull: PullRequestSnapshot) -> bool:
        """Whether the PR's head adds, changes, removes or moves a workflow file; read once
        per head (a head's files never change)."""
        key = (repo.lower(), pull.number, pull.head_sha)
        known = self._workflow_heads.get(key)
        if known is not None:
            return known
        owner, name = split_repo(repo)
        files = await self._list(
            "merge_permission",
            "/repos/{owner}/{repo}/pulls/{pull_number}/files{?per_page}",
            {"owner": owner, "repo": name, "pull_number": pull.number, "per_page": PER_PAGE},
            repo=repo,
        )
        with response_shape("merge_permission"):
            paths = [
                str(f.get(field) or "")
                for f in (as_dict(item, "merge_permission") for item in files)
                for field in ("filename", "previous_filename")
            ]
        changes = any(path.startswith(WORKFLOWS_DIR) for path in paths)
        if len(self._workflow_heads) >= WORKFLOW_HEADS_KEPT:
            self._workflow_heads.pop(next(iter(self._workflow_heads)))
        self._workflow_heads[key] = changes
        return changes

    async def user_permission(self, repo: str, user: str) -> str:
        owner, name = split_repo(repo)
        try:
            data = await self._get(
                "user_permission",
                "/repos/{owner}/{repo}/collaborators/{username}/permission",
                {"owner": owner, "repo": name, "username": user},
                repo=repo,
            )
        except NotFound:
            return "none"
        with response_shape("user_permission"):
            permission = str(as_dict(data, "user_permission")["permission"])
        return permission if permission in ("admin", "write", "read") else "none"

    async def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        if not marker:
            raise ValueError("a comment marker must not be empty")
        me = await self.bot_login()
        read = await self._served(repo, lambda r: r.pull.number == number)
        if read is not None and read.comments is not None:
            return marked_comment(read.comments, me, marker)
        owner, name = split_repo(repo)
        items = await self._list(
            "find_comment",
            "/repos/{owner}/{repo}/issues/{issue_number}/comments{?per_page}",
            {"owner": owner, "repo": name, "issue_number": number, "per_page": PER_PAGE},
            repo=repo,
        )
        return marked_comment(map_all(items, comment_of, "find_comment"), me, marker)

    async def create_comment(self, repo: str, number: int, body: str) -> Comment:
        owner, name = split_repo(repo)
        data = await self._write(
            "create_comment",
            "POST",
            "/repos/{owner}/{repo}/issues/{issue_number}/comments",
            {"owner": owner, "repo": name, "issue_number": number},
            {"body": body},
            repo=repo,
            changes=(number, Part.COMMENTS),
        )
        with response_shape("create_comment"):
            return comment_of(as_dict(data, "create_comment"))

    async def edit_comment(self, repo: str, comment_id: int, body: str) -> Comment:
        owner, name = split_repo(repo)
        data = await self._write(
            "edit_comment",
            "PATCH",
            "/repos/{owner}/{repo}/issues/comments/{comment_id}",
            {"owner": owner, "repo": name, "comment_id": comment_id},
            {"body": body},
            repo=repo,
            changes=(None, Part.COMMENTS),
        )
        with response_shape("edit_comment"):
            return comment_of(as_dict(data, "edit_comment"))

    # -- ref operations (RefOps): the Git database and merge endpoints, Contents (write) --

    def ref_ops(self) -> RefOps:
        """GitHub does every ref operation through its REST API."""
        return self

    async def branch_head(self, repo: str, branch: str) -> str | None:
        """``GET /repos/{owner}/{repo}/branches/{branch}`` ("Get a branch")."""
        owner, name = split_repo(repo)
        url_vars = {"owner": owner, "repo": name, "branch": branch}
        try:
            data = await self._get(
                "branch_head", "/repos/{owner}/{repo}/branches/{branch}", url_vars, repo=repo
            )
        except NotFound:
            return None
        with response_shape("branch_head"):
            return str(as_dict(data, "branch_head")["commit"]["sha"])

    async def close_issue(self, repo: str, number: int) -> Closing:
        """ "Get an issue", then "Update an issue" with ``state: closed`` (REST reference,
        issues/issues). GitHub's issues include pull requests (they carry ``pull_request``):
        one is never closed here."""
        owner, name = split_repo(repo)
        url_vars = {"owner": owner, "repo": name, "number": number}
        url = "/repos/{owner}/{repo}/issues/{number}"
        data = as_dict(await self._get("get_issue", url, url_vars, repo=repo), "get_issue")
        if data.get("pull_request"):
            return Closing.NOT_AN_ISSUE
        if data.get("state") == "closed":
            return Closing.ALREADY_CLOSED
        body = {"state": "closed", "state_reason": "completed"}
        await self._write("close_issue", "PATCH", url, url_vars, body, repo=repo)
        return Closing.CLOSED

    async def record_landed(self, repo: str, number: int, sha: str) -> None:
        """GitHub marks the pull request merged when its commits reach the base."""
        return None

    async def create_branch(self, repo: str, branch: str, sha: str) -> None:
        owner, name = split_repo(repo)
        try:
            await self._write(
                "create_branch",
                "POST",
                "/repos/{owner}/{repo}/git/refs",
                {"owner": owner, "repo": name},
                {"ref": f"refs/heads/{branch}", "sha": sha},
                repo=repo,
            )
        except ForgeError as exc:
            raise _unprocessable(exc) from None

    async def delete_branch(self, repo: str, branch: str) -> None:
        owner, name = split_repo(repo)
        try:
            await self._write(
                "delete_branch",
                "DELETE",
                "/repos/{owner}/{repo}/git/refs/{+ref}",
                {"owner": owner, "repo": name, "ref": f"heads/{branch}"},
                {},
                repo=repo,
            )
        except ForgeError as exc:
            raise _unprocessable(exc) from None

    async def compare(self, repo: str, base: str, head: str) -> Comparison:
        owner, name = split_repo(repo)
        data = await self._get(
            "compare",
            "/repos/{owner}/{repo}/compare/{+basehead}",
            {"owner": owner, "repo": name, "basehead": f"{base}...{head}"},
            repo=repo,
        )
        with response_shape("compare"):
            found = as_dict(data, "compare")
            files = [as_dict(f, "compare") for f in found.get("files") or ()]
            paths = [
                str(f[field])
                for f in files
                for field in ("filename", "previous_filename")
                if f.get(field)
            ]
            return Comparison(
                base=base,
                head=head,
                base_is_ancestor=found["status"] in ("ahead", "identical"),
                files=tuple(dict.fromkeys(paths)),
                files_complete=len(files) < COMPARE_FILES_CAP,
            )

    async def merge_into(self, repo: str, branch: str, sha: str, message: str) -> MergeCommit:
        owner, name = split_repo(repo)
        data = await self._write(
            "merge_into",
            "POST",
            "/repos/{owner}/{repo}/merges",
            {"owner": owner, "repo": name},
            {"base": branch, "head": sha, "commit_message": message},
            repo=repo,
            errors={409: MergeConflict},
        )
        if data is None:  # 204: the branch already contains the commit
            tip = await self._get(
                "merge_into",
                "/repos/{owner}/{repo}/branches/{branch}",
                {"owner": owner, "repo": name, "branch": branch},
                repo=repo,
            )
            with response_shape("merge_into"):
                sha = str(as_dict(tip, "merge_into")["commit"]["sha"])
                return MergeCommit(sha, created=False, onto=sha)
        with response_shape("merge_into"):
            made = as_dict(data, "merge_into")
            first = as_dict(as_list(made["parents"], "merge_into")[0], "merge_into")
            return MergeCommit(str(made["sha"]), created=True, onto=str(first["sha"]))

    async def fast_forward(self, repo: str, branch: str, sha: str) -> None:
        owner, name = split_repo(repo)
        try:
            await self._write(
                "fast_forward",
                "PATCH",
                "/repos/{owner}/{repo}/git/refs/{+ref}",
                {"owner": owner, "repo": name, "ref": f"heads/{branch}"},
                # force false: GitHub refuses (422) anything but a fast-forward.
                {"sha": sha, "force": False},
                repo=repo,
            )
        except ForgeError as exc:
            raise _unprocessable(exc) from None

    # -- GitHub App installation calls (InstallationApi) ------------------------------

    async def repo_installation_id(self, repo: str, app_jwt: str) -> int:
        owner, name = split_repo(repo)
        data = await self._get(
            "app_installation",
            "/repos/{owner}/{repo}/installation",
            {"owner": owner, "repo": name},
            auth=_Auth(jwt=app_jwt),
        )
        with response_shape("app_installation"):
            return int(as_dict(data, "app_installation")["id"])

    async def create_installation_token(
        self, installation_id: int, app_jwt: str
    ) -> tuple[str, str, dict[str, str] | None]:
        data = await self._call(
            _Call("app_token"),
            lambda: self._gh.post(
                "/app/installations/{installation_id}/access_tokens",
                {"installation_id": installation_id},
                data=b"",
                accept=ACCEPT,
                jwt=app_jwt,
            ),
        )
        with response_shape("app_token"):
            token = as_dict(data, "app_token")
            granted = token.get("permissions")
            # Optional in GitHub's description: absent means unknown, never "nothing".
            permissions = (
                {str(k): str(v) for k, v in as_dict(granted, "app_token").items()}
                if granted is not None
                else None
            )
            return str(token["token"]), str(token["expires_at"]), permissions

    # -- plumbing --------------------------------------------------------------------

    def _token_auth(self) -> _Auth:
        assert self._token is not None
        return _Auth(oauth_token=self._token)

    async def _repo_auth(self, repo: str) -> _Auth:
        if self._app is None:
            return self._token_auth()
        return _Auth(oauth_token=await self._app.token_for_repo(repo, self))

    async def _call(self, call: _Call, request: Callable[[], Awaitable[Any]]) -> Any:
        token = _CALL.set(call)
        try:
            return await request()
        except gidgethub.HTTPException as exc:  # only if a status slipped past ForgeHttp
            raise ForgeError(
                str(exc), status=int(exc.status_code), operation=call.operation
            ) from None
        except ValueError as exc:  # gidgethub decoding a body that is not JSON
            raise ForgeError(
                f"malformed JSON in response ({exc})", operation=call.operation
            ) from None
        finally:
            _CALL.reset(token)

    async def _authed(
        self,
        call: _Call,
        send: Callable[[_Auth], Awaitable[Any]],
        *,
        repo: str | None,
        auth: _Auth | None = None,
    ) -> Any:
        """Send with ``auth``, or with the credentials of ``repo`` (installation token)."""
        if auth is None:
            assert repo is not None
            used = await self._repo_auth(repo)
        else:
            used = auth
        try:
            return await self._call(call, lambda: send(used))
        except AuthenticationFailed:
            if self._app is not None and repo is not None and auth is None:
                self._app.forget_token(repo)  # revoked early: the next call mints a new one
            raise

    async def _get(
        self,
        operation: str,
        url: str,
        url_vars: Mapping[str, Any],
        *,
        repo: str | None = None,
        auth: _Auth | None = None,
    ) -> Any:
        async def send(a: _Auth) -> Any:
            return await self._gh.getitem(
                url, url_vars, accept=ACCEPT, oauth_token=a.oauth_token, jwt=a.jwt
            )

        return await self._authed(_Call(operation), send, repo=repo, auth=auth)

    async def _list(
        self,
        operation: str,
        url: str,
        url_vars: Mapping[str, Any],
        *,
        repo: str,
        iterable_key: str | None = None,
    ) -> list[Any]:
        async def collect(a: _Auth) -> list[Any]:
            # getiter walks the Link header; it takes a top-level array or an object
            # holding the array under ``iterable_key``.
            items: list[Any] = []
            async for item in self._gh.getiter(
                url,
                url_vars,
                accept=ACCEPT,
                iterable_key=iterable_key or "items",
                oauth_token=a.oauth_token,
                jwt=a.jwt,
            ):
                items.append(item)
                if len(items) >= MAX_ITEMS:
                    break
            return items

        result: list[Any] = await self._authed(_Call(operation), collect, repo=repo)
        return result

    async def _write(
        self,
        operation: str,
        method: str,
        url: str,
        url_vars: Mapping[str, Any],
        data: Mapping[str, Any],
        *,
        repo: str,
        errors: ErrorMap | None = None,
        changes: tuple[int | None, Part] | None = None,
    ) -> Any:
        """``changes``: the part of a pull's read the write changes (``None`` as the number:
        of every pull of ``repo``); without it, every read of ``repo`` is dropped."""

        async def send(a: _Auth) -> Any:
            body = dict(data)
            kw: dict[str, Any] = {"accept": ACCEPT, "oauth_token": a.oauth_token, "jwt": a.jwt}
            if method == "POST":
                return await self._gh.post(url, url_vars, data=body, **kw)
            if method == "PUT":
                return await self._gh.put(url, url_vars, data=body, **kw)
            if method == "DELETE":
                return await self._gh.delete(url, url_vars, **kw)
            return await self._gh.patch(url, url_vars, data=body, **kw)

        try:
            return await self._authed(_Call(operation, errors), send, repo=repo)
        finally:  # applied or not (a timeout): what was read before may be stale now
            self._forget(repo, changes)

    # -- the GraphQL read of a pull ---------------------------------------------------

    async def _pull_read(self, repo: str, number: int, *, live: bool = False) -> _Read | None:
        """:meth:`_graphql_read`, kept for this task's later reads; shared by the reads of
        the pull's parts that ask at once (the checks and the rules of one evaluation).
        ``live``: a read of its own, never one that started before it was asked for."""
        key = (repo.lower(), number)
        running = None if live else self._reading.get(key)
        if running is None:
            running = asyncio.ensure_future(self._graphql_read(repo, number))
            self._reading[key] = running
            running.add_done_callback(
                lambda done: self._reading.pop(key) if self._reading.get(key) is done else None
            )
        read = await asyncio.shield(running)
        if read is not None:
            reads = self._reads.get()
            if reads is None:
                reads = {}
                self._reads.set(reads)
            reads[key] = read
            while len(reads) > READS_KEPT:
                reads.pop(next(iter(reads)))
        return read

    async def _graphql_read(self, repo: str, number: int) -> _Read | None:
        """A new GraphQL read of the pull; ``None`` when GraphQL cannot serve (the caller reads
        over REST). The pull itself is always read live: the check before posting a review
        must see a head pushed since."""
        if self.graphql_url is None or self._http.clock() < self._graphql_paused_until:
            return None
        owner, name = split_repo(repo)
        try:
            gathered = await self._graphql_pages(repo, owner, name, number)
            with response_shape("pull_read"):
                read = self._read_of(owner, name, gathered)
        except GraphQLUnusable as exc:
            if exc.rejected:
                log.warning(
                    "GitHub GraphQL at %s refused the pull read (%s): REST only",
                    self.graphql_url,
                    exc,
                )
                self.graphql_url = None
            else:
                self._pause_graphql(f"GraphQL read of {repo}#{number} unusable ({exc})")
            return None
        except AuthenticationFailed:
            raise  # the credentials, not GraphQL: REST would be refused the same
        except ForgeError as exc:
            # Refused, not found, rate limited, malformed, unreachable or slow: REST reads (its
            # retries decide whether the forge can be reached at all).
            if isinstance(exc, NotFound):
                # GraphQL answers a missing pull in its errors (200): a 404 is the endpoint's
                # absence, and it will not appear in this process's lifetime.
                log.warning("no GitHub GraphQL endpoint at %s: REST only", self.graphql_url)
                self.graphql_url = None
            else:
                self._pause_graphql(f"GraphQL read of {repo}#{number} failed ({exc})")
            return None
        if gathered.unread:
            log.info(
                "GraphQL read of %s#%s left parts to REST: %s",
                repo,
                number,
                "; ".join(f"{part}: {why}" for part, why in gathered.unread.items()),
            )
        return read

    def _pause_graphql(self, why: str) -> None:
        log.warning("%s: reads go to REST for %g s", why, GRAPHQL_PAUSE_S)
        self._graphql_paused_until = self._http.clock() + GRAPHQL_PAUSE_S

    async def _graphql_pages(self, repo: str, owner: str, name: str, number: int) -> Gathered:
        assert self.graphql_url is not None
        url = self.graphql_url
        gathered: Gathered | None = None
        cursors: dict[Part, str] = {}
        while gathered is None or gathered.cursors:
            if gathered is not None:
                cursors = dict(gathered.cursors)
            query = {"query": PULL_READ, "variables": variables(owner, name, number, cursors)}

            async def send(a: _Auth, body: bytes = json.dumps(query).encode()) -> Any:
                headers = {
                    "accept": "application/json",
                    "user-agent": USER_AGENT,
                    "content-type": "application/json",
                    "authorization": f"bearer {a.oauth_token}",
                }
                # One exchange, never retried nor waited for: REST reads what it cannot.
                result = await self._http.send(
                    "pull_read", "POST", url, headers=headers, body=body, read=True, once=True
                )
                return decode_json(result, operation="pull_read")

            answer = await self._authed(_Call("pull_read"), send, repo=repo)
            with response_shape("pull_read"):  # a field missing or of another type
                gathered = gather(answer, gathered)
        self.graphql_points["pull_read"] += gathered.points
        return gathered

    def _read_of(self, owner: str, name: str, got: Gathered) -> _Read:
        pull = self._snapshot(owner, name, got.pull)
        results = None
        if Part.CHECKS not in got.unread:
            results = map_all(got.statuses, _status, "pull_read") + map_all(
                got.check_runs, _check_run, "pull_read"
            )
        required = None
        if Part.RULES not in got.unread:
            classic = RequiredChecks()
            if got.classic is not None:
                names = [str(n) for n in got.classic.get("requiredStatusCheckContexts") or ()]
                classic = RequiredChecks(
                    tuple(dict.fromkeys(names)),
                    required_approvals=int(got.classic.get("requiredApprovingReviewCount") or 0),
                    code_owner_review=bool(got.classic.get("requiresCodeOwnerReviews")),
                )
            flagged = RequiredChecks(tuple(dict.fromkeys(got.required_names)))
            # As the REST reads join them: rulesets, then classic protection.
            required = ruleset_requirements(got.rules).joined(classic).joined(flagged)
        reviews = None
        if Part.REVIEWS not in got.unread:
            reviews = map_all(got.reviews, _review, "pull_read")
        comments = None
        if Part.COMMENTS not in got.unread:
            comments = map_all(got.comments, comment_of, "pull_read")
        return _Read(
            self._http.clock(), pull, results, required, reviews, comments, got.viewer_permission
        )

    async def _served(self, repo: str, which: Callable[[_Read], bool]) -> _Read | None:
        """This task's read of the pull of ``repo`` that ``which`` picks; one older than
        ``READ_REUSE_S`` is read anew (one query), and serves only if ``which`` still picks
        it (the head may have moved). ``None``: no such read, the caller reads over REST."""
        reads = self._reads.get()
        if not reads:
            return None
        key = repo.lower()
        for (r, number), read in list(reads.items()):
            if r != key or not which(read):
                continue
            if 0 <= self._http.clock() - read.at <= READ_REUSE_S:
                return read
            again = await self._pull_read(repo, number)
            return again if again is not None and which(again) else None
        return None

    def _kept(self, repo: str, number: int) -> _Read | None:
        """This task's read of the pull, if it made one."""
        return (self._reads.get() or {}).get((repo.lower(), number))

    def _read_reviews(self, repo: str, number: int) -> list[Review] | None:
        """The reviews this task's read of the pull holds, without reading anything."""
        read = self._kept(repo, number)
        return list(read.reviews) if read is not None and read.reviews is not None else None

    def _keep_reviews(self, repo: str, number: int, reviews: list[Review]) -> None:
        read = self._kept(repo, number)
        if read is not None:
            read.reviews = reviews

    def _forget(self, repo: str, changes: tuple[int | None, Part] | None) -> None:
        reads = self._reads.get()
        if not reads:
            return
        key = repo.lower()
        for (r, number), read in list(reads.items()):
            if r != key:
                continue
            if changes is None:
                del reads[(r, number)]
            elif changes[0] in (None, number):
                if changes[1] is Part.REVIEWS:
                    read.reviews = None
                elif changes[1] is Part.COMMENTS:
                    read.comments = None

    def _snapshot(self, owner: str, name: str, data: dict[str, Any]) -> PullRequestSnapshot:
        merged = bool(data.get("merged") or data.get("merged_at"))
        return pull_snapshot("github", owner, name, data, merged=merged)


def graphql_endpoint(api_url: str) -> str:
    """GitHub's GraphQL URL for a REST base: ``/graphql`` beside api.github.com's REST,
    ``/api/graphql`` on a GitHub Enterprise Server (whose REST base ends in ``/api/v3``)."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base.removesuffix("/v3") + "/graphql"
    return base + "/graphql"


def protection_requirements(summary: Mapping[str, Any]) -> RequiredChecks:
    """Required checks of classic protection (``contexts`` and ``checks``, exact names)."""
    if summary.get("enforcement_level") == "off":
        return RequiredChecks()
    names = [str(n) for n in summary.get("contexts") or []]
    names += [str(c["context"]) for c in summary.get("checks") or []]
    return RequiredChecks(tuple(dict.fromkeys(names)))


def ruleset_requirements(rules: Sequence[Mapping[str, Any]]) -> RequiredChecks:
    """What the active rules of a branch require: status checks and pull-request reviews."""
    names: list[str] = []
    approvals, code_owners = 0, False
    for rule in rules:
        parameters = rule.get("parameters") or {}
        if rule["type"] == "required_status_checks":
            names += [str(c["context"]) for c in parameters.get("required_status_checks") or []]
        elif rule["type"] == "pull_request":
            count = parameters.get("required_approving_review_count") or 0
            approvals = max(approvals, int(count))
            code_owners = code_owners or bool(parameters.get("require_code_owner_review"))
    return RequiredChecks(
        tuple(dict.fromkeys(names)), required_approvals=approvals, code_owner_review=code_owners
    )


def _unprocessable(exc: ForgeError) -> ForgeError:
    """The typed error of a Git database 422, which GitHub words by case."""
    if exc.status != 422 or type(exc) is not ForgeError:
        return exc
    said = str(exc.args[0]) if exc.args else ""
    lowered = said.lower()
    kind: type[ForgeError] = ForgeError
    if "fast forward" in lowered or "fast-forward" in lowered:
        kind = NotFastForward
    elif "already exists" in lowered:
        kind = RefExists
    elif "does not exist" in lowered:
        kind = NotFound
    return kind(said, status=422, operation=exc.operation)


def gap(source: str, exc: ForgeError) -> RulesGap:
    """A part of the rules the credentials could not read, naming what GitHub asked for."""
    accepted = exc.accepted if isinstance(exc, PermissionDenied) else ""
    return RulesGap(source, permission_named(accepted) or NEEDED[source], exc.status)


def _status(data: dict[str, Any]) -> CheckResult:
    return commit_status(data, state_field="state")


def _check_run(data: dict[str, Any]) -> CheckResult:
    if data.get("status") != "completed":
        state = CheckState.PENDING
    else:
        conclusion = data.get("conclusion")
        # An unknown conclusion is never taken for a success.
        state = (
            CheckState.PENDING
            if conclusion is None
            else CHECK_RUN_CONCLUSIONS.get(str(conclusion), CheckState.ERROR)
        )
    return CheckResult(
        name=str(data["name"]),
        state=state,
        url=data.get("details_url") or data.get("html_url") or None,
        source="check_run",
        updated_at=str(data.get("completed_at") or data.get("started_at") or ""),
    )


def _review(data: dict[str, Any]) -> Review:
    return review_of(data, REVIEW_STATES.get(str(data["state"]).upper(), ReviewState.COMMENTED))
