"""``serve --role ingest`` and ``serve --role work`` as two real processes on one SQLite store.

The ingest process acknowledges and journals; the work process gates, reviews and merges
what it journalled. Every acknowledged delivery is gated once, and each PR head gets one
review. Each process refuses the other's routes with 404 ``wrong_role`` and shows its role
in ``/healthz`` and ``/readyz``; a second process that would gate the same store is refused
at start, while more ingest processes may join.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from tests.integration.process_support import run_reviewbot, serve_process
from tests.integration.review_support import BOT, REPO, SECRET, bot_env, prepare_sim

pytestmark = pytest.mark.slow

FORGES = ("github", "gitea")
PRS_PER_FORGE = 3
COPIES = 6  # deliveries of each PR's "opened" event, each with its own delivery id
# The work process's reconcile sweep journals deliveries of its own at start.
WEBHOOKS = "delivery_id NOT LIKE 'sweep:%'"


def store_rows(tmp_path: Path, sql: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(tmp_path / "data" / "db" / "db.sqlite", timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


async def wait_until_gated(tmp_path: Path, count: int, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        rows = store_rows(
            tmp_path,
            "SELECT COUNT(*) AS n FROM deliveries WHERE status IN ('done', 'failed')"
            f" AND {WEBHOOKS}",
        )
        if rows[0]["n"] >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"only {rows[0]['n']} of {count} deliveries were gated")
        await asyncio.sleep(0.1)


async def test_ingest_and_work_processes_share_one_store(tmp_path: Path) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        env = bot_env(tmp_path, sim_server, tokens)
        pulls = []
        for forge in FORGES:
            for n in range(PRS_PER_FORGE):
                pr = sim.open_pr(forge, REPO, author="alice", head_ref=f"feature-{n}")
                sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
                pulls.append((forge, pr.number, pr.head_sha))

        async with (
            serve_process("--role", "work", cwd=tmp_path, env=env) as work,
            # The role from the environment, as a container would set it.
            serve_process(cwd=tmp_path, env={**env, "REVIEWBOT_ROLE": "ingest"}) as ingest,
            httpx.AsyncClient(timeout=30) as http,
        ):
            for forge in FORGES:
                sim.set_webhook(forge, url=f"{ingest.base}/webhooks/{forge}", secret=SECRET)
            # The burst: every copy of every PR's event at once, all to the ingest process.
            sent = await asyncio.gather(
                *(
                    sim.deliver_pull_request(forge, REPO, number, action="opened")
                    for forge, number, _ in pulls
                    for _ in range(COPIES)
                )
            )
            assert [d.status for d in sent] == [202] * len(sent)
            assert len({d.id for d in sent}) == len(sent)
            await wait_until_gated(tmp_path, len(sent))

            # Each role answers what it serves, and says which role it is.
            for proc, role in ((ingest, "ingest"), (work, "work")):
                health = (await http.get(f"{proc.base}/healthz")).json()
                assert health["role"] == role
                ready = await http.get(f"{proc.base}/readyz")
                assert ready.json()["role"] == role, ready.text
            ready = (await http.get(f"{ingest.base}/readyz")).json()
            names = {c["name"] for c in ready["checks"]}
            assert names == {"store_writable"}  # no workers, no queue age, no forge

            # Every acknowledged delivery was gated exactly once: one claim, one decision.
            rows = store_rows(
                tmp_path, f"SELECT delivery_id, status, attempts FROM deliveries WHERE {WEBHOOKS}"
            )
            assert {r["delivery_id"] for r in rows} == {d.id for d in sent}
            assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}
            decided = store_rows(
                tmp_path,
                f"SELECT delivery_id, COUNT(*) AS n FROM pr_gate_decisions WHERE {WEBHOOKS}"
                " GROUP BY delivery_id",
            )
            assert {r["delivery_id"]: r["n"] for r in decided} == {d.id: 1 for d in sent}

            # One review per (PR, head), posted at that head.
            deadline = time.monotonic() + 30
            while True:
                reviews = {
                    (forge, number): [
                        r for r in sim.pull(forge, REPO, number).reviews if r.user == BOT
                    ]
                    for forge, number, _ in pulls
                }
                if all(reviews.values()) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            for forge, number, head in pulls:
                posted = reviews[(forge, number)]
                assert len(posted) == 1, (forge, number, posted)
                assert posted[0].commit_id == head

            # Nothing the work process had to do is left, and a little later still one review.
            await asyncio.sleep(0.5)
            for forge, number, _ in pulls:
                bot_reviews = [r for r in sim.pull(forge, REPO, number).reviews if r.user == BOT]
                assert len(bot_reviews) == 1


async def test_each_role_refuses_the_other_roles_routes(tmp_path: Path) -> None:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        env = bot_env(tmp_path, sim_server, prepare_sim(sim))
        async with (
            serve_process("--role", "work", cwd=tmp_path, env=env) as work,
            serve_process("--role", "ingest", cwd=tmp_path, env=env) as ingest,
            httpx.AsyncClient(timeout=30) as http,
        ):
            # A webhook (a big one, unsigned) to the work process: refused without reading it.
            for path in ("/webhooks/github", "/webhooks/gitea", "/webhooks/crew"):
                answer = await http.post(f"{work.base}{path}", content=b"x" * 1_000_000)
                assert answer.status_code == 404, answer.text
                body = answer.json()
                assert body["error"] == "wrong_role"
                assert "--role ingest" in body["detail"] and "\n" not in body["detail"]
            answer = await http.post(f"{work.base}/api/v1/reviews", json={"repo": REPO})
            assert answer.json()["error"] == "wrong_role"

            # The lease and merge API and the session tools live where the work is.
            for method, path in (
                ("POST", "/api/v1/workers"),
                ("POST", "/api/v1/leases/acquire"),
                ("GET", "/api/v1/leases"),
                ("POST", "/api/v1/merges"),
                ("POST", "/api/v1/tools/call"),
            ):
                answer = await http.request(
                    method,
                    f"{ingest.base}{path}",
                    headers={"Authorization": "Bearer not-a-token"},
                    json={},
                )
                assert answer.status_code == 404, (path, answer.text)
                assert answer.json()["error"] == "wrong_role"
                assert "--role work" in answer.json()["detail"]
            # ... and the work process still answers them (here: the token is refused).
            answer = await http.get(
                f"{work.base}/api/v1/leases", headers={"Authorization": "Bearer not-a-token"}
            )
            assert answer.status_code == 401

            # Another ingest process may join; another process that would gate may not.
            async with serve_process("--role", "ingest", cwd=tmp_path, env=env) as second:
                health = (await http.get(f"{second.base}/healthz")).json()
                assert health["role"] == "ingest"
            for role in ("work", "all"):
                refused = await asyncio.to_thread(
                    run_reviewbot, "serve", "--port", "0", "--role", role, cwd=tmp_path, env=env
                )
                assert refused.returncode == 2, refused.stdout + refused.stderr
                assert "already gates and reviews" in refused.stderr
                assert "--role ingest" in refused.stderr


def test_role_comes_from_the_environment(tmp_path: Path) -> None:
    """``REVIEWBOT_ROLE`` sets the role; a value that is no role is refused at start."""
    env = {"REVIEWBOT_DATA_DIR": str(tmp_path / "data"), "REVIEWBOT_ROLE": "gate"}
    refused = run_reviewbot("serve", "--port", "0", cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert "role" in refused.stderr and "ingest" in refused.stderr
