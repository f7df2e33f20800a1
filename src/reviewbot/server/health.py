"""Liveness, readiness and metrics: ``GET /healthz`` (the process serves and the store
answers; it also shows the reviewer sandbox state), ``GET /readyz`` (every check of
:mod:`reviewbot.runtime.health`; 503 naming the failing ones) and ``GET /metrics``."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reviewbot.core.errors import ReviewbotError
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.auth import authenticate
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
    return web.json_response(
        {"status": "ok", "role": service.role_name, "deliveries": counts, "sandbox": sandbox}
    )


async def readyz(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    checks = await service.readiness(probes=request.app[STATE].probes)
    failing = [c.name for c in checks if not c.ok]
    if failing:
        raise ReviewbotError(
            "not ready: " + ", ".join(failing),
            code="not_ready",
            role=service.role_name,
            failing=failing,
            checks=[c.to_json() for c in checks],
        )
    return web.json_response(
        {"status": "ready", "role": service.role_name, "checks": [c.to_json() for c in checks]}
    )


async def metrics(request: web.Request) -> web.Response:
    """The scrape, for a token with ``metrics`` or ``read`` scope unless ``metrics_auth`` is
    ``open`` (see :mod:`reviewbot.server.metrics`)."""
    if request.app[SERVICE].settings.metrics_auth != "open":
        await authenticate(request, "metrics", "read")
    return await open_metrics(request)


async def open_metrics(request: web.Request) -> web.Response:
    """The scrape without a token: the ``metrics_port`` listener, reached by choice."""
    state = request.app[STATE]
    await state.metrics.refresh(request.app[SERVICE])
    return web.Response(
        body=generate_latest(state.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
