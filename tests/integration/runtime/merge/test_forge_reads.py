"""How many times the bot asks the forge for each fact in one merge attempt, and in one
capability answer: each fact once (the PR itself a second time only to confirm a merge), so a
second read of the same facts is caught here.

The whole bot (``serve``'s app) runs against the forge simulator over real HTTP; the
simulator logs every request it served.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.merge_support import REPO, Merger, World, set_check

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def reads(w: World, forge: str) -> Counter[str]:
    """The bot's reads since the log was cleared, by the API route they asked (the tests set
    the simulator up in-process, so every request it logged is the bot's); GitHub's GraphQL
    queries count as ``graphql``."""
    found = Counter(r.route or r.path for r in w.sim.requests_for(forge, "GET"))
    found.update(r.operation_id for r in w.sim.requests_for(forge, "POST") if r.route == GRAPHQL)
    return found


GRAPHQL = "/graphql"
# The merge facts of a head, once each: the PR, its reviews, its checks, its base's rules
# and whether the bot may merge. On GitHub one GraphQL query reads all but the last.
FACTS = {
    "github": {
        "graphql": 1,  # the PR, reviews, statuses, check runs, rulesets, protection
        "/repos/{owner}/{repo}": 1,  # the bot's permissions: may it merge
    },
    "gitea": {
        "/repos/{owner}/{repo}/pulls/{index}": 1,
        "/repos/{owner}/{repo}/pulls/{index}/reviews": 1,
        "/repos/{owner}/{repo}/commits/{ref}/status": 1,
        # One read of the branch answers both its rules and user_can_merge.
        "/repos/{owner}/{repo}/branches/{branch}": 1,
    },
}
PULL = {
    "github": "graphql",
    "gitea": "/repos/{owner}/{repo}/pulls/{index}",
}
# After the merge call the merger reads the PR to confirm it merged at the pin; Gitea's merge
# answers with an empty body, so the forge client reads the PR back for the merge commit too.
CONFIRM = {"github": 1, "gitea": 2}


@FORGES
async def test_one_merge_attempt(world: World, forge: str) -> None:
    pr = world.sim.open_pr(forge, REPO, author="alice")
    set_check(world, forge, pr.head_sha, "success")
    world.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    world.sim.clear_requests()
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200 and body["merged"] is True, body
    expected = Counter(FACTS[forge])
    expected[PULL[forge]] += CONFIRM[forge]
    assert reads(world, forge) == expected
    assert sum(expected.values()) == {"github": 3, "gitea": 6}[forge]


@FORGES
async def test_one_capability_answer(world: World, forge: str) -> None:
    pr = world.sim.open_pr(forge, REPO, author="alice")
    set_check(world, forge, pr.head_sha, "success")
    world.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    token = world.token("lease,merge,read")
    world.sim.clear_requests()
    status, answer = await world.call(
        "GET", f"/api/v1/capability?pr={forge}:{REPO}%23{pr.number}&role=merge", token
    )
    assert status == 200 and answer["allowed"] is True, answer
    assert reads(world, forge) == Counter(FACTS[forge])
