"""Gitea / Forgejo adapter on httpx (``Authorization: token ...``, API under ``URL/api/v1``).

Where Gitea differs from GitHub, this module absorbs it: review events are spelled
``APPROVED`` / ``REQUEST_CHANGES`` / ``COMMENT`` (anything else silently becomes a
PENDING review, which is an error here); a merge is ``POST`` with ``Do`` and an always
non-empty ``head_commit_id`` and answers 200 with an empty body; required checks are
glob patterns over commit statuses, read from the branch (the protection routes are for
admins only); there is no "pulls of a commit" endpoint.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from reviewbot.core.access import AccessFacts
from reviewbot.core.after_merge import Closing
from reviewbot.core.clock import Clock
from reviewbot.core.models import (
    CheckResult,
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
from reviewbot.forges.errors import (
    ForgeError,
    HeadMoved,
    NotFastForward,
    NotFound,
    NotMergeable,
    PendingReview,
    PermissionDenied,
    RefExists,
    Unsupported,
)
from reviewbot.forges.git_clone import GitClone, clone_path, remote_url
from reviewbot.forges.http import (
    ErrorMap,
    ForgeWatcher,
    HttpAdapter,
    HttpResult,
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

USER_AGENT = "reviewbot"
PAGE_LIMIT = 50  # Gitea's default maximum page size
MAX_ITEMS = 1000  # a bound on every listing

REVIEW_EVENTS: dict[ReviewEvent, str] = {
    ReviewEvent.APPROVE: "APPROVED",
    ReviewEvent.REQUEST_CHANGES: "REQUEST_CHANGES",
    ReviewEvent.COMMENT: "COMMENT",
}
REVIEW_STATES: dict[str, ReviewState] = {
    "APPROVED": ReviewState.APPROVED,
    "REQUEST_CHANGES": ReviewState.CHANGES_REQUESTED,
    "COMMENT": ReviewState.COMMENTED,
    "PENDING": ReviewState.PENDING,
}
MERGE_DO: dict[str, str] = {"merge": "merge", "squash": "squash", "rebase": "rebase"}
MERGE_ERRORS: ErrorMap = {409: HeadMoved, 405: NotMergeable}
READ_CODE = (
    "read access to the repository's code (a collaborator with Read, or a team with Code: Read)"
)
NEWER_SERVER = (
    "a Gitea/Forgejo version whose branch API shows status_check_contexts (Gitea 1.11 or later)"
)
PERMISSIONS: dict[str, str] = {"owner": "admin", "admin": "admin", "write": "write", "read": "read"}
# ``PUT /repos/{o}/{r}/branches/{branch}`` (a fast-forward unless forced) came with Gitea 1.26
# (go-gitea/gitea#35951). Forgejo (``X.Y.Z+gitea-A.B.C``) has no such endpoint.
FAST_FORWARD_API = (1, 26)
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)([^+]*)(\+.*)?$")


class GiteaForge(HttpAdapter):
    """The :class:`~reviewbot.forges.base.Forge` for Gitea and Forgejo."""

    name = "gitea"

    def __init__(
        self,
        *,
        url: str,
        token: str,
        bot_login: str | None = None,
        client: httpx.AsyncClient | None = None,
        policy: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
        on_wait: OnWait | None = None,
        watch: ForgeWatcher | None = None,
        git_root: Path | None = None,
        fast_forward_api: bool | None = None,
    ) -> None:
        if not token:
            raise ValueError("GiteaForge needs a token")
        self._web = url.rstrip("/")
        self._token = token
        self._git_root = git_root
        # None: decided from the server's version on first use.
        self._fast_forward_api = fast_forward_api
        self._clones: dict[str, GitClone] = {}
        self._api = url.rstrip("/") + "/api/v1"
        self.url = self._api
        self._headers = {
            "Authorization": f"token {token}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self._open_http(client, policy, sleep, clock, on_wait, watch)
        self._bot_login = bot_login
        self._branch_reads: dict[tuple[str, str], asyncio.Future[Any]] = {}

    # -- Forge -----------------------------------------------------------------------

    async def probe(self) -> str:
        result = await self._send("probe", "GET", "/user", once=True)
        with response_shape("probe"):
            return str(as_dict(decode_json(result, operation="probe"), "probe")["login"])

    async def bot_login(self) -> str:
        if self._bot_login is None:
            user = await self._get_json("bot_login", "/user")
            with response_shape("bot_login"):
                self._bot_login = str(as_dict(user, "bot_login")["login"])
        return self._bot_login

    async def get_pull(
        self, repo: str, number: int, *, read_within_s: float = 0.0
    ) -> PullRequestSnapshot:
        # Always asked: Gitea's reads cost no rate-limit budget (and a 304 costs less still).
        return await self._pull(repo, number, "get_pull")

    async def list_open_pulls(self, repo: str) -> list[PullRequestSnapshot]:
        return await self._open_pulls(repo, "list_open_pulls")

    async def pulls_for_sha(self, repo: str, sha: str) -> list[PullRequestSnapshot]:
        # Gitea has no "pull requests of a commit" endpoint: filter the open PRs.
        pulls = await self._open_pulls(repo, "pulls_for_sha")
        return [p for p in pulls if p.head_sha == sha]

    async def required_checks(self, repo: str, branch: str) -> RequiredChecks:
        """The branch's protection as ``GET /repos/{o}/{r}/branches/{b}`` shows it to a reader.

        The ``branch_protections`` routes are for repository admins only (``reqAdmin()`` in
        Gitea's API router); the branch itself carries ``enable_status_check``,
        ``status_check_contexts`` and ``required_approvals`` for anyone who can read code.
        A refusal, or a protected branch whose answer leaves them out (an old server), is a
        gap, never "not protected".
        """
        try:
            data = await self._branch(repo, branch)
        except PermissionDenied as exc:
            return RequiredChecks(
                globs=True, unreadable=(RulesGap("branch", READ_CODE, exc.status),)
            )
        with response_shape("required_checks"):
            found = as_dict(data, "required_checks")
            if not found.get("protected"):
                return RequiredChecks(globs=True)
            if "enable_status_check" not in found:
                return RequiredChecks(
                    globs=True,
                    unreadable=(RulesGap("branch_protection", NEWER_SERVER),),
                )
            approvals = int(found.get("required_approvals") or 0)
            if not found["enable_status_check"]:
                return RequiredChecks(globs=True, required_approvals=approvals)
            patterns = [str(p) for p in found.get("status_check_contexts") or () if str(p)]
            # Status checks without patterns: Gitea requires every status to pass (and
            # none at all is pending), which the pattern "*" says exactly.
            return RequiredChecks(
                tuple(dict.fromkeys(patterns or ["*"])), globs=True, required_approvals=approvals
            )

    async def check_results(self, repo: str, sha: str) -> list[CheckResult]:
        path = _repo_path(repo, "commits", sha, "status")
        statuses: list[Any] = []
        for page in range(1, MAX_ITEMS // PAGE_LIMIT + 1):
            combined = as_dict(
                await self._get_json("check_results", path, {"page": page, "limit": PAGE_LIMIT}),
                "check_results",
            )
            batch = as_list(combined.get("statuses") or [], "check_results")
            statuses += batch
            total = combined.get("total_count")
            if len(batch) < PAGE_LIMIT or (isinstance(total, int) and len(statuses) >= total):
                break
        return map_all(statuses, _status, "check_results")

    async def list_reviews(self, repo: str, number: int) -> list[Review]:
        items = await self._paged("list_reviews", _repo_path(repo, "pulls", number, "reviews"))
        reviews = map_all(items, _review, "list_reviews")
        return [r for r in reviews if r is not None]

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
        if not commit_sha:
            raise ValueError("a review is always pinned to a commit SHA")
        payload: dict[str, Any] = {
            "commit_id": commit_sha,
            "body": body,
            "event": REVIEW_EVENTS[ReviewEvent(event)],
        }
        if comments:
            payload["comments"] = [
                {"path": c.path, "body": c.body, "new_position": c.line} for c in comments
            ]
        result = await self._send(
            "submit_review", "POST", _repo_path(repo, "pulls", number, "reviews"), payload
        )
        data = as_dict(decode_json(result, operation="submit_review"), "submit_review")
        with response_shape("submit_review"):
            review = _review(data)
        if review is None or review.state is ReviewState.PENDING:
            raise PendingReview(
                f"review {data.get('id')} was stored as {data.get('state')!r}, not submitted",
                status=result.status,
                operation="submit_review",
            )
        return review

    async def merge(
        self, repo: str, number: int, *, head_sha: str, method: str = "merge"
    ) -> MergeResult:
        if not head_sha:
            # Gitea checks the head only when head_commit_id is non-empty.
            raise ValueError("a merge is always pinned to the head SHA")
        if method not in MERGE_DO:
            raise ValueError(f"merge method {method!r}: expected one of {', '.join(MERGE_DO)}")
        # Never merge_when_checks_succeed: a scheduled merge ignores head_commit_id.
        payload = {"Do": MERGE_DO[method], "head_commit_id": head_sha}
        try:
            await self._send(
                "merge",
                "POST",
                _repo_path(repo, "pulls", number, "merge"),
                payload,
                errors=MERGE_ERRORS,
            )
        except HeadMoved as exc:
            # Gitea answers 409 for a moved head ("head out of date") and for conflicts.
            if "conflict" in str(exc).lower():
                raise NotMergeable(str(exc.args[0]), status=409, operation="merge") from None
            raise
        # 200 with an empty body: read the PR back for the merge commit. The call went
        # through either way; when the read fails or lags, the caller's own re-read decides
        # (reporting a failure here would invite a second merge call).
        try:
            pull = await self._pull(repo, number, "merge")
        except ForgeError:
            return MergeResult(merged=True, merge_commit_sha=None)
        return MergeResult(merged=True, merge_commit_sha=pull.merge_commit_sha)

    async def access(self, repo: str) -> AccessFacts:
        found = as_dict(await self._get_json("access", _repo_path(repo)), "access")
        version = as_dict(await self._get_json("access", "/version"), "access").get("version")
        with response_shape("access"):
            shown = found.get("permissions")
            return AccessFacts(
                "gitea",
                repo,
                "token",
                shown={str(k): bool(v) for k, v in shown.items()}
                if isinstance(shown, dict)
                else None,
                version=str(version) if version is not None else None,
            )

    async def merge_permission(self, repo: str, pull: PullRequestSnapshot) -> str | None:
        """``user_can_merge`` of the base branch as the bot's account sees it: write
        access, and a place on the branch's merge whitelist when it has one (Gitea's
        ``IsUserAllowedToMerge``)."""
        data = await self._branch(repo, pull.base_ref)
        with response_shape("merge_permission"):
            if as_dict(data, "merge_permission").get("user_can_merge") is False:
                return (
                    f"permission to merge into {pull.base_ref}: write access to the repository, "
                    "and a place on the branch protection's merge whitelist when it has one"
                )
        return None

    async def user_permission(self, repo: str, user: str) -> str:
        try:
            data = await self._get_json(
                "user_permission", _repo_path(repo, "collaborators", user, "permission")
            )
        except NotFound:
            return "none"
        with response_shape("user_permission"):
            permission = str(as_dict(data, "user_permission")["permission"]).lower()
        return PERMISSIONS.get(permission, "none")

    async def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        if not marker:
            raise ValueError("a comment marker must not be empty")
        me = await self.bot_login()
        items = as_list(
            await self._get_json("find_comment", _repo_path(repo, "issues", number, "comments")),
            "find_comment",
        )
        return marked_comment(map_all(items, comment_of, "find_comment"), me, marker)

    async def create_comment(self, repo: str, number: int, body: str) -> Comment:
        result = await self._send(
            "create_comment", "POST", _repo_path(repo, "issues", number, "comments"), {"body": body}
        )
        data = as_dict(decode_json(result, operation="create_comment"), "create_comment")
        with response_shape("create_comment"):
            return comment_of(data)

    async def edit_comment(self, repo: str, comment_id: int, body: str) -> Comment:
        result = await self._send(
            "edit_comment",
            "PATCH",
            _repo_path(repo, "issues", "comments", comment_id),
            {"body": body},
        )
        if result.status == 204 or not result.body:
            return Comment(id=comment_id, author=await self.bot_login(), body=body)
        data = as_dict(decode_json(result, operation="edit_comment"), "edit_comment")
        with response_shape("edit_comment"):
            return comment_of(data)

    # -- ref operations (RefOps): the branch API, and git for what it lacks ----------

    async def record_landed(self, repo: str, number: int, sha: str) -> None:
        """Mark the pull request merged by ``sha``, a commit already on its base branch
        (``Do: manually-merged``: go-gitea/gitea services/pull/merge.go MergedManually).

        Gitea and Forgejo refuse it (405) unless the repository allows manual merges
        ("Allow manual merge", off by default); the 405 of a merge says no more than
        "refused" (the API description documents it empty), so the repository's setting is
        read to say which refusal it was."""
        try:
            await self._send(
                "record_landed",
                "POST",
                _repo_path(repo, "pulls", number, "merge"),
                {"Do": "manually-merged", "MergeCommitID": sha},
                errors=MERGE_ERRORS,
            )
        except HeadMoved as exc:  # 409: "Wrong commit ID", not on the base branch
            raise NotMergeable(str(exc.args[0]), status=409, operation="record_landed") from None
        except NotMergeable as exc:
            settings = as_dict(await self._get_json("record_landed", _repo_path(repo)), "repo")
            if settings.get("allow_manual_merge") is False:
                raise NotMergeable(
                    f"{repo} does not allow marking pull requests manually merged: turn on "
                    "its pull-request setting allow_manual_merge (the repository's settings, "
                    "or PATCH /repos/{owner}/{repo}) so landed pull requests show merged",
                    status=exc.status,
                    operation="record_landed",
                ) from None
            raise

    def ref_ops(self) -> RefOps:
        """Gitea has no server-side merge of two refs: merge commits are made in the bot's
        git clone, so the capability needs a folder for it and the ``git`` program."""
        if self._git_root is None:
            raise Unsupported(
                "gitea: ref operations need a folder for the bot's git clone "
                "(the adapter was built without the data folder)",
                operation="ref_ops",
            )
        if shutil.which("git") is None:
            raise Unsupported(
                "gitea: ref operations need the git program, which is not installed",
                operation="ref_ops",
            )
        return self

    async def create_branch(self, repo: str, branch: str, sha: str) -> None:
        await self._send(
            "create_branch",
            "POST",
            _repo_path(repo, "branches"),
            {"new_branch_name": branch, "old_ref_name": sha},
            errors={409: RefExists},
        )

    async def delete_branch(self, repo: str, branch: str) -> None:
        await self._send("delete_branch", "DELETE", _branch_path(repo, branch))

    async def branch_head(self, repo: str, branch: str) -> str | None:
        """``GET /repos/{owner}/{repo}/branches/{branch}`` (``repoGetBranch``)."""
        try:
            data = await self._get_json("branch_head", _branch_path(repo, branch))
        except NotFound:
            return None
        with response_shape("branch_head"):
            return str(as_dict(data, "branch_head")["commit"]["id"])

    async def close_issue(self, repo: str, number: int) -> Closing:
        """``issueGetIssue``, then ``issueEditIssue`` with ``state: closed``
        (routers/api/v1/repo/issue.go). A pull request is an issue there too (it carries
        ``pull_request``): one is never closed here."""
        path = _repo_path(repo, "issues", number)
        data = as_dict(await self._get_json("get_issue", path), "get_issue")
        if data.get("pull_request"):
            return Closing.NOT_AN_ISSUE
        if data.get("state") == "closed":
            return Closing.ALREADY_CLOSED
        await self._send("close_issue", "PATCH", path, {"state": "closed"})
        return Closing.CLOSED

    async def compare(self, repo: str, base: str, head: str) -> Comparison:
        """Two comparisons: Gitea lists the commits from the merge base to the second commit,
        so ``head...base`` lists none exactly when ``base`` is an ancestor of ``head``; the
        files are those of the commits of ``base...head``."""
        behind = await self._compare(repo, head, base)
        ahead = await self._compare(repo, base, head)
        with response_shape("compare"):
            paths = [
                str(f["filename"])
                for commit in as_list(ahead.get("commits") or [], "compare")
                for f in as_list(as_dict(commit, "compare").get("files") or [], "compare")
                if as_dict(f, "compare").get("filename")
            ]
            return Comparison(
                base=base,
                head=head,
                base_is_ancestor=not behind.get("commits") and not behind.get("total_commits"),
                files=tuple(dict.fromkeys(paths)),
            )

    async def merge_into(self, repo: str, branch: str, sha: str, message: str) -> MergeCommit:
        clone = await self._clone(repo)
        tip, merge = await clone.merge(branch, sha, message)
        if merge is None:
            return MergeCommit(tip, created=False, onto=tip)
        # The commit exists only in the clone: a plain push lands it, and the server takes
        # it only while the branch is still at ``tip`` (a fast-forward).
        await clone.push(merge, branch, operation="merge_into")
        return MergeCommit(merge, created=True, onto=tip)

    async def fast_forward(self, repo: str, branch: str, sha: str) -> None:
        if await self._has_fast_forward_api():
            await self._send(
                "fast_forward",
                "PUT",
                _branch_path(repo, branch),
                {"new_commit_id": sha, "force": False},
                errors={409: NotFastForward},
            )
            return
        clone = await self._clone(repo)
        await clone.push(sha, branch, operation="fast_forward")

    async def _compare(self, repo: str, base: str, head: str) -> dict[str, Any]:
        owner, name = split_repo(repo)
        path = "/repos/{}/{}/compare/{}".format(
            quote(owner, safe=""), quote(name, safe=""), quote(f"{base}...{head}", safe="/")
        )
        return as_dict(await self._get_json("compare", path), "compare")

    async def _has_fast_forward_api(self) -> bool:
        if self._fast_forward_api is None:
            found = as_dict(await self._get_json("fast_forward", "/version"), "fast_forward")
            self._fast_forward_api = has_fast_forward_api(str(found.get("version") or ""))
        return self._fast_forward_api

    async def _clone(self, repo: str) -> GitClone:
        key = repo.lower()
        clone = self._clones.get(key)
        if clone is None:
            self.ref_ops()  # says what is missing
            assert self._git_root is not None
            login = await self.bot_login()
            host = urlsplit(self._web).hostname or "localhost"
            clone = GitClone(
                clone_path(self._git_root, self.name, repo),
                remote_url(self._web, repo),
                username=login,
                token=self._token,
                author=(login, f"{login}@noreply.{host}"),
            )
            self._clones[key] = clone
        return clone

    # -- plumbing --------------------------------------------------------------------

    async def _pull(self, repo: str, number: int, operation: str) -> PullRequestSnapshot:
        owner, name = split_repo(repo)
        data = as_dict(
            await self._get_json(operation, _repo_path(repo, "pulls", number)), operation
        )
        with response_shape(operation):
            return _snapshot(owner, name, data)

    async def _open_pulls(self, repo: str, operation: str) -> list[PullRequestSnapshot]:
        owner, name = split_repo(repo)
        items = await self._paged(operation, _repo_path(repo, "pulls"), {"state": "open"})
        return map_all(items, lambda d: _snapshot(owner, name, d), operation)

    async def _paged(
        self, operation: str, path: str, params: Mapping[str, Any] | None = None
    ) -> list[Any]:
        """Every item of a paginated listing (``page`` / ``limit``), up to ``MAX_ITEMS``."""
        items: list[Any] = []
        for page in range(1, MAX_ITEMS // PAGE_LIMIT + 1):
            query = {**(params or {}), "page": page, "limit": PAGE_LIMIT}
            result = await self._send(operation, "GET", path, params=query)
            batch = as_list(decode_json(result, operation=operation), operation)
            items += batch
            total = str(result.headers.get("x-total-count") or "")
            if len(batch) < PAGE_LIMIT or (total.isdigit() and len(items) >= int(total)):
                break
        return items

    async def _branch(self, repo: str, branch: str) -> Any:
        """``GET /repos/{o}/{r}/branches/{b}``, read once for everyone asking at the same
        time: a merge's judgement wants the branch's rules and the bot's merge permission
        at once, and both are in the one answer. Nothing is kept past the read in flight."""
        key = (repo.lower(), branch)
        pending = self._branch_reads.get(key)
        if pending is None:
            pending = asyncio.ensure_future(
                self._get_json("branch", _repo_path(repo, "branches", branch))
            )
            self._branch_reads[key] = pending
            pending.add_done_callback(lambda _: self._branch_reads.pop(key, None))
        # One caller giving up does not cancel the read the others wait for.
        return await asyncio.shield(pending)

    async def _get_json(
        self, operation: str, path: str, params: Mapping[str, Any] | None = None
    ) -> Any:
        result = await self._send(operation, "GET", path, params=params)
        return decode_json(result, operation=operation)

    async def _send(
        self,
        operation: str,
        method: str,
        path: str,
        payload: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        errors: ErrorMap | None = None,
        once: bool = False,
    ) -> HttpResult:
        url = self._api + path
        if params:
            url += "?" + urlencode(params)
        headers = dict(self._headers)
        body = b""
        if payload is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(payload).encode()
        return await self._http.send(
            operation, method, url, headers=headers, body=body, errors=errors, once=once
        )


def _repo_path(repo: str, *parts: str | int) -> str:
    owner, name = split_repo(repo)
    segments = [quote(owner, safe=""), quote(name, safe="")]
    segments += [quote(str(p), safe="") for p in parts]
    return "/repos/" + "/".join(segments)


def _branch_path(repo: str, branch: str) -> str:
    # Gitea routes the branch as the rest of the path: its slashes stay slashes.
    return _repo_path(repo, "branches") + "/" + quote(branch, safe="/")


def has_fast_forward_api(version: str) -> bool:
    """Whether a server of ``version`` (``GET /version``) has the fast-forward branch update.

    A release of Gitea 1.26 or later has it; Forgejo (``+gitea-`` in its version) does not; a
    development build (``1.26.0+dev-...``) cannot be placed before or after the change, so it
    is taken not to (the plain push does the same job).
    """
    found = _RELEASE.match(version.strip())
    if found is None or "gitea-" in version:
        return False
    release = (int(found.group(1)), int(found.group(2)))
    pre = found.group(4) + (found.group(5) or "")
    if release > FAST_FORWARD_API:
        return True
    return release == FAST_FORWARD_API and "dev" not in pre


def _snapshot(owner: str, name: str, data: dict[str, Any]) -> PullRequestSnapshot:
    return pull_snapshot("gitea", owner, name, data, merged=bool(data.get("merged")))


def _status(data: dict[str, Any]) -> CheckResult:
    return commit_status(data, state_field="status")


def _review(data: dict[str, Any]) -> Review | None:
    """A review; ``None`` for a review *request* (Gitea lists those as reviews too)."""
    state_name = str(data["state"]).upper()
    if state_name == "REQUEST_REVIEW":
        return None
    state = REVIEW_STATES.get(state_name, ReviewState.COMMENTED)
    if data.get("dismissed"):
        state = ReviewState.DISMISSED
    return review_of(data, state)
