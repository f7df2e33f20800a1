"""One contract for both forge adapters, run against the simulator over real HTTP.

Each test runs once per forge. The simulator's request log is the witness: it shows
which calls an operation made, and every request is checked against the forge's
official (reduced) API description after each test.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
import pytest

from reviewbot.core.models import CheckState, InlineComment, ReviewEvent, ReviewState
from reviewbot.forges import gitea as gitea_adapter
from reviewbot.forges.app_auth import GitHubAppAuth
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import (
    AuthenticationFailed,
    ForgeUnavailable,
    HeadMoved,
    NotFound,
    NotMergeable,
    PendingReview,
    PermissionDenied,
)
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.github import GitHubForge
from reviewbot.forges.http import RetryPolicy
from reviewbot.sim import ManualClock, RequestRecord, SimServer, Simulator
from tests.support.openapi import ForgeSpecs

REPO = "acme/api"
BOT = {"github": "reviewbot[bot]", "gitea": "reviewbot"}
MARKER = "<!-- reviewbot:state -->"
CI_URL = "https://ci.example/run/2"
TLS = ssl.create_default_context()  # built once: loading CA certificates is slow


class FakeSleep:
    """Sleeping moves the simulator's clock instead of waiting."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


@dataclass
class World:
    forge_name: str
    sim: Simulator
    server: SimServer
    clock: ManualClock
    sleep: FakeSleep
    client: httpx.AsyncClient
    bot_token: str

    def make_forge(
        self, token: str | None = None, policy: RetryPolicy | None = None, graphql: bool = False
    ) -> GitHubForge | GiteaForge:
        """An adapter against the simulator, with the bot's token unless told otherwise;
        the REST contract unless ``graphql`` (GitHub's one-query read of a pull)."""
        if self.forge_name == "github":
            return GitHubForge(
                api_url=self.server.github_api_url,
                token=token or self.bot_token,
                client=self.client,
                policy=policy,
                sleep=self.sleep,
                clock=self.clock,
                graphql=graphql,
            )
        return GiteaForge(
            url=self.server.gitea_url,
            token=token or self.bot_token,
            client=self.client,
            policy=policy,
            sleep=self.sleep,
            clock=self.clock,
        )

    @cached_property
    def forge(self) -> GitHubForge | GiteaForge:
        return self.make_forge()

    def api_path(self, suffix: str) -> str:
        return f"/repos/{REPO}{suffix}"

    def requests(self, method: str | None = None) -> list[RequestRecord]:
        return self.sim.requests_for(self.forge_name, method)

    def open_pr(self, *, head_ref: str = "feature", draft: bool = False, **kw: Any) -> int:
        pull = self.sim.open_pr(
            self.forge_name, REPO, author="alice", base="main", head_ref=head_ref, draft=draft, **kw
        )
        return pull.number

    def head(self, number: int) -> str:
        return self.sim.pull(self.forge_name, REPO, number).head_sha


@pytest.fixture(scope="module")
def forge_specs(reference_dir: Path) -> ForgeSpecs:
    return ForgeSpecs(reference_dir)


@pytest.fixture(params=["github", "gitea"])
async def world(request: pytest.FixtureRequest, forge_specs: ForgeSpecs) -> AsyncIterator[World]:
    forge_name: str = request.param
    clock = ManualClock()
    sim = Simulator(clock=clock)
    bot_token = sim.add_user(forge_name, BOT[forge_name], bot=True)
    sim.add_user(forge_name, "alice")
    sim.add_user(forge_name, "bob")
    sim.add_user(forge_name, "carol")
    sim.create_repo(forge_name, REPO, default_branch="main")
    async with (
        SimServer(sim, host="127.0.0.1", port=0) as server,
        httpx.AsyncClient(verify=TLS) as client,
    ):
        yield World(forge_name, sim, server, clock, FakeSleep(clock), client, bot_token)
    # Every request the adapter sent, and every answer, as the official description says.
    problems = forge_specs.check_records(sim.requests)
    assert problems == [], "\n".join(problems)


# -- reading ------------------------------------------------------------------------------


async def test_bot_login(world: World) -> None:
    assert await world.forge.bot_login() == BOT[world.forge_name]
    await world.forge.bot_login()
    assert world.forge.calls["bot_login"] == 1  # asked once, then remembered


async def test_get_pull_normalizes(world: World) -> None:
    number = world.open_pr(title="Add login", labels=("ready", "backend"))
    pr = await world.forge.get_pull(REPO, number)
    assert (pr.forge, pr.owner, pr.name, pr.number) == (world.forge_name, "acme", "api", number)
    assert pr.state == "open" and not pr.merged and not pr.draft
    assert pr.head_sha == world.head(number)
    assert (pr.base_ref, pr.head_ref, pr.author, pr.title) == (
        "main",
        "feature",
        "alice",
        "Add login",
    )
    assert set(pr.labels) == {"ready", "backend"}
    assert pr.merge_commit_sha is None


async def test_get_pull_draft(world: World) -> None:
    number = world.open_pr(draft=True)
    assert (await world.forge.get_pull(REPO, number)).draft is True


async def test_missing_pull_is_not_found(world: World) -> None:
    with pytest.raises(NotFound):
        await world.forge.get_pull(REPO, 999)


async def test_list_open_pulls_and_pulls_for_sha(world: World) -> None:
    one = world.open_pr(head_ref="one")
    two = world.open_pr(head_ref="two")
    open_numbers = {p.number for p in await world.forge.list_open_pulls(REPO)}
    assert open_numbers == {one, two}

    old_head = world.head(one)
    found = await world.forge.pulls_for_sha(REPO, old_head)
    assert [p.number for p in found] == [one]

    new_head = world.sim.push(world.forge_name, REPO, one)
    assert await world.forge.pulls_for_sha(REPO, old_head) == []
    assert [p.number for p in await world.forge.pulls_for_sha(REPO, new_head)] == [one]


async def test_required_checks(world: World) -> None:
    none = await world.forge.required_checks(REPO, "main")
    assert none.names == ()
    world.sim.require_checks(world.forge_name, REPO, "main", ["ci/test", "ci/lint"])
    checks = await world.forge.required_checks(REPO, "main")
    assert set(checks.names) == {"ci/test", "ci/lint"}
    assert checks.globs is (world.forge_name == "gitea")


async def test_check_results(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    world.sim.set_status(
        world.forge_name,
        REPO,
        sha,
        context="ci/test",
        state="success",
        target_url="https://ci.example/1",
    )
    world.sim.set_status(
        world.forge_name, REPO, sha, context="ci/lint", state="failure", target_url=CI_URL
    )
    expected = {"ci/test": CheckState.SUCCESS, "ci/lint": CheckState.FAILURE}
    if world.forge_name == "github":
        world.sim.set_check_run(REPO, sha, name="build", status="completed", conclusion="cancelled")
        world.sim.set_check_run(REPO, sha, name="docs", status="in_progress", conclusion=None)
        expected |= {"build": CheckState.CANCELLED, "docs": CheckState.PENDING}
    results = await world.forge.check_results(REPO, sha)
    assert {r.name: r.state for r in results} == expected
    by_name = {r.name: r for r in results}
    assert by_name["ci/test"].url == "https://ci.example/1"


async def test_list_reviews(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    world.sim.submit_review(
        world.forge_name, REPO, number, reviewer="bob", state="APPROVED", body="lgtm"
    )
    world.sim.submit_review(
        world.forge_name, REPO, number, reviewer="carol", state="REQUEST_CHANGES", body="no"
    )
    reviews = await world.forge.list_reviews(REPO, number)
    assert [(r.reviewer, r.state, r.commit_sha) for r in reviews] == [
        ("bob", ReviewState.APPROVED, sha),
        ("carol", ReviewState.CHANGES_REQUESTED, sha),
    ]
    assert reviews[0].body == "lgtm"


async def test_user_permission(world: World) -> None:
    world.sim.set_permission(world.forge_name, REPO, "bob", "read")
    if world.forge_name == "gitea":
        # Gitea shows another user's permission to repository admins only: a bot with
        # write access is refused, and the refusal is named, never read as "none".
        with pytest.raises(PermissionDenied, match="Only admins can query"):
            await world.forge.user_permission(REPO, "bob")
        world.sim.set_permission("gitea", REPO, BOT["gitea"], "admin")
    assert await world.forge.user_permission(REPO, "bob") == "read"
    assert await world.forge.user_permission(REPO, "acme") == "admin"


# -- writing ------------------------------------------------------------------------------


async def test_submit_review_pinned_with_inline_comments(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    review = await world.forge.submit_review(
        REPO,
        number,
        commit_sha=sha,
        event=ReviewEvent.REQUEST_CHANGES,
        body="ci/test failed",
        comments=[InlineComment("README.md", 1, "typo")],
    )
    assert review.state is ReviewState.CHANGES_REQUESTED and review.commit_sha == sha
    assert review.reviewer == BOT[world.forge_name]
    stored = world.sim.pull(world.forge_name, REPO, number).reviews[-1]
    assert stored.commit_id == sha

    approved = await world.forge.submit_review(
        REPO, number, commit_sha=sha, event=ReviewEvent.APPROVE, body="all green"
    )
    assert approved.state is ReviewState.APPROVED
    listed = await world.forge.list_reviews(REPO, number)
    assert [r.state for r in listed] == [ReviewState.CHANGES_REQUESTED, ReviewState.APPROVED]


async def test_gitea_pending_review_is_an_error(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    if world.forge_name != "gitea":
        pytest.skip("GitHub has no silent PENDING fallback")
    # Send GitHub's spelling, as a naive client would: Gitea stores a PENDING review.
    monkeypatch.setitem(gitea_adapter.REVIEW_EVENTS, ReviewEvent.APPROVE, "APPROVE")
    number = world.open_pr()
    with pytest.raises(PendingReview):
        await world.forge.submit_review(
            REPO, number, commit_sha=world.head(number), event=ReviewEvent.APPROVE, body="ok"
        )


async def test_merge_pinned(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    result = await world.forge.merge(REPO, number, head_sha=sha, method="squash")
    pull = world.sim.pull(world.forge_name, REPO, number)
    assert result.merged and pull.merged
    assert result.merge_commit_sha == pull.merge_commit_sha
    pr = await world.forge.get_pull(REPO, number)
    assert pr.merged and pr.merge_commit_sha == pull.merge_commit_sha


async def test_merge_head_moved(world: World) -> None:
    number = world.open_pr()
    old = world.head(number)
    world.sim.push(world.forge_name, REPO, number)
    with pytest.raises(HeadMoved):
        await world.forge.merge(REPO, number, head_sha=old)
    assert not world.sim.pull(world.forge_name, REPO, number).merged


async def test_merge_head_moves_between_read_and_merge(world: World) -> None:
    number = world.open_pr()
    pr = await world.forge.get_pull(REPO, number)
    world.sim.faults.add(
        forge=world.forge_name,
        method=_merge_method(world),
        path=world.api_path(f"/pulls/{number}/merge"),
        before=lambda: world.sim.push(world.forge_name, REPO, number),
    )
    with pytest.raises(HeadMoved):
        await world.forge.merge(REPO, number, head_sha=pr.head_sha)


async def test_merge_not_mergeable(world: World) -> None:
    number = world.open_pr()
    world.sim.set_mergeable(world.forge_name, REPO, number, False)
    with pytest.raises(NotMergeable):
        await world.forge.merge(REPO, number, head_sha=world.head(number))


async def test_merge_blocked_by_required_checks(world: World) -> None:
    number = world.open_pr()
    world.sim.require_checks(world.forge_name, REPO, "main", ["ci/test"])
    with pytest.raises(NotMergeable):
        await world.forge.merge(REPO, number, head_sha=world.head(number))


async def test_comments_by_marker(world: World) -> None:
    number = world.open_pr()
    world.sim.add_comment(world.forge_name, REPO, number, "bob", f"{MARKER} imitation")
    assert await world.forge.find_comment(REPO, number, MARKER) is None
    created = await world.forge.create_comment(REPO, number, f"{MARKER}\nstate: waiting")
    assert created.author == BOT[world.forge_name]
    found = await world.forge.find_comment(REPO, number, MARKER)
    assert found is not None and found.id == created.id
    edited = await world.forge.edit_comment(REPO, created.id, f"{MARKER}\nstate: approved")
    assert edited.id == created.id and "approved" in edited.body
    again = await world.forge.find_comment(REPO, number, MARKER)
    assert again is not None and again.body.endswith("state: approved")


# -- errors and the retry policy ----------------------------------------------------------


async def test_wrong_token_is_authentication_failed(world: World) -> None:
    stranger = world.make_forge(token="not-a-valid-token")
    with pytest.raises(AuthenticationFailed):
        await stranger.get_pull(REPO, 1)
    assert stranger.calls["get_pull"] == 1  # never retried


async def test_rate_limit_retry_after_honoured(world: World) -> None:
    number = world.open_pr()
    path = world.api_path(f"/pulls/{number}")
    world.sim.faults.add(forge=world.forge_name, method="GET", path=path, status=429, retry_after=7)
    pr = await world.forge.get_pull(REPO, number)
    assert pr.number == number
    assert world.sleep.waits == [7.0]
    assert [r.status for r in world.requests("GET")] == [429, 200]


async def test_secondary_rate_limit_403(world: World) -> None:
    if world.forge_name != "github":
        pytest.skip("secondary rate limits are GitHub's")
    number = world.open_pr()
    world.sim.faults.add(
        forge="github",
        method="POST",
        path=world.api_path(f"/issues/{number}/comments"),
        secondary_rate_limit=True,
        retry_after=30,
    )
    comment = await world.forge.create_comment(REPO, number, "hello")
    assert world.sleep.waits == [30.0]
    assert [c.id for c in world.sim.pull("github", REPO, number).comments] == [comment.id]


async def test_server_errors_retried_for_gets(world: World) -> None:
    number = world.open_pr()
    world.sim.faults.add(
        forge=world.forge_name,
        method="GET",
        path=world.api_path(f"/pulls/{number}"),
        status=502,
        times=2,
    )
    await world.forge.get_pull(REPO, number)
    assert [r.status for r in world.requests("GET")] == [502, 502, 200]
    assert world.forge.calls["get_pull"] == 3


async def test_server_error_never_retried_for_a_merge(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    world.sim.faults.add(
        forge=world.forge_name,
        method=_merge_method(world),
        path=world.api_path(f"/pulls/{number}/merge"),
        status=502,
        apply_then_fail=True,
    )
    with pytest.raises(ForgeUnavailable):
        await world.forge.merge(REPO, number, head_sha=sha)
    merges = [r for r in world.requests() if r.path.endswith("/merge")]
    assert len(merges) == 1
    # The forge did merge: re-reading, as a caller must, shows it.
    assert (await world.forge.get_pull(REPO, number)).merged


async def test_timeout_retried_for_gets_never_for_a_merge(world: World) -> None:
    number = world.open_pr()
    quick = world.make_forge(policy=RetryPolicy(timeout_s=0.3))
    path = world.api_path(f"/pulls/{number}")
    world.sim.faults.add(forge=world.forge_name, method="GET", path=path, timeout=3.0)
    assert (await quick.get_pull(REPO, number)).number == number
    assert quick.calls["get_pull"] == 2

    world.sim.faults.add(
        forge=world.forge_name, method=_merge_method(world), path=f"{path}/merge", timeout=3.0
    )
    with pytest.raises(ForgeUnavailable, match="timed out"):
        await quick.merge(REPO, number, head_sha=world.head(number))
    assert quick.calls["merge"] == 1


# -- GitHub App authentication -------------------------------------------------------------


async def test_github_app_flow(world: World) -> None:
    if world.forge_name != "github":
        pytest.skip("GitHub Apps are GitHub's")
    app_id, key = world.sim.create_github_app(bot_login="reviewbot-app[bot]")
    world.sim.install_app(app_id, REPO)
    auth = GitHubAppAuth(app_id, key, clock=world.clock)
    app = GitHubForge(
        api_url=world.server.github_api_url,
        app_auth=auth,
        client=world.client,
        sleep=world.sleep,
        clock=world.clock,
    )
    number = world.open_pr()

    assert await app.bot_login() == "reviewbot-app[bot]"
    await app.get_pull(REPO, number)
    await app.get_pull(REPO, number)
    assert app.calls["app_installation"] == 1 and app.calls["app_token"] == 1

    world.clock.advance(3600 - 400)  # the token is still good for more than the margin
    await app.create_comment(REPO, number, "as the app")
    assert app.calls["app_token"] == 1
    assert world.sim.pull("github", REPO, number).comments[-1].user == "reviewbot-app[bot]"

    world.clock.advance(200)  # now within the refresh margin: a new token is minted
    await app.get_pull(REPO, number)
    assert app.calls["app_token"] == 2 and app.calls["app_installation"] == 1
    tokens = [r for r in world.requests("POST") if r.path.endswith("/access_tokens")]
    assert [r.status for r in tokens] == [201, 201]


async def test_github_app_not_installed(world: World) -> None:
    if world.forge_name != "github":
        pytest.skip("GitHub Apps are GitHub's")
    app_id, key = world.sim.create_github_app(bot_login="lonely[bot]")
    app = GitHubForge(
        api_url=world.server.github_api_url,
        app_auth=GitHubAppAuth(app_id, key, clock=world.clock),
        client=world.client,
        clock=world.clock,
    )
    with pytest.raises(NotFound):
        await app.get_pull(REPO, 1)


# -- the call budget -----------------------------------------------------------------------


async def evaluate(forge: Forge, number: int) -> None:
    """What evaluating a PR reads: the PR, its base's required checks, results, reviews."""
    pr = await forge.get_pull(REPO, number)
    await forge.required_checks(REPO, pr.base_ref)
    await forge.check_results(REPO, pr.head_sha)
    await forge.list_reviews(REPO, number)


async def test_call_budget_of_evaluating_a_pr(world: World) -> None:
    number = world.open_pr()
    sha = world.head(number)
    world.sim.require_checks(world.forge_name, REPO, "main", ["ci/test"])
    world.sim.set_status(
        world.forge_name, REPO, sha, context="ci/test", state="success", target_url=CI_URL
    )
    assert world.requests() == []

    await evaluate(world.forge, number)
    gets = world.requests("GET")
    assert len(gets) == len(world.requests())  # reading only
    github = world.forge_name == "github"
    # GitHub keeps its rules in two places (rulesets and the branch's protection) and
    # reports CI in two (statuses and check runs); Gitea has one of each.
    # Gitea's branch read serves its rules and the bot's merge permission alike.
    rules = {"required_checks": 2} if github else {"branch": 1}
    reads = {"get_pull": 1, **rules, "list_reviews": 1}
    reads["check_results"] = 2 if github else 1
    assert dict(world.forge.calls) == reads
    assert len(gets) == sum(reads.values())
    without_reviews = len(gets) - reads["list_reviews"]
    assert without_reviews <= 5

    await evaluate(world.forge, number)
    again = world.requests("GET")[len(gets) :]
    assert len(again) == sum(reads.values())
    if world.forge_name == "github":
        # Every answer is a 304 from the ETag cache: nothing counts against the limit.
        assert {r.status for r in again} == {304}
        assert sum(world.forge.not_modified.values()) == len(again)
        rate_counted = sum(world.forge.calls.values()) - sum(world.forge.not_modified.values())
        assert rate_counted == sum(reads.values())  # only the first, uncached pass
        # The forge agrees: its rate-limit count did not move during the second pass.
        used = [r.response_headers.get("x-ratelimit-used") for r in (gets[-1], again[-1])]
        assert used[0] is not None and used[0] == used[1]


def _merge_method(world: World) -> str:
    return "PUT" if world.forge_name == "github" else "POST"
