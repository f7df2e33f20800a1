"""Counters of what the server accepted and refused (a fresh registry per application)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from reviewbot.server.budget import BodyBudget


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
