"""The simulator against the official API descriptions.

Every operation of both reduced descriptions is served, and a sweep calls each of them (and
their main error answers) over HTTP; the ``sim`` fixture validates every request/answer pair
of each test when it ends. The validator itself is shown to catch the drift it is for.
"""

from __future__ import annotations

import re
import time
from typing import Any

import aiohttp
import jwt
import pytest

from reviewbot.sim import SimServer, Simulator
from reviewbot.sim.gitea_api import GiteaApi
from reviewbot.sim.github_api import GitHubApi
from reviewbot.sim.issues_api import GiteaIssues, GitHubIssues
from reviewbot.sim.refs_api import GiteaRefs, GitHubRefs
from tests.support.openapi import ForgeSpecs

REPO = "acme/api"


def test_every_described_operation_is_served_at_its_path(
    sim: Simulator, forge_specs: ForgeSpecs
) -> None:
    github, gitea = GitHubApi(sim), GiteaApi(sim)
    for forge, api, refs, issues in (
        ("github", github, GitHubRefs(github), GitHubIssues(github)),
        ("gitea", gitea, GiteaRefs(gitea), GiteaIssues(gitea)),
    ):
        # The ref routes match names with slashes ({ref:.+}); the descriptions say {ref}.
        served = {
            (r.method, re.sub(r"\{(\w+):[^}]*\}", r"{\1}", r.path), r.operation_id)
            for r in [*api.routes(), *refs.routes(), *issues.routes()]
        }
        described = {(o.method, o.path, o.operation_id) for o in forge_specs[forge].operations}
        assert served == described, forge


async def _call(
    session: aiohttp.ClientSession, url: str, method: str, token: str, **kw: Any
) -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"} if token else {}
    async with session.request(method, url, headers=headers, **kw) as resp:
        raw = await resp.read()
        return resp.status, (await resp.json(content_type=None) if raw else None)


async def test_github_sweep_of_every_operation(
    sim: Simulator, sim_server: SimServer, forge_specs: ForgeSpecs
) -> None:
    sim.create_repo("github", REPO)
    token = sim.add_user("github", "bot")
    sim.set_permission("github", REPO, "bot", "admin")  # protection is shown to admins only
    sim.add_ruleset(REPO, ["~DEFAULT_BRANCH"], ["ci/test"], required_approvals=1)
    app_id, key = sim.create_github_app()
    installation = sim.install_app(app_id, REPO)
    now = int(time.time())
    app_jwt = jwt.encode({"iat": now - 60, "exp": now + 500, "iss": str(app_id)}, key, "RS256")
    pr = sim.open_pr("github", REPO, author="alice", labels=["bug"])
    issue = sim.open_issue("github", REPO, "alice")
    old = pr.head_sha
    sim.push("github", REPO, pr.number)
    sim.require_checks("github", REPO, "main", ["ci/test", "build"], required_approvals=1)
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "success", target_url="http://ci/1")
    sim.set_status("github", REPO, old, "ci/test", "failure")
    sim.set_check_run(REPO, pr.head_sha, "build", details_url="http://ci/build")
    sim.add_comment("github", REPO, pr.number, "alice", "hi")
    api = sim_server.github_api_url + f"/repos/{REPO}"
    n = pr.number
    calls: list[tuple[str, str, str, dict[str, Any]]] = [
        ("GET", "/user", token, {}),
        ("GET", "/user", "", {}),
        ("GET", "/rate_limit", token, {}),
        ("GET", "/app", app_jwt, {}),
        ("GET", f"/repos/{REPO}/installation", app_jwt, {}),
        ("POST", f"/app/installations/{installation}/access_tokens", app_jwt, {}),
        ("POST", "/app/installations/1/access_tokens", app_jwt, {}),
        ("GET", f"/repos/{REPO}", token, {}),
        ("GET", "/repos/acme/missing", token, {}),
        ("GET", f"/repos/{REPO}/branches/main", token, {}),
        ("GET", f"/repos/{REPO}/branches/main/protection", token, {}),
        ("GET", f"/repos/{REPO}/branches/main/protection/required_status_checks", token, {}),
        (
            "GET",
            f"/repos/{REPO}/branches/main/protection/required_status_checks/contexts",
            token,
            {},
        ),
        ("GET", f"/repos/{REPO}/branches/nope/protection", token, {}),
        ("GET", f"/repos/{REPO}/rules/branches/main", token, {}),
        ("GET", f"/repos/{REPO}/rules/branches/nope", token, {"params": {"per_page": "1"}}),
        ("GET", f"/repos/{REPO}/collaborators/alice/permission", token, {}),
        ("POST", f"/repos/{REPO}/git/refs", token, {"json": {"ref": "refs/heads/q/1", "sha": old}}),
        (
            "PATCH",
            f"/repos/{REPO}/git/refs/heads/q/1",
            token,
            {"json": {"sha": pr.head_sha, "force": False}},
        ),
        ("POST", f"/repos/{REPO}/merges", token, {"json": {"base": "q/1", "head": "main"}}),
        ("GET", f"/repos/{REPO}/compare/main...q/1", token, {}),
        ("DELETE", f"/repos/{REPO}/git/refs/heads/q/1", token, {}),
        ("GET", f"/repos/{REPO}/issues/{issue.number}", token, {}),
        ("GET", f"/repos/{REPO}/issues/{pr.number}", token, {}),
        ("PATCH", f"/repos/{REPO}/issues/{issue.number}", token, {"json": {"state": "closed"}}),
        ("GET", f"/repos/{REPO}/commits/{pr.head_sha}/pulls", token, {}),
        ("GET", f"/repos/{REPO}/commits/{pr.head_sha}/status", token, {}),
        ("GET", f"/repos/{REPO}/commits/{old}/statuses", token, {"params": {"per_page": "5"}}),
        (
            "GET",
            f"/repos/{REPO}/commits/{pr.head_sha}/check-runs",
            token,
            {"params": {"filter": "all"}},
        ),
        ("GET", f"/repos/{REPO}/commits/{pr.head_sha}/check-suites", token, {}),
        (
            "GET",
            f"/repos/{REPO}/pulls",
            token,
            {"params": {"state": "open", "head": "acme:feature"}},
        ),
        ("GET", f"/repos/{REPO}/pulls/{n}", token, {}),
        ("GET", f"/repos/{REPO}/pulls/999", token, {}),
        ("GET", f"/repos/{REPO}/pulls/{n}/files", token, {}),
        ("GET", f"/repos/{REPO}/pulls/{n}/commits", token, {}),
        (
            "POST",
            f"/repos/{REPO}/pulls/{n}/reviews",
            token,
            {
                "json": {
                    "commit_id": pr.head_sha,
                    "event": "COMMENT",
                    "body": "b",
                    "comments": [{"path": "a.py", "line": 1, "body": "c"}],
                }
            },
        ),
        ("POST", f"/repos/{REPO}/pulls/{n}/reviews", token, {"json": {"body": "pending"}}),
        ("POST", f"/repos/{REPO}/pulls/{n}/reviews", token, {"json": {"event": "REQUEST_CHANGES"}}),
        ("GET", f"/repos/{REPO}/pulls/{n}/comments", token, {}),
        ("GET", f"/repos/{REPO}/pulls/{n}/reviews", token, {}),
        ("GET", f"/repos/{REPO}/pulls/{n}/reviews/1", token, {}),
        ("GET", f"/repos/{REPO}/issues/{n}/comments", token, {}),
        ("POST", f"/repos/{REPO}/issues/{n}/comments", token, {"json": {"body": "x"}}),
        ("PUT", f"/repos/{REPO}/pulls/{n}/merge", token, {"json": {"sha": old}}),
        ("PUT", f"/repos/{REPO}/pulls/{n}/merge", token, {"json": {"sha": pr.head_sha}}),
    ]
    statuses: list[int] = []
    async with aiohttp.ClientSession() as session:
        for method, path, auth, kw in calls:
            status, _ = await _call(session, sim_server.github_api_url + path, method, auth, **kw)
            statuses.append(status)
        reviews = sim.pull("github", REPO, n).reviews
        pending = next(r for r in reviews if r.state == "PENDING")
        comment = sim.pull("github", REPO, n).comments[-1]
        status, body = await _call(
            session,
            f"{api}/pulls/{n}/reviews/{pending.id}/events",
            "POST",
            token,
            json={"event": "APPROVE", "body": "now"},
        )
        assert (status, body["state"]) == (200, "APPROVED")
        status, body = await _call(session, f"{api}/pulls/{n}/reviews/{pending.id}", "GET", token)
        assert status == 200
        status, _ = await _call(
            session,
            f"{api}/pulls/{n}/reviews/{pending.id}/dismissals",
            "PUT",
            token,
            json={"message": "stale", "event": "DISMISS"},
        )
        assert status == 200
        status, _ = await _call(
            session, f"{api}/issues/comments/{comment.id}", "PATCH", token, json={"body": "y"}
        )
        assert status == 200
        sim.submit_review("github", REPO, n, "carol", "APPROVE")
        status, body = await _call(
            session,
            f"{api}/pulls/{n}/merge",
            "PUT",
            token,
            json={"sha": pr.head_sha, "merge_method": "merge", "commit_title": "t"},
        )
        assert (status, body["merged"]) == (200, True)
    assert statuses[:3] == [200, 401, 200]
    assert statuses[-2:] == [409, 405]
    seen = {r.operation_id for r in sim.requests}
    assert seen == {o.operation_id for o in forge_specs["github"].operations}


async def test_gitea_sweep_of_every_operation(
    sim: Simulator, sim_server: SimServer, forge_specs: ForgeSpecs
) -> None:
    sim.version = "1.26.0"  # a server with the branch update (go-gitea/gitea#35951)
    sim.create_repo("gitea", REPO)
    token = sim.add_user("gitea", "bot")
    sim.set_permission("gitea", REPO, "bot", "admin")
    pr = sim.open_pr("gitea", REPO, author="alice", labels=["bug"])
    old = pr.head_sha
    sim.push("gitea", REPO, pr.number)
    sim.require_checks("gitea", REPO, "main", ["ci/*"])
    sim.set_status("gitea", REPO, pr.head_sha, "ci/unit", "success", target_url="http://ci/1")
    sim.add_comment("gitea", REPO, pr.number, "alice", "hi")
    base = sim_server.gitea_url + "/api/v1"
    api = f"{base}/repos/{REPO}"
    n = pr.number
    async with aiohttp.ClientSession() as session:

        async def call(method: str, url: str, **kw: Any) -> tuple[int, Any]:
            return await _call(session, url, method, kw.pop("token", token), **kw)

        assert (await call("GET", f"{base}/user"))[0] == 200
        assert (await call("GET", f"{base}/user", token=""))[0] == 401
        assert (await call("GET", f"{base}/version"))[0] == 200
        assert (await call("GET", api))[0] == 200
        assert (await call("GET", f"{base}/repos/acme/none"))[0] == 404
        assert (await call("GET", f"{api}/branch_protections"))[0] == 200
        assert (await call("GET", f"{api}/branch_protections/main"))[0] == 200
        assert (await call("GET", f"{api}/branch_protections/dev"))[0] == 404
        assert (await call("GET", f"{api}/branches/main"))[0] == 200
        assert (await call("GET", f"{api}/collaborators/alice/permission"))[0] == 200
        branches = f"{api}/branches"
        created = await call("POST", branches, json={"new_branch_name": "q/1", "old_ref_name": old})
        assert created[0] == 201
        assert (await call("GET", f"{api}/compare/q/1...{pr.head_sha}"))[0] == 200
        ff = {"new_commit_id": pr.head_sha, "force": False}
        assert (await call("PUT", f"{branches}/q/1", json=ff))[0] == 204
        assert (await call("DELETE", f"{branches}/q/1"))[0] == 204
        assert (await call("GET", f"{api}/commits/{pr.head_sha}/status"))[0] == 200
        assert (await call("GET", f"{api}/commits/main/statuses", params={"limit": "5"}))[0] == 200
        assert (await call("GET", f"{api}/statuses/{pr.head_sha}"))[0] == 200
        assert (await call("GET", f"{api}/pulls", params={"state": "all"}))[0] == 200
        assert (await call("GET", f"{api}/pulls/{n}"))[0] == 200
        assert (await call("GET", f"{api}/pulls/{n}/files"))[0] == 200
        assert (await call("GET", f"{api}/pulls/{n}/commits"))[0] == 200
        assert (await call("GET", f"{api}/pulls/{n}/merge"))[0] == 404
        status, body = await call(
            "POST",
            f"{api}/pulls/{n}/reviews",
            json={
                "event": "APPROVED",
                "body": "",
                "commit_id": pr.head_sha,
                "comments": [{"path": "a.py", "new_position": 1, "body": "c"}],
            },
        )
        assert status == 200
        approved = body["id"]
        status, body = await call("POST", f"{api}/pulls/{n}/reviews", json={"body": "draft"})
        assert (status, body["state"]) == (200, "PENDING")
        pending = body["id"]
        assert (await call("GET", f"{api}/pulls/{n}/reviews"))[0] == 200
        assert (await call("GET", f"{api}/pulls/{n}/reviews/{pending}"))[0] == 200
        status, body = await call(
            "POST", f"{api}/pulls/{n}/reviews/{pending}", json={"event": "COMMENT", "body": "x"}
        )
        assert (status, body["state"]) == (200, "COMMENT")
        status, body = await call(
            "POST", f"{api}/pulls/{n}/reviews/{approved}/dismissals", json={"message": "stale"}
        )
        assert (status, body["dismissed"]) == (200, True)
        status, body = await call("POST", f"{api}/issues/{n}/comments", json={"body": "c"})
        assert status == 201
        assert (await call("PATCH", f"{api}/issues/comments/{body['id']}", json={"body": "d"}))[
            0
        ] == 200
        assert (await call("GET", f"{api}/issues/{n}/comments"))[0] == 200
        issue = sim.open_issue("gitea", REPO, "alice")
        assert (await call("GET", f"{api}/issues/{n}"))[0] == 200
        closed = await call("PATCH", f"{api}/issues/{issue.number}", json={"state": "closed"})
        assert (closed[0], closed[1]["state"]) == (201, "closed")
        merge = f"{api}/pulls/{n}/merge"
        assert (await call("POST", merge, json={"Do": "merge", "head_commit_id": old}))[0] == 409
        sim.set_mergeable("gitea", REPO, n, False)
        assert (await call("POST", merge, json={"Do": "merge", "head_commit_id": pr.head_sha}))[
            0
        ] == 405
        sim.set_mergeable("gitea", REPO, n, True)
        assert (await call("POST", merge, json={"Do": "merge", "head_commit_id": pr.head_sha}))[
            0
        ] == 200
        assert (await call("GET", merge))[0] == 204
    seen = {r.operation_id for r in sim.requests}
    assert seen == {o.operation_id for o in forge_specs["gitea"].operations}


# ---------------------------------------------------------------------- the validator catches drift
def _pull_record(sim: Simulator) -> Any:
    return next(r for r in sim.requests if r.operation_id == "pulls/get")


async def test_validator_flags_a_missing_required_field_and_wrong_types(
    sim: Simulator, sim_server: SimServer, forge_specs: ForgeSpecs
) -> None:
    sim.create_repo("github", REPO)
    token = sim.add_user("github", "bot")
    pr = sim.open_pr("github", REPO, author="alice")
    async with aiohttp.ClientSession() as session:
        await _call(
            session, f"{sim_server.github_api_url}/repos/{REPO}/pulls/{pr.number}", "GET", token
        )
    spec = forge_specs["github"]
    good = _pull_record(sim).response_body
    assert spec.validate_response("pulls/get", 200, good, b"{}") == []
    broken = dict(good)
    del broken["head"]
    broken["number"] = "1"
    problems = spec.validate_response("pulls/get", 200, broken, b"{}")
    assert any("'head' is a required property" in p for p in problems)
    assert any("number" in p and "not of type 'integer'" in p for p in problems)
    assert spec.validate_response("pulls/get", 418, None) == [
        "pulls/get: status 418 is not documented"
    ]
    nullable = dict(good, closed_at=None, milestone=None)
    assert spec.validate_response("pulls/get", 200, nullable, b"{}") == []


def test_validator_flags_bad_requests(forge_specs: ForgeSpecs) -> None:
    github, gitea = forge_specs["github"], forge_specs["gitea"]
    assert github.validate_request("PUT", "/repos/a/b/pulls/1/merge", {}, {"sha": "x"}, b"{}") == []
    problems = github.validate_request(
        "PUT", "/repos/a/b/pulls/1/merge", {}, {"merge_method": "octopus"}, b"{}"
    )
    assert problems and "merge_method" in problems[0]
    problems = github.validate_request("GET", "/repos/a/b/pulls", {"state": ["opened"]})
    assert problems == [
        "pulls/list: query state must be one of ['open', 'closed', 'all'], got 'opened'"
    ]
    problems = github.validate_request("GET", "/repos/a/b/pulls", {"per_pgae": ["5"]})
    assert problems == ["pulls/list: query per_pgae is not documented"]
    assert github.validate_request("GET", "/repos/a/b/pulls/one") != []
    assert github.validate_request("DELETE", "/repos/a/b") == [
        "DELETE /repos/a/b: no such operation in the github description"
    ]
    problems = gitea.validate_request("POST", "/repos/a/b/pulls/1/merge", {}, {}, b"{}")
    assert problems and "'Do' is a required property" in problems[0]
    problems = gitea.validate_request("POST", "/repos/a/b/issues/1/comments", {}, {"body": 1}, b"x")
    assert problems and "body" in problems[0]
    problems = gitea.validate_request("GET", "/repos/a/b/pulls/1", {}, {"x": 1}, b'{"x":1}')
    assert problems == ["repoGetPullRequest: a body was sent to an operation that takes none"]


def test_validator_knows_giteas_empty_merge_answer(forge_specs: ForgeSpecs) -> None:
    gitea = forge_specs["gitea"]
    assert gitea.validate_response("repoMergePullRequest", 200, None, b"") == []
    problems = gitea.validate_response("repoMergePullRequest", 200, {"sha": "x"}, b'{"sha":"x"}')
    assert problems == ["repoMergePullRequest 200: this answer must have an empty body"]
    # Go pointer fields are null in real answers; a non-null value still needs its type.
    assert gitea.validate_response("repoGetPullRequest", 200, {"merged_at": None}, b"{}") == []
    assert gitea.validate_response("repoGetPullRequest", 200, {"number": "1"}, b"{}") != []


@pytest.mark.sim_invalid_requests
async def test_the_fixture_can_let_deliberately_invalid_requests_through(
    sim: Simulator, sim_server: SimServer
) -> None:
    sim.create_repo("github", REPO)
    token = sim.add_user("github", "bot")
    async with aiohttp.ClientSession() as session:
        status, _ = await _call(
            session,
            f"{sim_server.github_api_url}/repos/{REPO}/pulls",
            "GET",
            token,
            params={"state": "bogus"},
        )
    assert status == 422
