"""The Gitea API subset: handlers for the operations in Gitea's reduced description."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from reviewbot.sim.checks import protection_for
from reviewbot.sim.errors import ApiError
from reviewbot.sim.gitea_json import GiteaJson
from reviewbot.sim.github_auth import bearer
from reviewbot.sim.http import Call, Reply, Route
from reviewbot.sim.permissions import GITEA, PERMISSION_QUERY, role_at_least
from reviewbot.sim.state import SimPull, SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.simulator import Simulator

MERGE_STYLES = ("merge", "rebase", "rebase-merge", "squash", "fast-forward-only", "manually-merged")


class GiteaApi:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.json = GiteaJson(sim)

    def error_body(self, message: str) -> dict[str, Any]:
        return {"message": message, "url": f"{self.json.api}/swagger"}

    def routes(self) -> list[Route]:
        r = Route
        repo = "/repos/{owner}/{repo}"
        pulls = f"{repo}/pulls/{{index}}"
        return [
            r("GET", "/user", "userGetCurrent", self.get_user),
            r("GET", "/version", "getVersion", self.get_version),
            r("GET", repo, "repoGet", self.get_repo),
            r(
                "GET",
                f"{repo}/branch_protections",
                "repoListBranchProtection",
                self.list_protections,
            ),
            r(
                "GET",
                f"{repo}/branch_protections/{{name}}",
                "repoGetBranchProtection",
                self.get_protection,
            ),
            r("GET", f"{repo}/branches/{{branch}}", "repoGetBranch", self.get_branch),
            r(
                "GET",
                f"{repo}/collaborators/{{collaborator}}/permission",
                "repoGetRepoPermissions",
                self.get_permission,
            ),
            r(
                "GET",
                f"{repo}/commits/{{ref}}/status",
                "repoGetCombinedStatusByRef",
                self.combined_status,
            ),
            r(
                "GET",
                f"{repo}/commits/{{ref}}/statuses",
                "repoListStatusesByRef",
                self.list_statuses_by_ref,
            ),
            r("GET", f"{repo}/statuses/{{sha}}", "repoListStatuses", self.list_statuses),
            r("GET", f"{repo}/pulls", "repoListPullRequests", self.list_pulls),
            r("GET", pulls, "repoGetPullRequest", self.get_pull),
            r("GET", f"{pulls}/files", "repoGetPullRequestFiles", self.list_files),
            r("GET", f"{pulls}/commits", "repoGetPullRequestCommits", self.list_commits),
            r("GET", f"{pulls}/merge", "repoPullRequestIsMerged", self.is_merged),
            r("POST", f"{pulls}/merge", "repoMergePullRequest", self.merge),
            r("GET", f"{pulls}/reviews", "repoListPullReviews", self.list_reviews),
            r("POST", f"{pulls}/reviews", "repoCreatePullReview", self.create_review),
            r("GET", f"{pulls}/reviews/{{id}}", "repoGetPullReview", self.get_review),
            r("POST", f"{pulls}/reviews/{{id}}", "repoSubmitPullReview", self.submit_review),
            r(
                "POST",
                f"{pulls}/reviews/{{id}}/dismissals",
                "repoDismissPullReview",
                self.dismiss_review,
            ),
            r("GET", f"{repo}/issues/{{index}}/comments", "issueGetComments", self.list_comments),
            r(
                "POST",
                f"{repo}/issues/{{index}}/comments",
                "issueCreateComment",
                self.create_comment,
            ),
            r("PATCH", f"{repo}/issues/comments/{{id}}", "issueEditComment", self.edit_comment),
        ]

    async def serve(self, route: Route, request: web.Request, body: Any) -> web.Response:
        try:
            login = self._authenticate(request)
            call = Call(
                sim=self.sim,
                request=request,
                params=dict(request.match_info),
                body=body,
                login=login,
            )
            self._check_role(route, call)
            reply = await route.handler(call)
        except ApiError as exc:
            if exc.status == 404:
                reply = Reply(
                    404,
                    {
                        "errors": [exc.message],
                        "message": "The target couldn't be found.",
                        "url": f"{self.json.api}/swagger",
                    },
                )
            else:
                reply = Reply(exc.status, self.error_body(exc.message))
        return reply.to_response()

    def _authenticate(self, request: web.Request) -> str:
        token = bearer(request.headers.get("Authorization", ""))
        if token is None:
            raise ApiError(401, "token is required")
        login = self.sim.login_for_token("gitea", token)
        if login is None:
            raise ApiError(401, "user does not exist or token is invalid")
        return login

    def _check_role(self, route: Route, call: Call) -> None:
        """Refuse as Gitea's router does when the caller's role on the repository is too low
        (``sim/permissions.py`` holds the table and the router lines it follows)."""
        need = GITEA.get(route.operation_id)
        if need is None or "owner" not in call.params:
            return
        repo = self.sim.find_repo("gitea", call.params["owner"], call.params["repo"])
        if repo is None:
            return  # the handler answers 404
        role = self.sim.permission(repo, call.login)
        if role == "none" and repo.private:
            raise ApiError(404, "repository does not exist")  # repoAssignment hides it
        if need.role != "read" and not role_at_least(role, need.role):
            raise ApiError(403, need.message)

    # ------------------------------------------------------------------ lookups
    def _repo(self, call: Call) -> SimRepo:
        repo = self.sim.find_repo("gitea", call.params["owner"], call.params["repo"])
        if repo is None:
            raise ApiError(404, "repository does not exist")
        return repo

    def _pull(self, call: Call, repo: SimRepo) -> SimPull:
        pull = repo.pulls.get(call.int_param("index"))
        if pull is None:
            raise ApiError(404, "pull request does not exist")
        return pull

    @staticmethod
    def _page(call: Call, items: list[Any], default_limit: int = 30) -> list[Any]:
        try:
            limit = max(1, min(50, int(call.query("limit") or default_limit)))
            page = max(1, int(call.query("page") or 1))
        except ValueError:
            raise ApiError(422, "page and limit must be integers") from None
        start = (page - 1) * limit
        return items[start : start + limit]

    def _sha_for_ref(self, repo: SimRepo, ref: str) -> str:
        if ref in repo.commits:
            return ref
        if ref in repo.branches:
            return repo.branches[ref]
        found = self.sim.resolve(repo, ref)  # a pushed commit git holds, or a tag
        if found is not None:
            return found
        raise ApiError(404, f"ref {ref} not found")

    # ------------------------------------------------------------------ identity and repo
    async def get_user(self, call: Call) -> Reply:
        return Reply(200, self.json.user(call.login))

    async def get_version(self, call: Call) -> Reply:
        return Reply(200, {"version": self.sim.version})

    async def get_repo(self, call: Call) -> Reply:
        return Reply(200, self.json.repository(self._repo(call), viewer=call.login))

    async def list_protections(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, [self.json.protection(p) for p in repo.protections.values()])

    async def get_protection(self, call: Call) -> Reply:
        repo = self._repo(call)
        protection = repo.protections.get(call.params["name"])
        if protection is None:
            raise ApiError(404, "branch protection does not exist")
        return Reply(200, self.json.protection(protection))

    async def get_branch(self, call: Call) -> Reply:
        repo = self._repo(call)
        name = call.params["branch"]
        if name not in repo.branches:
            raise ApiError(404, "branch does not exist")
        protection = protection_for(repo, name)
        return Reply(200, self.json.branch(repo, name, protection, call.login))

    async def get_permission(self, call: Call) -> Reply:
        repo = self._repo(call)
        login = call.params["collaborator"]
        if login not in self.sim.users["gitea"]:
            raise ApiError(404, "user does not exist")
        if login != call.login and self.sim.permission(repo, call.login) != "admin":
            raise ApiError(403, PERMISSION_QUERY)
        permission = self.sim.permission(repo, login)
        return Reply(
            200, {"permission": permission, "role_name": permission, "user": self.json.user(login)}
        )

    # ------------------------------------------------------------------ statuses
    async def combined_status(self, call: Call) -> Reply:
        repo = self._repo(call)
        sha = self._sha_for_ref(repo, call.params["ref"])
        return Reply(200, self.json.combined_status(repo, sha))

    def _statuses(self, call: Call, repo: SimRepo, sha: str) -> Reply:
        statuses = sorted(
            (s for s in repo.statuses if s.sha == sha), key=lambda s: s.id, reverse=True
        )
        state = call.query("state")
        if state:
            statuses = [s for s in statuses if s.state == state]
        return Reply(200, self._page(call, [self.json.status(repo, s) for s in statuses]))

    async def list_statuses_by_ref(self, call: Call) -> Reply:
        repo = self._repo(call)
        return self._statuses(call, repo, self._sha_for_ref(repo, call.params["ref"]))

    async def list_statuses(self, call: Call) -> Reply:
        repo = self._repo(call)
        return self._statuses(call, repo, call.params["sha"])

    # ------------------------------------------------------------------ pulls
    async def list_pulls(self, call: Call) -> Reply:
        repo = self._repo(call)
        state = call.query("state", "open")
        pulls = [p for p in repo.pulls.values() if state == "all" or p.state == state]
        base = call.query("base_branch")
        if base:
            pulls = [p for p in pulls if p.base == base]
        pulls.sort(key=lambda p: p.number, reverse=True)
        return Reply(200, self._page(call, [self.json.pull(repo, p) for p in pulls]))

    async def get_pull(self, call: Call) -> Reply:
        repo = self._repo(call)
        return Reply(200, self.json.pull(repo, self._pull(call, repo)))

    async def list_files(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        changes = self.sim.pull_changes(repo, pull)
        if changes is not None:
            web, api, head = self.json.web, self.json.api, pull.head_sha
            rows = [
                {
                    "filename": c.path,
                    "status": {"A": "added", "D": "deleted"}.get(c.status, "changed"),
                    "additions": c.additions,
                    "deletions": c.deletions,
                    "changes": c.additions + c.deletions,
                    "html_url": f"{web}/{repo.full_name}/src/commit/{head}/{c.path}",
                    "contents_url": f"{api}/repos/{repo.full_name}/contents/{c.path}?ref={head}",
                    "raw_url": f"{web}/{repo.full_name}/raw/commit/{head}/{c.path}",
                }
                for c in changes
            ]
            return Reply(200, self._page(call, rows))
        # Virtual commits have no files: one made-up file per commit.
        files = [
            {
                "filename": f"change_{i}.txt",
                "status": "changed",
                "additions": 1,
                "deletions": 0,
                "changes": 1,
                "html_url": f"{self.json.web}/{repo.full_name}/src/commit/{sha}/change_{i}.txt",
                "contents_url": f"{self.json.api}/repos/{repo.full_name}/contents/change_{i}.txt",
                "raw_url": f"{self.json.web}/{repo.full_name}/raw/commit/{sha}/change_{i}.txt",
            }
            for i, sha in enumerate(pull.commits, start=1)
        ]
        return Reply(200, self._page(call, files))

    async def list_commits(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        commits = [self.json.commit(repo, repo.commits[sha]) for sha in pull.commits]
        return Reply(200, self._page(call, commits))

    async def is_merged(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        return Reply(204 if pull.merged else 404)

    async def merge(self, call: Call) -> Reply:
        repo = self._repo(call)
        body = call.body if isinstance(call.body, dict) else {}
        do = body.get("Do")
        if do not in MERGE_STYLES:
            raise ApiError(
                422, "[Do]: Required" if do is None else f"[Do]: invalid merge style {do!r}"
            )
        head = body.get("head_commit_id") or ""
        if not isinstance(head, str):
            raise ApiError(422, "[head_commit_id]: must be a string")
        merge_commit = body.get("MergeCommitID") or ""
        if not isinstance(merge_commit, str):
            raise ApiError(422, "[MergeCommitID]: must be a string")
        try:
            status = self.sim.api_merge_gitea(
                repo,
                call.int_param("index"),
                call.login,
                do=do,
                head_commit_id=head,
                when_checks_succeed=bool(body.get("merge_when_checks_succeed")),
                merge_commit_id=merge_commit,
            )
        except ApiError as exc:
            if exc.status == 405:
                # The description documents this answer as empty (``APIEmpty``).
                return Reply(405)
            raise
        return Reply(status)  # Gitea answers an empty body on success

    # ------------------------------------------------------------------ reviews
    async def list_reviews(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        visible = [r for r in pull.reviews if r.state != "PENDING" or r.user == call.login]
        return Reply(200, self._page(call, [self.json.review(repo, pull, r) for r in visible]))

    async def create_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        body = call.body if isinstance(call.body, dict) else {}
        comments = body.get("comments") or []
        if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
            raise ApiError(422, "comments must be a list")
        event = body.get("event")
        review = self.sim.api_create_review(
            repo,
            pull.number,
            call.login,
            event=event if isinstance(event, str) and event else None,
            body=str(body.get("body") or ""),
            commit_id=body.get("commit_id") if isinstance(body.get("commit_id"), str) else None,
            comments=comments,
        )
        return Reply(200, self.json.review(repo, pull, review))

    async def get_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        review = self.sim.api_review(pull, call.int_param("id"))
        return Reply(200, self.json.review(repo, pull, review))

    async def submit_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        body = call.body if isinstance(call.body, dict) else {}
        review = self.sim.api_submit_pending(
            repo,
            pull.number,
            call.int_param("id"),
            call.login,
            str(body.get("event") or ""),
            str(body.get("body") or ""),
        )
        return Reply(200, self.json.review(repo, pull, review))

    async def dismiss_review(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = self._pull(call, repo)
        if self.sim.permission(repo, call.login) != "admin":
            raise ApiError(403, "Must be repo admin")
        review = self.sim.api_dismiss(repo, pull.number, call.int_param("id"))
        return Reply(200, self.json.review(repo, pull, review))

    # ------------------------------------------------------------------ comments
    async def list_comments(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = repo.pulls.get(call.int_param("index"))
        if pull is None:
            raise ApiError(404, "issue does not exist")
        return Reply(200, [self.json.comment(repo, c) for c in pull.comments])

    async def create_comment(self, call: Call) -> Reply:
        repo = self._repo(call)
        pull = repo.pulls.get(call.int_param("index"))
        if pull is None:
            raise ApiError(404, "issue does not exist")
        body = call.body.get("body") if isinstance(call.body, dict) else None
        if not isinstance(body, str) or not body:
            raise ApiError(422, "[Body]: Required")
        comment = self.sim.add_comment("gitea", repo.full_name, pull.number, call.login, body)
        return Reply(201, self.json.comment(repo, comment))

    async def edit_comment(self, call: Call) -> Reply:
        repo = self._repo(call)
        comment = self.sim.find_comment(repo, call.int_param("id"))
        if comment is None:
            raise ApiError(404, "comment does not exist")
        body = call.body.get("body") if isinstance(call.body, dict) else None
        if not isinstance(body, str) or not body:
            raise ApiError(422, "[Body]: Required")
        if comment.user != call.login and self.sim.permission(repo, call.login) != "admin":
            raise ApiError(403, "user should have permission to edit comment")
        comment.body = body
        comment.updated_at = self.sim.now()
        return Reply(200, self.json.comment(repo, comment))
