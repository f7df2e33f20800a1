"""The application's state keys (a module of their own, so handlers and the app factory
import them without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from reviewbot.runtime.health import ForgeProbes
from reviewbot.server.budget import BodyBudget
from reviewbot.server.metrics import Metrics
from reviewbot.service import Service


@dataclass
class ServerState:
    """What the HTTP face keeps beside the service: its counters, the webhook secrets and
    the byte budget of unverified bodies, and the forge probes readiness shares."""

    metrics: Metrics
    secrets: dict[str, bytes | None]
    owns_service: bool
    body_budget: BodyBudget
    probes: ForgeProbes


SERVICE = web.AppKey("reviewbot.service", Service)
STATE = web.AppKey("reviewbot", ServerState)
