"""The GitHub adapter's GraphQL read: every query validates against GitHub's published schema,
and a read GraphQL cannot serve goes to REST, never to "nothing there"."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from reviewbot.core.models import CheckState
from reviewbot.forges.errors import PermissionDenied
from reviewbot.forges.github import (
    GRAPHQL_PAUSE_S,
    READ_REUSE_S,
    GitHubForge,
    graphql_endpoint,
)
from reviewbot.forges.github_graphql import QUERIES
from tests.support.graphql_schema import query_problems

API = "https://gh.example.test/api/v3"
GRAPHQL = "https://gh.example.test/api/graphql"
SHA = "a" * 40
TLS = ssl.create_default_context()


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.split("(")[0].split()[-1])
def test_every_query_the_adapter_sends_validates_against_githubs_schema(query: str) -> None:
    assert query_problems(query) == []


def test_a_query_with_a_field_github_lacks_is_refused() -> None:
    assert query_problems("query { viewer { noSuchField } }") != []


def test_graphql_endpoint_of_github_and_of_an_enterprise_server() -> None:
    assert graphql_endpoint("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_endpoint(API) == GRAPHQL


def pull_node(**parts: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "number": 7,
        "state": "OPEN",
        "isDraft": False,
        "merged": False,
        "mergeable": "MERGEABLE",
        "title": "Add things",
        "url": "https://gh.example.test/acme/api/pull/7",
        "headRefName": "feature",
        "headRefOid": SHA,
        "baseRefName": "main",
        "mergeCommit": None,
        "author": {"__typename": "User", "login": "alice"},
        "labels": {"nodes": []},
        "baseRef": {
            "refUpdateRule": {
                "requiredStatusCheckContexts": ["ci/test"],
                "requiredApprovingReviewCount": 0,
                "requiresCodeOwnerReviews": False,
            },
            "rules": {"pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": []},
        },
        "commits": {"nodes": [{"commit": {"oid": SHA, "statusCheckRollup": None}}]},
        "reviews": {"pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": []},
        "comments": {"pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": []},
    }
    node.update(parts)
    return node


def answer(pull: dict[str, Any] | None, errors: list[dict[str, Any]] | None = None) -> Any:
    body: dict[str, Any] = {
        "data": {"rateLimit": {"cost": 1, "remaining": 4999, "resetAt": "2027-01-01T00:00:00Z"}}
    }
    body["data"]["repository"] = {"pullRequest": pull}
    if errors:
        body["errors"] = errors
    return body


REST_PULL = {
    "number": 7,
    "state": "open",
    "draft": False,
    "merged": False,
    "mergeable": True,
    "title": "Add things",
    "html_url": "https://gh.example.test/acme/api/pull/7",
    "head": {"sha": SHA, "ref": "feature"},
    "base": {"ref": "main"},
    "user": {"login": "alice"},
    "labels": [],
}


@pytest.fixture
async def forge() -> AsyncIterator[GitHubForge]:
    async with httpx.AsyncClient(verify=TLS) as client:
        yield GitHubForge(api_url=API, token="t0ken", client=client, sleep=_no_sleep)


async def _no_sleep(_: float) -> None:
    return None


@respx.mock
async def test_one_query_reads_the_pull_and_serves_the_checks_of_its_head(
    forge: GitHubForge,
) -> None:
    rollup = {
        "contexts": {
            "pageInfo": {"hasNextPage": False, "endCursor": None},
            "nodes": [
                {
                    "__typename": "CheckRun",
                    "name": "lint",
                    "status": "COMPLETED",
                    "conclusion": "FAILURE",
                    "detailsUrl": None,
                    "startedAt": None,
                    "completedAt": None,
                    "isRequired": True,
                }
            ],
        }
    }
    commits = {"nodes": [{"commit": {"oid": SHA, "statusCheckRollup": rollup}}]}
    route = respx.post(GRAPHQL).mock(
        return_value=httpx.Response(200, json=answer(pull_node(commits=commits)))
    )
    pull = await forge.get_pull("acme/api", 7)
    required = await forge.required_checks("acme/api", "main")
    results = await forge.check_results("acme/api", SHA)
    sent = json.loads(route.calls[0].request.content)
    assert query_problems(sent["query"]) == []
    assert pull.head_sha == SHA and pull.mergeable is True
    # required by the base's rule, and lint because GitHub calls it required for this pull
    assert required.names == ("ci/test", "lint")
    assert [(r.name, r.state) for r in results] == [("lint", CheckState.FAILURE)]
    assert route.call_count == 1 and forge.graphql_points["pull_read"] == 1
    assert dict(forge.calls) == {"pull_read": 1}


@respx.mock
async def test_graphql_server_error_reads_over_rest_and_pauses_graphql() -> None:
    now = [1_767_225_600.0]
    async with httpx.AsyncClient(verify=TLS) as client:
        forge = GitHubForge(
            api_url=API, token="t0ken", client=client, sleep=_no_sleep, clock=lambda: now[0]
        )
        graphql = respx.post(GRAPHQL).mock(
            return_value=httpx.Response(502, json={"message": "bad gateway"})
        )
        rest = respx.get(f"{API}/repos/acme/api/pulls/7").mock(
            return_value=httpx.Response(200, json=REST_PULL)
        )
        pull = await forge.get_pull("acme/api", 7)
        assert pull.head_sha == SHA and rest.call_count == 1
        assert graphql.call_count == 1  # one exchange: REST reads what it could not
        await forge.get_pull("acme/api", 7)
        assert graphql.call_count == 1 and rest.call_count == 2  # paused: straight to REST
        now[0] += GRAPHQL_PAUSE_S + 1
        await forge.get_pull("acme/api", 7)
        assert graphql.call_count == 2  # a server error passes: GraphQL is asked again


@respx.mock
async def test_no_graphql_endpoint_reads_over_rest_from_then_on(forge: GitHubForge) -> None:
    graphql = respx.post(GRAPHQL).mock(
        return_value=httpx.Response(404, json={"message": "Not Found"})
    )
    respx.get(f"{API}/repos/acme/api/pulls/7").mock(
        return_value=httpx.Response(200, json=REST_PULL)
    )
    await forge.get_pull("acme/api", 7)
    await forge.get_pull("acme/api", 7)
    assert graphql.call_count == 1 and forge.graphql_url is None


@respx.mock
async def test_a_query_the_server_rejects_turns_graphql_off(forge: GitHubForge) -> None:
    rejected = {
        "errors": [
            {
                "path": ["query ReviewbotPullRead", "repository"],
                "extensions": {"code": "undefinedField", "typeName": "Ref", "fieldName": "rules"},
                "message": "Field 'rules' doesn't exist on type 'Ref'",
            }
        ]
    }
    graphql = respx.post(GRAPHQL).mock(return_value=httpx.Response(200, json=rejected))
    respx.get(f"{API}/repos/acme/api/pulls/7").mock(
        return_value=httpx.Response(200, json=REST_PULL)
    )
    assert (await forge.get_pull("acme/api", 7)).head_sha == SHA
    await forge.get_pull("acme/api", 7)
    assert graphql.call_count == 1 and forge.graphql_url is None


@respx.mock
async def test_a_part_graphql_may_not_read_is_read_over_rest_not_taken_as_empty(
    forge: GitHubForge,
) -> None:
    commits = {"nodes": [{"commit": {"oid": SHA, "statusCheckRollup": None}}]}
    forbidden = [
        {
            "type": "FORBIDDEN",
            "path": [
                "repository",
                "pullRequest",
                "commits",
                "nodes",
                0,
                "commit",
                "statusCheckRollup",
            ],
            "message": "Resource not accessible by integration",
        }
    ]
    respx.post(GRAPHQL).mock(
        return_value=httpx.Response(200, json=answer(pull_node(commits=commits), forbidden))
    )
    refused = {"message": "Resource not accessible by integration"}
    status = respx.get(f"{API}/repos/acme/api/commits/{SHA}/status").mock(
        return_value=httpx.Response(403, json=refused)
    )
    await forge.get_pull("acme/api", 7)
    # The rollup is null beside an error: unread, so REST is asked, and its refusal stands.
    with pytest.raises(PermissionDenied):
        await forge.check_results("acme/api", SHA)
    assert status.call_count == 1
    # the parts that were read are still served from the one read
    assert (await forge.required_checks("acme/api", "main")).names == ("ci/test",)


@respx.mock
async def test_the_reviews_and_comments_pages_are_followed(forge: GitHubForge) -> None:
    def page(cursor: str | None, review_id: int) -> dict[str, Any]:
        return {
            "pageInfo": {"hasNextPage": cursor is not None, "endCursor": cursor},
            "nodes": [
                {
                    "databaseId": review_id,
                    "state": "APPROVED",
                    "body": "",
                    "submittedAt": None,
                    "commit": {"oid": SHA},
                    "author": {"__typename": "Bot", "login": "reviewbot"},
                }
            ],
        }

    first = answer(pull_node(reviews=page("c1", 1)))
    second = answer(pull_node(reviews=page(None, 2)))
    route = respx.post(GRAPHQL).mock(
        side_effect=[httpx.Response(200, json=first), httpx.Response(200, json=second)]
    )
    await forge.get_pull("acme/api", 7)
    reviews = await forge.list_reviews("acme/api", 7)
    assert [(r.id, r.reviewer) for r in reviews] == [(1, "reviewbot[bot]"), (2, "reviewbot[bot]")]
    assert json.loads(route.calls[1].request.content)["variables"]["reviews"] == "c1"


@respx.mock
async def test_an_answer_of_another_shape_reads_over_rest(forge: GitHubForge) -> None:
    broken = pull_node()
    del broken["headRefOid"]
    broken["reviews"] = {"pageInfo": {}, "nodes": [{"state": "APPROVED"}]}
    respx.post(GRAPHQL).mock(return_value=httpx.Response(200, json=answer(broken)))
    rest = respx.get(f"{API}/repos/acme/api/pulls/7").mock(
        return_value=httpx.Response(200, json=REST_PULL)
    )
    assert (await forge.get_pull("acme/api", 7)).head_sha == SHA
    assert rest.call_count == 1


@respx.mock
async def test_an_old_read_is_read_again_once_for_the_parts_asked_at_once() -> None:
    now = [1_767_225_600.0]
    async with httpx.AsyncClient(verify=TLS) as client:
        forge = GitHubForge(
            api_url=API, token="t0ken", client=client, sleep=_no_sleep, clock=lambda: now[0]
        )
        route = respx.post(GRAPHQL).mock(return_value=httpx.Response(200, json=answer(pull_node())))
        await forge.get_pull("acme/api", 7)
        await forge.check_results("acme/api", SHA)
        assert route.call_count == 1  # served by the read
        now[0] += READ_REUSE_S + 1
        required, results = await asyncio.gather(
            forge.required_checks("acme/api", "main"), forge.check_results("acme/api", SHA)
        )
        assert required.names == ("ci/test",) and results == []
        assert route.call_count == 2  # one new read for both
