"""The application factory: the routes over a :class:`~reviewbot.service.Service`.

``create_app(service)`` adds every route; the service starts with the application and
stops with it (unless the caller started it and keeps it).
"""

from __future__ import annotations

import logging

from aiohttp import web
from pydantic import SecretStr

from reviewbot.core.errors import ReviewbotError
from reviewbot.runtime.health import ForgeProbes
from reviewbot.runtime.reuse import Reused
from reviewbot.server import capability, entry, health, history, leases, reads, runtime, webhooks
from reviewbot.server.app_keys import SERVICE, STATE, ServerState
from reviewbot.server.budget import BodyBudget
from reviewbot.server.errors import errors_middleware
from reviewbot.server.mcp_http import add_mcp_route
from reviewbot.server.metrics import Metrics
from reviewbot.server.tools import SESSIONS, TOOLS_ROUTE, tool_handler
from reviewbot.server.ui import pages as ui_pages
from reviewbot.service import Service
from reviewbot.workflowdb.query import cancel_submitted

log = logging.getLogger(__name__)

# The delivery paths whose refused bodies count in reviewbot_deliveries_refused.
_DELIVERY_PATHS = ("/webhooks/", "/api/v1/reviews")


def create_app(service: Service) -> web.Application:
    settings = service.settings
    state = ServerState(
        metrics=Metrics(),
        secrets={
            "github": _secret(settings.github.webhook_secret),
            "gitea": _secret(settings.gitea.webhook_secret),
        },
        owns_service=not service.started,
        body_budget=BodyBudget(settings.unverified_body_budget_bytes),
        probes=ForgeProbes(service.clock),
        reports=Reused(service.clock),
    )
    state.metrics.watch_budget(state.body_budget)

    def count_refusal(request: web.Request, exc: ReviewbotError) -> None:
        if exc.code == "body_too_large" and request.path.startswith(_DELIVERY_PATHS):
            source = request.path.rstrip("/").rsplit("/", 1)[-1]
            state.metrics.refused.labels(source, "too_large").inc()

    app = web.Application(
        client_max_size=settings.max_body_bytes, middlewares=[errors_middleware(count_refusal)]
    )
    app[SERVICE] = service
    app[STATE] = state
    app[SESSIONS] = service.sessions  # the manager the tools route answers for
    app.router.add_post("/webhooks/github", webhooks.github_webhook)
    app.router.add_post("/webhooks/gitea", webhooks.gitea_webhook)
    app.router.add_post("/webhooks/crew", entry.crew_webhook)
    app.router.add_post("/api/v1/reviews", entry.api_reviews)
    app.router.add_get("/api/v1/deliveries/{delivery_id}", reads.api_delivery)
    app.router.add_get("/api/v1/decisions", reads.api_decisions)
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/metrics", health.metrics)
    app.router.add_post(TOOLS_ROUTE, _tools)
    leases.add_routes(app)
    history.add_routes(app)
    capability.add_routes(app)
    runtime.add_routes(app)
    ui_pages.add_routes(app)  # the status page: GET /, /pr/..., /login
    add_mcp_route(app, service)
    app.on_startup.append(_startup)
    app.on_shutdown.append(_stop_queries)
    app.on_cleanup.append(_cleanup)
    return app


async def _stop_queries(app: web.Application) -> None:
    # Before aiohttp waits for requests in flight: runaway tool statements end now, so the
    # shutdown is bounded by the grace period, not by their time limit.
    cancel_submitted()


async def _tools(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    assert service.tools is not None
    return await tool_handler(service.tools, api_tokens=service.api_tokens)(request)


def _secret(value: SecretStr | None) -> bytes | None:
    if value is None:
        return None
    text = value.get_secret_value()
    return text.encode("utf-8") if text else None


async def _startup(app: web.Application) -> None:
    state = app[STATE]
    if state.owns_service:
        await app[SERVICE].start()
    for forge in webhooks.FORGE_SOURCES:
        # Only a configured forge lacks its secret; the rest get "no forge configured".
        if state.secrets[forge] is None and forge in app[SERVICE].forges:
            log.warning(
                "no webhook secret for %s: /webhooks/%s refuses every delivery "
                "(set REVIEWBOT_%s__WEBHOOK_SECRET)",
                forge,
                forge,
                forge.upper(),
            )


async def _cleanup(app: web.Application) -> None:
    if app[STATE].owns_service:
        await app[SERVICE].aclose()
