"""Freezes, merge windows, pause and drain of the merge queue over a real serve.

The bot runs on the simulator's clock, so time moves only by hand: a car is built and its CI
passes during a freeze, but the base does not move until the freeze is over, and the hold is
recorded once. Pause and drain are set over REST by a token with the merge scope bound to
the repository; another repository's token, a read token and malformed bodies are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reviewbot.sim import SimServer, Simulator
from reviewbot.store.queue import QueueRef, QueueStore
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, World, bot_world, queued_repo
from tests.integration.server.test_queue_api import CI_S, green_approved
from tests.support.clock import FakeClock

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])
HOUR = 3600.0
JAN_1 = 1_767_225_600.0  # 2026-01-01T00:00Z, a Thursday: where the clock starts
FREEZE = "2026-01-01T00:00Z/2026-01-01T06:00Z"

pytestmark = pytest.mark.git


@pytest.fixture
def clock(sim: Simulator) -> FakeClock:
    """The simulator's and the bot's clock: time moves only by hand."""
    fake = FakeClock(JAN_1)
    sim.clock = fake
    return fake


def queue_rules(**merge_queue: Any) -> dict[str, Any]:
    return {"required_checks": ["ci/test"], "merge_queue": merge_queue}


def events(w: World, forge: str, number: int) -> list[tuple[str, str | None]]:
    store = QueueStore(w.db, w.sim.clock)
    return [(e.kind, e.code) for e in store.events_of_pull(forge, REPO, number)]


async def enqueue(w: World, forge: str, token: str, number: int, head: str) -> dict[str, Any]:
    body = {"forge": forge, "repo": REPO, "number": number, "expect_head_sha": head}
    status, answer = await w.call("POST", "/api/v1/queue/enqueue", token, body)
    assert status == 200, answer
    return answer


async def pass_over(w: World, forge: str) -> None:
    """What the reconcile sweep does: a pass over every queue."""
    queue = w.api.queue
    assert queue is not None
    await queue.idle()
    await queue.sweep()
    await queue.idle()


def main_tip(w: World, forge: str) -> str:
    return w.sim.repo(forge, REPO).branches["main"]


@FORGES
async def test_a_freeze_holds_landing_while_the_car_passes_and_lands_after(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, clock: FakeClock, forge: str
) -> None:
    rules = queue_rules(freeze=[FREEZE])
    async with bot_world(tmp_path, sim, sim_server, rules=rules, clock=clock) as w:
        queued_repo(sim, forge, CI_S)
        number, head = green_approved(w, forge, "feature")
        await w.settle()
        before = main_tip(w, forge)
        token = w.token("merge,read")
        await enqueue(w, forge, token, number, head)
        await pass_over(w, forge)
        sim.advance(CI_S)  # the car's CI passes inside the freeze
        await pass_over(w, forge)
        await pass_over(w, forge)  # a second pass records nothing new

        status, view = await w.call("GET", f"/api/v1/queue?forge={forge}&repo={REPO}", token)
        assert status == 200, view
        (car,) = view["cars"]
        assert car["status"] == "green" and car["tested_sha"]
        assert main_tip(w, forge) == before and not sim.pull(forge, REPO, number).merged
        assert events(w, forge, number).count(("held", "queue_frozen")) == 1

        sim.advance(6 * HOUR)  # the freeze is over
        await pass_over(w, forge)
        assert sim.pull(forge, REPO, number).merged
        assert main_tip(w, forge) == car["tested_sha"]  # exactly the commit tested
        kinds = [k for k, _ in events(w, forge, number)]
        assert kinds.index("held") < kinds.index("landed")


@FORGES
async def test_outside_a_merge_window_nothing_lands(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, clock: FakeClock, forge: str
) -> None:
    # Thursday 00:00Z: outside the window until 08:00.
    rules = queue_rules(merge_windows=["Mon-Fri 08:00-18:00 UTC"])
    async with bot_world(tmp_path, sim, sim_server, rules=rules, clock=clock) as w:
        queued_repo(sim, forge, CI_S)
        number, head = green_approved(w, forge, "feature")
        await w.settle()
        token = w.token("merge,read")
        await enqueue(w, forge, token, number, head)
        await pass_over(w, forge)
        sim.advance(CI_S)
        await pass_over(w, forge)
        assert not sim.pull(forge, REPO, number).merged
        assert events(w, forge, number).count(("held", "queue_outside_window")) == 1
        sim.advance(8 * HOUR)
        await pass_over(w, forge)
        assert sim.pull(forge, REPO, number).merged


@FORGES
async def test_pause_holds_everything_and_drain_refuses_new_entries(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, clock: FakeClock, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules=queue_rules(), clock=clock) as w:
        queued_repo(sim, forge, CI_S)
        a, a_head = green_approved(w, forge, "feature-a")
        b, b_head = green_approved(w, forge, "feature-b")
        await w.settle()
        token = w.token("merge,read", repo=f"{forge}:{REPO}")
        await enqueue(w, forge, token, a, a_head)
        await pass_over(w, forge)

        # Paused (under another spelling of the repository): the green car does not land,
        # and nothing is admitted.
        body = {"forge": forge, "repo": "ACME/Api", "base": "main", "paused": True}
        status, answer = await w.call("POST", "/api/v1/queue/control", token, body)
        assert status == 200, answer
        assert (answer["repo"], answer["paused"], answer["draining"]) == (REPO, True, False)
        sim.advance(CI_S)
        await pass_over(w, forge)
        assert not sim.pull(forge, REPO, a).merged
        body_b = {"forge": forge, "repo": REPO, "number": b, "expect_head_sha": b_head}
        status, refused = await w.call("POST", "/api/v1/queue/enqueue", token, body_b)
        assert (status, refused["error"]) == (409, "queue_paused"), refused
        status, view = await w.call("GET", f"/api/v1/queue?forge={forge}&repo={REPO}", token)
        assert status == 200 and view["controls"]["main"]["paused"] is True

        # Resumed and draining: what is queued lands, nothing new comes in.
        body = {"forge": forge, "repo": REPO, "base": "main", "paused": False, "draining": True}
        status, answer = await w.call("POST", "/api/v1/queue/control", token, body)
        assert status == 200 and (answer["paused"], answer["draining"]) == (False, True)
        await pass_over(w, forge)
        assert sim.pull(forge, REPO, a).merged
        status, refused = await w.call("POST", "/api/v1/queue/enqueue", token, body_b)
        assert (status, refused["error"]) == (409, "queue_draining"), refused

        # Each change is in the queue's event log, with who made it.
        store = QueueStore(w.db, sim.clock)
        log = [e for e in store.events(forge, REPO, "main") if e.kind == "control"]
        assert [e.code for e in log] == ["queue_paused", "queue_draining"]
        assert all("token t-" in e.detail for e in log)

        body = {"forge": forge, "repo": REPO, "base": "main", "draining": False}
        status, answer = await w.call("POST", "/api/v1/queue/control", token, body)
        assert status == 200 and answer["draining"] is False
        await enqueue(w, forge, token, b, b_head)


@FORGES
async def test_hostile_control_calls_are_refused(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, clock: FakeClock, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules=queue_rules(), clock=clock) as w:
        await w.settle()
        token = w.token("merge,read")
        good = {"forge": forge, "repo": REPO, "base": "main", "paused": True}
        cases: list[tuple[str, dict[str, Any], int, str]] = [
            (w.token("read"), {}, 403, "missing_scope"),
            (w.token("merge", repo=f"{forge}:acme/other"), {}, 403, "repo_not_allowed"),
            (
                w.token("merge", repo=f"{forge}:acme/other"),
                {"repo": "ACME/API"},
                403,
                "repo_not_allowed",
            ),
            (token, {"repo": "acme/other"}, 404, "repo_not_configured"),
            (token, {"forge": "gitlab"}, 404, "unknown_forge"),
            (token, {"base": "no-such-branch"}, 404, "branch_not_found"),
            (token, {"base": "Main"}, 404, "branch_not_found"),
            (token, {"base": "../main"}, 400, "invalid_request"),
            (token, {"base": "ma in"}, 400, "invalid_request"),
            (token, {"base": "x" * 300}, 400, "invalid_request"),
            (token, {"paused": "yes please"}, 400, "invalid_request"),
            (token, {"paused": None}, 400, "invalid_request"),
            (token, {"until": "forever"}, 400, "invalid_request"),
        ]
        for tok, extra, want_status, want_code in cases:
            status, answer = await w.call("POST", "/api/v1/queue/control", tok, {**good, **extra})
            assert (status, answer.get("error")) == (want_status, want_code), (extra, answer)
        huge = b"{" + b" " * (64 * 1024) + b"}"
        fresh = w.token("merge")  # each token may make 10 merge-class calls at once
        status, answer = await w.post_bytes("/api/v1/queue/control", fresh, huge)
        assert (status, answer["error"]) == (413, "body_too_large")
        # Nothing of the above paused the queue.
        store = QueueStore(w.db, sim.clock)
        assert store.control(forge, REPO, "main").paused is False
        assert QueueRef(forge, REPO, "main").lane == f"merge:{forge}:{REPO}:main"


async def test_queue_control_over_mcp_checks_scope_and_binding(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, clock: FakeClock
) -> None:
    forge = "gitea"
    async with bot_world(tmp_path, sim, sim_server, rules=queue_rules(), clock=clock) as w:
        await w.settle()
        args = {"forge": forge, "repo": "Acme/API", "base": "main", "draining": True}
        other = w.token("merge", repo=f"{forge}:acme/other")
        async with mcp_http(w.base, other) as client:
            code, _ = refused(await client.call_tool("queue_control", args))
            assert code == "repo_not_allowed"
        async with mcp_http(w.base, w.token("read")) as client:
            code, _ = refused(await client.call_tool("queue_control", args))
            assert code == "missing_scope"
        async with mcp_http(w.base, w.token("merge", repo=f"{forge}:{REPO}")) as client:
            answer = ok(await client.call_tool("queue_control", args))
        assert (answer["repo"], answer["draining"], answer["paused"]) == (REPO, True, False)
        assert QueueStore(w.db, clock).control(forge, REPO, "main").draining is True
