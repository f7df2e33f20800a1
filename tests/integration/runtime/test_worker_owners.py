"""A worker identity belongs to the token that registered it (a real server, the forge
simulator over HTTP, a real SQLite file).

Each test replays an attack that worked when a worker identity was a bearer name: another
``lease`` token heartbeating, releasing, acquiring or merging as someone else's worker,
reading the holder's epoch out of a refusal, taking the bot's own names, merging with a
SHA prefix, or being told "already merged" without a claim. Each is refused with nothing
changed.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.integration.merge_support import REPO, World, set_check

FORGE = "github"


class Caller:
    """One API token and the worker it registered."""

    def __init__(self, w: World, scopes: str = "lease,merge,read") -> None:
        self.w = w
        self.token = w.token(scopes)
        self.identity = ""

    async def register(self, name: str = "agent") -> tuple[int, dict[str, Any]]:
        status, body = await self.w.call(
            "POST",
            "/api/v1/workers",
            self.token,
            {"name": name, "client": "test", "session_id": "s", "role": "merger"},
        )
        if status == 201:
            self.identity = body["worker_identity"]
        return status, body

    async def call(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return await self.w.call("POST", path, self.token, body)

    def target(self, number: int, identity: str | None = None) -> dict[str, Any]:
        return {
            "forge": FORGE,
            "repo": REPO,
            "number": number,
            "role": "merger",
            "worker_identity": identity or self.identity,
        }

    async def acquire(self, number: int, head: str, identity: str | None = None) -> Any:
        return await self.call(
            "/api/v1/leases/acquire", {**self.target(number, identity), "head_sha": head}
        )

    async def merge(
        self, number: int, head: str, epoch: int, identity: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        body = {k: v for k, v in self.target(number, identity).items() if k != "role"}
        return await self.call("/api/v1/merges", {**body, "head_sha": head, "epoch": epoch})


def green_approved_pr(w: World) -> Any:
    pr = w.sim.open_pr(FORGE, REPO, author="alice")
    set_check(w, FORGE, pr.head_sha, "success")
    w.sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    return pr


def lease_rows(w: World) -> list[tuple[Any, ...]]:
    with w.db.read() as tx:
        rows = tx.all(
            "SELECT repo, number, role, holder, epoch, head_sha, phase, expires_at, writes"
            " FROM leases ORDER BY repo, number, role"
        )
    return [tuple(r) for r in rows]


def worker_rows(w: World) -> list[tuple[Any, ...]]:
    with w.db.read() as tx:
        return [tuple(r) for r in tx.all("SELECT * FROM workers ORDER BY identity")]


def merge_attempts(w: World) -> int:
    with w.db.read() as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM merge_attempts")
    assert row is not None
    return int(row["n"])


async def test_another_tokens_worker_cannot_be_driven(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    pr = green_approved_pr(world)
    owner, thief = Caller(world), Caller(world)
    assert (await owner.register("owner"))[0] == 201
    status, lease = await owner.acquire(pr.number, pr.head_sha)
    assert status == 200, lease
    epoch = lease["epoch"]
    assert (await thief.register("thief"))[0] == 201
    before = (lease_rows(world), worker_rows(world), merge_attempts(world))

    caplog.set_level(logging.WARNING, logger="reviewbot.store.workers")
    claim = {**owner.target(pr.number), "epoch": epoch}
    attempts = [
        ("/api/v1/workers/heartbeat", {"worker_identity": owner.identity}),
        ("/api/v1/leases/heartbeat", claim),
        ("/api/v1/leases/release", claim),
        ("/api/v1/leases/acquire", {**owner.target(pr.number), "head_sha": pr.head_sha}),
    ]
    for path, body in attempts:
        status, answer = await thief.call(path, body)
        assert (status, answer["error"]) == (403, "not_worker_owner"), (path, answer)
        assert owner.identity in answer["detail"]
    status, answer = await thief.merge(pr.number, pr.head_sha, epoch, owner.identity)
    assert (status, answer["error"]) == (403, "not_worker_owner")

    # nothing changed: the lease, the workers, the merge record, the forge
    assert (lease_rows(world), worker_rows(world), merge_attempts(world)) == before
    assert world.merge_requests(FORGE, pr.number) == []
    assert not world.sim.pull(FORGE, REPO, pr.number).merged
    # each refusal is logged at warning level, naming the worker and both callers
    refusals = [r for r in caplog.records if "acted in the name of worker" in r.getMessage()]
    assert len(refusals) == 5 and all(r.levelno == logging.WARNING for r in refusals)
    assert all(owner.identity in r.getMessage() for r in refusals)
    assert all(owner.token[:8] not in r.getMessage() for r in refusals)  # no secret

    # the owner still holds it and can merge
    status, merged = await owner.merge(pr.number, pr.head_sha, epoch)
    assert status == 200 and merged["merged"] is True


async def test_a_lease_held_refusal_names_holder_and_expiry_but_not_the_epoch(
    world: World,
) -> None:
    pr = green_approved_pr(world)
    owner, other = Caller(world), Caller(world)
    await owner.register("owner")
    await other.register("other")
    _, lease = await owner.acquire(pr.number, pr.head_sha)
    status, answer = await other.acquire(pr.number, pr.head_sha)
    assert (status, answer["error"]) == (409, "lease_held")
    assert answer["holder"] == owner.identity and answer["expires_at"] == lease["expires_at"]
    assert "epoch" not in answer and "epoch" not in answer["detail"]


@pytest.mark.parametrize("name", ["reviewbot", "reviewbot.merger", "ReviewBot.Merger"])
async def test_the_bots_own_names_are_reserved(world: World, name: str) -> None:
    caller = Caller(world)
    before = worker_rows(world)
    status, answer = await caller.register(name)
    assert (status, answer["error"]) == (403, "worker_name_reserved")
    assert worker_rows(world) == before


async def test_the_bots_own_workers_cannot_be_driven_over_the_api(world: World) -> None:
    pr = green_approved_pr(world)
    with world.db.read() as tx:
        bots = [r["identity"] for r in tx.all("SELECT identity FROM workers")]
    assert bots and all(b.startswith("reviewbot") for b in bots)
    caller = Caller(world)
    for bot in bots:
        status, answer = await caller.acquire(pr.number, pr.head_sha, bot)
        assert (status, answer["error"]) == (403, "not_worker_owner")
    assert lease_rows(world) == []


async def test_a_hyphenated_worker_name_works_end_to_end(world: World) -> None:
    pr = green_approved_pr(world)
    agent = Caller(world)
    status, body = await agent.register("claude-opus-4")
    assert status == 201 and body["name"] == "claude-opus-4"
    assert agent.identity.startswith("claude-opus-4-")
    status, lease = await agent.acquire(pr.number, pr.head_sha)
    assert status == 200 and lease["holder"] == agent.identity
    status, merged = await agent.merge(pr.number, pr.head_sha, lease["epoch"])
    assert status == 200 and merged["merged"] is True


async def test_a_sha_prefix_is_refused_by_leases_and_merges(world: World) -> None:
    pr = green_approved_pr(world)
    agent = Caller(world)
    await agent.register()
    status, answer = await agent.acquire(pr.number, pr.head_sha[:4])
    assert (status, answer["error"]) == (400, "invalid_request")
    assert "full commit SHA" in answer["detail"]
    assert lease_rows(world) == []

    _, lease = await agent.acquire(pr.number, pr.head_sha)
    before = lease_rows(world)
    status, answer = await agent.merge(pr.number, pr.head_sha[:4], lease["epoch"])
    assert (status, answer["error"]) == (400, "invalid_request")
    # nothing was read as a moved head: the lease stands, no merge attempt, nothing sent
    assert lease_rows(world) == before and merge_attempts(world) == 0
    assert world.merge_requests(FORGE, pr.number) == []


async def test_merging_a_merged_pr_still_needs_the_callers_claim(world: World) -> None:
    pr = green_approved_pr(world)
    owner = Caller(world)
    await owner.register("owner")
    _, lease = await owner.acquire(pr.number, pr.head_sha)
    status, merged = await owner.merge(pr.number, pr.head_sha, lease["epoch"])
    assert status == 200 and merged["merged"] is True
    after = (lease_rows(world), merge_attempts(world))

    # a caller with a worker of its own but no claim learns nothing and changes nothing
    other = Caller(world)
    await other.register("other")
    for epoch in (lease["epoch"], lease["epoch"] + 1):
        status, answer = await other.merge(pr.number, pr.head_sha, epoch)
        assert status == 409 and answer["error"] in ("lease_not_held", "superseded"), answer
        assert answer["merged"] is False and answer["merge_commit_sha"] is None
    # a token without the merge scope is refused before anything
    reader = Caller(world, "lease,read")
    await reader.register("reader")
    status, answer = await reader.merge(pr.number, pr.head_sha, lease["epoch"])
    assert (status, answer["error"]) == (403, "missing_scope")
    assert (lease_rows(world), merge_attempts(world)) == after
    assert len(world.merge_requests(FORGE, pr.number)) == 1

    # the caller whose claim merged it is still told it is merged
    status, again = await owner.merge(pr.number, pr.head_sha, lease["epoch"])
    assert status == 200 and again["already_merged"] is True
