"""POST /api/v1/merges against the forge simulator over real HTTP, with a real store.

A merge happens only at the pinned head, under the live merger lease, approved by someone
other than the author at exactly that head, with no standing change request and green
required checks; a moved head, a forge error after the merge and a stale epoch are handled
without a second merge.
"""

from __future__ import annotations

import json

import pytest

from reviewbot.core.prstate import parse_pr_state
from reviewbot.store.merges import MergeStore
from tests.integration.merge_support import (
    CHANGES,
    REPO,
    Merger,
    World,
    green_approved_pr,
    set_check,
)

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def merges(w: World) -> MergeStore:
    return w.api.merges


@FORGES
async def test_a_complete_merger_session(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge)
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200, body
    merged = world.sim.pull(forge, REPO, pr.number)
    assert merged.merged
    assert body["merged"] is True
    assert body["merge_commit_sha"] == merged.merge_commit_sha
    assert body["approvers"] == ["bob"]
    # the merge call carried the pin
    (call,) = world.merge_requests(forge, pr.number)
    sent = json.loads(call.body) if isinstance(call.body, str | bytes) else call.body
    pin_field = "sha" if forge == "github" else "head_commit_id"
    assert sent[pin_field] == pr.head_sha
    # recorded with the holder and epoch, and the lease released
    record = merges(world).merge_of(forge, REPO, pr.number)
    assert record is not None
    assert (record.head_sha, record.merge_commit_sha, record.holder, record.epoch) == (
        pr.head_sha,
        merged.merge_commit_sha,
        m.identity,
        epoch,
    )
    assert (await m.lease(forge, pr.number))["phase"] == "released"
    # asking again is answered from the live state: already merged, never a second call
    epoch2 = await m.acquire(forge, pr.number, pr.head_sha)
    status, again = await m.merge(forge, pr.number, pr.head_sha, epoch2)
    assert status == 200 and again["already_merged"] is True
    assert len(world.merge_requests(forge, pr.number)) == 1


@FORGES
async def test_head_pushed_between_approval_and_merge(world: World, forge: str) -> None:
    """(c) the forge answers 409, nothing merges, and the new head is reviewed."""
    pr = green_approved_pr(world, forge)
    old = pr.head_sha
    pushed: list[str] = []

    def push() -> None:
        new = world.sim.push(forge, REPO, pr.number)
        set_check(world, forge, new, "success")
        pushed.append(new)

    method = "PUT" if forge == "github" else "POST"
    world.sim.faults.add(
        forge=forge, method=method, path=f"/repos/{REPO}/pulls/{pr.number}/merge", before=push
    )
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, old)
    status, body = await m.merge(forge, pr.number, old, epoch)
    assert pushed, "the push did not happen"
    assert status == 409, body
    assert body["error"] == "head_moved"
    assert body["new_head"] == pushed[0]
    assert not world.sim.pull(forge, REPO, pr.number).merged
    assert merges(world).merge_of(forge, REPO, pr.number) is None
    attempts = merges(world).attempts(forge, REPO, pr.number)
    assert [(a.status, a.head_sha) for a in attempts] == [("head_moved", old)]
    assert (await m.lease(forge, pr.number))["phase"] == "released"
    # the old epoch can do nothing more
    status, body = await m.merge(forge, pr.number, old, epoch)
    assert status == 409 and body["error"] in ("lease_not_held", "head_moved")
    # the bot reviews the new head on its own
    await world.settle()
    reviews = world.bot_reviews(forge, pr.number)
    assert [(r.state, r.commit_id) for r in reviews] == [("APPROVED", pushed[0])]
    assert len(world.merge_requests(forge, pr.number)) == 1


@FORGES
async def test_merge_answered_500_after_it_merged_is_recorded_once(
    world: World, forge: str
) -> None:
    """(d) the forge merged and answered 500: re-read, no second merge, recorded as merged."""
    pr = green_approved_pr(world, forge)
    method = "PUT" if forge == "github" else "POST"
    world.sim.faults.add(
        forge=forge,
        method=method,
        path=f"/repos/{REPO}/pulls/{pr.number}/merge",
        status=500,
        apply_then_fail=True,
    )
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200, body
    live = world.sim.pull(forge, REPO, pr.number)
    assert live.merged and body["merge_commit_sha"] == live.merge_commit_sha
    assert len(world.merge_requests(forge, pr.number)) == 1
    record = merges(world).merge_of(forge, REPO, pr.number)
    assert record is not None and record.merge_commit_sha == live.merge_commit_sha
    (attempt,) = merges(world).attempts(forge, REPO, pr.number)
    assert attempt.status == "merged" and "500" in attempt.detail


async def test_merge_answered_500_without_merging_is_not_retried(world: World) -> None:
    forge = "github"
    pr = green_approved_pr(world, forge)
    world.sim.faults.add(
        forge=forge, method="PUT", path=f"/repos/{REPO}/pulls/{pr.number}/merge", status=502
    )
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 503 and body["error"] == "forge_unavailable"
    assert "not merged" in body["detail"]
    assert not world.sim.pull(forge, REPO, pr.number).merged
    assert len(world.merge_requests(forge, pr.number)) == 1
    assert [a.status for a in merges(world).attempts(forge, REPO, pr.number)] == ["unknown"]
    # the lease is still held: the caller calls again, which reads the live state first
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200 and body["merged"] is True
    assert len(world.merge_requests(forge, pr.number)) == 2


@FORGES
async def test_an_approval_at_an_old_head_never_permits_a_merge(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge)
    approved = pr.head_sha
    new = world.sim.push(forge, REPO, pr.number)
    set_check(world, forge, new, "success")
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, new)
    status, body = await m.merge(forge, pr.number, new, epoch)
    assert status == 409 and body["error"] == "not_approved"
    assert body["codes"] == ["not_approved"]
    assert world.merge_requests(forge, pr.number) == []
    # merging at the old head is refused too: the head moved
    status, body = await m.merge(forge, pr.number, approved, epoch)
    assert status == 409 and body["codes"][0] == "lease_not_held", body
    assert "head_moved" in body["codes"]
    assert not world.sim.pull(forge, REPO, pr.number).merged


@FORGES
async def test_the_authors_own_approval_never_counts(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge, reviewer="alice")
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 409 and body["codes"] == ["not_approved"]
    assert "alice" in body["detail"]
    assert world.merge_requests(forge, pr.number) == []


@FORGES
async def test_request_changes_as_latest_review_blocks(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge)
    world.sim.submit_review(forge, REPO, pr.number, reviewer="carol", state=CHANGES[forge])
    set_check(world, forge, pr.head_sha, "failure")
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 409
    assert body["codes"] == ["changes_requested", "checks_not_green"]
    assert "carol" in body["detail"] and "ci/test failure" in body["detail"]
    assert world.merge_requests(forge, pr.number) == []
    (attempt,) = merges(world).attempts(forge, REPO, pr.number)
    assert attempt.status == "refused"
    assert attempt.codes == ("changes_requested", "checks_not_green")
    # carol approves: her change request is lifted and the merge goes through
    set_check(world, forge, pr.head_sha, "success")
    world.sim.submit_review(forge, REPO, pr.number, reviewer="carol", state="APPROVED")
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200 and body["approvers"] == ["bob", "carol"]


@FORGES
async def test_a_stale_epoch_is_refused_and_merges_nothing(world: World, forge: str) -> None:
    pr = green_approved_pr(world, forge)
    first, second = Merger(world, "first"), Merger(world, "second")
    await first.register()
    await second.register()
    old = await first.acquire(forge, pr.number, pr.head_sha)
    status, _ = await world.call(
        "POST",
        "/api/v1/leases/release",
        first.token,
        {
            "forge": forge,
            "repo": REPO,
            "number": pr.number,
            "role": "merger",
            "worker_identity": first.identity,
            "epoch": old,
        },
    )
    assert status == 200
    new = await second.acquire(forge, pr.number, pr.head_sha)
    assert new > old
    status, body = await first.merge(forge, pr.number, pr.head_sha, old)
    assert status == 409 and body["error"] == "superseded"
    assert second.identity in body["detail"]
    assert world.merge_requests(forge, pr.number) == []
    assert merges(world).attempts(forge, REPO, pr.number) == []
    # someone else's identity with the live epoch is not the holder either
    status, body = await first.merge(forge, pr.number, pr.head_sha, new)
    assert status == 409 and body["error"] == "lease_not_held"
    status, body = await second.merge(forge, pr.number, pr.head_sha, new)
    assert status == 200 and body["merged"] is True
    assert len(world.merge_requests(forge, pr.number)) == 1


async def test_merge_needs_the_merge_scope_and_the_repository(world: World) -> None:
    pr = green_approved_pr(world, "gitea")
    body = {
        "forge": "gitea",
        "repo": REPO,
        "number": pr.number,
        "head_sha": pr.head_sha,
        "worker_identity": "x-20260101T000000Z-0123456789ab",
        "epoch": 1,
    }
    status, answer = await world.call("POST", "/api/v1/merges", world.token("lease"), body)
    assert status == 403 and answer["error"] == "missing_scope"
    bound = world.token("merge", repo="gitea:acme/other")
    status, answer = await world.call("POST", "/api/v1/merges", bound, body)
    assert status == 403 and answer["error"] == "repo_not_allowed"
    status, answer = await world.call(
        "POST", "/api/v1/merges", world.token("merge"), {**body, "method": "octopus"}
    )
    assert status == 400 and answer["error"] == "invalid_request"
    status, answer = await world.call(
        "POST", "/api/v1/merges", world.token("merge"), {**body, "epoch": 0}
    )
    assert status == 400
    assert world.merge_requests("gitea", pr.number) == []


@FORGES
async def test_the_state_comment_shows_the_merger_lease_then_the_merge(
    world: World, forge: str
) -> None:
    pr = world.sim.open_pr(forge, REPO, author="alice")
    set_check(world, forge, pr.head_sha, "success")
    await world.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
    await world.settle()
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    # any event the bot handles refreshes the comment
    status_id = set_check(world, forge, pr.head_sha, "success").id
    await world.sim.deliver_status(forge, REPO, status_id)
    await world.settle()

    def state_comment() -> str:
        comments = [
            c.body
            for c in world.sim.pull(forge, REPO, pr.number).comments
            if "<!-- reviewbot:pr-state -->" in c.body
        ]
        assert len(comments) == 1
        return comments[0]

    assert f"merger: `{m.identity}`, claimed, head `{pr.head_sha[:12]}`" in state_comment()
    before = parse_pr_state(state_comment())  # what an agent reads back
    assert (before.state, before.who_is_next, before.merge_ready) == ("merging", m.identity, True)
    assert [(x.role, x.holder, x.head_sha) for x in before.leases] == [
        ("merger", m.identity, pr.head_sha)
    ]
    assert before.what_happened == f"merger lease granted: {m.identity}"
    assert f"epoch {epoch}" not in state_comment()  # public: never the fencing token
    # the bot's own approval at the head permits the merge; the comment follows it
    status, body = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200, body
    text = state_comment()
    assert "| State | merged (merged) |" in text
    after = parse_pr_state(text)
    assert (after.state, after.leases, after.merge_ready) == ("merged", (), False)
    assert (after.what_happened, after.why) == (f"merger lease released: {m.identity}", "merged")


async def test_two_concurrent_merge_calls_send_one_merge(world: World) -> None:
    import asyncio

    forge = "github"
    pr = green_approved_pr(world, forge)
    m = Merger(world)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    answers = await asyncio.gather(*(m.merge(forge, pr.number, pr.head_sha, epoch) for _ in "ab"))
    assert sorted(status for status, _ in answers) == [200, 200]
    assert sorted(body["already_merged"] for _, body in answers) == [False, True]
    assert len(world.merge_requests(forge, pr.number)) == 1
