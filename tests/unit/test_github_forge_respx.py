"""HTTP corner cases of the GitHub adapter that are awkward to stage against a server."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from reviewbot.core.models import CheckState, InlineComment, ReviewEvent, ReviewState
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    HeadMoved,
    NotFound,
    NotMergeable,
    PermissionDenied,
    RateLimited,
    reason_for,
)
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.http import ForgeHttp

API = "https://gh.example.test/api"
PULL = f"{API}/repos/acme/api/pulls/7"
MERGE = f"{PULL}/merge"
SHA = "a" * 40
# Loading CA certificates is slow: one context for every client of this module.
TLS = ssl.create_default_context()


class FakeTime:
    """A wall clock that only moves when the code under test sleeps."""

    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pull_json(number: int = 7, sha: str = SHA, state: str = "open") -> dict[str, object]:
    return {
        "number": number,
        "state": state,
        "draft": False,
        "merged": False,
        "mergeable": True,
        "title": "Add things",
        "html_url": f"https://gh.example.test/acme/api/pull/{number}",
        "user": {"login": "alice"},
        "labels": [{"name": "ready"}],
        "head": {"sha": sha, "ref": "feature"},
        "base": {"sha": "b" * 40, "ref": "main"},
        "merge_commit_sha": "c" * 40,
    }


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as c:
        yield c


@pytest.fixture
async def forge(fake_time: FakeTime, client: httpx.AsyncClient) -> GitHubForge:
    return GitHubForge(
        api_url=API,
        token="t0ken",
        client=client,
        sleep=fake_time.sleep,
        clock=fake_time,
        graphql=False,  # the REST reads; the GraphQL read: test_github_graphql_respx.py
    )


@respx.mock
async def test_get_pull_normalizes_and_sends_token(forge: GitHubForge) -> None:
    route = respx.get(PULL).respond(200, json=pull_json())
    pr = await forge.get_pull("acme/api", 7)
    assert (pr.forge, pr.number, pr.head_sha, pr.base_ref, pr.author) == (
        "github",
        7,
        SHA,
        "main",
        "alice",
    )
    assert pr.labels == ("ready",) and pr.mergeable is True and pr.merge_commit_sha is None
    assert route.calls.last.request.headers["authorization"] == "token t0ken"
    assert forge.calls["get_pull"] == 1


@respx.mock
async def test_malformed_json_is_a_forge_error_not_retried(forge: GitHubForge) -> None:
    route = respx.get(PULL).respond(
        200, content=b"{not json", headers={"content-type": "application/json"}
    )
    with pytest.raises(ForgeError, match="malformed JSON"):
        await forge.get_pull("acme/api", 7)
    assert route.call_count == 1


@respx.mock
async def test_html_where_json_was_expected_is_a_forge_error(forge: GitHubForge) -> None:
    respx.get(PULL).respond(200, text="<html>proxy</html>", headers={"content-type": "text/html"})
    with pytest.raises(ForgeError, match="expected a JSON object"):
        await forge.get_pull("acme/api", 7)


@respx.mock
async def test_connection_reset_on_get_is_retried(forge: GitHubForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.ReadError("connection reset by peer"),
        httpx.Response(200, json=pull_json()),
    ]
    pr = await forge.get_pull("acme/api", 7)
    assert pr.number == 7
    assert route.call_count == 2 and forge.calls["get_pull"] == 2
    assert fake_time.sleeps == [0.5]


@respx.mock
async def test_timeout_on_get_is_retried_with_backoff(
    forge: GitHubForge, fake_time: FakeTime
) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.ReadTimeout("slow"),
        httpx.ConnectTimeout("slow"),
        httpx.Response(200, json=pull_json()),
    ]
    await forge.get_pull("acme/api", 7)
    assert route.call_count == 3
    assert fake_time.sleeps == [0.5, 1.0]


@respx.mock
async def test_get_gives_up_after_the_retry_budget(forge: GitHubForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL).respond(502, json={"message": "Bad gateway"})
    with pytest.raises(ForgeUnavailable) as info:
        await forge.get_pull("acme/api", 7)
    assert info.value.status == 502 and info.value.operation == "get_pull"
    assert route.call_count == 4
    assert fake_time.sleeps == [0.5, 1.0, 2.0]


@respx.mock
async def test_timeout_on_merge_is_not_retried(forge: GitHubForge, fake_time: FakeTime) -> None:
    route = respx.put(MERGE)
    route.side_effect = httpx.ReadTimeout("slow")
    with pytest.raises(ForgeUnavailable, match="timed out"):
        await forge.merge("acme/api", 7, head_sha=SHA)
    assert route.call_count == 1 and forge.calls["merge"] == 1
    assert fake_time.sleeps == []


@respx.mock
async def test_server_error_on_merge_is_not_retried(forge: GitHubForge) -> None:
    route = respx.put(MERGE).respond(500, json={"message": "boom"})
    with pytest.raises(ForgeUnavailable) as info:
        await forge.merge("acme/api", 7, head_sha=SHA)
    assert info.value.status == 500
    assert route.call_count == 1


@respx.mock
async def test_connection_reset_on_a_write_is_not_retried(forge: GitHubForge) -> None:
    route = respx.post(f"{API}/repos/acme/api/issues/7/comments")
    route.side_effect = httpx.RemoteProtocolError("peer closed connection")
    with pytest.raises(ForgeUnavailable, match="connection failed"):
        await forge.create_comment("acme/api", 7, "hello")
    assert route.call_count == 1


@respx.mock
async def test_merge_sends_sha_pin_and_method(forge: GitHubForge) -> None:
    route = respx.put(MERGE).respond(
        200, json={"sha": "d" * 40, "merged": True, "message": "Pull Request successfully merged"}
    )
    result = await forge.merge("acme/api", 7, head_sha=SHA, method="squash")
    assert json.loads(route.calls.last.request.content) == {"sha": SHA, "merge_method": "squash"}
    assert result.merged and result.merge_commit_sha == "d" * 40


@pytest.mark.parametrize(
    ("status", "error"), [(409, HeadMoved), (405, NotMergeable), (403, PermissionDenied)]
)
@respx.mock
async def test_merge_refusals_are_typed(
    forge: GitHubForge, status: int, error: type[ForgeError]
) -> None:
    respx.put(MERGE).respond(status, json={"message": "Head branch was modified."})
    with pytest.raises(error) as info:
        await forge.merge("acme/api", 7, head_sha=SHA)
    assert info.value.status == status


async def test_merge_refuses_an_unpinned_merge(forge: GitHubForge) -> None:
    with pytest.raises(ValueError, match="pinned"):
        await forge.merge("acme/api", 7, head_sha="")


@respx.mock
async def test_etag_304_is_served_from_cache_and_counted(forge: GitHubForge) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.Response(200, json=pull_json(), headers={"etag": '"v1"'}),
        httpx.Response(304, headers={"etag": '"v1"'}),
    ]
    first = await forge.get_pull("acme/api", 7)
    second = await forge.get_pull("acme/api", 7)
    assert first == second
    assert route.calls[1].request.headers["if-none-match"] == '"v1"'
    assert forge.calls["get_pull"] == 2
    assert forge.not_modified["get_pull"] == 1
    assert forge.rate_limited_calls["get_pull"] == 1


@respx.mock
async def test_etag_cache_is_per_credentials(client: httpx.AsyncClient) -> None:
    # One adapter may hold several credentials (an App's installation tokens).
    route = respx.get(PULL).respond(200, json=pull_json(), headers={"etag": '"v1"'})
    http = ForgeHttp(client)
    await http.send("get_pull", "GET", PULL, headers={"Authorization": "token one"})
    await http.send("get_pull", "GET", PULL, headers={"Authorization": "token two"})
    await http.send("get_pull", "GET", PULL, headers={"Authorization": "token one"})
    assert "if-none-match" not in route.calls[1].request.headers
    assert route.calls[2].request.headers["if-none-match"] == '"v1"'


@respx.mock
async def test_retry_after_is_honoured(forge: GitHubForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.Response(429, headers={"retry-after": "7"}, json={"message": "slow down"}),
        httpx.Response(200, json=pull_json()),
    ]
    await forge.get_pull("acme/api", 7)
    assert fake_time.sleeps == [7.0]
    assert route.call_count == 2


@respx.mock
async def test_primary_limit_waits_until_reset(forge: GitHubForge, fake_time: FakeTime) -> None:
    reset = int(fake_time.now) + 30
    route = respx.get(PULL)
    route.side_effect = [
        httpx.Response(
            403,
            headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
            json={"message": "API rate limit exceeded for installation."},
        ),
        httpx.Response(200, json=pull_json()),
    ]
    await forge.get_pull("acme/api", 7)
    assert fake_time.sleeps == [31.0]


@respx.mock
async def test_secondary_limit_403_waits_and_retries(
    forge: GitHubForge, fake_time: FakeTime
) -> None:
    route = respx.post(f"{API}/repos/acme/api/issues/7/comments")
    route.side_effect = [
        httpx.Response(
            403,
            json={
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes."
            },
        ),
        httpx.Response(201, json={"id": 5, "user": {"login": "bot"}, "body": "hi"}),
    ]
    comment = await forge.create_comment("acme/api", 7, "hi")
    assert comment.id == 5
    # The limited write was refused, not applied, so sending it again is safe.
    assert fake_time.sleeps == [60.0]
    assert route.call_count == 2


@respx.mock
async def test_rate_limit_longer_than_the_cap_is_raised(
    forge: GitHubForge, fake_time: FakeTime
) -> None:
    respx.get(PULL).respond(
        403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(fake_time.now) + 3000)},
        json={"message": "API rate limit exceeded"},
    )
    with pytest.raises(RateLimited) as info:
        await forge.get_pull("acme/api", 7)
    assert info.value.retry_after == pytest.approx(3001.0)
    assert fake_time.sleeps == []


@respx.mock
async def test_rate_limit_that_persists_is_raised(forge: GitHubForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL).respond(429, headers={"retry-after": "2"})
    with pytest.raises(RateLimited):
        await forge.get_pull("acme/api", 7)
    assert route.call_count == 3 and fake_time.sleeps == [2.0, 2.0]


@respx.mock
async def test_plain_403_is_permission_denied(forge: GitHubForge) -> None:
    respx.get(PULL).respond(403, json={"message": "Resource not accessible by integration"})
    with pytest.raises(PermissionDenied, match="Resource not accessible"):
        await forge.get_pull("acme/api", 7)


@respx.mock
async def test_401_is_authentication_failed(forge: GitHubForge) -> None:
    route = respx.get(PULL).respond(401, json={"message": "Bad credentials"})
    with pytest.raises(AuthenticationFailed, match="Bad credentials"):
        await forge.get_pull("acme/api", 7)
    assert route.call_count == 1


@respx.mock
async def test_review_uses_github_spelling_and_pins_the_commit(forge: GitHubForge) -> None:
    route = respx.post(f"{PULL}/reviews").respond(
        200,
        json={
            "id": 80,
            "user": {"login": "reviewbot[bot]"},
            "state": "APPROVED",
            "commit_id": SHA,
            "body": "ok",
            "submitted_at": "2026-01-01T00:00:00Z",
        },
    )
    review = await forge.submit_review(
        "acme/api",
        7,
        commit_sha=SHA,
        event=ReviewEvent.APPROVE,
        body="ok",
        comments=[InlineComment("src/app.py", 12, "nit")],
    )
    sent = json.loads(route.calls.last.request.content)
    assert sent == {
        "commit_id": SHA,
        "body": "ok",
        "event": "APPROVE",
        "comments": [{"path": "src/app.py", "line": 12, "side": "RIGHT", "body": "nit"}],
    }
    assert review.state is ReviewState.APPROVED and review.commit_sha == SHA


@respx.mock
async def test_check_results_merge_statuses_and_check_runs(forge: GitHubForge) -> None:
    respx.get(f"{API}/repos/acme/api/commits/{SHA}/status").respond(
        200,
        json={
            "state": "failure",
            "statuses": [
                {"context": "ci/test", "state": "failure", "target_url": "https://ci/1"},
                {"context": "ci/lint", "state": "success", "target_url": None},
            ],
        },
    )
    respx.get(f"{API}/repos/acme/api/commits/{SHA}/check-runs").respond(
        200,
        json={
            "total_count": 3,
            "check_runs": [
                {"name": "build", "status": "completed", "conclusion": "timed_out"},
                {"name": "docs", "status": "in_progress", "conclusion": None},
                {"name": "odd", "status": "completed", "conclusion": "something_new"},
            ],
        },
    )
    results = {r.name: r for r in await forge.check_results("acme/api", SHA)}
    assert results["ci/test"].state is CheckState.FAILURE
    assert results["ci/test"].url == "https://ci/1"
    assert results["ci/lint"].state is CheckState.SUCCESS
    assert results["build"].state is CheckState.TIMED_OUT
    assert results["build"].source == "check_run"
    assert results["docs"].state is CheckState.PENDING
    assert results["odd"].state is CheckState.ERROR
    assert forge.calls["check_results"] == 2


def _branch(protected: bool, summary: dict[str, object] | None = None) -> dict[str, object]:
    body: dict[str, object] = {"name": "main", "protected": protected}
    if summary is not None:
        body["protection"] = {"enabled": protected, "required_status_checks": summary}
    return body


def _no_rulesets() -> None:
    respx.get(f"{API}/repos/acme/api/rules/branches/main").respond(200, json=[])


@respx.mock
async def test_required_checks_of_unprotected_branch_are_none(forge: GitHubForge) -> None:
    _no_rulesets()
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(False))
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == () and checks.globs is False and checks.unreadable == ()


@respx.mock
async def test_required_checks_from_the_branch_summary_need_no_admin_read(
    forge: GitHubForge,
) -> None:
    _no_rulesets()
    summary = {"enforcement_level": "non_admins", "contexts": ["ci/test"], "checks": []}
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(True, summary))
    protection = respx.get(f"{API}/repos/acme/api/branches/main/protection")
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ("ci/test",) and checks.unreadable == ()
    assert not protection.called


@respx.mock
async def test_required_checks_join_contexts_and_checks(forge: GitHubForge) -> None:
    _no_rulesets()
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(True))
    respx.get(f"{API}/repos/acme/api/branches/main/protection").respond(
        200,
        json={
            "required_status_checks": {
                "strict": True,
                "contexts": ["ci/test"],
                "checks": [
                    {"context": "ci/test", "app_id": None},
                    {"context": "build", "app_id": 1},
                ],
            },
            "required_pull_request_reviews": {"required_approving_review_count": 2},
        },
    )
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ("ci/test", "build")
    assert checks.required_approvals == 2


@respx.mock
async def test_protection_hidden_from_a_non_admin_is_a_gap_not_unprotected(
    forge: GitHubForge,
) -> None:
    _no_rulesets()
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(True))
    respx.get(f"{API}/repos/acme/api/branches/main/protection").respond(
        404, json={"message": "Not Found"}
    )
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ()
    (gap,) = checks.unreadable
    assert gap.source == "branch_protection" and gap.status == 404
    assert "Administration (read)" in gap.permission


@respx.mock
async def test_a_refusal_names_the_permission_github_accepts(forge: GitHubForge) -> None:
    respx.get(f"{API}/repos/acme/api/rules/branches/main").respond(
        403,
        json={"message": "Resource not accessible by integration"},
        headers={"X-Accepted-GitHub-Permissions": "metadata=read"},
    )
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        403,
        json={"message": "Resource not accessible by integration"},
        headers={"X-Accepted-GitHub-Permissions": "contents=read,metadata=read; issues=write"},
    )
    checks = await forge.required_checks("acme/api", "main")
    assert [(g.source, g.permission, g.status) for g in checks.unreadable] == [
        ("rulesets", "Metadata (read)", 403),
        ("branch", "Contents (read) and Metadata (read) or Issues (write)", 403),
    ]


@respx.mock
async def test_ruleset_checks_and_approvals_join_classic_protection(forge: GitHubForge) -> None:
    source = {"ruleset_source_type": "Repository", "ruleset_source": "acme/api", "ruleset_id": 7}
    respx.get(f"{API}/repos/acme/api/rules/branches/main").respond(
        200,
        json=[
            {"type": "deletion", **source},
            {
                "type": "required_status_checks",
                "parameters": {
                    "required_status_checks": [{"context": "lint"}, {"context": "ci/test"}],
                    "strict_required_status_checks_policy": False,
                },
                **source,
            },
            {
                "type": "pull_request",
                "parameters": {
                    "required_approving_review_count": 2,
                    "require_code_owner_review": True,
                },
                **source,
            },
        ],
    )
    summary = {"enforcement_level": "everyone", "contexts": ["ci/test"], "checks": []}
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(True, summary))
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ("lint", "ci/test")
    assert checks.required_approvals == 2 and checks.code_owner_review


@respx.mock
async def test_pulls_for_sha_keeps_open_prs_whose_head_is_the_sha(forge: GitHubForge) -> None:
    respx.get(f"{API}/repos/acme/api/commits/{SHA}/pulls").respond(
        200,
        json=[
            pull_json(1, SHA),
            pull_json(2, "e" * 40),  # contains the commit, but its head moved on
            pull_json(3, SHA, state="closed"),
        ],
    )
    pulls = await forge.pulls_for_sha("acme/api", SHA)
    assert [p.number for p in pulls] == [1]


@respx.mock
async def test_listing_follows_link_pages(forge: GitHubForge) -> None:
    page2 = f"{API}/repositories/1/pulls/7/reviews?per_page=100&page=2"
    review = {"id": 1, "user": {"login": "bob"}, "state": "COMMENTED", "commit_id": SHA}
    respx.get(f"{PULL}/reviews").respond(
        200, json=[review], headers={"link": f'<{page2}>; rel="next"'}
    )
    respx.get(page2).respond(200, json=[{**review, "id": 2, "state": "CHANGES_REQUESTED"}])
    reviews = await forge.list_reviews("acme/api", 7)
    assert [(r.id, r.state) for r in reviews] == [
        (1, ReviewState.COMMENTED),
        (2, ReviewState.CHANGES_REQUESTED),
    ]
    assert forge.calls["list_reviews"] == 2


@respx.mock
async def test_find_comment_only_matches_the_bots_own(client: httpx.AsyncClient) -> None:
    forge = GitHubForge(api_url=API, token="t", bot_login="reviewbot[bot]", client=client)
    respx.get(f"{API}/repos/acme/api/issues/7/comments").respond(
        200,
        json=[
            {"id": 1, "user": {"login": "mallory"}, "body": "<!-- reviewbot:state --> fake"},
            {"id": 2, "user": {"login": "reviewbot[bot]"}, "body": "hello"},
            {"id": 3, "user": {"login": "reviewbot[bot]"}, "body": "<!-- reviewbot:state --> real"},
        ],
    )
    found = await forge.find_comment("acme/api", 7, "<!-- reviewbot:state -->")
    assert found is not None and found.id == 3


async def test_bad_repository_names_are_refused(forge: GitHubForge) -> None:
    for bad in ("acme", "acme/api/x", "../etc", "acme/.."):
        with pytest.raises(ValueError, match="OWNER/NAME"):
            await forge.get_pull(bad, 1)


@respx.mock
async def test_status_checks_enforced_for_nobody_require_nothing(forge: GitHubForge) -> None:
    _no_rulesets()
    summary = {"enforcement_level": "off", "contexts": ["ci/test"], "checks": []}
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch(True, summary))
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == () and checks.unreadable == ()


@respx.mock
async def test_a_missing_base_branch_is_an_error_not_a_missing_pull_request(
    forge: GitHubForge,
) -> None:
    _no_rulesets()
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        404, json={"message": "Branch not found"}
    )
    with pytest.raises(NotFound) as caught:
        await forge.required_checks("acme/api", "main")
    assert reason_for(caught.value) is ReasonCode.FORGE_ERROR
