"""Counters of what the server accepted and refused (a fresh registry per application)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.refused = Counter(
            "reviewbot_deliveries_refused",
            "Deliveries refused before anything was stored",
            ["source", "reason"],
            registry=self.registry,
        )
        self.accepted = Counter(
            "reviewbot_deliveries_accepted",
            "Deliveries committed to the journal",
            ["source"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            "reviewbot_deliveries_duplicate",
            "Deliveries whose id was already in the journal",
            ["source"],
            registry=self.registry,
        )
