"""HTTP corner cases of the Gitea/Forgejo adapter that are awkward to stage against a server."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from reviewbot.core.models import CheckState, InlineComment, ReviewEvent, ReviewState
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeError,
    ForgeUnavailable,
    HeadMoved,
    NotMergeable,
    PendingReview,
    RateLimited,
)
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.http import RetryPolicy

BASE = "https://gitea.example.test"
API = f"{BASE}/api/v1"
PULL = f"{API}/repos/acme/api/pulls/7"
MERGE = f"{PULL}/merge"
SHA = "a" * 40
# Loading CA certificates is slow: one context for every client of this module.
TLS = ssl.create_default_context()


class FakeTime:
    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pull_json(
    number: int = 7, sha: str = SHA, *, merged: bool = False, state: str = "open"
) -> dict[str, object]:
    return {
        "number": number,
        "state": state,
        "draft": False,
        "merged": merged,
        "mergeable": True,
        "title": "Add things",
        "html_url": f"{BASE}/acme/api/pulls/{number}",
        "user": {"login": "alice"},
        "labels": [{"name": "ready"}],
        "head": {"sha": sha, "ref": "feature"},
        "base": {"sha": "b" * 40, "ref": "main"},
        "merge_commit_sha": "c" * 40 if merged else None,
    }


def review_json(state: str, review_id: int = 3) -> dict[str, object]:
    return {
        "id": review_id,
        "user": {"login": "reviewbot"},
        "state": state,
        "commit_id": SHA,
        "body": "ok",
        "dismissed": False,
        "submitted_at": "2026-01-01T00:00:00Z",
    }


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as c:
        yield c


@pytest.fixture
async def forge(fake_time: FakeTime, client: httpx.AsyncClient) -> GiteaForge:
    return GiteaForge(
        url=BASE + "/", token="t0ken", client=client, sleep=fake_time.sleep, clock=fake_time
    )


@respx.mock
async def test_get_pull_uses_token_header_and_api_v1(forge: GiteaForge) -> None:
    route = respx.get(PULL).respond(200, json=pull_json())
    pr = await forge.get_pull("acme/api", 7)
    assert (pr.forge, pr.head_sha, pr.base_ref, pr.labels) == ("gitea", SHA, "main", ("ready",))
    assert route.calls.last.request.headers["authorization"] == "token t0ken"


@pytest.mark.parametrize(
    ("event", "spelled"),
    [
        (ReviewEvent.APPROVE, "APPROVED"),
        (ReviewEvent.REQUEST_CHANGES, "REQUEST_CHANGES"),
        (ReviewEvent.COMMENT, "COMMENT"),
    ],
)
@respx.mock
async def test_review_events_use_gitea_spelling(
    forge: GiteaForge, event: ReviewEvent, spelled: str
) -> None:
    route = respx.post(f"{PULL}/reviews").respond(200, json=review_json(spelled))
    review = await forge.submit_review(
        "acme/api",
        7,
        commit_sha=SHA,
        event=event,
        body="ok",
        comments=[InlineComment("src/app.py", 4, "nit")],
    )
    sent = json.loads(route.calls.last.request.content)
    assert sent == {
        "commit_id": SHA,
        "body": "ok",
        "event": spelled,
        "comments": [{"path": "src/app.py", "body": "nit", "new_position": 4}],
    }
    assert review.state is not ReviewState.PENDING


@respx.mock
async def test_a_pending_review_is_an_error(forge: GiteaForge) -> None:
    respx.post(f"{PULL}/reviews").respond(200, json=review_json("PENDING", 9))
    with pytest.raises(PendingReview, match="9"):
        await forge.submit_review(
            "acme/api", 7, commit_sha=SHA, event=ReviewEvent.APPROVE, body="ok"
        )


@respx.mock
async def test_merge_pins_head_and_reads_back_the_merge_commit(forge: GiteaForge) -> None:
    merge = respx.post(MERGE).respond(200)  # Gitea: empty body
    respx.get(PULL).respond(200, json=pull_json(merged=True, state="closed"))
    result = await forge.merge("acme/api", 7, head_sha=SHA, method="rebase")
    sent = json.loads(merge.calls.last.request.content)
    assert sent == {"Do": "rebase", "head_commit_id": SHA}
    assert "merge_when_checks_succeed" not in sent
    assert result.merged and result.merge_commit_sha == "c" * 40
    assert forge.calls["merge"] == 2


@respx.mock
async def test_merge_head_out_of_date_is_head_moved(forge: GiteaForge) -> None:
    respx.post(MERGE).respond(409, json={"message": "head out of date", "url": ""})
    with pytest.raises(HeadMoved):
        await forge.merge("acme/api", 7, head_sha=SHA)


@respx.mock
async def test_merge_conflict_409_is_not_mergeable(forge: GiteaForge) -> None:
    respx.post(MERGE).respond(409, json={"message": "Merge Conflict: a.txt", "url": ""})
    with pytest.raises(NotMergeable):
        await forge.merge("acme/api", 7, head_sha=SHA)


@respx.mock
async def test_merge_405_is_not_mergeable(forge: GiteaForge) -> None:
    respx.post(MERGE).respond(405)
    with pytest.raises(NotMergeable):
        await forge.merge("acme/api", 7, head_sha=SHA)


async def test_merge_refuses_unknown_method_and_missing_pin(forge: GiteaForge) -> None:
    with pytest.raises(ValueError, match="pinned"):
        await forge.merge("acme/api", 7, head_sha="")
    with pytest.raises(ValueError, match="fast-forward"):
        await forge.merge("acme/api", 7, head_sha=SHA, method="fast-forward")


@respx.mock
async def test_timeout_on_merge_is_not_retried(forge: GiteaForge, fake_time: FakeTime) -> None:
    route = respx.post(MERGE)
    route.side_effect = httpx.ReadTimeout("slow")
    with pytest.raises(ForgeUnavailable):
        await forge.merge("acme/api", 7, head_sha=SHA)
    assert route.call_count == 1 and fake_time.sleeps == []


@respx.mock
async def test_timeout_on_get_is_retried(forge: GiteaForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL)
    route.side_effect = [httpx.ReadTimeout("slow"), httpx.Response(200, json=pull_json())]
    await forge.get_pull("acme/api", 7)
    assert route.call_count == 2 and fake_time.sleeps == [0.5]


@respx.mock
async def test_connection_reset_on_get_is_retried(forge: GiteaForge) -> None:
    route = respx.get(PULL)
    route.side_effect = [httpx.ReadError("reset"), httpx.Response(200, json=pull_json())]
    await forge.get_pull("acme/api", 7)
    assert forge.calls["get_pull"] == 2


@respx.mock
async def test_malformed_json(forge: GiteaForge) -> None:
    respx.get(PULL).respond(200, content=b"<!DOCTYPE html>")
    with pytest.raises(ForgeError, match="malformed JSON"):
        await forge.get_pull("acme/api", 7)


@respx.mock
async def test_missing_fields_are_a_forge_error(forge: GiteaForge) -> None:
    respx.get(PULL).respond(200, json={"number": 7})
    with pytest.raises(ForgeError, match="unexpected response shape"):
        await forge.get_pull("acme/api", 7)


@respx.mock
async def test_401(forge: GiteaForge) -> None:
    respx.get(PULL).respond(401, json={"message": "token is required"})
    with pytest.raises(AuthenticationFailed):
        await forge.get_pull("acme/api", 7)


@respx.mock
async def test_429_from_a_proxy_honours_retry_after(forge: GiteaForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.Response(429, headers={"retry-after": "3"}),
        httpx.Response(200, json=pull_json()),
    ]
    await forge.get_pull("acme/api", 7)
    assert fake_time.sleeps == [3.0]


@respx.mock
async def test_retry_after_as_http_date(forge: GiteaForge, fake_time: FakeTime) -> None:
    route = respx.get(PULL)
    route.side_effect = [
        httpx.Response(503, headers={"retry-after": "Thu, 01 Jan 2026 00:00:09 GMT"}),
        httpx.Response(200, json=pull_json()),
    ]
    await forge.get_pull("acme/api", 7)
    assert fake_time.sleeps == [9.0]


@respx.mock
async def test_rate_limit_over_cap_raises(forge: GiteaForge) -> None:
    respx.get(PULL).respond(429, headers={"retry-after": "3600"})
    with pytest.raises(RateLimited) as info:
        await forge.get_pull("acme/api", 7)
    assert info.value.retry_after == 3600.0


@respx.mock
async def test_pulls_for_sha_pages_through_open_pulls(forge: GiteaForge) -> None:
    first = [pull_json(n, "f" * 40) for n in range(1, 51)]
    route = respx.get(f"{API}/repos/acme/api/pulls")
    route.side_effect = [
        httpx.Response(200, json=first),
        httpx.Response(200, json=[pull_json(51, SHA)]),
    ]
    pulls = await forge.pulls_for_sha("acme/api", SHA)
    assert [p.number for p in pulls] == [51]
    params = [dict(c.request.url.params) for c in route.calls]
    assert params == [
        {"state": "open", "page": "1", "limit": "50"},
        {"state": "open", "page": "2", "limit": "50"},
    ]


def _branch(**fields: object) -> dict[str, object]:
    return {"name": "main", "protected": True, **fields}


@respx.mock
async def test_required_checks_from_the_branch_a_reader_sees(forge: GiteaForge) -> None:
    # The branch_protections routes are for admins only: the bot never asks them.
    admin_only = respx.get(f"{API}/repos/acme/api/branch_protections")
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        200,
        json=_branch(
            enable_status_check=True,
            status_check_contexts=["ci/*", "lint"],
            required_approvals=2,
            effective_branch_protection_name="",  # filled for admins only
        ),
    )
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ("ci/*", "lint") and checks.globs is True
    assert checks.required_approvals == 2 and checks.unreadable == ()
    assert not admin_only.called


@respx.mock
async def test_required_checks_disabled_status_check(forge: GiteaForge) -> None:
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        200, json=_branch(enable_status_check=False, status_check_contexts=["ci"])
    )
    assert (await forge.required_checks("acme/api", "main")).names == ()


@respx.mock
async def test_status_checks_without_patterns_require_every_status(forge: GiteaForge) -> None:
    # Gitea then requires every status to pass, and none at all is pending
    # (services/pull/commit_status.go): "*" says exactly that.
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        200, json=_branch(enable_status_check=True, status_check_contexts=[])
    )
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == ("*",) and checks.globs


@respx.mock
async def test_an_unprotected_branch_requires_nothing(forge: GiteaForge) -> None:
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        200, json={"name": "main", "protected": False}
    )
    checks = await forge.required_checks("acme/api", "main")
    assert checks.names == () and checks.unreadable == ()


@respx.mock
async def test_a_branch_that_cannot_be_read_is_a_gap(forge: GiteaForge) -> None:
    respx.get(f"{API}/repos/acme/api/branches/main").respond(
        403,
        json={
            "message": "user should have specific read permission or be a repo admin or a "
            "site admin",
            "url": "https://gitea.example.test/api/swagger",
        },
    )
    (gap,) = (await forge.required_checks("acme/api", "main")).unreadable
    assert gap.source == "branch" and gap.status == 403 and "Read" in gap.permission


@respx.mock
async def test_a_protected_branch_without_its_checks_shown_is_a_gap(forge: GiteaForge) -> None:
    # An old server's branch answer has no enable_status_check: "protected" with nothing
    # more is never read as "nothing required".
    respx.get(f"{API}/repos/acme/api/branches/main").respond(200, json=_branch())
    (gap,) = (await forge.required_checks("acme/api", "main")).unreadable
    assert gap.source == "branch_protection"


@respx.mock
async def test_check_results_map_gitea_states(forge: GiteaForge) -> None:
    respx.get(f"{API}/repos/acme/api/commits/{SHA}/status").respond(
        200,
        json={
            "state": "warning",
            "total_count": 3,
            "statuses": [
                {"context": "ci/test", "status": "success", "target_url": "https://ci/1"},
                {"context": "ci/lint", "status": "warning"},
                {"context": "ci/doc", "status": "pending"},
            ],
        },
    )
    results = {r.name: r.state for r in await forge.check_results("acme/api", SHA)}
    assert results == {
        "ci/test": CheckState.SUCCESS,
        "ci/lint": CheckState.FAILURE,
        "ci/doc": CheckState.PENDING,
    }
    assert forge.calls["check_results"] == 1


@respx.mock
async def test_reviews_normalized_and_review_requests_dropped(forge: GiteaForge) -> None:
    dismissed = {**review_json("APPROVED", 4), "dismissed": True}
    respx.get(f"{PULL}/reviews").respond(
        200,
        json=[
            review_json("APPROVED", 1),
            review_json("REQUEST_CHANGES", 2),
            review_json("REQUEST_REVIEW", 3),
            dismissed,
            review_json("COMMENT", 5),
        ],
    )
    reviews = await forge.list_reviews("acme/api", 7)
    assert [(r.id, r.state) for r in reviews] == [
        (1, ReviewState.APPROVED),
        (2, ReviewState.CHANGES_REQUESTED),
        (4, ReviewState.DISMISSED),
        (5, ReviewState.COMMENTED),
    ]


@respx.mock
async def test_permission_owner_is_admin_and_unknown_user_is_none(forge: GiteaForge) -> None:
    respx.get(f"{API}/repos/acme/api/collaborators/alice/permission").respond(
        200, json={"permission": "owner"}
    )
    respx.get(f"{API}/repos/acme/api/collaborators/ghost/permission").respond(
        404, json={"message": "not found"}
    )
    assert await forge.user_permission("acme/api", "alice") == "admin"
    assert await forge.user_permission("acme/api", "ghost") == "none"


@respx.mock
async def test_edit_comment_with_empty_answer(forge: GiteaForge) -> None:
    respx.get(f"{API}/user").respond(200, json={"login": "reviewbot"})
    respx.patch(f"{API}/repos/acme/api/issues/comments/12").respond(204)
    comment = await forge.edit_comment("acme/api", 12, "new")
    assert (comment.id, comment.author, comment.body) == (12, "reviewbot", "new")


@respx.mock
async def test_maintenance_longer_than_the_cap_is_not_slept(
    forge: GiteaForge, fake_time: FakeTime
) -> None:
    respx.get(PULL).respond(503, headers={"retry-after": "7200"})
    with pytest.raises(ForgeUnavailable):
        await forge.get_pull("acme/api", 7)
    assert fake_time.sleeps == []


@respx.mock
async def test_oversized_answer_is_refused(fake_time: FakeTime, client: httpx.AsyncClient) -> None:
    small = GiteaForge(
        url=BASE, token="t", client=client, policy=RetryPolicy(max_body_bytes=1000), clock=fake_time
    )
    respx.get(PULL).respond(200, json={"title": "x" * 2000})
    with pytest.raises(ForgeError, match="exceeds 1000") as info:
        await small.get_pull("acme/api", 7)
    assert info.value.operation == "get_pull"


@respx.mock
async def test_the_readiness_probe_asks_the_forge_once_even_with_a_configured_login(
    fake_time: FakeTime, client: httpx.AsyncClient
) -> None:
    forge = GiteaForge(
        url=BASE, token="t0ken", bot_login="bot", client=client, sleep=fake_time.sleep
    )
    route = respx.get(f"{API}/user").mock(
        side_effect=[httpx.Response(502), httpx.Response(200, json={"login": "bot"})]
    )
    with pytest.raises(ForgeUnavailable):
        await forge.probe()  # not retried, not slept: health reports what it sees now
    assert route.call_count == 1 and fake_time.sleeps == []
    assert await forge.probe() == "bot"
    assert route.call_count == 2
    assert await forge.bot_login() == "bot" and route.call_count == 2  # configured: no call
    assert forge.url == API
