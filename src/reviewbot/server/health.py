"""Liveness, readiness and metrics: ``GET /healthz`` (the process serves and the store
answers; it also shows the reviewer sandbox state), ``GET /readyz`` (every check of
:mod:`reviewbot.runtime.health`; 503 naming the failing ones) and ``GET /metrics``."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reviewbot.core.errors import ReviewbotError
from reviewbot.runtime.health import readiness
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.store import journal as journal_store


async def healthz(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    db = service.db
    try:
        assert db is not None
        counts = await db.run(journal_store.count_by_status, db)
    except Exception as exc:
        raise ReviewbotError(str(exc), code="store_unavailable") from None
    # The reviewer sandbox is shown here so that ``sandbox = "off"`` is never a silent state.
    sandbox = service.external.sandbox.state.describe()
    return web.json_response({"status": "ok", "deliveries": counts, "sandbox": sandbox})


async def readyz(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    checks = await readiness(
        service.settings,
        service.db,
        service.forges,
        service.clock,
        service.pool,
        expect_workers=service.runner is not None or service.pool is not None,
        probes=request.app[STATE].probes,
    )
    failing = [c.name for c in checks if not c.ok]
    if failing:
        raise ReviewbotError(
            "not ready: " + ", ".join(failing),
            code="not_ready",
            failing=failing,
            checks=[c.to_json() for c in checks],
        )
    return web.json_response({"status": "ready", "checks": [c.to_json() for c in checks]})


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
