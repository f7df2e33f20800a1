"""Graceful shutdown: work in flight finishes within the grace period, or goes back to the
queue and is gated by the next start."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reviewbot.store import decisions, journal
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.server_support import (
    WAIT_S,
    Running,
    point_webhooks,
    running_server,
    sim_world,
)


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
