"""GET /api/v1/capability against the forge simulator over real HTTP, with a real store:
whether a caller may review or merge a PR now, and every reason why not."""

from __future__ import annotations

import urllib.parse
from typing import Any

from tests.integration.merge_support import CHANGES, REPO, World, set_check


def path(pr: str, role: str, worker: str | None = None) -> str:
    query = {"pr": pr, "role": role, **({"worker": worker} if worker else {})}
    return "/api/v1/capability?" + urllib.parse.urlencode(query)


async def register(w: World, token: str, name: str = "agent") -> str:
    body = {"name": name, "client": "test", "session_id": "s", "role": "merger"}
    status, answer = await w.call("POST", "/api/v1/workers", token, body)
    assert status == 201, answer
    identity: str = answer["worker_identity"]
    return identity


async def acquire(w: World, token: str, worker: str, number: int, head: str) -> dict[str, Any]:
    body = {
        "forge": "gitea",
        "repo": REPO,
        "number": number,
        "role": "merger",
        "worker_identity": worker,
        "head_sha": head,
    }
    status, lease = await w.call("POST", "/api/v1/leases/acquire", token, body)
    assert status == 200, lease
    return lease


def codes(answer: dict[str, Any]) -> set[str]:
    return {b["code"] for b in answer["blockers"]}


async def test_a_green_approved_pr_may_be_merged_then_the_lease_names_its_holder(
    world: World,
) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice")
    set_check(w, "gitea", pr.head_sha, "success")
    w.sim.submit_review("gitea", REPO, pr.number, reviewer="bob", state="APPROVED")
    await w.settle()
    ref = f"gitea:{REPO}#{pr.number}"
    me_token, other_token = w.token("lease,merge,read"), w.token("lease,merge,read")
    me, other = await register(w, me_token, "me"), await register(w, other_token, "other")

    status, answer = await w.call("GET", path(ref, "merge", me), me_token)
    assert status == 200, answer
    assert (answer["allowed"], answer["blockers"], answer["head_sha"]) == (True, [], pr.head_sha)
    assert answer["next_action"].startswith(f"acquire the merger lease at {pr.head_sha}")

    lease = await acquire(w, other_token, other, pr.number, pr.head_sha)
    status, answer = await w.call("GET", path(ref, "merge", me), me_token)
    assert status == 200 and answer["allowed"] is False
    (held,) = answer["blockers"]
    assert (held["code"], held["holder"], held["expires_at"]) == (
        "lease_held",
        other,
        lease["expires_at"],
    )
    assert "epoch" not in held and str(lease["epoch"]) not in held["detail"].split()
    assert answer["next_action"] == held["next_action"]

    # the holder itself may merge now, with its epoch
    status, answer = await w.call("GET", path(ref, "merge", other), other_token)
    assert answer["allowed"] is True and answer["next_action"].startswith("merge at")


async def test_every_reason_at_once(world: World) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice", draft=True)
    set_check(w, "gitea", pr.head_sha, "failure")
    w.sim.submit_review("gitea", REPO, pr.number, reviewer="alice", state="APPROVED")
    w.sim.submit_review("gitea", REPO, pr.number, reviewer="carol", state=CHANGES["gitea"])
    w.sim.set_mergeable("gitea", REPO, pr.number, False)
    await w.settle()
    reader = w.token("read")  # may ask, may not act
    status, answer = await w.call("GET", path(f"gitea:{REPO}#{pr.number}", "merge"), reader)
    assert status == 200, answer
    assert codes(answer) >= {
        "missing_scope",
        "pr_draft",
        "not_mergeable",
        "self_approval",
        "changes_requested",
        "checks_not_green",
    }
    scopes = [b["detail"] for b in answer["blockers"] if b["code"] == "missing_scope"]
    assert len(scopes) == 2 and "'lease'" in scopes[0] and "'merge'" in scopes[1]
    assert all(b["next_action"] for b in answer["blockers"])


async def test_an_approval_at_an_older_head_is_head_moved(world: World) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice")
    w.sim.submit_review("gitea", REPO, pr.number, reviewer="bob", state="APPROVED")
    new_head = w.sim.push("gitea", REPO, pr.number)
    set_check(w, "gitea", new_head, "success")
    await w.settle()
    token = w.token("lease,merge,read")
    status, answer = await w.call("GET", path(f"gitea:{REPO}#{pr.number}", "merge"), token)
    assert status == 200
    (moved,) = [b for b in answer["blockers"] if b["code"] == "head_moved"]
    assert pr.head_sha[:12] in moved["detail"] and new_head in moved["detail"]
    assert "not_approved" not in codes(answer)


async def test_review_of_a_closed_pr_and_worker_refusals(world: World) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice")
    w.sim.update_pr("gitea", REPO, pr.number, state="closed")
    token, stranger = w.token("review,lease,read"), w.token("lease,read")
    ref = f"gitea:{REPO}#{pr.number}"
    status, answer = await w.call("GET", path(ref, "review"), token)
    assert (status, codes(answer)) == (200, {"pr_closed"})

    theirs = await register(w, stranger, "theirs")
    status, answer = await w.call("GET", path(ref, "review", theirs), token)
    assert "not_worker_owner" in codes(answer)
    ghost = theirs.replace("theirs", "ghost")
    status, answer = await w.call("GET", path(ref, "review", ghost), token)
    assert "worker_unproven" in codes(answer)


async def test_binding_and_casing(world: World) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice")
    bound = w.token("review,read", repo="gitea:acme/api")
    status, answer = await w.call("GET", path(f"gitea:ACME/Api#{pr.number}", "review"), bound)
    assert status == 200, answer  # another casing of the bound repository is the same one
    assert answer["pr"] == f"gitea:acme/api#{pr.number}"

    before = len(w.sim.requests)
    for other in (f"github:acme/api#{pr.number}", f"gitea:acme/other#{pr.number}"):
        status, answer = await w.call("GET", path(other, "review"), bound)
        assert (status, answer["error"]) == (403, "repo_not_allowed"), other
    assert len(w.sim.requests) == before  # refused before the forge was asked anything

    reader = w.token("read")
    for bad in (path("gitea:acme/api", "review"), path(f"gitea:{REPO}#1", "admin")):
        status, answer = await w.call("GET", bad, reader)
        assert (status, answer["error"]) == (400, "invalid_request"), bad
    status, answer = await w.call("GET", path(f"gitea:{REPO}#1", "review", "x" * 500), reader)
    assert (status, answer["error"]) == (400, "invalid_request")
    status, answer = await w.call("GET", path(f"gitea:{REPO}#{pr.number}", "review"), None)
    assert status == 401
    status, answer = await w.call("GET", path(f"gitea:{REPO}#999", "review"), reader)
    assert (status, answer["error"]) == (404, "pr_not_found")


async def test_a_bot_outside_the_merge_whitelist_is_a_named_blocker(world: World) -> None:
    w = world
    pr = w.sim.open_pr("gitea", REPO, author="alice")
    set_check(w, "gitea", pr.head_sha, "success")
    w.sim.submit_review("gitea", REPO, pr.number, reviewer="bob", state="APPROVED")
    await w.settle()
    w.sim.require_checks("gitea", REPO, "main", ["ci/test"])
    w.sim.repo("gitea", REPO).protections["main"].merge_whitelist = ["carol"]
    token = w.token("lease,merge,read")
    status, answer = await w.call("GET", path(f"gitea:{REPO}#{pr.number}", "merge"), token)
    assert status == 200 and answer["allowed"] is False, answer
    (blocker,) = [b for b in answer["blockers"] if b["code"] == "permission_denied"]
    assert "merge whitelist" in blocker["detail"] and "main" in blocker["detail"]
