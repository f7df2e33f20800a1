"""The merge queue over a real serve: REST enqueue, status and dequeue against the git-backed
simulator, with the simulator's CI reporting on the queue branches by webhook.

A PR enqueued at its head lands at exactly its car's tested commit with no call but the
enqueue (the CI's status webhook on the queue branch starts the pass that lands it); a moved
head is refused with a stable code; a low-scope or wrongly bound token, another spelling of
the repository, malformed values and huge bodies get what they should.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import REPO, WAIT_S, World, bot_world, queued_repo

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])
CI_S = 600.0

pytestmark = pytest.mark.git


def green_approved(w: World, forge: str, branch: str) -> tuple[int, str]:
    pull = w.sim.open_pr(forge, REPO, author="alice", head_ref=branch)
    w.sim.advance(CI_S)  # its own CI run passes
    w.sim.submit_review(forge, REPO, pull.number, reviewer="bob", state="APPROVED")
    return pull.number, pull.head_sha


async def until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S  # a bound for a wait, never a speed check
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@FORGES
async def test_a_pr_enqueued_over_rest_lands_at_its_tested_commit(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"required_checks": ["ci/test"]}) as w:
        queued_repo(sim, forge, CI_S)
        number, head = green_approved(w, forge, "feature")
        await w.settle()
        token = w.token("merge,read")
        body = {"forge": forge, "repo": "ACME/Api", "number": number, "expect_head_sha": head}
        status, answer = await w.call("POST", "/api/v1/queue/enqueue", token, body)
        assert status == 200, answer
        assert (answer["state"], answer["head_sha"], answer["already"]) == ("queued", head, False)
        status, again = await w.call("POST", "/api/v1/queue/enqueue", token, body)
        assert status == 200 and again["already"] is True

        queue = w.api.queue
        assert queue is not None
        await queue.idle()
        status, view = await w.call("GET", f"/api/v1/queue?forge={forge}&repo={REPO}", token)
        assert status == 200, view
        (car,) = view["cars"]
        assert car["batch"] == [number] and car["status"] == "testing"
        assert car["branch"].startswith("reviewbot/queue/main/")

        sim.advance(CI_S)  # the car's CI passes; its status webhook starts the landing pass
        await until(lambda: sim.pull(forge, REPO, number).merged, "the landing")
        await queue.idle()
        main = sim.repo(forge, REPO).branches["main"]
        assert main == car["tested_sha"]
        assert sim.pull(forge, REPO, number).merge_commit_sha == main
        status, view = await w.call("GET", f"/api/v1/queue?forge={forge}&repo={REPO}", token)
        assert status == 200 and view["entries"] == [] and view["cars"] == []


@FORGES
async def test_a_moved_head_and_hostile_calls_are_refused(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"required_checks": ["ci/test"]}) as w:
        queued_repo(sim, forge, CI_S)
        number, head = green_approved(w, forge, "feature")
        sim.push(forge, REPO, number)  # the head moves after the caller read it
        await w.settle()
        token = w.token("merge,read")
        base = {"forge": forge, "repo": REPO, "number": number}

        async def enqueue(tok: str, **extra: object) -> tuple[int, dict[str, object]]:
            return await w.call("POST", "/api/v1/queue/enqueue", tok, {**base, **extra})

        status, answer = await enqueue(token, expect_head_sha=head)
        assert (status, answer["error"]) == (409, "head_moved"), answer
        assert answer["head_sha"] == sim.pull(forge, REPO, number).head_sha

        cases = [
            (w.token("read"), {}, 403, "missing_scope"),
            (w.token("merge", repo=f"{forge}:acme/other"), {}, 403, "repo_not_allowed"),
            (token, {"expect_head_sha": "zz"}, 400, "invalid_request"),
            (token, {"number": 2**64}, 400, "invalid_request"),
            (token, {"number": 10**12}, 404, "pr_not_found"),
            (token, {"repo": "acme/other"}, 404, "repo_not_configured"),
            (token, {"forge": "gitlab"}, 404, "unknown_forge"),
            (token, {"priority": "yes please"}, 400, "invalid_request"),
        ]
        for tok, extra, want_status, want_code in cases:
            status, answer = await enqueue(tok, **extra)
            assert (status, answer.get("error")) == (want_status, want_code), (extra, answer)

        status, answer = await w.call("POST", "/api/v1/queue/dequeue", token, base)
        assert (status, answer["error"]) == (404, "not_queued")
        huge = b"{" + b" " * (64 * 1024) + b"}"
        status, answer = await w.post_bytes("/api/v1/queue/enqueue", token, huge)
        assert (status, answer["error"]) == (413, "body_too_large")
        other = w.token("read", repo=f"{forge}:acme/other")
        status, answer = await w.call("GET", f"/api/v1/queue?forge={forge}&repo={REPO}", other)
        assert (status, answer["error"]) == (403, "repo_not_allowed")
        assert w.api.queue is not None
        assert await w.db.run(w.api.queue.store.entries, forge, REPO) == []


@FORGES
async def test_a_queue_comment_by_a_writer_enqueues_and_a_push_takes_it_out(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"required_checks": ["ci/test"]}) as w:
        queued_repo(sim, forge, CI_S)
        sim.set_permission(forge, REPO, "bob", "write")
        sim.set_permission(forge, REPO, "carol", "read")
        # Gitea shows a collaborator's permission to a repository admin only.
        sim.set_permission(forge, REPO, "reviewbot", "admin")
        number, head = green_approved(w, forge, "feature")
        await w.settle()
        queue = w.api.queue
        assert queue is not None

        async def say(user: str, text: str) -> None:
            comment = sim.add_comment(forge, REPO, number, user, text)
            await sim.deliver_issue_comment(forge, REPO, number, comment.id)
            await w.settle()
            await queue.idle()

        await say("carol", "/reviewbot queue")  # read access only: the gate refuses it
        assert await w.db.run(queue.store.entries, forge, REPO) == []
        await say("bob", "Ready.\n/reviewbot queue\n")
        (entry,) = await w.db.run(queue.store.entries, forge, REPO)
        assert (entry.number, entry.head_sha) == (number, head)

        sim.push(forge, REPO, number)  # a new head: it leaves, with the reason
        await sim.deliver_pull_request(forge, REPO, number, action="synchronize")
        await w.settle()
        await queue.idle()
        assert await w.db.run(queue.store.entries, forge, REPO) == []
        events = await w.db.run(queue.store.events_of_pull, forge, REPO, number)
        assert [(e.kind, e.code) for e in events][-1] == ("left", "head_moved")


@FORGES
async def test_queue_true_admits_a_pr_once_it_is_approved_and_green(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    rules = {"required_checks": ["ci/test"], "queue": True}
    async with bot_world(tmp_path, sim, sim_server, rules=rules) as w:
        queued_repo(sim, forge, CI_S)
        pull = sim.open_pr(forge, REPO, author="alice", head_ref="feature")
        await sim.deliver_pull_request(forge, REPO, pull.number)
        await w.settle()
        queue = w.api.queue
        assert queue is not None
        await queue.idle()
        assert await w.db.run(queue.store.entries, forge, REPO) == []  # not green, not approved
        sim.advance(CI_S)
        review = sim.submit_review(forge, REPO, pull.number, reviewer="bob", state="APPROVED")
        await sim.deliver_pull_request_review(forge, REPO, pull.number, review.id)
        await w.settle()
        await queue.idle()
        (entry,) = await w.db.run(queue.store.entries, forge, REPO)
        assert (entry.number, entry.head_sha) == (pull.number, pull.head_sha)


@FORGES
async def test_a_dequeue_cancels_its_car_and_deletes_its_queue_branch(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"required_checks": ["ci/test"]}) as w:
        queued_repo(sim, forge, CI_S)
        number, head = green_approved(w, forge, "feature")
        await w.settle()
        token = w.token("merge,read")
        pull = {"forge": forge, "repo": REPO, "number": number}
        status, _ = await w.call(
            "POST", "/api/v1/queue/enqueue", token, {**pull, "expect_head_sha": head}
        )
        assert status == 200
        queue = w.api.queue
        assert queue is not None
        await queue.idle()
        (car,) = await w.db.run(queue.store.cars, forge, REPO, "main")
        assert car.branch in sim.repo(forge, REPO).branches

        status, answer = await w.call("POST", "/api/v1/queue/dequeue", token, pull)
        assert status == 200, answer
        assert (answer["queued"], answer["reason"]) == (False, "dequeued")
        await queue.idle()
        assert await w.db.run(queue.store.cars, forge, REPO, "main") == []
        assert car.branch not in sim.repo(forge, REPO).branches
        events = await w.db.run(queue.store.events_of_pull, forge, REPO, number)
        assert [(e.kind, e.code) for e in events][-1] == ("left", "dequeued")
        sim.advance(CI_S)  # the cancelled car's CI answers: nothing lands
        await w.settle()
        await queue.idle()
        assert not sim.pull(forge, REPO, number).merged
