"""GitHub's one GraphQL read of a pull, against the simulator's ``POST /graphql`` over real
HTTP: the same facts as the REST reads in one request, REST where GraphQL cannot serve, and
the endpoint's refusals (GitHub's schema, the REST routes' permissions, its paging limits).

Every exchange is also checked by the ``sim`` fixture: the query against GitHub's published
schema, the answer against the shape the query selects.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from reviewbot.forges.errors import PermissionDenied
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.github_graphql import PULL_READ
from reviewbot.sim import SimServer, Simulator
from tests.support.graphql_schema import shape_problems

REPO = "acme/api"
MARKER = "<!-- reviewbot:state -->"
CI = "https://ci.example/run/1"
TLS = ssl.create_default_context()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as c:
        yield c


def scenario(sim: Simulator) -> tuple[str, int]:
    """A pull with classic protection and a ruleset, statuses and check runs, a review and
    the bot's state comment; returns the bot's token and the pull's number."""
    token = sim.add_user("github", "reviewbot", bot=True)
    sim.add_user("github", "alice")
    sim.create_repo("github", REPO)
    sim.require_checks("github", REPO, "main", ["ci/test"], required_approvals=1)
    sim.add_ruleset(REPO, ["~DEFAULT_BRANCH"], contexts=["lint"], required_approvals=2)
    pr = sim.open_pr("github", REPO, author="alice", head_ref="feature")
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "success", target_url=CI)
    sim.set_status("github", REPO, pr.head_sha, "docs", "pending", target_url=CI)
    sim.set_check_run(REPO, pr.head_sha, "lint", conclusion="failure", details_url=CI)
    sim.submit_review("github", REPO, pr.number, "alice", "COMMENTED", body="looks fine")
    sim.add_comment("github", REPO, pr.number, "alice", "a question")
    sim.add_comment("github", REPO, pr.number, "reviewbot", f"state\n{MARKER}")
    return token, pr.number


def forge(server: SimServer, client: httpx.AsyncClient, token: str, graphql: bool) -> GitHubForge:
    return GitHubForge(
        api_url=server.github_api_url,
        token=token,
        client=client,
        graphql=graphql,
        bot_login="reviewbot",  # known, as the service's is after its first read
    )


async def facts(f: GitHubForge, number: int) -> dict[str, Any]:
    pull = await f.get_pull(REPO, number)
    results = await f.check_results(REPO, pull.head_sha)
    return {
        "pull": pull,
        "required": await f.required_checks(REPO, pull.base_ref),
        "results": sorted((r.name, r.state, r.url, r.source) for r in results),
        "reviews": await f.list_reviews(REPO, number),
        "comment": await f.find_comment(REPO, number, MARKER),
    }


def graphql_requests(sim: Simulator) -> list[Any]:
    return [r for r in sim.requests if r.operation_id == "graphql"]


async def test_one_graphql_request_reads_what_the_rest_reads_read(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    rest = await facts(forge(sim_server, client, token, graphql=False), number)
    sim.clear_requests()
    one = forge(sim_server, client, token, graphql=True)
    read = await facts(one, number)
    assert read == rest
    assert read["required"].names == ("lint", "ci/test")  # ruleset and protection
    assert read["required"].required_approvals == 2
    assert read["comment"] is not None and read["comment"].author == "reviewbot"
    # the pull, its checks, its rules, its reviews and the state comment: one request
    assert [(r.method, r.path) for r in sim.requests if r.forge == "github"] == [
        ("POST", "/graphql")
    ]
    assert one.graphql_points["pull_read"] == 1
    assert graphql_requests(sim)[0].response_headers["x-ratelimit-resource"] == "graphql"


async def test_a_pull_read_within_the_window_answers_and_an_older_one_is_read_again(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    now = [1000.0]
    f = GitHubForge(
        api_url=sim_server.github_api_url,
        token=token,
        client=client,
        bot_login="reviewbot",
        clock=lambda: now[0],
    )
    first = await f.get_pull(REPO, number)
    moved = sim.push("github", REPO, number)
    sim.clear_requests()
    # this task's read of a moment ago answers: no request
    now[0] += 0.9
    assert (await f.get_pull(REPO, number, read_within_s=1.0)).head_sha == first.head_sha
    assert graphql_requests(sim) == []
    # older than the window, or no window: the forge is asked, and the push is seen
    now[0] += 0.2
    assert (await f.get_pull(REPO, number, read_within_s=1.0)).head_sha == moved
    assert (await f.get_pull(REPO, number)).head_sha == moved
    assert len(graphql_requests(sim)) == 2


async def test_more_checks_than_a_page_are_read_page_by_page(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    head = sim.pull("github", REPO, number).head_sha
    for n in range(150):
        sim.set_status("github", REPO, head, f"matrix/{n}", "success", target_url=CI)
    rest = await facts(forge(sim_server, client, token, graphql=False), number)
    sim.clear_requests()
    read = await facts(forge(sim_server, client, token, graphql=True), number)
    assert len(read["results"]) == 153 and read == rest
    assert len(graphql_requests(sim)) == 2


async def test_a_token_that_may_not_read_checks_is_refused_never_shown_none(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    _, number = scenario(sim)
    # A fine-grained token without Checks (read): GitHub refuses that part of the query.
    limited = sim.add_user(
        "github",
        "limited",
        permissions={
            "pull_requests": "read",
            "statuses": "read",
            "metadata": "read",
            "contents": "read",
        },
    )
    f = forge(sim_server, client, limited, graphql=True)
    pull = await f.get_pull(REPO, number)
    (answer,) = graphql_requests(sim)
    assert [e["type"] for e in answer.response_body["errors"]] == ["FORBIDDEN"]
    with pytest.raises(PermissionDenied):
        await f.check_results(REPO, pull.head_sha)  # read over REST, refused there too
    with pytest.raises(PermissionDenied):
        await forge(sim_server, client, limited, graphql=False).check_results(REPO, pull.head_sha)


async def test_graphql_failing_reads_the_same_facts_over_rest(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    rest = await facts(forge(sim_server, client, token, graphql=False), number)
    sim.faults.add(forge="github", method="POST", path="/graphql", status=502, times=None)
    read = await facts(forge(sim_server, client, token, graphql=True), number)
    assert read == rest


async def test_the_answer_has_the_shape_the_query_selects(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    await forge(sim_server, client, token, graphql=True).get_pull(REPO, number)
    (record,) = graphql_requests(sim)
    data = copy.deepcopy(record.response_body["data"])
    assert shape_problems(PULL_READ, data) == []
    pull = data["repository"]["pullRequest"]
    pull["extra"] = 1
    del pull["headRefOid"]
    pull["isDraft"] = "no"
    problems = shape_problems(PULL_READ, data)
    assert len(problems) == 2  # the keys, and a String where a Boolean belongs
    assert "headRefOid" in problems[0] and "isDraft" in problems[1]


async def post(
    client: httpx.AsyncClient, server: SimServer, token: str, query: str, **variables: Any
) -> Any:
    response = await client.post(
        f"{server.github_api_url}/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"bearer {token}"},
    )
    assert response.status_code == 200
    return response.json()


@pytest.mark.sim_invalid_requests
async def test_a_field_github_does_not_have_is_refused_as_github_refuses_it(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, _ = scenario(sim)
    answer = await post(client, sim_server, token, "query { viewer { noSuchField } }")
    assert "data" not in answer
    (error,) = answer["errors"]
    assert error["extensions"]["code"] == "undefinedField"
    assert error["message"] == "Field 'noSuchField' doesn't exist on type 'User'"


async def test_a_repository_outside_the_installation_is_not_found(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    scenario(sim)
    sim.create_repo("github", "acme/secret")
    sim.open_pr("github", "acme/secret", author="alice", head_ref="x")
    app_id, _ = sim.create_github_app(bot_login="reviewbot-app[bot]")
    installation = sim.install_app(app_id, REPO)
    token, _ = sim.issue_installation_token(sim.installations[installation])
    for name in ("secret", "SECRET"):
        answer = await post(client, sim_server, token, PULL_READ, owner="acme", name=name, number=1)
        assert answer["data"]["repository"] is None
        assert [e["type"] for e in answer["errors"]] == ["NOT_FOUND"]
    mine = await post(client, sim_server, token, PULL_READ, owner="acme", name="api", number=1)
    assert mine["data"]["repository"]["pullRequest"]["number"] == 1


async def test_paging_limits_and_cursors_are_github_s(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    many = (
        'query($n: Int!) { repository(owner: "acme", name: "api") '
        "{ pullRequest(number: $n) { reviews(first: 101) { nodes { databaseId } } } } }"
    )
    answer = await post(client, sim_server, token, many, n=number)
    assert [e["type"] for e in answer["errors"]] == ["EXCESSIVE_PAGINATION"]
    bad = await post(
        client,
        sim_server,
        token,
        PULL_READ,
        owner="acme",
        name="api",
        number=number,
        reviews="not-a-cursor",
    )
    assert [e["type"] for e in bad["errors"]] == ["INVALID_CURSOR_ARGUMENTS"]
    assert bad["data"]["repository"]["pullRequest"]["reviews"] is None


@pytest.mark.sim_invalid_requests
async def test_a_query_of_too_many_nodes_and_a_foreign_pull_are_refused(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, number = scenario(sim)
    nested = (
        'query { repository(owner: "acme", name: "api") { pullRequest(number: 1) '
        "{ reviews(first: 100) { nodes { comments(first: 100) { nodes { "
        "reactions(first: 100) { nodes { id } } } } } } } } }"
    )
    answer = await post(client, sim_server, token, nested)
    assert "data" not in answer
    assert [e["type"] for e in answer["errors"]] == ["MAX_NODE_LIMIT_EXCEEDED"]
    # isRequired answers for the pull it is asked about only
    other = PULL_READ.replace(
        "isRequired(pullRequestNumber: $number)", "isRequired(pullRequestNumber: 999)"
    )
    foreign = await post(client, sim_server, token, other, owner="acme", name="api", number=number)
    assert "UNPROCESSABLE" in [e["type"] for e in foreign["errors"]]


async def test_a_private_repository_of_others_is_not_found(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    scenario(sim)
    sim.create_repo("github", "acme/hidden", private=True)
    stranger = sim.add_user("github", "mallory")
    sim.set_permission("github", "acme/hidden", "mallory", "none")
    answer = await post(
        client, sim_server, stranger, PULL_READ, owner="acme", name="hidden", number=1
    )
    assert answer["data"]["repository"] is None
    assert [e["type"] for e in answer["errors"]] == ["NOT_FOUND"]


@pytest.mark.sim_invalid_requests
async def test_malformed_and_oversized_queries_are_refused_without_harm(
    sim: Simulator, sim_server: SimServer, client: httpx.AsyncClient
) -> None:
    token, _ = scenario(sim)
    url = f"{sim_server.github_api_url}/graphql"
    auth = {"Authorization": f"bearer {token}"}
    for body in ({"query": 7}, {"query": "{ viewer { login } }", "operationName": ["x"]}, []):
        response = await client.post(url, json=body, headers=auth)
        assert response.status_code == 400
    deep = "query { " + "viewer { " * 3000 + "login" + " }" * 3001
    for query in (deep, "query { " + "viewer { login } " * 20000 + "}"):
        answer = await post(client, sim_server, token, query)
        assert "data" not in answer and answer["errors"]
    nobody = await client.post(url, json={"query": "{ viewer { login } }"})
    assert nobody.status_code == 401
