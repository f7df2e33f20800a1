"""Issues of both forges, as far as the bot uses them: read one, close it.

GitHub (REST reference, "Issues": "Get an issue" ``GET /repos/{o}/{r}/issues/{n}`` 200, and
"Update an issue" ``PATCH`` with ``state`` 200; https://docs.github.com/en/rest/issues/issues):
every pull request is an issue too, shown with a ``pull_request`` member; a number that is
neither is 404. Updating needs push access (or the Triage role) for a user token and Issues
write for an App (``sim/permissions.py``).

Gitea (``routers/api/v1/repo/issue.go``: ``GetIssue``, ``EditIssue``): 404 for an unknown
index; ``EditIssue`` answers 403 with an empty body unless the caller wrote the issue or may
write issues (``CanWriteIssuesOrPulls``), 412 for a state change of a merged pull request,
and 201 with the issue on success.

Only issues are closed here; closing a pull request through these routes is not simulated
(the bot never does it: it reads first and leaves pull requests alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reviewbot.sim.clock import forge_time
from reviewbot.sim.errors import ApiError
from reviewbot.sim.github_json import node_id
from reviewbot.sim.http import Call, Reply, Route
from reviewbot.sim.permissions import role_at_least
from reviewbot.sim.state import SimIssue, SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.gitea_api import GiteaApi
    from reviewbot.sim.github_api import GitHubApi

REPO = "/repos/{owner}/{repo}"


def _state(call: Call) -> str:
    body = call.body if isinstance(call.body, dict) else {}
    state = body.get("state")
    if state not in ("open", "closed"):
        raise ApiError(422, "Validation Failed", errors=['"state" must be open or closed'])
    return str(state)


def _close(call: Call, issue: SimIssue, state: str) -> None:
    now = call.sim.now()
    issue.state, issue.updated_at = state, now
    issue.closed_at = now if state == "closed" else None
    issue.closed_by = call.login if state == "closed" else None


class GitHubIssues:
    def __init__(self, api: GitHubApi) -> None:
        self.api = api
        self.sim = api.sim

    def routes(self) -> list[Route]:
        r = Route
        path = f"{REPO}/issues/{{issue_number}}"
        return [
            r("GET", path, "issues/get", self.get_issue),
            r("PATCH", path, "issues/update", self.update_issue),
        ]

    def _json(self, repo: SimRepo, number: int) -> dict[str, Any]:
        """GitHub's ``issue`` object (every member its schema requires)."""
        web = f"{self.api.json.web}/{repo.full_name}"
        api = f"{self.api.json.api}/repos/{repo.full_name}"
        issue = repo.issues.get(number)
        pull = repo.pulls.get(number)
        if issue is None and pull is None:
            raise ApiError(404, "Not Found")
        if issue is not None:
            id_, title, author, state = issue.id, issue.title, issue.author, issue.state
            created, updated, closed = issue.created_at, issue.updated_at, issue.closed_at
            html = f"{web}/issues/{number}"
        else:
            assert pull is not None
            id_, title, author, state = pull.id, pull.title, pull.author, pull.state
            created, updated, closed = pull.created_at, pull.updated_at, pull.closed_at
            html = f"{web}/pull/{number}"
        url = f"{api}/issues/{number}"
        body: dict[str, Any] = {
            "id": id_,
            "node_id": node_id("I", id_),
            "url": url,
            "repository_url": api,
            "labels_url": f"{url}/labels{{/name}}",
            "comments_url": f"{url}/comments",
            "events_url": f"{url}/events",
            "html_url": html,
            "number": number,
            "state": state,
            "state_reason": "completed" if state == "closed" else None,
            "title": title,
            "user": self.api.json.user(author),
            "labels": [],
            "assignee": None,
            "milestone": None,
            "locked": False,
            "comments": 0,
            "created_at": forge_time(created),
            "updated_at": forge_time(updated),
            "closed_at": forge_time(closed) if closed is not None else None,
        }
        if pull is not None and issue is None:
            body["pull_request"] = {
                "url": f"{api}/pulls/{number}",
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
                "merged_at": forge_time(pull.merged_at) if pull.merged_at else None,
            }
        return body

    async def get_issue(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        return Reply(200, self._json(repo, call.int_param("issue_number")))

    async def update_issue(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        number = call.int_param("issue_number")
        issue = repo.issues.get(number)
        if issue is None:
            if number in repo.pulls:
                raise ApiError(422, "Only issues are simulated here, not pull requests")
            raise ApiError(404, "Not Found")
        role = self.sim.permission(repo, call.login)
        if issue.author != call.login and not role_at_least(role, "write"):
            raise ApiError(403, "Must have push access to repository")
        _close(call, issue, _state(call))
        return Reply(200, self._json(repo, number))


class GiteaIssues:
    def __init__(self, api: GiteaApi) -> None:
        self.api = api
        self.sim = api.sim

    def routes(self) -> list[Route]:
        r = Route
        path = f"{REPO}/issues/{{index}}"
        return [
            r("GET", path, "issueGetIssue", self.get_issue),
            r("PATCH", path, "issueEditIssue", self.edit_issue),
        ]

    def _json(self, repo: SimRepo, number: int) -> dict[str, Any]:
        web = f"{self.api.json.web}/{repo.full_name}"
        issue = repo.issues.get(number)
        if issue is not None:
            return {
                "id": issue.id,
                "number": number,
                "title": issue.title,
                "user": self.api.json.user(issue.author),
                "state": issue.state,
                "html_url": f"{web}/issues/{number}",
                "closed_at": forge_time(issue.closed_at) if issue.closed_at else None,
                "pull_request": None,
            }
        pull = repo.pulls.get(number)
        if pull is None:
            raise ApiError(404, "issue does not exist")
        return {
            "id": pull.id,
            "number": number,
            "title": pull.title,
            "user": self.api.json.user(pull.author),
            "state": pull.state,
            "html_url": f"{web}/pulls/{number}",
            "pull_request": {
                "merged": pull.merged,
                "merged_at": forge_time(pull.merged_at) if pull.merged_at else None,
            },
        }

    async def get_issue(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        return Reply(200, self._json(repo, call.int_param("index")))

    async def edit_issue(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        number = call.int_param("index")
        issue = repo.issues.get(number)
        pull = repo.pulls.get(number)
        if issue is None and pull is None:
            raise ApiError(404, "issue does not exist")
        poster = (issue.author if issue is not None else pull.author if pull else "") == call.login
        # EditIssue: "if !issue.IsPoster(ctx.Doer.ID) && !canWrite" -> a bare 403.
        if not poster and not role_at_least(self.sim.permission(repo, call.login), "write"):
            return Reply(403)
        state = _state(call)
        if issue is None:
            if pull is not None and pull.merged:
                merged = "cannot change state of this pull request, it was already merged"
                raise ApiError(412, merged)
            raise ApiError(422, "Only issues are simulated here, not pull requests")
        _close(call, issue, state)
        return Reply(201, self._json(repo, number))
