"""The application's state keys (a module of their own, so handlers and the app factory
import them without importing each other)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

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


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SERVICE = web.AppKey("reviewbot.service", Service)
STATE = web.AppKey("reviewbot", ServerState)
