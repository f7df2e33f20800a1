"""Commit listeners over real HTTP: the simulator's webhooks reach a registered listener, are
journalled and explained as routed, and the reconcile sweep makes up for a lost webhook."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.core.commit_routes import CommitResult
from reviewbot.runtime.ingestion.listeners import POLL, WEBHOOK, CommitNotice
from reviewbot.runtime.review.reconcile import Reconciler
from reviewbot.sim.gitea_json import GiteaJson
from reviewbot.sim.github_json import GitHubJson
from reviewbot.store import decisions
from reviewbot.store.decisions import DecisionRecord
from tests.integration.merge_support import REPO, World
from tests.support.clock import FakeClock

FORGES = ["github", "gitea"]
QUEUE_BRANCH = "reviewbot/queue/main/3"


def queue_commit(world: World, forge: str, branch: str = QUEUE_BRANCH) -> str:
    """A commit at the head of ``branch`` that belongs to no open PR (its PR was closed)."""
    pull = world.sim.open_pr(forge, REPO, author="alice", head_ref=branch, title="queue")
    world.sim.update_pr(forge, REPO, pull.number, state="closed")
    return pull.head_sha


def push_payload(world: World, forge: str, branch: str, after: str) -> dict[str, Any]:
    """A push as each forge sends it: ref, before, after, the repository and the pusher."""
    repo = world.sim.repo(forge, REPO)
    if forge == "github":
        gh = GitHubJson(world.sim)
        repository, sender = gh.repository(repo), gh.user("alice")
    else:
        gt = GiteaJson(world.sim)
        repository, sender = gt.repository(repo), gt.user("alice")
    return {
        "ref": f"refs/heads/{branch}",
        "before": "0" * 40,
        "after": after,
        "commits": [],
        "repository": repository,
        "pusher": sender,
        "sender": sender,
    }


async def rows_of(world: World, delivery_id: str) -> list[DecisionRecord]:
    await world.settle()
    return decisions.for_delivery(world.db, delivery_id)


async def explain_text(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], delivery: str
) -> str:
    """What ``reviewbot explain DELIVERY_ID`` prints, read from the server's store."""
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(world.settings.data_dir))
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["explain", delivery]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("forge", FORGES)
async def test_a_status_on_a_registered_commit_reaches_its_listener(
    world: World,
    forge: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sha = queue_commit(world, forge)
    heard: list[CommitNotice] = []
    world.service.listeners.register("merge-queue", heard.append, forge=forge, repo=REPO, sha=sha)

    world.sim.set_status(forge, REPO, sha, "ci/test", "success", target_url="https://ci/7")
    delivery = await world.sim.deliver_status(forge, REPO)
    assert delivery.status == 202

    rows = await rows_of(world, delivery.id)
    assert [(r.decision, r.reason_code) for r in rows] == [("skip", "routed_to_listener")]
    assert (rows[0].forge, rows[0].repo, rows[0].head_sha) == (forge, REPO, sha)
    assert "merge-queue" in rows[0].detail
    assert [(n.kind, n.via, n.result, n.url, n.delivery_id) for n in heard] == [
        ("status", WEBHOOK, CommitResult("ci/test", "success"), "https://ci/7", delivery.id)
    ]
    assert heard[0].event.sha == sha

    # The explain API and the command line both say where it went.
    status, body = await world.call("GET", f"/api/v1/deliveries/{delivery.id}", world.token("read"))
    assert status == 200, body
    assert body["status"] == "done"
    assert [d["reason_code"] for d in body["decisions"]] == ["routed_to_listener"]
    text = await explain_text(world, monkeypatch, capsys, delivery.id)
    assert "a part of the bot registered for that commit" in text
    assert "[routed_to_listener]" in text and "merge-queue" in text


@pytest.mark.parametrize("forge", FORGES)
async def test_a_status_on_an_unregistered_commit_is_still_a_skip_explained_as_before(
    world: World,
    forge: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sha = queue_commit(world, forge)
    heard: list[CommitNotice] = []
    other = queue_commit(world, forge, branch="reviewbot/queue/main/4")
    world.service.listeners.register("merge-queue", heard.append, forge=forge, repo=REPO, sha=other)

    world.sim.set_status(forge, REPO, sha, "ci/test", "success")
    delivery = await world.sim.deliver_status(forge, REPO)
    rows = await rows_of(world, delivery.id)
    assert [(r.decision, r.reason_code) for r in rows] == [("skip", "no_open_pull_requests")]
    assert heard == []
    status, body = await world.call("GET", f"/api/v1/deliveries/{delivery.id}", world.token("read"))
    assert status == 200, body
    assert [d["reason_code"] for d in body["decisions"]] == ["no_open_pull_requests"]
    text = await explain_text(world, monkeypatch, capsys, delivery.id)
    assert "no open pull request has that commit as its head [no_open_pull_requests]" in text


async def test_a_registered_pr_head_is_gated_and_routed(world: World) -> None:
    pull = world.sim.open_pr("github", REPO, author="alice")
    heard: list[CommitNotice] = []
    world.service.listeners.register(
        "watcher", heard.append, forge="github", repo=REPO, sha=pull.head_sha
    )
    world.sim.set_status(
        "github", REPO, pull.head_sha, "ci/test", "success", target_url="https://ci/1"
    )
    delivery = await world.sim.deliver_status("github", REPO)
    rows = await rows_of(world, delivery.id)
    # The PR's own decision first, as always; the routed one beside it.
    assert [(r.number, r.decision, r.reason_code) for r in rows] == [
        (pull.number, "eligible", "eligible"),
        (None, "skip", "routed_to_listener"),
    ]
    assert len(heard) == 1
    assert [r.user for r in world.sim.pull("github", REPO, pull.number).reviews] == ["reviewbot"]


async def test_a_forge_failure_reading_the_prs_still_routes_the_event(world: World) -> None:
    sha = queue_commit(world, "github")
    heard: list[CommitNotice] = []
    world.service.listeners.register(
        "merge-queue", heard.append, forge="github", repo=REPO, sha=sha
    )
    world.sim.faults.add(
        forge="github",
        method="GET",
        path=f"/repos/{REPO}/commits/{sha}/pulls",
        status=502,
        times=10,
    )
    world.sim.set_status("github", REPO, sha, "ci/test", "success")
    delivery = await world.sim.deliver_status("github", REPO)
    rows = await rows_of(world, delivery.id)
    assert [(r.decision, r.reason_code) for r in rows] == [
        ("error", "forge_error"),
        ("skip", "routed_to_listener"),
    ]
    assert [n.result for n in heard] == [CommitResult("ci/test", "success")]


async def test_a_removed_registration_leaves_the_commit_to_the_old_skip(world: World) -> None:
    sha = queue_commit(world, "github")
    heard: list[CommitNotice] = []
    listeners = world.service.listeners
    reg = listeners.register("merge-queue", heard.append, forge="github", repo=REPO, sha=sha)
    assert listeners.unregister(reg)
    world.sim.set_status("github", REPO, sha, "ci/test", "failure")
    delivery = await world.sim.deliver_status("github", REPO)
    rows = await rows_of(world, delivery.id)
    assert [r.reason_code for r in rows] == ["no_open_pull_requests"]
    assert heard == []


async def test_a_check_run_on_a_registered_branch_reaches_its_listener(world: World) -> None:
    sha = queue_commit(world, "github")
    queue: asyncio.Queue[CommitNotice] = asyncio.Queue()
    world.service.listeners.register(
        "merge-queue", queue, forge="github", repo=REPO, branch="reviewbot/queue/*"
    )
    world.sim.set_check_run(REPO, sha, "build", conclusion="failure")
    delivery = await world.sim.deliver_check_run(REPO)
    rows = await rows_of(world, delivery.id)
    assert [r.reason_code for r in rows] == ["routed_to_listener"]
    notice = queue.get_nowait()
    assert (notice.kind, notice.result) == ("check_run", CommitResult("build", "failure"))
    assert notice.event.branches == (QUEUE_BRANCH,)


@pytest.mark.parametrize("forge", FORGES)
async def test_a_push_reaches_the_listener_of_its_branch_and_nothing_else(
    world: World, forge: str
) -> None:
    sha = queue_commit(world, forge)
    heard: list[CommitNotice] = []
    world.service.listeners.register(
        "merge-queue", heard.append, forge=forge, repo=REPO, branch="reviewbot/queue/*"
    )
    payload = push_payload(world, forge, QUEUE_BRANCH, sha)
    delivery = await world.sim.deliver_raw(forge, "push", payload)
    assert delivery.status == 202
    rows = await rows_of(world, delivery.id)
    assert [(r.decision, r.reason_code, r.head_sha) for r in rows] == [
        ("skip", "routed_to_listener", sha)
    ]
    assert [(n.kind, n.result, n.event.branches) for n in heard] == [
        ("push", None, (QUEUE_BRANCH,))
    ]
    # The same push delivered again under a new id (a manual replay) is handled once.
    again = await world.sim.deliver_raw(forge, "push", payload)
    assert [r.reason_code for r in await rows_of(world, again.id)] == ["duplicate_delivery"]
    assert len(heard) == 1


@pytest.mark.parametrize("forge", FORGES)
async def test_a_push_to_a_pr_branch_is_not_gated_a_second_time(world: World, forge: str) -> None:
    pull = world.sim.open_pr(forge, REPO, author="alice", head_ref="feature")
    sha = world.sim.push(forge, REPO, pull.number)
    sync = await world.sim.deliver_pull_request(forge, REPO, pull.number, action="synchronize")
    push = await world.sim.deliver_raw(forge, "push", push_payload(world, forge, "feature", sha))
    assert [r.decision for r in await rows_of(world, sync.id)] == ["eligible"]
    rows = await rows_of(world, push.id)
    assert [(r.decision, r.reason_code, r.number) for r in rows] == [
        ("skip", "not_pull_request_event", None)
    ]
    # Every gate decision about the PR came from the synchronize alone.
    with world.db.read() as tx:
        found = tx.all(
            "SELECT delivery_id FROM pr_gate_decisions WHERE number = ? AND forge = ?",
            (pull.number, forge),
        )
    assert {r["delivery_id"] for r in found} == {sync.id}


async def test_a_failing_listener_does_not_break_the_delivery(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    sha = queue_commit(world, "gitea")

    def broken(notice: CommitNotice) -> None:
        raise RuntimeError("queue state lost")

    heard: list[CommitNotice] = []
    world.service.listeners.register("broken", broken, forge="gitea", repo=REPO, sha=sha)
    world.service.listeners.register("steady", heard.append, forge="gitea", repo=REPO, sha=sha)
    world.sim.set_status("gitea", REPO, sha, "ci/test", "success")
    delivery = await world.sim.deliver_status("gitea", REPO)
    rows = await rows_of(world, delivery.id)
    assert [r.reason_code for r in rows] == ["routed_to_listener"]
    assert "broken, steady" in rows[0].detail
    with world.db.read() as tx:
        row = tx.one("SELECT status FROM deliveries WHERE delivery_id = ?", (delivery.id,))
    assert row is not None and row["status"] == "done"
    assert len(heard) == 1
    assert "commit listener broken failed" in caplog.text
    assert "queue state lost" in caplog.text


@pytest.mark.parametrize("forge", FORGES)
async def test_the_sweep_hands_over_a_result_whose_webhook_was_lost(
    world: World, forge: str
) -> None:
    sha = queue_commit(world, forge)
    heard: list[CommitNotice] = []
    listeners = world.service.listeners
    listeners.register("merge-queue", heard.append, forge=forge, repo=REPO, sha=sha)
    parts = world.service.review
    assert parts is not None and world.service.journal is not None
    sweeper = Reconciler(
        world.settings,
        parts.store,
        world.service.forges,
        parts.pipeline,
        world.service.journal.append,
        clock=FakeClock(),
        listeners=listeners,
    )

    # Pending by webhook; the success is set on the forge but its webhook never arrives.
    link = f"https://ci.example/{sha[:8]}"  # as CI systems send them
    world.sim.set_status(forge, REPO, sha, "ci/test", "pending", target_url=link)
    pending = await world.sim.deliver_status(forge, REPO)
    await rows_of(world, pending.id)
    status = world.sim.set_status(forge, REPO, sha, "ci/test", "success", target_url=link)
    assert [n.result for n in heard] == [CommitResult("ci/test", "pending")]

    report = await sweeper.sweep()
    assert report.listened == [f"merge-queue: ci/test=success at {sha[:12]}"]
    assert [(n.via, n.result) for n in heard[1:]] == [(POLL, CommitResult("ci/test", "success"))]
    assert (await sweeper.sweep()).listened == []  # nothing new: nothing handed

    # The lost webhook turns up late: journalled and routed, but the listener heard it.
    late = await world.sim.deliver_status(forge, REPO, status.id)
    assert [r.reason_code for r in await rows_of(world, late.id)] == ["routed_to_listener"]
    assert len(heard) == 2
