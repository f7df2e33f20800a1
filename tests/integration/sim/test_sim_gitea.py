"""The simulator's Gitea API subset over real HTTP: reviews, merges, protections, statuses."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from reviewbot.sim import SimServer, Simulator

REPO = "acme/api"


class Gitea:
    def __init__(self, session: aiohttp.ClientSession, server: SimServer, token: str) -> None:
        self.session = session
        self.base = server.gitea_url + "/api/v1"
        self.token = token

    async def call(
        self, method: str, path: str, *, token: str | None = None, **kw: Any
    ) -> tuple[int, Any, bytes]:
        headers = dict(kw.pop("headers", {}))
        auth = self.token if token is None else token
        if auth:
            headers["Authorization"] = f"token {auth}"
        async with self.session.request(method, self.base + path, headers=headers, **kw) as resp:
            raw = await resp.read()
            body = await resp.json(content_type=None) if raw else None
            return resp.status, body, raw


@pytest.fixture
async def gitea(sim: Simulator, sim_server: SimServer) -> Any:
    sim.create_repo("gitea", REPO)
    token = sim.add_user("gitea", "bot")
    sim.add_user("gitea", "alice")
    async with aiohttp.ClientSession() as session:
        yield Gitea(session, sim_server, token)


async def test_token_auth(gitea: Gitea) -> None:
    status, body, _ = await gitea.call("GET", "/user", token="")
    assert status == 401 and "message" in body
    status, _, _ = await gitea.call("GET", "/user", token="wrong")
    assert status == 401
    status, body, _ = await gitea.call("GET", "/user")
    assert (status, body["login"], body["username"]) == (200, "bot", "bot")
    status, body, _ = await gitea.call("GET", "/version")
    assert status == 200 and body["version"]


async def test_pull_reads_and_lists(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice", labels=["needs-review"], draft=True)
    closed = sim.open_pr("gitea", REPO, author="alice", head_ref="old")
    sim.update_pr("gitea", REPO, closed.number, state="closed")
    status, body, _ = await gitea.call("GET", f"/repos/{REPO}/pulls/{pr.number}")
    assert status == 200
    assert (body["head"]["sha"], body["base"]["ref"], body["draft"]) == (pr.head_sha, "main", True)
    assert body["merged_at"] is None and body["mergeable"] is True
    assert [label["name"] for label in body["labels"]] == ["needs-review"]
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/pulls", params={"state": "open"})
    assert [p["number"] for p in body] == [pr.number]
    status, body, _ = await gitea.call("GET", f"/repos/{REPO}/pulls/42")
    assert status == 404
    for path in ("files", "commits"):
        status, body, _ = await gitea.call("GET", f"/repos/{REPO}/pulls/{pr.number}/{path}")
        assert status == 200 and len(body) == 1
    status, body, _ = await gitea.call("GET", f"/repos/{REPO}")
    assert (status, body["full_name"]) == (200, REPO)
    # Another user's permission is for repository admins (and the user themself) only.
    status, body, _ = await gitea.call("GET", f"/repos/{REPO}/collaborators/alice/permission")
    assert status == 403 and body["message"].startswith("Only admins can query")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/collaborators/bot/permission")
    assert body["permission"] == "write"
    sim.set_permission("gitea", REPO, "bot", "admin")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/collaborators/alice/permission")
    assert body["permission"] == "write"


async def test_required_checks_are_glob_patterns(sim: Simulator, gitea: Gitea) -> None:
    sim.require_checks("gitea", REPO, "main", ["ci/*", "lint"])
    # A writer reads the rule through the branch; the protection routes are reqAdmin().
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/branches/main")
    assert (body["protected"], body["status_check_contexts"]) == (True, ["ci/*", "lint"])
    assert body["effective_branch_protection_name"] == ""  # shown to admins only
    status, body, _ = await gitea.call("GET", f"/repos/{REPO}/branch_protections")
    assert status == 403
    assert body["message"] == (
        "user should be an owner or a collaborator with admin write of a repository"
    )
    sim.set_permission("gitea", REPO, "bot", "admin")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/branch_protections")
    assert [(p["rule_name"], p["enable_status_check"]) for p in body] == [("main", True)]
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/branch_protections/main")
    assert body["status_check_contexts"] == ["ci/*", "lint"]
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/branches/main")
    assert body["effective_branch_protection_name"] == "main"
    status, _, _ = await gitea.call("GET", f"/repos/{REPO}/branch_protections/dev")
    assert status == 404


async def test_combined_status_and_status_lists(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/status")
    assert (body["state"], body["total_count"], body["statuses"]) == ("pending", 0, [])
    sim.set_status("gitea", REPO, pr.head_sha, "ci/unit", "pending")
    sim.set_status("gitea", REPO, pr.head_sha, "ci/unit", "success")
    sim.set_status("gitea", REPO, pr.head_sha, "lint", "warning")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/status")
    assert body["state"] == "warning"
    assert sorted((s["context"], s["status"]) for s in body["statuses"]) == [
        ("ci/unit", "success"),
        ("lint", "warning"),
    ]
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/commits/{pr.head_sha}/statuses")
    assert len(body) == 3
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/statuses/{pr.head_sha}")
    assert len(body) == 3


async def test_review_events_and_the_pending_trap(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}/reviews"
    status, body, _ = await gitea.call(
        "POST", path, json={"event": "APPROVED", "body": "ok", "commit_id": pr.head_sha}
    )
    assert (status, body["state"], body["commit_id"]) == (200, "APPROVED", pr.head_sha)
    # GitHub's spelling is not an event Gitea knows: the review silently stays PENDING.
    status, body, _ = await gitea.call("POST", path, json={"event": "APPROVE", "body": "lgtm"})
    assert (status, body["state"]) == (200, "PENDING")
    status, body, _ = await gitea.call("POST", path, json={"event": "REQUEST_CHANGES", "body": ""})
    assert status == 422 and "requires a body" in body["message"]
    _, body, _ = await gitea.call("POST", path, json={"event": "COMMENT", "body": "note"})
    assert body["state"] == "COMMENT"
    _, body, _ = await gitea.call("GET", path)
    assert [r["state"] for r in body] == ["APPROVED", "PENDING", "COMMENT"]
    assert sim.pull("gitea", REPO, pr.number).reviews[1].state == "PENDING"


async def test_a_stale_commit_id_is_accepted_and_marked_stale(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    old = pr.head_sha
    sim.push("gitea", REPO, pr.number)
    _, body, _ = await gitea.call(
        "POST",
        f"/repos/{REPO}/pulls/{pr.number}/reviews",
        json={"event": "APPROVED", "body": "", "commit_id": old},
    )
    assert (body["commit_id"], body["stale"]) == (old, True)


async def test_own_pull_cannot_be_approved(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="bot")
    status, body, _ = await gitea.call(
        "POST", f"/repos/{REPO}/pulls/{pr.number}/reviews", json={"event": "APPROVED"}
    )
    assert (status, body["message"]) == (422, "approve your own pull is not allowed")


async def test_merge_pins_and_empty_success_body(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    old = pr.head_sha
    sim.push("gitea", REPO, pr.number)
    path = f"/repos/{REPO}/pulls/{pr.number}/merge"

    status, body, _ = await gitea.call("POST", path, json={"Do": "merge", "head_commit_id": old})
    assert (status, body["message"]) == (409, "head out of date")

    sim.set_mergeable("gitea", REPO, pr.number, False)
    status, _, _ = await gitea.call(
        "POST", path, json={"Do": "merge", "head_commit_id": pr.head_sha}
    )
    assert status == 405
    sim.set_mergeable("gitea", REPO, pr.number, True)

    sim.require_checks("gitea", REPO, "main", ["ci/*"])
    status, _, _ = await gitea.call(
        "POST", path, json={"Do": "merge", "head_commit_id": pr.head_sha}
    )
    assert status == 405
    sim.set_status("gitea", REPO, pr.head_sha, "ci/unit", "success")

    status, body, raw = await gitea.call(
        "POST", path, json={"Do": "squash", "head_commit_id": pr.head_sha}
    )
    assert (status, raw) == (200, b"")
    pull = sim.pull("gitea", REPO, pr.number)
    assert pull.merged and pull.state == "closed" and pull.merge_commit_sha
    status, _, _ = await gitea.call("GET", path)
    assert status == 204
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/pulls/{pr.number}")
    assert (body["merged"], body["merge_commit_sha"]) == (True, pull.merge_commit_sha)


async def test_empty_head_commit_id_is_not_checked(sim: Simulator, gitea: Gitea) -> None:
    """Why the bot always sends head_commit_id: an empty one merges whatever the head is."""
    pr = sim.open_pr("gitea", REPO, author="alice")
    sim.push("gitea", REPO, pr.number)
    status, _, _ = await gitea.call(
        "POST", f"/repos/{REPO}/pulls/{pr.number}/merge", json={"Do": "merge"}
    )
    assert status == 200
    assert sim.pull("gitea", REPO, pr.number).merged


async def test_scheduled_auto_merge_ignores_the_pin_when_it_runs(
    sim: Simulator, gitea: Gitea
) -> None:
    """merge_when_checks_succeed checks head_commit_id now, but merges whatever head is there
    when the checks pass later: why a pinned merge never asks for it."""
    pr = sim.open_pr("gitea", REPO, author="alice")
    pinned = pr.head_sha
    sim.require_checks("gitea", REPO, "main", ["ci/*"])
    status, _, raw = await gitea.call(
        "POST",
        f"/repos/{REPO}/pulls/{pr.number}/merge",
        json={"Do": "merge", "head_commit_id": pinned, "merge_when_checks_succeed": True},
    )
    assert (status, raw) == (201, b"")
    assert not sim.pull("gitea", REPO, pr.number).merged
    moved = sim.push("gitea", REPO, pr.number)
    sim.set_status("gitea", REPO, moved, "ci/unit", "success")
    pull = sim.pull("gitea", REPO, pr.number)
    assert pull.merged and pull.head_sha == moved != pinned


async def test_unmerged_pull_is_merged_check_is_404(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    status, _, _ = await gitea.call("GET", f"/repos/{REPO}/pulls/{pr.number}/merge")
    assert status == 404


@pytest.mark.sim_invalid_requests
async def test_merge_without_do_is_422(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    status, _, _ = await gitea.call(
        "POST", f"/repos/{REPO}/pulls/{pr.number}/merge", json={"head_commit_id": pr.head_sha}
    )
    assert status == 422
    assert not sim.pull("gitea", REPO, pr.number).merged


async def test_comments_create_list_edit(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    status, body, _ = await gitea.call(
        "POST", f"/repos/{REPO}/issues/{pr.number}/comments", json={"body": "hi <!-- rb -->"}
    )
    assert status == 201
    comment_id = body["id"]
    status, body, _ = await gitea.call(
        "PATCH", f"/repos/{REPO}/issues/comments/{comment_id}", json={"body": "v2 <!-- rb -->"}
    )
    assert (status, body["body"]) == (200, "v2 <!-- rb -->")
    _, body, _ = await gitea.call("GET", f"/repos/{REPO}/issues/{pr.number}/comments")
    assert [(c["user"]["login"], c["body"]) for c in body] == [("bot", "v2 <!-- rb -->")]


async def test_faults_on_gitea(sim: Simulator, gitea: Gitea) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    path = f"/repos/{REPO}/pulls/{pr.number}"
    sim.faults.add(forge="gitea", method="GET", path=path, status=500, times=2)
    assert (await gitea.call("GET", path))[0] == 500
    assert (await gitea.call("GET", path))[0] == 500
    assert (await gitea.call("GET", path))[0] == 200
    assert [r.operation_id for r in sim.requests_for("gitea")] == ["repoGetPullRequest"] * 3
