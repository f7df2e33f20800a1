"""Observability: structured logs (:mod:`.logs`) and the service's metrics and events
(:mod:`.telemetry`). Below the runtime: it knows core types only by their fields."""

from reviewbot.observe.telemetry import ForgeWatch, Telemetry

__all__ = ["ForgeWatch", "Telemetry"]
