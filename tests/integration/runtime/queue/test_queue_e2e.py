"""The merge queue end to end on both forges: real git, the simulator's CI, a real store.

What a user relies on: the base branch only ever moves to a commit whose CI passed (a
semantic-conflict pair never both lands), the merged commit is the tested commit, disjoint
PRs ride separate trains, a flake is retried once, a culprit hidden in a batch is found and
ejected with its evidence, a moved head is refused at the door.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.queue.driver import QueueRefused
from reviewbot.runtime.queue.session import QueueSession
from reviewbot.store import lanes
from reviewbot.store.lanes import LaneHold
from reviewbot.store.queue import EventKind, QueueCar, QueueFenced
from tests.integration.runtime.queue.queue_support import (
    CI_S,
    CONTEXT,
    LANE_TERM_S,
    REPO,
    QueueWorld,
    needs_git,
    queue_world,
)

pytestmark = [needs_git, pytest.mark.git]
FORGES = ["github", "gitea"]


def assert_base_green(w: QueueWorld) -> None:
    """Every commit the base moved to passes CI, and each is a commit a car tested."""
    moves = w.base_commits()
    assert moves, "the base never moved"
    assert [w.ci_result(sha) for sha in moves] == ["success"] * len(moves)


def landed(w: QueueWorld, number: int) -> str:
    (event,) = [e for e in w.events(number) if e.kind == "landed"]
    assert event.sha is not None
    assert event.evidence["merged_sha"] == event.evidence["tested_sha"] == event.sha
    return event.sha


@pytest.mark.parametrize("server", [*FORGES, "gitea-1.26"])
async def test_a_semantic_conflict_pair_never_both_lands(server: str, tmp_path: Path) -> None:
    forge = server.partition("-")[0]
    conflict = [["src/api.py", "src/caller.py"]]  # green alone, red together
    async with queue_world(server, tmp_path, conflicts=conflict) as w:
        a = await w.pull("a", {"src/api.py": "def api():\n    return 2\n"})
        b = await w.pull("b", {"src/caller.py": "from api import api as call\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (a, b):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await w.drive(driver, rounds=1)

        # The first lands at exactly its tested commit; the second, red on top of it, is out.
        sha = landed(w, a.number)
        assert w.tip() == sha
        assert_base_green(w)
        pulled = w.sim.pull(forge, REPO, a.number)
        assert pulled.merged and pulled.merge_commit_sha == sha
        assert not w.sim.pull(forge, REPO, b.number).merged
        ejected = [e for e in w.events(b.number) if e.kind == "ejected"]
        assert [e.code for e in ejected] == [ReasonCode.QUEUE_CULPRIT.value]
        evidence = ejected[0].evidence
        assert evidence["check"] == CONTEXT and evidence["check_url"]
        assert evidence["batch"] == [b.number] and evidence["ahead"] == [a.number]
        assert w.store.entries(forge, REPO, "main") == []
        if server == "gitea-1.26":  # the base moved by the server's fast-forward update
            puts = [r for r in w.sim.requests if r.method == "PUT" and "/branches/" in r.path]
            assert [r.status for r in puts] == [204]


@pytest.mark.parametrize("forge", FORGES)
async def test_disjoint_prs_ride_separate_trains(forge: str, tmp_path: Path) -> None:
    async with queue_world(forge, tmp_path) as w:
        docs = await w.pull("docs", {"docs/guide.md": "# Guide, better\n"})
        lib = await w.pull("lib", {"lib/util.py": "X = 2\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (docs, lib):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        entries = w.store.entries(forge, REPO, "main")
        assert len({e.train for e in entries}) == 2
        await driver.run(w.queue)
        # Both cars are in flight at once, one per train.
        live = w.store.cars(forge, REPO, "main")
        assert sorted(len(c.batch) for c in live) == [1, 1]
        assert len({c.train for c in live}) == 2
        w.ci_done()
        await w.drive(driver, rounds=1)
        assert {e.kind for e in w.events(docs.number)} >= {"landed"}
        assert {e.kind for e in w.events(lib.number)} >= {"landed"}
        assert_base_green(w)
        assert w.tip() == landed(w, lib.number) or w.tip() == landed(w, docs.number)
        for pull in (docs, lib):
            assert w.sim.pull(forge, REPO, pull.number).merged


async def test_a_pr_touching_two_trains_joins_one_and_stops_neither(tmp_path: Path) -> None:
    """As the board routes it: a PR whose keys overlap two trains rides its home train (the
    oldest of those it shares most with); the trains are not merged, no car is cancelled."""
    forge = "github"
    async with queue_world(forge, tmp_path) as w:
        docs = await w.pull("docs", {"docs/guide.md": "# Guide, better\n"})
        lib = await w.pull("lib", {"lib/util.py": "X = 2\n"})
        both = await w.pull("both", {"docs/api.md": "# API\n", "lib/api.py": "Y = 1\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (docs, lib):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        before = {c.id for c in w.store.cars(forge, REPO, "main")}
        assert len(before) == 2
        await driver.enqueue(forge, REPO, both.number, expect_head_sha=both.head_sha)
        await driver.run(w.queue)
        entries = {e.number: e.train for e in w.store.entries(forge, REPO, "main")}
        assert entries[both.number] == entries[docs.number] != entries[lib.number]
        assert before <= {c.id for c in w.store.cars(forge, REPO, "main")}
        w.ci_done()
        await w.drive(driver, rounds=3)
        assert_base_green(w)
        for pull in (docs, lib, both):
            assert w.sim.pull(forge, REPO, pull.number).merged


async def test_a_landing_gitea_will_not_mark_merged_is_explained(tmp_path: Path) -> None:
    """A Gitea repository without manual merges: the commits land, the PR stays open, and
    its queue events say so with the code and the forge's answer."""
    async with queue_world("gitea", tmp_path) as w:
        w.sim.repo("gitea", REPO).allow_manual_merge = False
        docs = await w.pull("docs", {"docs/guide.md": "# Guide, better\n"})
        w.ci_done()
        driver = w.driver()
        await driver.enqueue("gitea", REPO, docs.number, expect_head_sha=docs.head_sha)
        await driver.run(w.queue)
        w.ci_done()
        await w.drive(driver, rounds=1)
        events = w.events(docs.number)
        assert "landed" in {e.kind for e in events}
        assert w.tip() == landed(w, docs.number)
        assert not w.sim.pull("gitea", REPO, docs.number).merged
        (unmarked,) = [e for e in events if e.kind == EventKind.NOT_MARKED]
        assert unmarked.code == ReasonCode.FORGE_ERROR.value
        assert "allow_manual_merge" in unmarked.detail


@pytest.mark.parametrize("forge", FORGES)
async def test_trains_that_pass_together_land_through_the_landing_line(
    forge: str, tmp_path: Path
) -> None:
    async with queue_world(forge, tmp_path) as w:
        pulls = [await w.pull(a, {f"{a}/x.txt": f"{a}\n"}) for a in ("docs", "lib", "web")]
        w.ci_done()
        driver = w.driver()
        for pull in pulls:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        # Round one: each train tests its car; all three pass. One lands directly; the other
        # two, whose base moved, join the landing line and are tested there once, together.
        await w.drive(driver, rounds=2)
        for pull in pulls:
            assert w.sim.pull(forge, REPO, pull.number).merged, pull.number
        promoted = [e for e in w.store.events(forge, REPO, "main") if e.kind == "promoted"]
        assert len(promoted) == 2
        # Every landing is a fast-forward of the base to exactly a commit CI tested.
        repo = w.sim.repo(forge, REPO)
        moves = [sha for sha in w.base_commits() if sha != w.root]
        for before, after in zip([w.root, *moves], moves, strict=False):
            assert w.sim.is_ancestor(repo, before, after)
        assert set(moves) == {landed(w, pull.number) for pull in pulls}
        assert_base_green(w)
        # Three cars in the trains and at most two in the landing line; landing each train
        # on its own retests the others after every landing (3 + 2 + 1 cars, three rounds).
        built = [e for e in w.store.events(forge, REPO, "main") if e.kind == "car_built"]
        assert len(built) <= 5
        assert w.store.entries(forge, REPO, "main") == []
        assert w.store.trains(forge, REPO, "main") == []


async def test_a_pr_whose_queue_spot_changes_gets_its_state_comment_synced(
    tmp_path: Path,
) -> None:
    forge = "github"
    async with queue_world(forge, tmp_path) as w:
        synced: list[int] = []

        async def sync(forge_name: str, repo: str, number: int) -> str:
            assert (forge_name, repo) == (forge, REPO)
            synced.append(number)
            return "edited"

        docs = await w.pull("docs", {"docs/guide.md": "# Guide, better\n"})
        lib = await w.pull("lib", {"lib/util.py": "X = 2\n"})
        w.ci_done()
        driver = w.driver(state_comment=sync)
        for pull in (docs, lib):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        assert synced == [docs.number, lib.number]  # each joined a train
        synced.clear()
        await driver.run(w.queue)  # each now rides a car
        assert sorted(synced) == [docs.number, lib.number]
        synced.clear()
        await driver.run(w.queue)  # CI still running: no spot moved
        assert synced == []
        w.ci_done()
        await driver.run(w.queue)  # one landed, the other joined the landing line
        assert sorted(synced) == [docs.number, lib.number]
        synced.clear()
        w.ci_done()
        await driver.run(w.queue)  # landed: out of the queue, the QUEUE line goes
        assert synced == [lib.number] or synced == [docs.number]
        assert w.store.entries(forge, REPO, "main") == []


@pytest.mark.parametrize("forge", FORGES)
async def test_a_stale_head_is_refused_at_enqueue(forge: str, tmp_path: Path) -> None:
    async with queue_world(forge, tmp_path) as w:
        pull = await w.pull("a", {"src/api.py": "def api():\n    return 3\n"})
        w.ci_done()
        old = pull.head_sha
        w.sim.push(forge, REPO, pull.number, files={"src/api.py": "def api():\n    return 4\n"})
        driver = w.driver()
        with pytest.raises(QueueRefused) as refused:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=old)
        assert refused.value.code == ReasonCode.HEAD_MOVED.value
        assert w.store.entries(forge, REPO, "main") == []


@pytest.mark.parametrize("forge", FORGES)
async def test_ci_on_the_queue_branches_builds_each_car_once_at_its_tested_commit(
    forge: str, tmp_path: Path
) -> None:
    """CI set up as the docs say (on ``reviewbot/queue/**``) runs once per car, on the commit
    the car tests: not on the branch's start, nor on each merge made to build it."""
    async with queue_world(
        forge, tmp_path, ci_branches=["reviewbot/queue/*"], merge_queue={"cars_per_train": 1}
    ) as w:
        pulls = [await w.pull(f"p{i}", {f"src/p{i}.py": f"P = {i}\n"}) for i in range(3)]
        for pull in pulls:  # green at their heads by a CI of their own
            w.sim.set_status(forge, REPO, pull.head_sha, CONTEXT, "success")
            if forge == "github":
                w.sim.set_check_run(REPO, pull.head_sha, CONTEXT, conclusion="success")
        driver = w.driver()
        for pull in pulls:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        (car,) = w.store.cars(forge, REPO, "main")
        assert car.batch == tuple(p.number for p in pulls)
        assert [(j.branch, j.sha) for j in w.sim.ci.jobs] == [(car.branch, car.tested_sha)]
        await w.drive(driver, rounds=1)
        assert w.tip() == car.tested_sha
        assert_base_green(w)
        assert [r.job.sha for r in w.sim.ci.results] == [car.tested_sha]
        # The work branch the merges were made on is gone.
        assert not [b for b in w.sim.repo(forge, REPO).branches if b.startswith("reviewbot/b")]


@pytest.mark.parametrize("forge", FORGES)
async def test_a_commit_pushed_to_a_cars_work_branch_never_rides_into_the_car(
    forge: str, tmp_path: Path
) -> None:
    """A user who may push branches but not the base pushes to the work branch while the
    bot makes a car there: the build stops, and the car made again holds only the queued
    heads; the commit never reaches a queue branch or the base."""
    async with queue_world(forge, tmp_path, merge_queue={"cars_per_train": 1}) as w:
        a = await w.pull("a", {"src/one.py": "ONE = 1\n"})
        b = await w.pull("b", {"src/two.py": "TWO = 2\n"})
        d = await w.pull("d", {"docs/guide.md": "# Guide, again\n"})  # a train of its own
        w.ci_done()
        driver = w.driver()
        pushed = w.sneak_after_create(forge, lambda b: b.startswith("reviewbot/build/"))
        for pull in (a, b, d):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        report = await driver.run(w.queue)
        assert pushed and report is not None
        (error,) = report.errors
        assert "someone else pushed to it" in error and pushed[0] in error
        # The car is left to build again; the other train's car was built in the same pass.
        built = {c.batch: c.tested_sha for c in w.store.cars(forge, REPO, "main")}
        assert built[(a.number, b.number)] is None and built[(d.number,)] is not None

        await w.drive(driver, rounds=2)  # made again from the start, tested, landed
        for pull in (a, b, d):
            assert [e.kind for e in w.events(pull.number)][-2:] == ["landed", "merged"]
        assert_base_green(w)
        git = w.sim.git_of(w.sim.repo(forge, REPO))
        assert git is not None
        assert git.read_file(w.tip(), "src/two.py") == "TWO = 2\n"
        assert git.read_file(w.tip(), "src/sneak.py") is None
        assert not any(git.is_ancestor(pushed[0], m) for m in w.base_commits())


@pytest.mark.parametrize("forge", FORGES)
async def test_a_flaky_batch_is_retried_once_and_lands(forge: str, tmp_path: Path) -> None:
    async with queue_world(forge, tmp_path, merge_queue={"cars_per_train": 1}) as w:
        a = await w.pull("a", {"src/one.py": "ONE = 1\n"})
        b = await w.pull("b", {"src/two.py": "TWO = 2\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (a, b):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        (car,) = w.store.cars(forge, REPO, "main")
        assert car.batch == (a.number, b.number) and car.tested_sha is not None
        # The run on the car's commit fails by chance; a second run of it would pass.
        w.flaky_failure(car.tested_sha)
        await driver.run(w.queue)  # failed: each half is tested alone
        halves = w.store.cars(forge, REPO, "main")
        assert sorted(c.batch for c in halves) == [(a.number,), (b.number,)]
        await w.drive(driver, rounds=2)  # both halves pass: a suspected flake, retried once
        for pull in (a, b):
            kinds = [e.kind for e in w.events(pull.number)]
            assert "ejected" not in kinds and kinds[-2:] == ["landed", "merged"]
        assert_base_green(w)
        failed = [e for e in w.store.events(forge, REPO, "main") if e.kind == "car_failed"]
        assert len(failed) == 1
        entries = w.store.entries(forge, REPO, "main", state=None)
        assert [(e.state, e.strikes) for e in entries] == [("merged", 1), ("merged", 1)]


@pytest.mark.parametrize("forge", FORGES)
async def test_a_culprit_in_a_batch_of_eight_is_found_and_ejected(
    forge: str, tmp_path: Path
) -> None:
    async with queue_world(
        forge,
        tmp_path,
        conflicts=[["src/bad.py", "src/victim.py"]],
        merge_queue={"cars_per_train": 1, "batch_max": 8},
    ) as w:
        pulls = []
        for i in range(8):
            files = {"src/bad.py": "broken\n"} if i == 5 else {f"src/f{i}.py": f"F = {i}\n"}
            pulls.append(await w.pull(f"p{i}", files))
        w.ci_done()  # each is green alone, on the base it was opened on
        culprit = pulls[5]
        # Then the base changes under them: green alone, but red with the culprit.
        await w.work.run("checkout", "-q", "main")
        await w.work.commit({"src/victim.py": "USES_BAD = True\n"}, "Use the old bad.py")
        await w.work.push("main")
        w.ci_done()
        driver = w.driver()
        for pull in pulls:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        (first,) = w.store.cars(forge, REPO, "main")
        assert len(first.batch) == 8
        await w.drive(driver, rounds=6)
        ejected = [e for e in w.events(culprit.number) if e.kind == "ejected"]
        assert [e.code for e in ejected] == [ReasonCode.QUEUE_CULPRIT.value]
        evidence = ejected[0].evidence
        assert evidence["batch"] == [culprit.number]
        assert evidence["check"] == CONTEXT and evidence["check_url"]
        assert evidence["failure"] == ReasonCode.CHECKS_FAILED.value
        assert evidence["tested_sha"] and evidence["conflicts_with"]["base_sha"]
        for pull in pulls:
            if pull is not culprit:
                assert w.sim.pull(forge, REPO, pull.number).merged, pull.number
        assert not w.sim.pull(forge, REPO, culprit.number).merged
        assert_base_green(w)
        assert w.store.entries(forge, REPO, "main") == []


@pytest.mark.parametrize("landed_before", [False, True], ids=["first-entry", "landed-before"])
async def test_a_car_sitting_on_a_pr_ejected_from_the_landing_line_never_lands_it(
    tmp_path: Path, landed_before: bool
) -> None:
    """A train's car built on a PR ahead that was promoted and then ejected from the landing
    line holds that PR's commits: it must not land directly, even with the landing line idle
    and the base unmoved; it is promoted and tested again without them. The same holds when
    that PR landed once before (a forge that could not mark it merged kept it open, and it
    was admitted again at new commits): its earlier landing is not this entry's."""
    forge = "github"
    branches = ["w", "z", "a", "b"]  # CI on the PR heads only: the cars' results are posted
    async with queue_world(
        forge, tmp_path, ci_branches=branches, merge_queue={"cars_per_train": 2}
    ) as w:
        pw = await w.pull("w", {"docs/w.md": "W\n"})
        pz = await w.pull("z", {"lib/z.py": "Z = 1\n"})
        pa = await w.pull("a", {"src/a.py": "A = 1\n"})
        pb = await w.pull("b", {"src/b.py": "B = 1\n"})
        w.ci_done()

        def post(sha: str | None, state: str) -> None:
            assert sha is not None
            url = f"https://ci.example/{sha[:12]}"
            w.sim.set_status(forge, REPO, sha, CONTEXT, state, target_url=url)
            conclusion = "success" if state == "success" else "failure"
            w.sim.set_check_run(REPO, sha, CONTEXT, conclusion=conclusion, details_url=url)

        def car_of(number: int) -> QueueCar:
            (car,) = [c for c in w.store.cars(forge, REPO, "main") if number in c.batch]
            return car

        driver = w.driver()
        for pull in (pw, pz):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        post(car_of(pw.number).tested_sha, "success")
        post(car_of(pz.number).tested_sha, "success")
        await driver.run(w.queue)  # W lands; Z, on the old base, waits in the landing line
        assert w.tip() == landed(w, pw.number)
        assert car_of(pz.number).train == "landing"

        if landed_before:  # A's earlier entry, landed at other commits
            with w.store.db.write() as tx:
                tx.execute(
                    "INSERT INTO queue_entries (forge, repo, base, number, head_sha, keys,"
                    " state, train, enqueued_at, updated_at, epoch) VALUES"
                    " (?, ?, 'main', ?, ?, '[\"src\"]', 'merged', 'old', 0, 0, 1)",
                    (forge, REPO.lower(), pa.number, "c" * 40),
                )
        for pull in (pa, pb):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)  # A's car on the base, B's car on A's
        car_b = car_of(pb.number)
        assert car_b.ahead == (pa.number,)
        post(car_of(pa.number).tested_sha, "success")
        await driver.run(w.queue)  # A passed its train; the landing line is busy: promoted
        assert car_of(pa.number).train == "landing"
        for _ in range(4):  # Z and then A fail in the landing line until both are out
            for car in w.store.cars(forge, REPO, "main"):
                if car.train == "landing" and car.tested_sha:
                    post(car.tested_sha, "failure")
            await driver.run(w.queue)
        assert {e.number for e in w.store.entries(forge, REPO, "main")} == {pb.number}
        tip = w.tip()

        post(car_b.tested_sha, "success")  # B's car, on A's commit, passes its train
        await driver.run(w.queue)
        git = w.sim.git_of(w.sim.repo(forge, REPO))
        assert git is not None
        assert git.read_file(w.tip(), "src/a.py") is None  # A's commit never lands
        assert w.tip() == tip  # B was promoted, to be tested without A
        assert car_of(pb.number).train == "landing"


async def test_an_untested_merge_weighs_every_key_of_its_car_not_only_its_trains(
    tmp_path: Path,
) -> None:
    """PX rides the docs+web train but also touches lib/; the lib train lands a PR that breaks
    with PX. The docs train's car may then not land as an untested merge: it holds lib/."""
    forge = "github"
    rules = {"merge_queue": {"land_disjoint_untested": True, "cars_per_train": 1}}
    conflict = [["lib/api.py", "lib/caller.py"]]
    async with queue_world(forge, tmp_path, conflicts=conflict, **rules) as w:
        pl = await w.pull("l", {"lib/caller.py": "from api import api\n"})
        pd = await w.pull("d", {"docs/d.md": "D\n", "web/d.txt": "D\n"})
        px = await w.pull("x", {"docs/x.md": "X\n", "web/x.txt": "X\n", "lib/api.py": "A=1\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (pl, pd, px):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        trains = {e.number: e.train for e in w.store.entries(forge, REPO, "main")}
        assert trains[px.number] == trains[pd.number] != trains[pl.number]
        await w.drive(driver, rounds=4)
        assert_base_green(w)
        assert not [e for e in w.store.events(forge, REPO, "main") if "untested" in e.detail]


async def test_a_train_stored_with_every_entrys_keys_draws_only_its_home_area(
    tmp_path: Path,
) -> None:
    """A train row whose keys grew with each entry (as stored before trains stopped merging)
    would draw in every PR touching any of them: its home keys are its oldest entry's."""
    forge = "github"
    async with queue_world(forge, tmp_path) as w:
        pa = await w.pull("a", {"docs/a.md": "A\n"})
        pb = await w.pull("b", {"lib/b.py": "B = 1\n"})
        pc = await w.pull("c", {"web/c.txt": "C\n"})
        w.ci_done()
        driver = w.driver()
        await driver.enqueue(forge, REPO, pa.number, expect_head_sha=pa.head_sha)
        (entry,) = w.store.entries(forge, REPO, "main")
        with w.store.db.write() as tx:
            tx.execute(
                "UPDATE queue_trains SET keys = ? WHERE train = ?",
                ('["docs", "lib", "web"]', entry.train),
            )
        for pull in (pb, pc):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        trains = {e.number: e.train for e in w.store.entries(forge, REPO, "main")}
        assert len(set(trains.values())) == 3, trains


async def test_every_orphan_of_a_deleted_train_is_adopted_and_lands(tmp_path: Path) -> None:
    forge = "github"
    async with queue_world(forge, tmp_path, merge_queue={"cars_per_train": 1}) as w:
        pa = await w.pull("a", {"docs/a.md": "A\n"})
        pb = await w.pull("b", {"docs/b.md": "B\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (pa, pb):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        with w.store.db.write() as tx:  # an operator deleted the train's row
            tx.execute("DELETE FROM queue_trains")
        await w.drive(driver, rounds=4)
        assert w.store.entries(forge, REPO, "main") == []
        for pull in (pa, pb):
            assert w.sim.pull(forge, REPO, pull.number).merged, pull.number
        assert_base_green(w)


class Killed(BaseException):
    """The process stops here: nothing after this line of its runs."""


@pytest.mark.parametrize("forge", FORGES)
@pytest.mark.parametrize("when", ["before_the_fast_forward", "after_the_fast_forward"])
async def test_a_replica_killed_while_landing_leaves_base_and_queue_consistent(
    forge: str, when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with queue_world(forge, tmp_path) as w:
        a = await w.pull("a", {"src/api.py": "def api():\n    return 5\n"})
        w.ci_done()
        first = w.driver("replica-1")
        await first.enqueue(forge, REPO, a.number, expect_head_sha=a.head_sha)
        await first.run(w.queue)
        w.ci_done()
        (car,) = w.store.cars(forge, REPO, "main")
        tested = car.tested_sha
        assert tested is not None

        async def killed(*args: object, **kwargs: object) -> None:
            raise Killed

        with monkeypatch.context() as m:
            # A killed process releases nothing: its lane stays held until its term ends.
            m.setattr("reviewbot.runtime.lanes.store.release", lambda *a: False)
            if when == "after_the_fast_forward":
                m.setattr(QueueSession, "_record_landing", killed)
            else:
                forge_class = type(w.forges[0][forge])
                m.setattr(forge_class, "fast_forward", killed)
            with pytest.raises(Killed):
                await first.run(w.queue)
        assert w.db is not None
        stale = lanes.holder_of(w.db, w.queue.lane, w.sim.clock())
        assert stale is not None and stale.holder == "replica-1"
        assert (w.tip() == tested) == (when == "after_the_fast_forward")

        second = w.driver("replica-2")
        assert await second.run(w.queue) is None  # the lane is still the dead one's
        w.sim.advance(LANE_TERM_S + 1)
        await second.run(w.queue)

        assert w.tip() == tested
        assert w.base_commits().count(tested) == 1  # one fast-forward, never repeated
        assert landed(w, a.number) == tested
        assert w.sim.pull(forge, REPO, a.number).merged
        assert [e.state for e in w.store.entries(forge, REPO, state=None)] == ["merged"]
        assert w.store.cars(forge, REPO, "main") == []
        assert_base_green(w)
        # The dead replica's token no longer writes anything.
        old = LaneHold(stale.name, stale.holder, stale.token, stale.expires_at)
        with pytest.raises(QueueFenced), w.store.fenced(w.queue, old) as writer:
            writer.event(EventKind.LEFT, "a stale write")


@pytest.mark.parametrize("forge", FORGES)
async def test_the_sweep_takes_out_an_entry_whose_push_webhook_was_lost(
    forge: str, tmp_path: Path
) -> None:
    async with queue_world(forge, tmp_path) as w:
        a = await w.pull("a", {"src/api.py": "def api():\n    return 6\n"})
        b = await w.pull("b", {"docs/guide.md": "# Guide, again\n"})
        w.ci_done()
        driver = w.driver()
        for pull in (a, b):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await driver.run(w.queue)
        # A push nobody told the bot about: the queued head is no longer the PR's.
        w.sim.push(forge, REPO, a.number, files={"src/api.py": "def api():\n    return 7\n"})
        w.ci_done()
        report = await driver.sweep()
        assert report.errors == [] and report.queues == [w.queue.lane]
        (left,) = [e for e in w.events(a.number) if e.kind == "left"]
        assert left.code == ReasonCode.HEAD_MOVED.value
        assert not w.sim.pull(forge, REPO, a.number).merged
        assert w.sim.pull(forge, REPO, b.number).merged  # the other train landed meanwhile
        assert w.store.cars(forge, REPO, "main") == []
        assert_base_green(w)


@pytest.mark.parametrize("forge", FORGES)
async def test_a_hotfix_goes_to_the_head_of_its_train(forge: str, tmp_path: Path) -> None:
    rules = {"merge_queue": {"cars_per_train": 1, "batch_max": 1}}
    async with queue_world(forge, tmp_path, **rules) as w:
        first = await w.pull("first", {"src/one.py": "ONE = 1\n"})
        second = await w.pull("second", {"src/two.py": "TWO = 2\n"})
        fix = await w.pull("fix", {"src/three.py": "THREE = 3\n"})
        w.sim.update_pr(forge, REPO, fix.number, labels=["hotfix"])
        w.ci_done()
        driver = w.driver()
        for pull in (first, second, fix):
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        assert [e.priority for e in w.store.entries(forge, REPO, "main")] == [False, False, True]
        await driver.run(w.queue)
        (car,) = w.store.cars(forge, REPO, "main")
        assert car.batch == (fix.number,)
        await w.drive(driver, rounds=3)
        landed_in_order = [
            e.number for e in w.store.events(forge, REPO, "main") if e.kind == "landed"
        ]
        assert landed_in_order == [fix.number, first.number, second.number]
        assert_base_green(w)


@pytest.mark.parametrize("forge", FORGES)
async def test_disjoint_trains_land_in_one_round_where_the_rules_allow_untested_merges(
    forge: str, tmp_path: Path
) -> None:
    rules = {"merge_queue": {"land_disjoint_untested": True}}
    async with queue_world(forge, tmp_path, **rules) as w:
        pulls = [await w.pull(a, {f"{a}/x.txt": f"{a}\n"}) for a in ("docs", "lib", "web")]
        w.ci_done()
        driver = w.driver()
        for pull in pulls:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await w.drive(driver, rounds=1)  # one CI run of each train's car, then one pass
        for pull in pulls:
            assert w.sim.pull(forge, REPO, pull.number).merged, pull.number
        landings = [e for e in w.store.events(forge, REPO, "main") if e.kind == "landed"]
        assert len(landings) == 3
        first, *rest = landings
        assert first.evidence["merged_sha"] == first.evidence["tested_sha"]
        for event in rest:  # merges of a moved base and a tested commit: both recorded
            assert event.evidence["merged_sha"] != event.evidence["tested_sha"]
            assert "landed untested" in event.detail
        assert_base_green(w)
        built = [e for e in w.store.events(forge, REPO, "main") if e.kind == "car_built"]
        assert len(built) == 3  # no car was rebuilt or retested


@pytest.mark.parametrize("forge", FORGES)
async def test_an_untested_merge_never_takes_along_a_commit_pushed_to_its_branch(
    forge: str, tmp_path: Path
) -> None:
    """Where the rules allow untested merges, a push by someone else to the branch such a
    merge is made on makes the car retested, never landed with that push in it."""
    rules = {"merge_queue": {"land_disjoint_untested": True}}
    async with queue_world(forge, tmp_path, **rules) as w:
        pulls = [await w.pull(a, {f"{a}/x.txt": f"{a}\n"}) for a in ("docs", "lib")]
        w.ci_done()
        driver = w.driver()
        pushed = w.sneak_after_create(forge, lambda b: "-on-" in b)
        for pull in pulls:
            await driver.enqueue(forge, REPO, pull.number, expect_head_sha=pull.head_sha)
        await w.drive(driver, rounds=3)
        assert pushed
        for pull in pulls:
            assert w.sim.pull(forge, REPO, pull.number).merged, pull.number
        git = w.sim.git_of(w.sim.repo(forge, REPO))
        assert git is not None
        assert not any(git.is_ancestor(pushed[0], m) for m in w.base_commits())
        assert git.read_file(w.tip(), "src/sneak.py") is None
        assert_base_green(w)


@pytest.mark.parametrize("forge", FORGES)
async def test_a_car_whose_ci_never_answers_times_out_with_its_own_reason(
    forge: str, tmp_path: Path
) -> None:
    # CI runs on the PR branches only: nothing ever reports on the queue branch.
    rules = {"merge_queue": {"car_timeout_s": 2 * CI_S}}
    async with queue_world(forge, tmp_path, ci_branches=["a"], **rules) as w:
        a = await w.pull("a", {"src/api.py": "def api():\n    return 8\n"})
        w.ci_done()
        driver = w.driver()
        await driver.enqueue(forge, REPO, a.number, expect_head_sha=a.head_sha)
        await w.drive(driver, rounds=1)
        assert [e.kind for e in w.events(a.number)] == ["enqueued"]  # still waiting
        w.sim.advance(CI_S + 1)  # past the car's time limit
        await driver.run(w.queue)
        (ejected,) = [e for e in w.events(a.number) if e.kind == "ejected"]
        assert ejected.code == ReasonCode.QUEUE_CULPRIT.value
        assert ejected.evidence["failure"] == ReasonCode.CAR_TIMED_OUT.value
        timed_out = [e for e in w.store.events(forge, REPO, "main") if e.kind == "car_timed_out"]
        assert [e.code for e in timed_out] == [ReasonCode.CAR_TIMED_OUT.value]
        assert w.tip() != ejected.sha and not w.sim.pull(forge, REPO, a.number).merged
