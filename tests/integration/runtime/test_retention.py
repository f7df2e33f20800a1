"""What callers can grow, and its bound: the rows API callers add (review requests, Crew
calls, workflow-DB tool calls, worker registrations) are deleted once older than the
retention, a bounded number per run, on both stores; and the tables that are not pruned
grow only as docs/operations.md says (one lease row per target, however often it is
leased). Rows are made over HTTP against a real server with a fake clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import RetentionSettings
from reviewbot.runtime.retention import DAY_S, Retention
from reviewbot.service import build_service
from reviewbot.store import journal, sessions
from reviewbot.store.database import Database
from reviewbot.store.journal import NewDelivery
from reviewbot.store.tokens import create_token
from reviewbot.store.workers import prune_workers
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.server_support import WAIT_S, Running, make_settings, running_server
from tests.support.clock import FakeClock

HEAD = "a" * 40
TABLES = (
    "deliveries",
    "delivery_bodies",
    "pr_gate_decisions",
    "delivery_semantic_keys",
    "review_jobs",
    "session_tool_calls",
    "workers",
)


def counts(db: Database) -> dict[str, int]:
    with db.read() as tx:
        return {t: int(tx.one(f"SELECT count(*) FROM {t}")[0]) for t in TABLES}  # type: ignore[index]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def server(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running_server(make_settings(tmp_path / "data"), forges={}, clock=clock) as srv:
        yield srv


async def post(srv: Running, path: str, token: str, body: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with srv.http.post(srv.base + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def caller_rows(srv: Running, n: int) -> tuple[list[str], list[str]]:
    """``n`` review requests, Crew calls, tool calls and workers of one token, gated; the
    delivery ids and the worker identities."""
    token = srv.token("review,lease,db:read")
    delivery_ids, workers = [], []
    for i in range(n):
        review = {"forge": "gitea", "repo": "acme/api", "number": i + 1}
        status, body = await post(srv, "/api/v1/reviews", token, review)
        assert status == 202, body
        delivery_ids.append(body["delivery_id"])
        envelope = {"variables": review, "payload": {"call_id": f"{srv.service.clock()}-{i}"}}
        status, body = await post(srv, "/webhooks/crew", token, envelope)
        assert status == 202, body
        delivery_ids.append(body["delivery_id"])
        call = {"arguments": {"sql": "SELECT 1"}}
        assert (await post(srv, "/api/v1/tools/query_workflow_db", token, call))[0] == 200
        worker = {"name": "agent", "client": "c", "session_id": f"s{i}", "role": "merger"}
        status, body = await post(srv, "/api/v1/workers", token, worker)
        assert status == 201, body
        workers.append(body["worker_identity"])
    for delivery_id in delivery_ids:
        await srv.wait_done(delivery_id)  # no forge is configured: each ends in an error
    await srv.settle()
    return delivery_ids, workers


async def test_rows_api_callers_add_are_deleted_after_the_retention(
    server: Running, clock: FakeClock
) -> None:
    retention = server.service.retention
    assert retention is not None
    empty = counts(server.db)
    old_ids, old_workers = await caller_rows(server, 5)
    clock.now += 31 * DAY_S
    new_ids, new_workers = await caller_rows(server, 2)
    assert len(new_workers) == 2
    grown = counts(server.db)
    assert grown["deliveries"] - empty["deliveries"] == 14
    assert grown["session_tool_calls"] - empty["session_tool_calls"] == 7

    report = await retention.run()
    assert report.deleted == {"deliveries": 10, "tool calls": 5, "workers": 5}
    left = counts(server.db)
    assert left["deliveries"] - empty["deliveries"] == 4
    assert left["delivery_bodies"] - empty["delivery_bodies"] == 4
    assert left["session_tool_calls"] - empty["session_tool_calls"] == 2
    assert left["workers"] - empty["workers"] == 2  # the bot's own merger worker is kept
    with server.db.read() as tx:
        kept = {r[0] for r in tx.all("SELECT delivery_id FROM pr_gate_decisions")}
    assert kept == set(new_ids)
    reader = server.token("read")
    assert (await server.get(f"/api/v1/deliveries/{old_ids[0]}", reader))[0] == 404
    assert (await server.get(f"/api/v1/deliveries/{new_ids[0]}", reader))[0] == 200
    lease = server.token("lease")
    status, body = await post(server, "/api/v1/workers/heartbeat", lease,
                              {"worker_identity": old_workers[0]})  # fmt: skip
    assert (status, body["error"]) == (404, "worker_unproven")
    # A second run finds nothing more to delete.
    assert (await retention.run()).deleted == {}
    assert counts(server.db) == left


# -- the store functions, on both stores ------------------------------------------------------


def add_delivery(db: Database, delivery_id: str, received_at: float, *, ended: bool) -> None:
    body = json.dumps({"forge": "gitea", "repo": "acme/api", "number": 1}).encode()
    journal.insert_delivery(db, NewDelivery(delivery_id, "api", body, received_at, "gitea"))
    with db.write() as tx:
        tx.execute(
            "INSERT INTO pr_gate_decisions (delivery_id, source, decision, reason_code,"
            " semantic_key, decided_at) VALUES (?, 'api', 'eligible', 'eligible', ?, ?)",
            (delivery_id, f"key-{delivery_id}", received_at),
        )
        decision = tx.one("SELECT id FROM pr_gate_decisions WHERE delivery_id = ?", (delivery_id,))
        assert decision is not None
        tx.execute(
            "INSERT INTO delivery_semantic_keys (semantic_key, delivery_id, claimed_at)"
            " VALUES (?, ?, ?)",
            (f"key-{delivery_id}", delivery_id, received_at),
        )
        tx.execute(
            "INSERT INTO review_jobs (decision_id, delivery_id, source, forge, repo, number,"
            " status, created_at) VALUES (?, ?, 'api', 'gitea', 'acme/api', 1, ?, ?)",
            (decision[0], delivery_id, "done" if ended else "queued", received_at),
        )
    if ended:
        journal.finish(db, delivery_id, ok=True, error=None, at=received_at)


def test_ended_deliveries_are_pruned_oldest_first_a_chunk_at_a_time(db: Database) -> None:
    for n in range(5):
        add_delivery(db, f"old-{n}", 100.0 + n, ended=True)
    add_delivery(db, "old-still-reviewed", 50.0, ended=False)  # its review job is queued
    add_delivery(db, "new", 1000.0, ended=True)
    assert journal.prune_ended(db, 500.0, limit=3) == 3
    assert journal.prune_ended(db, 500.0, limit=3) == 2
    assert journal.prune_ended(db, 500.0, limit=3) == 0
    with db.read() as tx:
        left = {t: sorted(r[0] for r in tx.all(f"SELECT delivery_id FROM {t}")) for t in (
            "deliveries", "delivery_bodies", "pr_gate_decisions", "delivery_semantic_keys",
            "review_jobs",
        )}  # fmt: skip
    assert all(ids == ["new", "old-still-reviewed"] for ids in left.values()), left


def test_tool_calls_and_token_workers_are_pruned(db: Database, clock: FakeClock) -> None:
    for n in range(4):
        sessions.record_tool_call(
            db, session_id="s", owner_session_id=None, run_id="r", tool="query_workflow_db",
            outcome="ok", detail="", called_at=100.0 * (n + 1),
        )  # fmt: skip
    assert sessions.prune_tool_calls(db, 250.0, limit=10) == 2
    assert sessions.prune_tool_calls(db, 250.0, limit=10) == 0
    _, info = create_token(db, name="agent", scopes="lease", repo=None, now=0.0)
    with db.write() as tx:
        for identity, owner, heard in (("a-old", info.id, 10.0), ("a-new", info.id, 900.0),
                                       ("bot-old", None, 10.0)):  # fmt: skip
            tx.execute(
                "INSERT INTO workers (identity, name, client, session_id, role, registered_at,"
                " heartbeat_at, owner_token_id) VALUES (?, 'w', 'c', 's', 'merger', ?, ?, ?)",
                (identity, heard, heard, owner),
            )
    assert prune_workers(db, 500.0, limit=10) == 1
    with db.read() as tx:
        assert sorted(r[0] for r in tx.all("SELECT identity FROM workers")) == ["a-new", "bot-old"]


async def test_a_run_is_bounded_and_zero_days_keeps_everything(db: Database) -> None:
    for n in range(7):
        add_delivery(db, f"old-{n}", 1.0 + n, ended=True)
    now = 100 * DAY_S
    kept = Retention(db, RetentionSettings(journal_days=0), lambda: now, chunk=2, per_run=4)
    assert (await kept.run()).deleted == {}
    bounded = Retention(db, RetentionSettings(), lambda: now, chunk=2, per_run=4)
    assert (await bounded.run()).deleted == {"deliveries": 4}
    assert (await bounded.run()).deleted == {"deliveries": 3}


async def test_a_target_is_one_lease_row_however_often_it_is_leased(
    server: Running, clock: FakeClock
) -> None:
    token = server.token("lease")
    worker = {"name": "agent", "client": "c", "session_id": "s", "role": "merger"}
    status, body = await post(server, "/api/v1/workers", token, worker)
    assert status == 201, body
    me = body["worker_identity"]
    target = {"forge": "gitea", "repo": "acme/api", "number": 7, "role": "merger"}
    for _ in range(20):
        status, lease = await post(server, "/api/v1/leases/acquire", token,
                                   {**target, "worker_identity": me, "head_sha": HEAD})  # fmt: skip
        assert status == 200, lease
        claim = {**target, "worker_identity": me, "epoch": lease["epoch"]}
        assert (await post(server, "/api/v1/leases/release", token, claim))[0] == 200
        clock.now += 1
    with server.db.read() as tx:
        leases = tx.all("SELECT epoch FROM leases WHERE number = 7")
        epochs = tx.all("SELECT epoch FROM lease_epochs WHERE number = 7")
    assert [r[0] for r in leases] == [r[0] for r in epochs] == [20]


async def test_the_reconcile_sweep_prunes(tmp_path: Path, clock: FakeClock) -> None:
    settings = make_settings(tmp_path / "data", reconcile_interval_s=3600.0)
    db = open_store(settings)
    try:
        add_delivery(db, "old", clock.now - 31 * DAY_S, ended=True)
        add_delivery(db, "new", clock.now, ended=True)
        service = build_service(settings, forges={}, db=db, clock=clock)
        async with service:
            assert service.reconciler is not None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while service.reconciler.sweeps < 1:  # the sweep at start
                assert loop.time() < deadline, "no sweep ran"
                await asyncio.sleep(0.02)
        assert journal.get_delivery(db, "old") is None
        assert journal.get_delivery(db, "new") is not None
    finally:
        db.close()
