"""The application factory: the routes over a :class:`~reviewbot.service.Service`.

``create_app(service)`` adds every route; the service starts with the application and
stops with it (unless the caller started it and keeps it).
"""

from __future__ import annotations

import logging

from aiohttp import web
from pydantic import SecretStr

from reviewbot.core.errors import Refused
from reviewbot.core.quota import RouteClass
from reviewbot.forges.kinds import FORGE_ADAPTERS
from reviewbot.runtime.health import ForgeProbes
from reviewbot.server import (
    capability,
    entry,
    health,
    history,
    leases,
    pr_watch,
    queue_actions,
    queue_control,
    reads,
    runtime,
    webhooks,
    whoami,
)
from reviewbot.server.app_keys import SERVICE, STATE, Handler, ServerState
from reviewbot.server.budget import BodyBudget
from reviewbot.server.errors import errors_middleware
from reviewbot.server.mcp_http import add_mcp_route
from reviewbot.server.metrics import Metrics
from reviewbot.server.quota import admit
from reviewbot.server.tools import SESSIONS, TOOLS_ROUTE, tool_handler
from reviewbot.server.ui import pages as ui_pages
from reviewbot.service import Routes, Service
from reviewbot.workflowdb.query import cancel_submitted

log = logging.getLogger(__name__)


def create_app(service: Service) -> web.Application:
    settings = service.settings
    state = ServerState(
        metrics=Metrics(service.telemetry),
        secrets={
            name: _secret(kind.section(settings).webhook_secret)
            for name, kind in FORGE_ADAPTERS.items()
        },
        owns_service=not service.started,
        body_budget=BodyBudget(settings.unverified_body_budget_bytes),
        probes=ForgeProbes(service.clock, ttl_s=service.settings.forge_probe_ttl_s),
    )
    state.metrics.watch_budget(state.body_budget)

    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[errors_middleware(state.metrics.refused_request)],
    )
    app[SERVICE] = service
    app[STATE] = state
    app[SESSIONS] = service.sessions  # the manager the tools route answers for
    # The routes of a role this process does not serve answer 404 wrong_role, one line.
    role = _RoleRouter(app, service.routes)
    role.add(Routes.INGRESS, "POST", "/webhooks/crew", entry.crew_webhook)
    # Every forge of the table of forge kinds; after /webhooks/crew, which wins over it.
    role.add(Routes.INGRESS, "POST", webhooks.ROUTE, webhooks.webhook)
    role.add(Routes.INGRESS, "POST", "/api/v1/reviews", entry.api_reviews)
    role.add(Routes.WORK, "POST", TOOLS_ROUTE, _tools)
    for method, path, handler in leases.routes():
        role.add(Routes.WORK, method, path, handler)
    role.add(Routes.WORK, "POST", pr_watch.ROUTE, pr_watch.api_watch)
    for method, path, handler in (*queue_actions.routes(), *queue_control.routes()):
        role.add(Routes.WORK, method, path, handler)
    app.router.add_get("/api/v1/deliveries/{delivery_id}", reads.api_delivery)
    app.router.add_get("/api/v1/decisions", reads.api_decisions)
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/metrics", health.metrics)
    history.add_routes(app)
    capability.add_routes(app)
    runtime.add_routes(app)
    whoami.add_routes(app)
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


def create_metrics_app(app: web.Application) -> web.Application:
    """``/metrics`` alone, without a token, over ``app``'s service (``metrics_port``)."""
    metrics_app = web.Application()
    metrics_app[SERVICE] = app[SERVICE]
    metrics_app[STATE] = app[STATE]
    metrics_app.router.add_get("/metrics", health.open_metrics)
    return metrics_app


class _RoleRouter:
    """Adds a group's routes with their handlers when this process serves the group, and
    with :func:`_wrong_role` when it does not."""

    def __init__(self, app: web.Application, served: Routes) -> None:
        self.app = app
        self.served = served

    def add(self, group: Routes, method: str, path: str, handler: Handler) -> None:
        self.app.router.add_route(method, path, handler if group in self.served else _wrong_role)


async def _wrong_role(request: web.Request) -> web.Response:
    role = request.app[SERVICE].role
    other = "work" if role is not None and role.value == "ingest" else "ingest"
    raise Refused(
        f"this reviewbot process serves the {role.value if role else 'all'} role; "
        f"send {request.method} {request.path} to a process with --role {other} or all",
        code="wrong_role",
    )


async def _tools(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    assert service.tools is not None
    handler = tool_handler(
        service.tools,
        api_tokens=service.api_tokens,
        admit=lambda caller: admit(service, caller, RouteClass.TOOLS),
    )
    return await handler(request)


def _secret(value: SecretStr | None) -> bytes | None:
    if value is None:
        return None
    text = value.get_secret_value()
    return text.encode("utf-8") if text else None


async def _startup(app: web.Application) -> None:
    state = app[STATE]
    if state.owns_service:
        await app[SERVICE].start()
    for forge, secret in state.secrets.items():
        # Only a configured forge lacks its secret; the rest get "no forge configured".
        if secret is None and forge in app[SERVICE].forges:
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
