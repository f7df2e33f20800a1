"""Liveness and metrics: ``GET /healthz`` (the store answers) and ``GET /metrics``."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reviewbot.core.errors import ReviewbotError
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.store import journal as journal_store


async def healthz(request: web.Request) -> web.Response:
    db = request.app[SERVICE].db
    try:
        assert db is not None
        counts = await db.run(journal_store.count_by_status, db)
    except Exception as exc:
        raise ReviewbotError(str(exc), code="store_unavailable") from None
    return web.json_response({"status": "ok", "deliveries": counts})


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
