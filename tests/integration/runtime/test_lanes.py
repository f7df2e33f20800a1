"""Named lanes on both stores, with two store instances (as two replicas would have) on one
database: one holder at a time, a lapsed holder is taken over, the token fences a holder
that was taken over, and a waiter waits, bounded; the reconcile sweep skips a repository
another process is sweeping.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reviewbot.config import Settings
from reviewbot.forges.factory import make_forge
from reviewbot.runtime.lanes import Lanes, lane_name
from reviewbot.runtime.review.reconcile import Reconciler
from reviewbot.service import Parts, build_service
from reviewbot.sim import SimServer, Simulator
from reviewbot.store import lanes
from reviewbot.store.database import Database
from reviewbot.store.journal import NewDelivery
from reviewbot.store.lanes import LaneBusy, LaneHold
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.merge_support import REPO, bot_world, set_check
from tests.integration.server_support import WAIT_S
from tests.integration.store.test_store_claims import race
from tests.support.clock import FakeClock

T0 = 1_767_225_600.0
TERM = 15.0
LANE = "merge:github:acme/api:main"


@pytest.fixture
def replicas(workflow_paths: WorkflowPaths) -> Iterator[tuple[Database, Database]]:
    """Two independent store instances on one database."""
    a, b = open_store(workflow_paths), open_store(workflow_paths)
    yield a, b
    a.close()
    b.close()


# --- the store ---------------------------------------------------------------------------


def test_two_stores_racing_for_one_lane_grant_it_once(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    answers: dict[str, LaneHold | LaneBusy] = {}

    def ask(db: Database, holder: str) -> None:
        answers[holder] = lanes.try_acquire(db, LANE, holder, TERM, T0)

    race([lambda db=db, h=f"r{i}": ask(db, h) for i, db in enumerate([a, b, a, b, a, b])])
    granted = [h for h, got in answers.items() if isinstance(got, LaneHold)]
    assert len(granted) == 1
    (winner,) = granted
    for holder, got in answers.items():
        if holder != winner:
            assert isinstance(got, LaneBusy)
            assert (got.holder, got.expires_at) == (winner, T0 + TERM)
    assert lanes.holder_of(b, LANE, T0) == LaneBusy(LANE, winner, 1, T0 + TERM)


def test_a_lapsed_holder_is_taken_over_and_its_token_changes_nothing(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    first = lanes.try_acquire(a, LANE, "replica-a", TERM, T0)
    assert isinstance(first, LaneHold)
    # Within the term the lane is A's; once the term lapsed, B takes it over.
    assert isinstance(lanes.try_acquire(b, LANE, "replica-b", TERM, T0 + TERM - 0.001), LaneBusy)
    second = lanes.try_acquire(b, LANE, "replica-b", TERM, T0 + TERM)
    assert isinstance(second, LaneHold)
    assert second.token > first.token
    # A comes back with its old token: it cannot renew or release B's lane.
    assert lanes.renew(a, first, TERM, T0 + TERM + 1) is None
    assert lanes.release(a, first) is False
    assert lanes.holder_of(a, LANE, T0 + TERM + 1) == LaneBusy(
        LANE, "replica-b", second.token, T0 + 2 * TERM
    )
    # B renews its own: a full term from now.
    renewed = lanes.renew(b, second, TERM, T0 + TERM + 5)
    assert renewed == LaneHold(LANE, "replica-b", second.token, T0 + 2 * TERM + 5)


def test_a_renewal_after_the_term_lapsed_is_refused_even_if_nobody_took_it(
    replicas: tuple[Database, Database],
) -> None:
    a, _ = replicas
    hold = lanes.try_acquire(a, LANE, "replica-a", TERM, T0)
    assert isinstance(hold, LaneHold)
    assert lanes.renew(a, hold, TERM, T0 + TERM) is None  # lost: the holder must say so


def test_a_released_lane_is_granted_again_with_a_higher_token(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    first = lanes.try_acquire(a, LANE, "replica-a", TERM, T0)
    assert isinstance(first, LaneHold)
    # Not re-entrant: the holder asking again is told it is busy (with itself).
    again = lanes.try_acquire(a, LANE, "replica-a", TERM, T0 + 1)
    assert isinstance(again, LaneBusy) and again.holder == "replica-a"
    assert lanes.release(a, first) is True
    assert lanes.holder_of(b, LANE, T0 + 1) is None
    second = lanes.try_acquire(b, LANE, "replica-b", TERM, T0 + 1)
    assert isinstance(second, LaneHold) and second.token == first.token + 1
    # Other lanes are independent of this one.
    other = lanes.try_acquire(a, "merge:github:acme/api:release", "replica-a", TERM, T0 + 1)
    assert isinstance(other, LaneHold) and other.token == 1


def test_a_branch_with_a_long_name_has_a_lane(replicas: tuple[Database, Database]) -> None:
    a, _ = replicas
    name = lane_name("merge", "github", "acme/api", "release/" + "x" * 240)
    assert isinstance(lanes.try_acquire(a, name, "replica-a", TERM, T0), LaneHold)


@pytest.mark.parametrize(
    ("name", "holder", "term"),
    [
        ("", "r", TERM),
        ("lane\n", "r", TERM),
        ("x" * 1025, "r", TERM),
        (LANE, "", TERM),
        (LANE, "r\x00", TERM),
        (LANE, "r", 0.0),
        (LANE, "r", -1.0),
        (LANE, "r", math.nan),
        (LANE, "r", math.inf),
    ],
)
def test_malformed_lanes_are_refused_before_the_store_is_asked(
    replicas: tuple[Database, Database], name: str, holder: str, term: float
) -> None:
    a, _ = replicas
    with pytest.raises(ValueError):
        lanes.try_acquire(a, name, holder, term, T0)
    assert lanes.holder_of(a, name, T0) is None


# --- holding a lane while async work runs ------------------------------------------------


async def test_a_waiter_gets_the_lane_once_the_holder_leaves(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    clock = FakeClock(T0)
    lanes_a = Lanes(a, "replica-a", term_s=TERM, clock=clock, poll_s=0.02)
    lanes_b = Lanes(b, "replica-b", term_s=TERM, clock=clock, poll_s=0.02)
    order: list[str] = []
    a_in = asyncio.Event()
    a_may_leave = asyncio.Event()

    async def hold_a() -> None:
        async with lanes_a.hold(LANE) as lane:
            assert lane.held
            order.append("a in")
            a_in.set()
            await a_may_leave.wait()
            order.append("a out")

    async def hold_b() -> None:
        async with lanes_b.hold(LANE, wait_s=WAIT_S) as lane:
            assert lane.held
            order.append("b in")

    task_a = asyncio.create_task(hold_a())
    await a_in.wait()
    task_b = asyncio.create_task(hold_b())
    await asyncio.sleep(0.2)  # B is polling the store meanwhile
    assert order == ["a in"]
    a_may_leave.set()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(task_a, task_b)
    assert order == ["a in", "a out", "b in"]
    assert lanes.holder_of(a, LANE, clock()) is None  # B released it on leaving


async def test_a_waiter_gives_up_after_its_bound_and_names_the_holder(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    clock = FakeClock(T0)
    lanes_a = Lanes(a, "replica-a", term_s=TERM, clock=clock)
    lanes_b = Lanes(b, "replica-b", term_s=TERM, clock=clock, poll_s=0.02)
    async with lanes_a.hold(LANE) as held:
        assert held.held
        async with lanes_b.hold(LANE, wait_s=0.1) as lane:
            assert not lane.held
            assert lane.busy_with == "replica-a"
        # Asked once (no wait): the same answer.
        async with lanes_b.hold(LANE) as lane:
            assert not lane.held and lane.busy_with == "replica-a"
        # This process's own second caller does not even ask the store.
        async with lanes_a.hold(LANE) as lane:
            assert not lane.held and lane.busy_with == "replica-a"
    assert held.hold is not None
    assert lanes.holder_of(a, LANE, clock()) is None


async def test_a_stopping_process_stops_waiting_for_a_lane_held_elsewhere(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    clock = FakeClock(T0)
    lanes_a = Lanes(a, "replica-a", term_s=TERM, clock=clock)
    lanes_b = Lanes(b, "replica-b", term_s=TERM, clock=clock, poll_s=0.05)

    async def wait_for_it() -> bool:
        async with lanes_b.hold(LANE, wait_s=10 * WAIT_S) as lane:
            return lane.held

    async with lanes_a.hold(LANE) as held:
        assert held.held
        waiting = asyncio.create_task(wait_for_it())
        await asyncio.sleep(0.2)  # B is polling the store meanwhile
        assert not waiting.done()
        lanes_b.close()  # the process is stopping (shutdown)
        async with asyncio.timeout(WAIT_S):  # far sooner than its wait bound
            assert await waiting is False


async def test_a_holder_taken_over_loses_the_lane_visibly_and_leaves_it_alone(
    replicas: tuple[Database, Database], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = replicas
    # Whatever level an earlier test in this process left on the root logger.
    caplog.set_level(logging.WARNING, logger="reviewbot.runtime.lanes")
    clock = FakeClock(T0)
    lanes_a = Lanes(a, "replica-a", term_s=TERM, clock=clock)
    lanes_b = Lanes(b, "replica-b", term_s=TERM, clock=clock)
    async with lanes_a.hold(LANE) as lane_a:
        assert lane_a.held and await lanes_a.confirm(lane_a)
        clock.now += TERM  # A paused past its term (no renewal ran): B takes the lane
        async with lanes_b.hold(LANE) as lane_b:
            assert lane_b.held
            assert not await lanes_a.confirm(lane_a)
            assert lane_a.lost and not lane_a.held
            assert "lost the lane " + LANE in caplog.text
        b_token = lane_b.hold.token if lane_b.hold is not None else 0
        again = lanes.try_acquire(b, LANE, "replica-c", TERM, clock())
        assert isinstance(again, LaneHold) and again.token == b_token + 1
    # A leaving did not release C's lane.
    assert lanes.holder_of(b, LANE, clock()) == LaneBusy(
        LANE, "replica-c", again.token, again.expires_at
    )


async def test_a_held_lane_is_renewed_while_the_work_runs(
    replicas: tuple[Database, Database],
) -> None:
    a, b = replicas
    clock = FakeClock(T0)
    term = 0.3  # the renewal runs every 0.1 s of the loop's time; the lane's clock is fake
    lanes_a = Lanes(a, "replica-a", term_s=term, clock=clock)
    async with lanes_a.hold(LANE) as lane:
        first = lane.hold
        assert first is not None and first.expires_at == T0 + term
        clock.now = T0 + 0.25
        async with asyncio.timeout(WAIT_S):
            while True:
                if lane.hold is not None and lane.hold.expires_at != first.expires_at:
                    break
                await asyncio.sleep(0.02)
        assert lane.held
        # Past the first term, but renewed: another process is refused.
        clock.now = T0 + 0.4
        assert isinstance(lanes.try_acquire(b, LANE, "replica-b", term, clock()), LaneBusy)


# --- the reconcile sweep -----------------------------------------------------------------


async def test_a_repository_another_process_sweeps_is_skipped_and_reported(
    tmp_path: Path,
    sim: Simulator,
    sim_server: SimServer,
    replicas: tuple[Database, Database],
    workflow_paths: WorkflowPaths,
) -> None:
    a, b = replicas
    token = sim.add_user("github", "reviewbot", bot=True)
    sim.add_user("github", "alice")
    for repo in ("acme/api", "acme/web"):
        sim.create_repo("github", repo)
        sim.open_pr("github", repo, author="alice")
    settings = Settings(
        data_dir=workflow_paths.data_dir,
        database_url=workflow_paths.database_url,
        github={"api_url": sim_server.github_api_url, "token": token, "bot_login": "reviewbot"},
        repos={"github:acme/api": {}, "github:acme/web": {}},
    )
    forge = make_forge(settings, "github")
    queued: list[NewDelivery] = []

    async def enqueue(delivery: NewDelivery) -> bool:
        queued.append(delivery)
        return True

    clock = FakeClock(T0)
    other = Lanes(b, "replica-b", term_s=TERM, clock=clock)
    try:
        service = build_service(
            settings, forges={"github": forge}, db=a, parts=Parts.REVIEW, client="sweep-test"
        )
        async with service:
            parts = service.review
            assert parts is not None
            sweeper = Reconciler(
                settings,
                parts.store,
                {"github": forge},
                parts.pipeline,
                enqueue,
                lanes=Lanes(a, "replica-a", term_s=TERM, clock=clock),
            )
            async with other.hold(lane_name("sweep", "github", "acme/web")) as lane:
                assert lane.held
                report = await sweeper.sweep()
            assert report.skipped == ["github:acme/web: swept by replica-b"]
            assert [d.delivery_id.split("#")[0] for d in queued] == ["sweep:github:acme/api"]
            assert sim.requests_for("github", "GET")
            listed = {r.path for r in sim.requests if r.path.endswith("/pulls")}
            assert listed == {"/repos/acme/api/pulls"}  # the skipped one was not even listed
            # Once the other process is done, the next sweep takes it.
            report = await sweeper.sweep()
            assert report.skipped == []
            assert "sweep:github:acme/web" in {d.delivery_id.split("#")[0] for d in queued}
    finally:
        await forge.aclose()


# --- automerge ---------------------------------------------------------------------------


async def test_automerge_that_lost_its_lane_sends_no_merge(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "github"
    async with bot_world(tmp_path, sim, sim_server, rules={"automerge": True}) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        set_check(w, forge, pr.head_sha, "success")
        w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
        name = lane_name("merge", forge, REPO, "main")
        other = open_store(w.settings)  # another replica's store instance
        taken: list[LaneHold | LaneBusy] = []

        reads: list[int] = []

        def take_over() -> None:
            # Another replica, whose clock says this one's term lapsed, is granted the lane
            # while this one reads the PR inside it (GitHub's second GraphQL read of the
            # attempt: the first, of the pull alone, names the lane).
            reads.append(1)
            if len(reads) == 2:
                taken.append(lanes.try_acquire(other, name, "replica-b", TERM, time.time() + 3600))

        w.sim.faults.add(forge=forge, method="POST", path="/graphql", times=2, before=take_over)
        automerge = w.api.automerge
        assert automerge is not None
        try:
            outcome = await automerge.run(forge, REPO, pr.number)
            (got,) = taken
            assert isinstance(got, LaneHold)
            assert outcome is not None and outcome.code == "lane_lost"
            assert w.merge_requests(forge, pr.number) == []  # nothing was sent
            assert not w.sim.pull(forge, REPO, pr.number).merged
            assert w.api.merges.merge_of(forge, REPO, pr.number) is None
            # Leaving did not release the other replica's lane.
            busy = lanes.holder_of(other, name, time.time())
            assert busy is not None and busy.holder == "replica-b"
            # Once the other replica is done, the next attempt merges.
            assert lanes.release(other, got)
            outcome = await automerge.run(forge, REPO, pr.number)
            assert outcome is not None and outcome.merged
            assert len(w.merge_requests(forge, pr.number)) == 1
        finally:
            other.close()


async def test_a_merge_left_behind_for_a_busy_lane_is_taken_up_by_the_next_sweep(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "github"
    async with bot_world(tmp_path, sim, sim_server, rules={"automerge": True}) as w:
        automerge = w.api.automerge
        assert automerge is not None and w.service.review is not None
        automerge.wait_s = 0.3  # the bound this test waits out, instead of a minute
        other = open_store(w.settings)  # another replica, merging into main meanwhile
        try:
            busy = lanes.try_acquire(
                other, lane_name("merge", forge, REPO, "main"), "replica-b", 3600, time.time()
            )
            assert isinstance(busy, LaneHold)
            pr = w.sim.open_pr(forge, REPO, author="alice")
            set_check(w, forge, pr.head_sha, "success")
            await w.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
            await w.settle()
            # Approved, but the merge waited for the lane and left the PR.
            assert [r.state for r in w.bot_reviews(forge, pr.number)] == ["APPROVED"]
            assert not w.sim.pull(forge, REPO, pr.number).merged
            assert w.merge_requests(forge, pr.number) == []
            assert lanes.release(other, busy)
        finally:
            other.close()
        parts = w.service.review
        sweeper = Reconciler(
            w.settings,
            parts.store,
            w.service.forges,
            parts.pipeline,
            enqueue=_never_queued,
            consider_merge=automerge.consider,
        )
        report = await sweeper.sweep()
        assert report.merge_considered == [f"{forge}:{REPO}#{pr.number}"]
        await w.settle()
        assert w.sim.pull(forge, REPO, pr.number).merged
        assert len(w.merge_requests(forge, pr.number)) == 1


async def _never_queued(delivery: NewDelivery) -> bool:
    raise AssertionError(f"nothing is left to gate, yet {delivery.delivery_id} was queued")
