"""Graceful shutdown: work in flight finishes within the grace period, or goes back to the
queue and is gated by the next start."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from reviewbot.runtime.ingestion.workers import WorkerPool
from reviewbot.store import decisions, journal
from reviewbot.store.journal import NewDelivery, StoredDelivery
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.server_support import (
    WAIT_S,
    Running,
    make_settings,
    point_webhooks,
    running_server,
    sim_world,
)

NOW = 1_767_225_600.0


async def wait_processing(server: Running, delivery_id: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while True:
            stored = journal.get_delivery(server.db, delivery_id)
            if stored is not None and stored.status == "processing":
                return
            await asyncio.sleep(0.02)


async def test_in_flight_work_past_the_grace_goes_back_to_the_queue(tmp_path: Path) -> None:
    async with sim_world(tmp_path / "data") as world:
        pr = world.sim.open_pr("github", "acme/api", author="alice")
        path = f"/repos/acme/api/pulls/{pr.number}"
        world.sim.faults.add(forge="github", method="GET", path=path, delay=60.0, times=100)
        # the gate reads the PR with GitHub's GraphQL query first
        world.sim.faults.add(forge="github", method="POST", path="/graphql", delay=60.0, times=100)
        async with running_server(world.settings, shutdown_grace_s=0.2) as server:
            point_webhooks(world, server)
            delivery = await world.sim.deliver_pull_request("github", "acme/api", pr.number)
            assert delivery.status == 202
            await wait_processing(server, delivery.id)
        db = open_store(world.settings)
        try:
            assert journal.get_delivery(db, delivery.id).status == "queued"  # type: ignore[union-attr]
            assert decisions.count_for_delivery(db, delivery.id) == 0
        finally:
            db.close()
        world.sim.faults.clear()
        async with running_server(world.settings) as server:  # the next start gates it
            rows = await server.decisions_of(delivery.id)
            assert [r.decision for r in rows] == ["eligible"]


async def test_in_flight_work_within_the_grace_finishes(tmp_path: Path) -> None:
    async with sim_world(tmp_path / "data") as world:
        pr = world.sim.open_pr("gitea", "acme/api", author="alice")
        path = f"/repos/acme/api/pulls/{pr.number}"
        world.sim.faults.add(forge="gitea", method="GET", path=path, delay=0.5, times=1)
        async with running_server(world.settings, shutdown_grace_s=20.0) as server:
            point_webhooks(world, server)
            delivery = await world.sim.deliver_pull_request("gitea", "acme/api", pr.number)
            await wait_processing(server, delivery.id)
        db = open_store(world.settings)
        try:
            assert journal.get_delivery(db, delivery.id).status == "done"  # type: ignore[union-attr]
            assert decisions.count_for_delivery(db, delivery.id) == 1
        finally:
            db.close()


async def test_a_claim_taken_as_the_stop_begins_is_gated_within_the_grace(tmp_path: Path) -> None:
    """The stop begins while a worker takes its claim (the delivery shows ``processing``
    before the worker has the batch in hand): the claimed batch is in flight and is gated
    within the grace, once, instead of going back to the queue."""
    db = open_store(make_settings(tmp_path / "data"))
    try:
        journal.insert_delivery(db, NewDelivery("d-1", "api", b"{}", NOW))
        gated: list[str] = []

        async def process(batch: Sequence[StoredDelivery]) -> None:
            for delivery in batch:
                gated.append(delivery.delivery_id)
                await db.run(journal.finish, db, delivery.delivery_id, ok=True, error=None, at=NOW)

        stopping: asyncio.Future[asyncio.Task[None]] = asyncio.get_running_loop().create_future()

        def clock() -> float:
            # A worker reads the clock as it takes a claim (the first read of a pool without
            # claim terms): the stop begins right then, while the claim commits on its thread.
            if not stopping.done():
                stopping.set_result(asyncio.create_task(pool.stop(grace_s=WAIT_S)))
            return NOW

        pool = WorkerPool(db, process, size=1, clock=clock)
        await pool.start()
        async with asyncio.timeout(WAIT_S):
            await (await stopping)
        assert gated == ["d-1"]
        assert journal.get_delivery(db, "d-1").status == journal.DONE  # type: ignore[union-attr]
    finally:
        db.close()
