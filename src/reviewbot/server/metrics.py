"""``GET /metrics``: the service's series (:class:`~reviewbot.observe.Telemetry`) plus what
only the HTTP face knows, in one scrape.

Each application has a registry of its own (the body budget is the application's) that
also collects the service's registry; the queue gauges are read from the store just before
a scrape renders, so they are never stale and never read SQLite on the event loop.

Access (``metrics_auth``): ``token`` (the default) answers only a bearer token with the
``metrics`` or ``read`` scope; ``open`` answers anyone. ``metrics_port`` serves the same
page on a listener of its own (``metrics_host``, loopback by default) without a token, for
a scraper on a private network. No series is labelled with a repository, PR or SHA.
"""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from reviewbot.core.errors import ReviewbotError
from reviewbot.ingress.forge_kinds import FORGE_KINDS, forge_delivery_id
from reviewbot.observe import Telemetry
from reviewbot.server.budget import BodyBudget
from reviewbot.service import Service
from reviewbot.store.stats import queue_stats

# Where deliveries other than a forge's arrive, and the source each journals them under.
DELIVERY_SOURCES = {
    "/webhooks/crew": "crew",
    "/api/v1/reviews": "api",
}


def delivery_source(path: str) -> str | None:
    """The source a delivery path journals under: ``/webhooks/{forge}`` for every forge of
    the table of forge kinds, and the paths above."""
    path = path.rstrip("/")
    source = DELIVERY_SOURCES.get(path)
    if source is None and path.startswith("/webhooks/"):
        forge = path.removeprefix("/webhooks/")
        source = forge if forge in FORGE_KINDS else None
    return source


class Metrics:
    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.registry = CollectorRegistry()
        self.registry.register(telemetry.registry)
        self.refused = telemetry.deliveries_refused
        r = self.registry
        self.queue_depth = Gauge(
            "reviewbot_queue_depth", "Deliveries waiting to be gated", registry=r
        )
        self.queue_oldest = Gauge(
            "reviewbot_queue_oldest_age_seconds",
            "How long the oldest delivery waiting to be gated has waited",
            registry=r,
        )
        self.dead = Gauge(
            "reviewbot_deliveries_dead", "Deliveries parked after their last attempt", registry=r
        )
        self.jobs_pending = Gauge(
            "reviewbot_review_jobs_pending",
            "Eligible heads whose review has not finished",
            registry=r,
        )
        self.outbox_pending = Gauge(
            "reviewbot_review_outbox_pending",
            "Reviews decided but not yet posted on the forge",
            registry=r,
        )

    def watch_budget(self, budget: BodyBudget) -> None:
        """Export the unverified-body budget: bytes reserved now and the most ever."""
        Gauge(
            "reviewbot_unverified_body_bytes",
            "Bytes reserved now for webhook bodies whose signature is not checked yet",
            registry=self.registry,
        ).set_function(lambda: budget.in_use)
        Gauge(
            "reviewbot_unverified_body_bytes_peak",
            "The most bytes ever reserved at once for unverified webhook bodies",
            registry=self.registry,
        ).set_function(lambda: budget.peak)

    def acknowledged(
        self, delivery_id: str, source: str, event: str | None, started: float, *, new: bool
    ) -> None:
        """A delivery was committed (``new``) or found already journalled."""
        self.telemetry.delivery_received(
            delivery_id,
            source,
            event,
            duration_s=time.perf_counter() - started,
            duplicate=not new,
        )

    def refused_request(self, request: web.Request, exc: ReviewbotError) -> None:
        """Every refused call is one log line; a refused delivery also counts (webhooks count
        their own reasons before raising, so only what they do not name is counted here)."""
        source = delivery_source(request.path)
        if source is not None and (exc.code == "body_too_large" or source in ("crew", "api")):
            reason = "too_large" if exc.code == "body_too_large" else exc.code
            self.refused.labels(source, reason).inc()
        # The forge's own delivery id, so the refusal can be matched to its delivery log.
        named = forge_delivery_id(request.headers)
        keys = {"delivery_id": named[:100]} if source is not None and named else {}
        self.telemetry.request_refused(source, request.path, exc.code, exc.detail, **keys)

    async def refresh(self, service: Service) -> None:
        """Read the queue gauges from the store (on its executor)."""
        db = service.db
        if db is None:
            return
        stats = await db.run(queue_stats, db)
        self.queue_depth.set(stats.queued)
        self.queue_oldest.set(stats.oldest_age_s(service.clock()))
        self.dead.set(stats.dead)
        self.jobs_pending.set(stats.review_jobs_pending)
        self.outbox_pending.set(stats.outbox_pending)
