"""The application's state keys (a module of their own, so handlers and the app factory
import them without importing each other)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from reviewbot.runtime.health import ForgeProbes
from reviewbot.server.budget import BodyBudget
from reviewbot.server.metrics import Metrics
from reviewbot.service import Service


@dataclass
class ServerState:
    """What the HTTP face keeps beside the service: its counters, the webhook secrets, the
    byte budget of unverified bodies, and the answers reused rather than computed per call
    (the forge probes; the runtime reports are the service's)."""

    metrics: Metrics
    secrets: dict[str, bytes | None]
    owns_service: bool
    body_budget: BodyBudget
    probes: ForgeProbes
    refusal_records: RecordBudget = field(default_factory=lambda: RecordBudget())


@dataclass
class RecordBudget:
    """How many refused webhooks are written to the store: ``per_s`` a second, ``burst`` at
    once. A flood of refused requests costs a bounded number of writes; the rest are only
    counted (``reviewbot_deliveries_refused_total``)."""

    per_s: float = 10.0
    burst: float = 50.0
    tokens: float = 50.0
    at: float | None = None

    def take(self, now: float) -> bool:
        if self.at is not None:
            self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.per_s)
        self.at = now if self.at is None else max(self.at, now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SERVICE = web.AppKey("reviewbot.service", Service)
STATE = web.AppKey("reviewbot", ServerState)
