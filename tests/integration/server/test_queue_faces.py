"""The merge queue's faces over real HTTP: ``queue_predict`` (REST, MCP, CLI), ``explain``
with every queue event and its reason code, and the PR state comment's queue spot. The
queue's rows are written into the real SQLite store the server reads, under the branch's
merge lane, as the queue driver writes them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import QueueRules, RepoRules
from reviewbot.core.reasons import ReasonCode
from reviewbot.sim import SimServer, Simulator
from reviewbot.store import lanes, repositories
from reviewbot.store.database import Database
from reviewbot.store.lanes import LaneHold
from reviewbot.store.queue import CarState, EventKind, QueueRef, QueueStore
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, bot_world, green_approved_pr
from tests.integration.process_support import run_reviewbot
from tests.integration.server_support import Running, make_settings, running_server
from tests.support.clock import FakeClock

FORGE = "gitea"
QUEUE = QueueRef(FORGE, REPO, "main")
HEAD = "a" * 40
TESTED = "b" * 40
RULES = RepoRules(
    merge_queue=QueueRules(path_groups={"src/api/*": "api"}, serial_paths=["poetry.lock"])
)


def hold(db: Database, now: float) -> LaneHold:
    got = lanes.try_acquire(db, QUEUE.lane, "queue-test", 600.0, now)
    assert isinstance(got, LaneHold)
    return got


def seed_queue(db: Database, clock: Any) -> None:
    """PR 7 (area api) in train 1 with a car testing, PR 8 (docs) waiting in train 2."""
    store = QueueStore(db, clock)
    with store.fenced(QUEUE, hold(db, clock())) as w:
        w.enqueue(7, HEAD, ["api"], "1")
        w.enqueue(8, HEAD, ["docs"], "2")
        w.event(EventKind.ENQUEUED, "approved and green at its head", number=7, sha=HEAD)
        car = w.add_car("1", 1, [7], [], "reviewbot/queue/main/1-1")
        w.update_car(car, CarState.TESTING, base_sha=HEAD, tested_sha=TESTED)
        w.event(EventKind.CAR_BUILT, "pushed", car=car, sha=TESTED)


async def predict(server: Running, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return await server.post("/api/v1/queue/predict", json.dumps(body).encode(), headers)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    """A serve whose gitea:acme/api has path groups and a queue seeded by :func:`seed_queue`."""
    clock = FakeClock()
    settings = make_settings(tmp_path / "data", repos={f"{FORGE}:{REPO}": RULES})
    async with running_server(settings, forges={}, clock=clock) as running:
        seed_queue(running.db, clock)
        yield running


async def test_queue_predict_names_the_overlapped_entries_on_rest_mcp_and_cli(
    tmp_path: Path, server: Running
) -> None:
    ask = {"forge": FORGE, "repo": "Acme/API", "base": "main", "files": ["src/api/v.py"]}
    status, answer = await predict(server, server.token("read"), ask)
    assert status == 200, answer
    assert answer["keys"] == ["api"] and not answer["independent"]
    assert answer["overlaps"] == [{"number": 7, "train": "1", "shared": ["api"]}]
    assert answer["trains"] == ["1"]
    # a lockfile overlaps every queued entry; a disjoint change none
    status, serial = await predict(server, server.token("read"), {**ask, "files": ["poetry.lock"]})
    assert [o["number"] for o in serial["overlaps"]] == [7, 8] and serial["serial"]
    status, alone = await predict(server, server.token("read"), {**ask, "files": ["cli/x.py"]})
    assert alone["independent"] and alone["overlaps"] == []
    # another base branch has nothing queued
    status, other = await predict(server, server.token("read"), {**ask, "base": "release"})
    assert status == 200 and other["independent"]

    async with mcp_http(server.base, server.token("read")) as client:
        by_mcp = ok(await client.call_tool("queue_predict", ask))
    assert by_mcp == answer

    config = tmp_path / "reviewbot.toml"
    config.write_text(
        f'[repos."{FORGE}:{REPO}".merge_queue]\n'
        'path_groups = { "src/api/*" = "api" }\nserial_paths = ["poetry.lock"]\n'
    )
    done = run_reviewbot(
        "queue",
        "predict",
        f"{FORGE}:{REPO}",
        "--base",
        "main",
        "src/api/v.py",
        "--json",
        cwd=tmp_path,
        env={
            "REVIEWBOT_DATA_DIR": str(server.service.settings.data_dir),
            "REVIEWBOT_CONFIG": str(config),
        },
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == answer


async def test_queue_predict_refuses_what_a_low_scope_or_foreign_token_asks(
    server: Running,
) -> None:
    ask = {"forge": FORGE, "repo": REPO, "base": "main", "files": ["src/api/v.py"]}
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        (server.token("lease"), ask, 403, "missing_scope"),
        (server.token("read", repo="gitea:acme/web"), ask, 403, "repo_not_allowed"),
        (server.token("read", repo="github:acme/api"), ask, 403, "repo_not_allowed"),
        (server.token("read"), {**ask, "files": ["x"] * 5001}, 400, "invalid_request"),
        (server.token("read"), {**ask, "files": []}, 400, "invalid_request"),
        (server.token("read"), {**ask, "files": ["a" * 1025]}, 400, "invalid_request"),
        (server.token("read"), {**ask, "forge": "gitlab"}, 400, "invalid_request"),
        (server.token("read"), {**ask, "repo": "acme"}, 400, "invalid_request"),
        (server.token("read"), {**ask, "extra": 1}, 400, "invalid_request"),
        (server.token("read"), {**ask, "repo": "acme/unconfigured"}, 200, ""),
    ]
    for token, body, code, error in cases:
        status, answer = await predict(server, token, body)
        assert status == code, (body.keys(), answer)
        if error:
            assert answer["error"] == error, answer
    # a token bound to the repository in other casing asks about it
    status, answer = await predict(server, server.token("read", repo="gitea:ACME/Api"), ask)
    assert status == 200 and answer["overlaps"][0]["number"] == 7
    # a body past the limit is refused before it is read
    huge = json.dumps({**ask, "files": ["p" * 1000] * 1100}).encode()
    headers = {
        "Authorization": f"Bearer {server.token('read')}",
        "Content-Type": "application/json",
    }
    status, answer = await server.post("/api/v1/queue/predict", huge, headers)
    assert (status, answer["error"]) == (413, "body_too_large")
    async with mcp_http(server.base, server.token("read", repo="gitea:acme/web")) as client:
        code, _ = refused(await client.call_tool("queue_predict", ask))
    assert code == "repo_not_allowed"


async def test_a_binding_to_a_name_the_repository_left_reads_nothing_of_its_queue(
    server: Running,
) -> None:
    """``acme/legacy`` was renamed ``acme/api``; a token made afterwards for ``acme/legacy``
    (a new repository may take the name) must not read ``acme/api``'s queue."""
    common = {"forge": FORGE, "signed": True, "seen_at": 1_800_000_000.0, "forge_id": 7}
    repositories.observe(server.db, repo="acme/legacy", display_name="acme/legacy", **common)
    repositories.observe(server.db, repo=REPO, display_name=REPO, **common)
    old_name = server.token("read", repo=f"{FORGE}:acme/legacy")
    for query in (f"forge={FORGE}&repo=acme/legacy", f"forge={FORGE}&repo=ACME/Legacy"):
        status, answer = await server.get(f"/api/v1/queue?{query}", old_name)
        assert (status, answer.get("error")) == (403, "repo_not_allowed"), (query, answer)
    async with mcp_http(server.base, old_name) as client:
        code, _ = refused(
            await client.call_tool("queue_status", {"forge": FORGE, "repo": "acme/legacy"})
        )
    assert code == "repo_not_allowed"
    # The repository's own token reads it under either name, in any casing.
    owner = server.token("read", repo=f"{FORGE}:ACME/Api")
    for name in ("acme/legacy", REPO):
        status, answer = await server.get(f"/api/v1/queue?forge={FORGE}&repo={name}", owner)
        assert status == 200 and answer["repo"] == REPO, answer
        assert [e["number"] for e in answer["entries"]] == [7, 8]


async def test_explain_and_the_state_comment_show_the_queue(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    async with bot_world(tmp_path, sim, sim_server) as w:
        pr = green_approved_pr(w, FORGE)
        await w.sim.deliver_status(FORGE, REPO, None)
        await w.settle()
        db = w.service.db
        assert db is not None
        clock = w.service.clock
        store = QueueStore(db, clock)
        with store.fenced(QUEUE, hold(db, clock())) as q:
            q.enqueue(pr.number, pr.head_sha, ["src"], "1")
            q.event(EventKind.ENQUEUED, "approved and green", number=pr.number, sha=pr.head_sha)
            car = q.add_car("1", 1, [pr.number], [], "reviewbot/queue/main/1-1")
            q.update_car(car, CarState.FAILED, base_sha=HEAD, tested_sha=TESTED)
            q.event(
                EventKind.CAR_FAILED,
                "ci/test failed",
                car=car,
                sha=TESTED,
                code=ReasonCode.CHECKS_FAILED,
            )
            q.event(EventKind.ENQUEUED, "retried", number=pr.number, sha=pr.head_sha)
            again = q.add_car("1", 2, [pr.number], [], "reviewbot/queue/main/1-2")
            q.update_car(again, CarState.TESTING, base_sha=HEAD, tested_sha=TESTED)
        ref = f"{FORGE}:{REPO}#{pr.number}"
        async with mcp_http(w.base, w.token("read")) as client:
            facts = ok(await client.call_tool("explain", {"pr": ref}))
            state = ok(
                await client.call_tool(
                    "pr_state", {"forge": FORGE, "repo": REPO, "number": pr.number}
                )
            )
        kinds = [(e["kind"], e["code"]) for e in facts["queue"]]
        assert ("car_failed", "checks_failed") in kinds and kinds[0] == ("enqueued", None)
        assert state["canonical"]["queue"].startswith("position 1 of 1 in train 1, car 2")
        assert (
            "| Merge queue | position 1 of 1 in train 1, car 2 (testing)" in state["state_comment"]
        )
        done = run_reviewbot(
            "explain", ref, cwd=tmp_path, env={"REVIEWBOT_DATA_DIR": str(w.settings.data_dir)}
        )
        assert done.returncode == 0, done.stderr
        assert f"Merge queue events for {FORGE}:{REPO}#{pr.number}, oldest first:" in done.stdout
        assert "[checks_failed]" in done.stdout
