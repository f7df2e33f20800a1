"""The simulator's GitHub REST subset over real HTTP: state, auth, App flow, ETags, faults."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import jwt
import pytest

from reviewbot.sim import ManualClock, SimServer, Simulator

REPO = "acme/api"


class GitHub:
    def __init__(self, session: aiohttp.ClientSession, server: SimServer, token: str) -> None:
        self.session = session
        self.base = server.github_api_url
        self.token = token

    async def call(
        self, method: str, path: str, *, token: str | None = None, **kw: Any
    ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        headers = dict(kw.pop("headers", {}))
        auth = self.token if token is None else token
        if auth:
            headers.setdefault("Authorization", f"token {auth}")
        async with self.session.request(method, self.base + path, headers=headers, **kw) as resp:
            raw = await resp.read()
            body = await resp.json(content_type=None) if raw else None
            return resp.status, body, resp.headers


@pytest.fixture
async def gh(sim: Simulator, sim_server: SimServer) -> Any:
    sim.create_repo("github", REPO)
    token = sim.add_user("github", "bot")
    sim.add_user("github", "alice")
    async with aiohttp.ClientSession() as session:
        yield GitHub(session, sim_server, token)


async def test_missing_or_wrong_token_is_401_with_githubs_error_body(gh: GitHub) -> None:
    status, body, _ = await gh.call("GET", "/user", token="")
    assert status == 401
    assert body["message"] == "Requires authentication"
    assert "documentation_url" in body
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls", token="nope")
    assert (status, body["message"]) == (401, "Bad credentials")
    status, body, _ = await gh.call("GET", "/user", headers={"Authorization": "Bearer " + gh.token})
    assert (status, body["login"]) == (200, "bot")


async def test_pull_request_reads(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice", head_ref="feature", title="Add", labels=["x"])
    other = sim.open_pr("github", REPO, author="alice", head_ref="other")
    sim.update_pr("github", REPO, other.number, state="closed")

    status, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}")
    assert status == 200
    assert body["head"]["sha"] == pr.head_sha
    assert (body["base"]["ref"], body["user"]["login"], body["draft"]) == ("main", "alice", False)
    assert [label["name"] for label in body["labels"]] == ["x"]
    assert body["mergeable"] is True and body["merged"] is False

    status, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls", params={"state": "open"})
    assert [p["number"] for p in body] == [pr.number]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls", params={"head": "acme:feature"})
    assert [p["number"] for p in body] == [pr.number]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls", params={"state": "all"})
    assert sorted(p["number"] for p in body) == [pr.number, other.number]

    _, body, _ = await gh.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/pulls")
    assert [p["number"] for p in body] == [pr.number]

    status, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/99")
    assert (status, body["message"]) == (404, "Not Found")
    for path in ("/files", "/commits", "/comments"):
        status, _, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}{path}")
        assert status == 200
    status, body, _ = await gh.call("GET", f"/repos/{REPO}")
    assert (status, body["default_branch"]) == (200, "main")


async def test_branch_protection_and_ci_results(sim: Simulator, gh: GitHub) -> None:
    # Protection is for repository admins: to anyone else GitHub answers 404, protected or
    # not (https://docs.github.com/en/rest/branches/branch-protection).
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/branches/main/protection")
    assert (status, body["message"]) == (404, "Not Found")
    sim.set_permission("github", REPO, "bot", "admin")
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/branches/main/protection")
    assert (status, body["message"]) == (404, "Branch not protected")
    sim.require_checks("github", REPO, "main", ["ci/test", "build"])
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/branches/main/protection")
    assert body["required_status_checks"]["contexts"] == ["ci/test", "build"]
    _, body, _ = await gh.call(
        "GET", f"/repos/{REPO}/branches/main/protection/required_status_checks"
    )
    assert body["checks"] == [
        {"context": "ci/test", "app_id": None},
        {"context": "build", "app_id": None},
    ]
    _, body, _ = await gh.call(
        "GET", f"/repos/{REPO}/branches/main/protection/required_status_checks/contexts"
    )
    assert body == ["ci/test", "build"]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/branches/main")
    assert body["protected"] is True

    pr = sim.open_pr("github", REPO, author="alice")
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "pending")
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "success", target_url="http://ci/1")
    sim.set_check_run(REPO, pr.head_sha, "build", status="in_progress", conclusion=None)
    sim.set_check_run(REPO, pr.head_sha, "build", conclusion="failure")

    _, body, _ = await gh.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/status")
    assert body["state"] == "success"
    assert [(s["context"], s["state"]) for s in body["statuses"]] == [("ci/test", "success")]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/statuses")
    assert [s["state"] for s in body] == ["success", "pending"]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/check-runs")
    assert body["total_count"] == 1
    run = body["check_runs"][0]
    assert (run["name"], run["status"], run["conclusion"]) == ("build", "completed", "failure")
    assert run["pull_requests"][0]["number"] == pr.number
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/check-suites")
    assert body["check_suites"][0]["conclusion"] == "failure"
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}")
    assert body["mergeable_state"] == "blocked"


async def test_reviews_pinned_to_commits(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    first = pr.head_sha
    sim.push("github", REPO, pr.number)
    status, body, _ = await gh.call(
        "POST",
        f"/repos/{REPO}/pulls/{pr.number}/reviews",
        json={"commit_id": first, "event": "APPROVE", "body": "ok <!-- m1 -->"},
    )
    assert status == 200
    assert (body["state"], body["commit_id"], body["user"]["login"]) == ("APPROVED", first, "bot")
    review_id = body["id"]
    _, body, _ = await gh.call(
        "POST",
        f"/repos/{REPO}/pulls/{pr.number}/reviews",
        json={"event": "REQUEST_CHANGES", "body": "no", "comments": [{"path": "a", "body": "x"}]},
    )
    assert (body["state"], body["commit_id"]) == ("CHANGES_REQUESTED", pr.head_sha)
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}/reviews")
    assert [r["state"] for r in body] == ["APPROVED", "CHANGES_REQUESTED"]
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}/reviews/{review_id}")
    assert body["body"] == "ok <!-- m1 -->"
    status, body, _ = await gh.call(
        "PUT",
        f"/repos/{REPO}/pulls/{pr.number}/reviews/{review_id}/dismissals",
        json={"message": "stale"},
    )
    assert (status, body["state"]) == (200, "DISMISSED")
    assert sim.pull("github", REPO, pr.number).reviews[0].state == "DISMISSED"


async def test_review_of_own_pull_request_is_refused(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="bot")
    status, body, _ = await gh.call(
        "POST", f"/repos/{REPO}/pulls/{pr.number}/reviews", json={"event": "APPROVE"}
    )
    assert status == 422
    assert body["errors"] == ["Can not approve your own pull request"]
    assert sim.pull("github", REPO, pr.number).reviews == []


async def test_issue_comments_create_list_edit(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    sim.add_comment("github", REPO, pr.number, "alice", "hello")
    status, body, headers = await gh.call(
        "POST", f"/repos/{REPO}/issues/{pr.number}/comments", json={"body": "state <!-- rb -->"}
    )
    assert status == 201 and headers["Location"] == body["url"]
    comment_id = body["id"]
    status, body, _ = await gh.call(
        "PATCH", f"/repos/{REPO}/issues/comments/{comment_id}", json={"body": "v2 <!-- rb -->"}
    )
    assert (status, body["body"]) == (200, "v2 <!-- rb -->")
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/issues/{pr.number}/comments")
    assert [(c["user"]["login"], c["body"]) for c in body] == [
        ("alice", "hello"),
        ("bot", "v2 <!-- rb -->"),
    ]


async def test_merge_pinned_to_head(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    old = pr.head_sha
    sim.push("github", REPO, pr.number)
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"

    status, body, _ = await gh.call("PUT", path, json={"sha": old})
    assert status == 409
    assert body["message"] == "Head branch was modified. Review and try the merge again."

    sim.set_mergeable("github", REPO, pr.number, False)
    status, body, _ = await gh.call("PUT", path, json={"sha": pr.head_sha})
    assert (status, body["message"]) == (405, "Pull Request is not mergeable")
    sim.set_mergeable("github", REPO, pr.number, True)

    sim.require_checks("github", REPO, "main", ["ci/test"])
    status, body, _ = await gh.call("PUT", path, json={"sha": pr.head_sha})
    assert (status, body["message"]) == (405, 'Required status check "ci/test" is expected.')
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "success")

    status, body, _ = await gh.call(
        "PUT", path, json={"sha": pr.head_sha, "merge_method": "squash"}
    )
    assert status == 200 and body["merged"] is True
    pull = sim.pull("github", REPO, pr.number)
    assert (pull.merged, pull.state, pull.merge_commit_sha) == (True, "closed", body["sha"])
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}")
    assert (body["merged"], body["merged_by"]["login"]) == (True, "bot")
    status, _, _ = await gh.call("PUT", path, json={"sha": pr.head_sha})
    assert status == 405


@pytest.mark.sim_invalid_requests
async def test_merge_with_an_unknown_method_is_422(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    status, body, _ = await gh.call(
        "PUT", f"/repos/{REPO}/pulls/{pr.number}/merge", json={"merge_method": "octopus"}
    )
    assert status == 422
    assert body["errors"][0]["code"] == "custom"
    assert not sim.pull("github", REPO, pr.number).merged


async def test_etag_answers_304_that_costs_no_rate_limit(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}"
    status, _, headers = await gh.call("GET", path)
    etag, remaining = headers["ETag"], int(headers["x-ratelimit-remaining"])
    assert int(headers["x-ratelimit-limit"]) == 5000 and int(headers["x-ratelimit-reset"]) > 0
    status, body, headers = await gh.call("GET", path, headers={"If-None-Match": etag})
    assert (status, body) == (304, None)
    assert int(headers["x-ratelimit-remaining"]) == remaining
    sim.push("github", REPO, pr.number)
    status, _, headers = await gh.call("GET", path, headers={"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    assert int(headers["x-ratelimit-remaining"]) == remaining - 1
    _, body, _ = await gh.call("GET", "/rate_limit")
    assert body["rate"]["remaining"] == remaining - 1


async def test_collaborator_permission(sim: Simulator, gh: GitHub) -> None:
    sim.set_permission("github", REPO, "alice", "read")
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/collaborators/alice/permission")
    assert (status, body["permission"]) == (200, "read")
    _, body, _ = await gh.call("GET", f"/repos/{REPO}/collaborators/acme/permission")
    assert body["permission"] == "admin"


def _jwt(app_id: int, key: str, iat: float, exp: float) -> str:
    return jwt.encode({"iat": int(iat), "exp": int(exp), "iss": str(app_id)}, key, "RS256")


async def test_github_app_flow_with_expiring_installation_tokens(
    sim: Simulator, gh: GitHub
) -> None:
    clock = ManualClock(time.time())
    sim.clock = clock
    app_id, key = sim.create_github_app(bot_login="reviewbot[bot]")
    installation_id = sim.install_app(app_id, REPO)
    now = clock()
    token = _jwt(app_id, key, now - 60, now + 540)

    status, body, _ = await gh.call("GET", "/app", token=token)
    assert (status, body["slug"]) == (200, "reviewbot")
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/installation", token=token)
    assert (status, body["id"]) == (200, installation_id)
    status, body, _ = await gh.call(
        "POST", f"/app/installations/{installation_id}/access_tokens", token=token
    )
    assert status == 201
    access = body["token"]
    pr = sim.open_pr("github", REPO, author="alice")
    status, body, _ = await gh.call(
        "POST",
        f"/repos/{REPO}/pulls/{pr.number}/reviews",
        token=access,
        json={"event": "APPROVE", "commit_id": pr.head_sha},
    )
    assert (status, body["user"]["login"], body["user"]["type"]) == (200, "reviewbot[bot]", "Bot")
    status, _, _ = await gh.call("GET", "/user", token=access)
    assert status == 403  # installation tokens cannot read /user

    clock.advance(3601)
    status, body, _ = await gh.call("GET", f"/repos/{REPO}/pulls/{pr.number}", token=access)
    assert (status, body["message"]) == (401, "Bad credentials")


async def test_app_jwt_checks(sim: Simulator, gh: GitHub) -> None:
    app_id, key = sim.create_github_app()
    now = sim.now()
    status, body, _ = await gh.call("GET", "/app", token=_jwt(app_id, key, now - 60, now + 900))
    assert (status, body["message"]) == (
        401,
        "'Expiration time' claim ('exp') is too far in the future.",
    )
    status, _, _ = await gh.call("GET", "/app", token=_jwt(app_id, key, now - 700, now - 100))
    assert status == 401
    _, other_key = sim.create_github_app(bot_login="other[bot]")
    status, _, _ = await gh.call("GET", "/app", token=_jwt(app_id, other_key, now, now + 60))
    assert status == 401
    status, _, _ = await gh.call("GET", "/app")  # a user token is not a JWT
    assert status == 401


async def test_installation_tokens_only_reach_installed_repositories(
    sim: Simulator, gh: GitHub
) -> None:
    sim.create_repo("github", "acme/other")
    app_id, key = sim.create_github_app()
    installation_id = sim.install_app(app_id, REPO)
    now = sim.now()
    _, body, _ = await gh.call(
        "POST",
        f"/app/installations/{installation_id}/access_tokens",
        token=_jwt(app_id, key, now - 60, now + 540),
    )
    status, _, _ = await gh.call("GET", "/repos/acme/other", token=body["token"])
    assert status == 404
    status, _, _ = await gh.call("GET", f"/repos/{REPO}", token=body["token"])
    assert status == 200


async def test_faults_server_errors_and_rate_limits(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}"
    sim.faults.add(forge="github", method="GET", path=path, status=502, times=1)
    sim.faults.add(forge="github", method="GET", path=path, status=429, retry_after=7)
    sim.faults.add(
        forge="github", method="GET", path=path, secondary_rate_limit=True, retry_after=3
    )
    status, _, _ = await gh.call("GET", path)
    assert status == 502
    status, _, headers = await gh.call("GET", path)
    assert (status, headers["retry-after"]) == (429, "7")
    status, body, headers = await gh.call("GET", path)
    assert status == 403 and "secondary rate limit" in body["message"]
    assert headers["retry-after"] == "3"
    status, _, _ = await gh.call("GET", path)
    assert status == 200
    assert [r.status for r in sim.requests_for("github")] == [502, 429, 403, 200]
    assert [r.operation_id for r in sim.requests_for("github")] == ["pulls/get"] * 4


async def test_apply_then_fail_merges_but_answers_an_error(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"
    sim.faults.add(forge="github", method="PUT", path=path, status=502, apply_then_fail=True)
    status, _, _ = await gh.call("PUT", path, json={"sha": pr.head_sha})
    assert status == 502
    assert sim.pull("github", REPO, pr.number).merged


async def test_before_hook_moves_the_head_between_two_calls(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    seen = pr.head_sha
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"
    sim.faults.add(
        forge="github", method="PUT", path=path, before=lambda: sim.push("github", REPO, pr.number)
    )
    status, _, _ = await gh.call("PUT", path, json={"sha": seen})
    assert status == 409
    assert not sim.pull("github", REPO, pr.number).merged


async def test_timeout_holds_the_answer_past_the_clients_deadline(
    sim: Simulator, gh: GitHub
) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}"
    sim.faults.add(forge="github", method="GET", path=path, timeout=True)
    with pytest.raises(asyncio.TimeoutError):
        await gh.call("GET", path, timeout=aiohttp.ClientTimeout(total=0.2))
    status, _, _ = await gh.call("GET", path)
    assert status == 200


async def _record_of(sim: Simulator, count: int) -> None:
    for _ in range(500):
        if len(sim.requests) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the simulator never finished the held request")


async def test_a_merge_the_client_gave_up_on_is_not_applied(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"
    sim.faults.add(forge="github", method="PUT", path=path, timeout=0.5)
    with pytest.raises(asyncio.TimeoutError):
        await gh.call(
            "PUT", path, json={"sha": pr.head_sha}, timeout=aiohttp.ClientTimeout(total=0.1)
        )
    await _record_of(sim, 1)
    assert sim.requests[0].dropped
    assert not sim.pull("github", REPO, pr.number).merged


async def test_a_merge_that_timed_out_after_applying_is_merged(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"
    sim.faults.add(forge="github", method="PUT", path=path, timeout=0.5, apply_then_fail=True)
    with pytest.raises(asyncio.TimeoutError):
        await gh.call(
            "PUT", path, json={"sha": pr.head_sha}, timeout=aiohttp.ClientTimeout(total=0.1)
        )
    assert sim.pull("github", REPO, pr.number).merged
    await _record_of(sim, 1)


async def test_delay_slows_the_answer_but_keeps_it(sim: Simulator, gh: GitHub) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}"
    sim.faults.add(forge="github", path=path, delay=0.05, times=None)
    assert (await gh.call("GET", path))[0] == 200
    assert (await gh.call("GET", path))[0] == 200
    assert sim.faults.rules[0].hits == 2


@pytest.mark.sim_invalid_requests
async def test_a_body_that_is_not_json_is_400_and_changes_nothing(
    sim: Simulator, gh: GitHub
) -> None:
    pr = sim.open_pr("github", REPO, author="alice")
    status, body, _ = await gh.call(
        "PUT", f"/repos/{REPO}/pulls/{pr.number}/merge", data=b'{"sha": ', headers={}
    )
    assert (status, body["message"]) == (400, "Problems parsing JSON")
    assert not sim.pull("github", REPO, pr.number).merged


async def test_unknown_path_is_a_404_in_githubs_shape(gh: GitHub, sim: Simulator) -> None:
    status, body, _ = await gh.call("GET", "/nope")
    assert (status, body["message"]) == (404, "Not Found")
    sim.clear_requests()  # not an operation of the description, on purpose
