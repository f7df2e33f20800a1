"""The GitHub REST subset: handlers for the operations in GitHub's reduced description."""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from reviewbot.sim.checks import protection_for, rulesets_for
from reviewbot.sim.clock import forge_time
from reviewbot.sim.errors import ApiError
from reviewbot.sim.git import FileChange
from reviewbot.sim.github_auth import GitHubIdentity, bearer, identify
from reviewbot.sim.github_json import GitHubJson
from reviewbot.sim.http import Call, Reply, Route
from reviewbot.sim.permissions import GITHUB, github_granted, role_at_least
from reviewbot.sim.state import SimPull, SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.simulator import Simulator

DOCS = "https://docs.github.com/rest"
RATE_LIMIT = 5000
RATE_WINDOW = 3600
GRAPHQL = "graphql"  # POST /graphql (sim/github_graphql.py), outside the REST description
# Operations that take an App JWT rather than a user or installation token.
APP_OPERATIONS = (
    "apps/get-authenticated",
    "apps/get-repo-installation",
    "apps/create-installation-access-token",
)


# Operations whose 422 body is ``validation-error-simple`` (errors are strings); the others
# answer ``validation-error`` (errors are objects with a ``code``).
SIMPLE_VALIDATION = ("pulls/create-review", "pulls/dismiss-review", "pulls/submit-review")


def error_body(
    status: int, message: str, errors: list[str] | None = None, *, simple: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS}
    if errors:
        body["errors"] = (
            list(errors)
            if simple
            else [{"resource": "Issue", "code": "custom", "message": e} for e in errors]
        )
    if status in (401, 403, 404, 409, 405, 429) or status >= 500:
        body["status"] = str(status)
    return body


def etag_of(payload: bytes) -> str:
    return '"' + hashlib.sha256(payload).hexdigest()[:40] + '"'


class GitHubApi:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.json = GitHubJson(sim)
        self._rate: dict[str, tuple[int, float]] = {}  # identity -> (remaining, reset)

    # ------------------------------------------------------------------ plumbing
    def routes(self) -> list[Route]:
        r = Route
        repo = "/repos/{owner}/{repo}"
        return [
            r("GET", "/user", "users/get-authenticated", self.get_user),
            r("GET", "/app", "apps/get-authenticated", self.get_app),
            r("GET", "/rate_limit", "rate-limit/get", self.get_rate_limit),
            r(
                "POST",
                "/app/installations/{installation_id}/access_tokens",
                "apps/create-installation-access-token",
                self.create_access_token,
            ),
            r("GET", f"{repo}/installation", "apps/get-repo-installation", self.get_installation),
            r("GET", repo, "repos/get", self.get_repo),
            r(
                "GET",
                f"{repo}/branches/{{branch}}/protection/required_status_checks/contexts",
                "repos/get-all-status-check-contexts",
                self.get_contexts,
            ),
            r(
                "GET",
                f"{repo}/branches/{{branch}}/protection/required_status_checks",
                "repos/get-status-checks-protection",
                self.get_status_checks,
            ),
            r(
                "GET",
                f"{repo}/branches/{{branch}}/protection",
                "repos/get-branch-protection",
                self.get_protection,
            ),
            r("GET", f"{repo}/branches/{{branch}}", "repos/get-branch", self.get_branch),
            r(
                "GET",
                f"{repo}/rules/branches/{{branch}}",
                "repos/get-branch-rules",
                self.get_branch_rules,
            ),
            r(
                "GET",
                f"{repo}/collaborators/{{username}}/permission",
                "repos/get-collaborator-permission-level",
                self.get_permission,
            ),
            r(
                "GET",
                f"{repo}/commits/{{commit_sha}}/pulls",
                "repos/list-pull-requests-associated-with-commit",
                self.pulls_for_commit,
            ),
            r(
                "GET",
                f"{repo}/commits/{{ref}}/status",
                "repos/get-combined-status-for-ref",
                self.combined_status,
            ),
            r(
                "GET",
                f"{repo}/commits/{{ref}}/statuses",
                "repos/list-commit-statuses-for-ref",
                self.list_statuses,
            ),
            r("GET", f"{repo}/commits/{{ref}}/check-runs", "checks/list-for-ref", self.check_runs),
            r(
                "GET",
                f"{repo}/commits/{{ref}}/check-suites",
                "checks/list-suites-for-ref",
                self.check_suites,
            ),
            r("GET", f"{repo}/pulls", "pulls/list", self.list_pulls),
            r("GET", f"{repo}/pulls/{{pull_number}}", "pulls/get", self.get_pull),
            r("GET", f"{repo}/pulls/{{pull_number}}/files", "pulls/list-files", self.list_files),
            r(
                "GET",
                f"{repo}/pulls/{{pull_number}}/commits",
                "pulls/list-commits",
                self.list_commits,
            ),
            r(
                "GET",
                f"{repo}/pulls/{{pull_number}}/comments",
                "pulls/list-review-comments",
                self.list_review_comments,
            ),
            r("PUT", f"{repo}/pulls/{{pull_number}}/merge", "pulls/merge", self.merge),
            r(
                "GET",
                f"{repo}/pulls/{{pull_number}}/reviews",
                "pulls/list-reviews",
                self.list_reviews,
            ),
            r(
                "POST",
                f"{repo}/pulls/{{pull_number}}/reviews",
                "pulls/create-review",
                self.create_review,
            ),
            r(
                "GET",
                f"{repo}/pulls/{{pull_number}}/reviews/{{review_id}}",
                "pulls/get-review",
                self.get_review,
            ),
            r(
                "PUT",
                f"{repo}/pulls/{{pull_number}}/reviews/{{review_id}}/dismissals",
                "pulls/dismiss-review",
                self.dismiss_review,
            ),
            r(
                "POST",
                f"{repo}/pulls/{{pull_number}}/reviews/{{review_id}}/events",
                "pulls/submit-review",
                self.submit_review,
            ),
            r(
                "GET",
                f"{repo}/issues/{{issue_number}}/comments",
                "issues/list-comments",
                self.list_comments,
            ),
            r(
                "POST",
                f"{repo}/issues/{{issue_number}}/comments",
                "issues/create-comment",
                self.create_comment,
            ),
            r(
                "PATCH",
                f"{repo}/issues/comments/{{comment_id}}",
                "issues/update-comment",
                self.update_comment,
            ),
        ]

    def error(
        self, status: int, message: str, errors: list[str] | None = None, operation: str = ""
    ) -> Reply:
        simple = operation in SIMPLE_VALIDATION
        return Reply(status, error_body(status, message, errors, simple=simple))

    def _rate_headers(self, key: str, count: bool) -> dict[str, str]:
        now = self.sim.now()
        remaining, reset = self._rate.get(key, (RATE_LIMIT, now + RATE_WINDOW))
        if reset <= now:
            remaining, reset = RATE_LIMIT, now + RATE_WINDOW
        if count:
            remaining = max(0, remaining - 1)
        self._rate[key] = (remaining, reset)
        return {
            "x-ratelimit-limit": str(RATE_LIMIT),
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-reset": str(math.ceil(reset)),
            "x-ratelimit-used": str(RATE_LIMIT - remaining),
            "x-ratelimit-resource": "core",
        }

    async def serve(self, route: Route, request: web.Request, body: Any) -> web.Response:
        """Authenticate, run the handler, then add ETag and rate-limit headers."""
        who: GitHubIdentity | None = None
        call: Call | None = None
        try:
            who = identify(self.sim, request.headers.get("Authorization"))
            if route.operation_id in APP_OPERATIONS and who.kind != "app":
                raise ApiError(
                    401,
                    "A JSON web token could not be decoded",
                )
            if who.kind == "app" and route.operation_id not in APP_OPERATIONS:
                raise ApiError(
                    403,
                    "Resource not accessible by integration",
                )
            call = Call(
                sim=self.sim,
                request=request,
                params=dict(request.match_info),
                body=body,
                login=who.login,
                installation_id=who.installation_id,
            )
            self._check_installation_scope(who, call)
            self._check_permission(route, who, call, request.headers.get("Authorization", ""))
            if route.operation_id == "users/get-authenticated" and who.kind == "installation":
                raise ApiError(403, "Resource not accessible by integration")
            reply = await route.handler(call)
        except ApiError as exc:
            reply = self.error(exc.status, exc.message, exc.errors, route.operation_id)
            reply.headers.update(exc.headers)
        key = "anonymous" if who is None else f"{who.kind}:{who.login}:{who.installation_id}"
        if call is not None and call.links and reply.status == 200:
            reply.headers["Link"] = call.links
        response = reply.to_response()
        if request.method == "GET" and reply.status == 200 and reply.body is not None:
            tag = etag_of(response.body if isinstance(response.body, bytes) else b"")
            response.headers["ETag"] = tag
            if _etag_matches(request.headers.get("If-None-Match"), tag):
                response = web.Response(status=304, headers={"ETag": tag})
        if route.operation_id == GRAPHQL:
            return response  # charged in points by its own handler
        # Neither a 304 nor GET /rate_limit counts against the limit.
        counted = response.status != 304 and route.operation_id != "rate-limit/get"
        response.headers.update(self._rate_headers(key, count=counted))
        return response

    def _check_installation_scope(self, who: GitHubIdentity, call: Call) -> None:
        if who.kind != "installation" or "owner" not in call.params:
            return
        installation = self.sim.installations[who.installation_id or 0]
        if f"{call.params['owner']}/{call.params['repo']}".lower() not in installation.repos:
            raise ApiError(404, "Not Found")

    def _check_permission(
        self, route: Route, who: GitHubIdentity, call: Call, authorization: str
    ) -> None:
        """Refuse as GitHub does when the caller lacks what the operation needs
        (``sim/permissions.py`` holds the table and its sources)."""
        need = GITHUB.get(route.operation_id)
        if need is None or "owner" not in call.params:
            return
        repo = self.sim.find_repo("github", call.params["owner"], call.params["repo"])
        if repo is None:
            return  # the handler answers 404
        accepted = {"X-Accepted-GitHub-Permissions": need.header()}
        if who.kind == "installation":
            installation = self.sim.installations[who.installation_id or 0]
            if not github_granted(installation.permissions, need):
                raise ApiError(403, "Resource not accessible by integration", headers=accepted)
            return
        granted = self.sim.token_permissions(bearer(authorization) or "")
        if granted is not None and not github_granted(granted, need):
            raise ApiError(
                403, "Resource not accessible by personal access token", headers=accepted
            )
        role = self.sim.permission(repo, who.login)
        if need.admin_only and role != "admin":
            raise ApiError(404, "Not Found")  # GitHub hides admin routes from non-admins
        if role == "none" and repo.private:
            raise ApiError(404, "Not Found")
        if need.role != "read" and not role_at_least(role, need.role):
            raise ApiError(403, "Must have push access to repository")

    def _repo(self, call: Call) -> SimRepo:
        repo = self.sim.find_repo("github", call.params["owner"], call.params["repo"])
        if repo is None:
            raise ApiError(404, "Not Found")
        return repo

    def _pull(self, call: Call, repo: SimRepo) -> SimPull:
        pull = repo.pulls.get(call.int_param("pull_number"))
        if pull is None:
            raise ApiError(404, "Not Found")
        return pull

    @staticmethod
    def _page(call: Call, items: list[Any]) -> list[Any]:
        try:
            per_page = min(100, max(1, int(call.query("per_page") or 30)))
            page = max(1, int(call.query("page") or 1))
        except ValueError:
            raise ApiError(422, "Validation Failed") from None
        start = (page - 1) * per_page
        last = max(1, -(-len(items) // per_page))
        if page < last:
            # GitHub's pagination: a Link header naming the next and the last page.
            url = call.request.url
            rels = [(page + 1, "next"), (last, "last")]
            call.links = ", ".join(
                f'<{url.update_query(page=str(n), per_page=str(per_page))}>; rel="{rel}"'
                for n, rel in rels
            )
        return items[start : start + per_page]

    def _commit_for_ref(self, repo: SimRepo, ref: str) -> str:
        if ref in repo.commits:
            return ref
        if ref in repo.branches:
            return repo.branches[ref]
        found = self.sim.resolve(repo, ref)  # a pushed commit git holds, or a tag
        if found is not None:
            return found
        raise ApiError(404, f"No commit found for SHA: {ref}")

    # ------------------------------------------------------------------ identity
    async def get_user(self, call: Call) -> Reply:
        return Reply(200, self.json.private_user(call.login))

    async def get_app(self, call: Call) -> Reply:
        app = next(a for a in self.sim.apps.values() if a.bot_login == call.login)
        return Reply(200, self.json.app(app))

    async def get_rate_limit(self, call: Call) -> Reply:
        kind = "installation" if call.installation_id else "user"
        key = f"{kind}:{call.login}:{call.installation_id}"
        remaining, reset = self._rate.get(key, (RATE_LIMIT, self.sim.now() + RATE_WINDOW))
        return Reply(200, self.json.rate_limit(RATE_LIMIT, remaining, math.ceil(reset)))

    async def get_installation(self, call: Call) -> Reply:
        full = f"{call.params['owner']}/{call.params['repo']}".lower()
        app = next(a for a in self.sim.apps.values() if a.bot_login == call.login)
        for installation in self.sim.installations.values():
            if installation.app_id == app.id and full in installation.repos:
                return Reply(200, self.json.installation(installation))
        raise ApiError(404, "Not Found")

    async def create_access_token(self, call: Call) -> Reply:
        try:
            installation_id = int(call.params["installation_id"])
        except ValueError:
            raise ApiError(404, "Not Found") from None
        installation = self.sim.installations.get(installation_id)
        app = next(a for a in self.sim.apps.values() if a.bot_login == call.login)
        if installation is None or installation.app_id != app.id:
            raise ApiError(404, "Not Found")
        token, expires_at = self.sim.issue_installation_token(installation)
        body = {
            "token": token,
            "expires_at": forge_time(expires_at),
            "permissions": dict(installation.permissions),
            "repository_selection": "selected",
        }
        return Reply(201, body)

    # ------------------------------------------------------------------ repository
    async def get_repo(self, call: Call) -> Reply:
        repo = self._repo(call)
        body = self.json.repository(repo, full=True)
        if call.installation_id is None:
            # With a user's token GitHub shows that user's access (full-repository schema).
            role = self.sim.permission(repo, call.login)
            body["permissions"] = {
                "admin": role == "admin",
                "maintain": role == "admin",
                "push": role in ("admin", "write"),
                "triage": role in ("admin", "write"),
                "pull": role != "none" or not repo.private,
            }
        return Reply(200, body)

    def _protection(self, call: Call, repo: SimRepo) -> Any:
        branch = call.params["branch"]
        if branch not in repo.branches:
            raise ApiError(404, "Branch not found")
        protection = protection_for(repo, branch)
        if protection is None:
            raise ApiError(404, "Branch not protected")
        return protection

    async def get_protection(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, self.json.branch_protection(repo, self._protection(call, repo)))

    async def get_status_checks(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, self.json.status_check_policy(repo, self._protection(call, repo)))

    async def get_contexts(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, list(self._protection(call, repo).contexts))

    async def get_branch(self, call: Call) -> Reply:
        repo = self._repo(call)
        branch = call.params["branch"]
        if branch not in repo.branches:
            raise ApiError(404, "Branch not found")
        return Reply(200, self.json.branch(repo, branch, protection_for(repo, branch)))

    async def get_branch_rules(self, call: Call) -> Reply:
        # The branch need not exist: the rules that would apply to that name are returned.
        repo = self._repo(call)
        rules = self.json.branch_rules(repo, rulesets_for(repo, call.params["branch"]))
        return Reply(200, self._page(call, rules))

    async def get_permission(self, call: Call) -> Reply:
        repo = self._repo(call)
        login = call.params["username"]
        if login not in self.sim.users["github"]:
            raise ApiError(404, "Not Found")
        permission = self.sim.permission(repo, login)
        if permission == "none":
            raise ApiError(404, f"{login} is not a user")
        user = self.json.user(login)
        user["permissions"] = {
            "pull": True,
            "triage": permission != "read",
            "push": permission in ("write", "admin"),
            "maintain": permission == "admin",
            "admin": permission == "admin",
        }
        user["role_name"] = permission
        return Reply(200, {"permission": permission, "role_name": permission, "user": user})

    # ------------------------------------------------------------------ commits and CI
    async def pulls_for_commit(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = call.params["commit_sha"]
        if sha not in repo.commits:
            raise ApiError(404, f"No commit found for SHA: {sha}")
        pulls = [p for p in repo.pulls.values() if sha in p.commits or p.merge_commit_sha == sha]
        return Reply(200, self._page(call, [self.json.pull(repo, p, simple=True) for p in pulls]))

    async def combined_status(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = self._commit_for_ref(repo, call.params["ref"])
        return Reply(200, self.json.combined_status(repo, sha))

    async def list_statuses(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = self._commit_for_ref(repo, call.params["ref"])
        statuses = sorted(
            (s for s in repo.statuses if s.sha == sha), key=lambda s: s.id, reverse=True
        )
        return Reply(200, self._page(call, [self.json.status(repo, s) for s in statuses]))

    async def check_runs(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = self._commit_for_ref(repo, call.params["ref"])
        runs = self.json.check_runs(repo, sha, latest=call.query("filter", "latest") != "all")
        if call.query("check_name"):
            runs = [r for r in runs if r["name"] == call.query("check_name")]
        if call.query("status"):
            runs = [r for r in runs if r["status"] == call.query("status")]
        if call.query("app_id"):
            runs = [r for r in runs if str(r["app"]["id"]) == call.query("app_id")]
        page = self._page(call, runs)
        return Reply(200, {"total_count": len(runs), "check_runs": page})

    async def check_suites(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = self._commit_for_ref(repo, call.params["ref"])
        suites = [self.json.check_suite(repo, s) for s in repo.check_suites if s.sha == sha]
        page = self._page(call, suites)
        return Reply(200, {"total_count": len(suites), "check_suites": page})

    # ------------------------------------------------------------------ pulls
    async def list_pulls(self, call: Call) -> Reply:
        repo = self._repo(call)
        state = call.query("state", "open")
        if state not in ("open", "closed", "all"):
            raise ApiError(422, "Validation Failed")
        pulls = [p for p in repo.pulls.values() if state == "all" or p.state == state]
        head = call.query("head")
        if head:
            owner, _, ref = head.partition(":")
            pulls = [p for p in pulls if (p.head_ref == ref and owner == repo.owner)]
        base = call.query("base")
        if base:
            pulls = [p for p in pulls if p.base == base]
        pulls.sort(key=lambda p: p.number, reverse=call.query("direction", "desc") == "desc")
        return Reply(200, self._page(call, [self.json.pull(repo, p, simple=True) for p in pulls]))

    async def get_pull(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, self.json.pull(repo, self._pull(call, repo)))

    async def list_files(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        changes = self.sim.pull_changes(repo, pull)
        if changes is not None:
            return Reply(200, self._page(call, [self._file(repo, pull, c) for c in changes]))
        # Virtual commits have no files: one made-up file per commit.
        files = [
            {
                "sha": sha,
                "filename": f"change_{i}.txt",
                "status": "modified",
                "additions": 1,
                "deletions": 0,
                "changes": 1,
                "blob_url": f"{self.json.web}/{repo.full_name}/blob/{sha}/change_{i}.txt",
                "raw_url": f"{self.json.web}/{repo.full_name}/raw/{sha}/change_{i}.txt",
                "contents_url": f"{self.json.api}/repos/{repo.full_name}/contents/change_{i}.txt",
                "patch": "@@ -0,0 +1 @@\n+change",
            }
            for i, sha in enumerate(pull.commits, start=1)
        ]
        return Reply(200, self._page(call, files))

    def _file(self, repo: SimRepo, pull: SimPull, change: FileChange) -> dict[str, Any]:
        web, head, path = self.json.web, pull.head_sha, change.path
        return {
            "sha": change.blob,
            "filename": path,
            "status": {"A": "added", "D": "removed"}.get(change.status, "modified"),
            "additions": change.additions,
            "deletions": change.deletions,
            "changes": change.additions + change.deletions,
            "blob_url": f"{web}/{repo.full_name}/blob/{head}/{path}",
            "raw_url": f"{web}/{repo.full_name}/raw/{head}/{path}",
            "contents_url": f"{self.json.api}/repos/{repo.full_name}/contents/{path}?ref={head}",
        }

    async def list_commits(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        commits = [self.json.commit(repo, repo.commits[sha]) for sha in pull.commits]
        return Reply(200, self._page(call, commits))

    async def list_review_comments(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        comments = [
            self.json.review_comment(repo, pull, review, i)
            for review in pull.reviews
            for i in range(len(review.comments))
        ]
        return Reply(200, self._page(call, comments))

    async def merge(self, call: Call) -> Reply:
        repo = self._repo(call)
        body = call.body if isinstance(call.body, dict) else {}
        if call.body is not None and not isinstance(call.body, dict):
            raise ApiError(422, "Validation Failed", errors=["body must be an object"])
        method = body.get("merge_method", "merge")
        if method not in ("merge", "squash", "rebase"):
            raise ApiError(422, "Validation Failed", errors=[f"Invalid merge_method {method!r}"])
        sha = body.get("sha")
        if sha is not None and not isinstance(sha, str):
            raise ApiError(422, "Validation Failed", errors=["sha must be a string"])
        try:
            pull = self.sim.api_merge_github(
                repo, call.int_param("pull_number"), call.login, sha=sha, method=method
            )
        except ApiError as exc:
            if exc.status in (405, 409):
                return Reply(exc.status, {"message": exc.message, "documentation_url": DOCS})
            raise
        return Reply(
            200,
            {
                "sha": pull.merge_commit_sha,
                "merged": True,
                "message": "Pull Request successfully merged",
            },
        )

    # ------------------------------------------------------------------ reviews
    def _visible(self, call: Call, pull: SimPull) -> list[Any]:
        return [r for r in pull.reviews if r.state != "PENDING" or r.user == call.login]

    async def list_reviews(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        reviews = [self.json.review(repo, pull, r) for r in self._visible(call, pull)]
        return Reply(200, self._page(call, reviews))

    async def create_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        body = call.body if isinstance(call.body, dict) else {}
        comments = body.get("comments") or []
        if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
            raise ApiError(422, "Unprocessable Entity", errors=["comments must be a list"])
        event = body.get("event")
        review = self.sim.api_create_review(
            repo,
            pull.number,
            call.login,
            event=event if isinstance(event, str) else None,
            body=str(body.get("body") or ""),
            commit_id=body.get("commit_id") if isinstance(body.get("commit_id"), str) else None,
            comments=comments,
        )
        return Reply(200, self.json.review(repo, pull, review))

    async def get_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        review = self.sim.api_review(pull, call.int_param("review_id"))
        return Reply(200, self.json.review(repo, pull, review))

    async def dismiss_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        body = call.body if isinstance(call.body, dict) else {}
        if not isinstance(body.get("message"), str):
            raise ApiError(422, "Unprocessable Entity", errors=["message is required"])
        review = self.sim.api_dismiss(repo, pull.number, call.int_param("review_id"))
        return Reply(200, self.json.review(repo, pull, review))

    async def submit_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        body = call.body if isinstance(call.body, dict) else {}
        review = self.sim.api_submit_pending(
            repo,
            pull.number,
            call.int_param("review_id"),
            call.login,
            str(body.get("event") or ""),
            str(body.get("body") or ""),
        )
        return Reply(200, self.json.review(repo, pull, review))

    # ------------------------------------------------------------------ comments
    async def list_comments(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = repo.pulls.get(call.int_param("issue_number"))
        if pull is None:
            raise ApiError(404, "Not Found")
        comments = [self.json.issue_comment(repo, c) for c in pull.comments]
        return Reply(200, self._page(call, comments))

    async def create_comment(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = repo.pulls.get(call.int_param("issue_number"))
        if pull is None:
            raise ApiError(404, "Not Found")
        body = call.body.get("body") if isinstance(call.body, dict) else None
        if not isinstance(body, str):
            raise ApiError(422, "Validation Failed", errors=["body is required"])
        comment = self.sim.add_comment("github", repo.full_name, pull.number, call.login, body)
        rendered = self.json.issue_comment(repo, comment)
        return Reply(201, rendered, {"Location": rendered["url"]})

    async def update_comment(self, call: Call) -> Reply:
        repo = self._repo(call)
        comment = self.sim.find_comment(repo, call.int_param("comment_id"))
        if comment is None:
            raise ApiError(404, "Not Found")
        body = call.body.get("body") if isinstance(call.body, dict) else None
        if not isinstance(body, str):
            raise ApiError(422, "Validation Failed", errors=["body is required"])
        if comment.user != call.login and self.sim.permission(repo, call.login) != "admin":
            raise ApiError(403, "Resource not accessible by integration")
        comment.body = body
        comment.updated_at = self.sim.now()
        return Reply(200, self.json.issue_comment(repo, comment))


def _etag_matches(header: str | None, tag: str) -> bool:
    if not header:
        return False
    candidates = [part.strip().removeprefix("W/") for part in header.split(",")]
    return tag in candidates or "*" in candidates
