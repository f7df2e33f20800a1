"""Counts of waiting work, read in one short transaction: what ``/metrics`` exports as gauges
and what a status view shows (queue depth, the oldest waiting delivery, pending reviews)."""

from __future__ import annotations

from dataclasses import dataclass

from reviewbot.store.database import Database


@dataclass(frozen=True)
class QueueStats:
    queued: int  # deliveries waiting to be gated (queued or being gated)
    oldest_received_at: float | None  # when the oldest of them arrived (epoch seconds)
    dead: int  # deliveries parked after their last attempt
    review_jobs_pending: int  # eligible heads whose review has not finished
    outbox_pending: int  # reviews decided but not yet on the forge

    def oldest_age_s(self, now: float) -> float:
        """Seconds the oldest waiting delivery has waited (0 with none waiting)."""
        if self.oldest_received_at is None:
            return 0.0
        return max(0.0, now - self.oldest_received_at)


def queue_stats(db: Database) -> QueueStats:
    with db.read() as tx:
        deliveries = tx.one(
            "SELECT SUM(status IN ('queued', 'processing')) AS queued,"
            " MIN(CASE WHEN status IN ('queued', 'processing') THEN received_at END) AS oldest,"
            " SUM(status = 'dead') AS dead FROM deliveries"
        )
        jobs = tx.one("SELECT COUNT(*) AS n FROM review_jobs WHERE status = 'queued'")
        outbox = tx.one("SELECT COUNT(*) AS n FROM review_outbox WHERE status = 'pending'")
    assert deliveries is not None and jobs is not None and outbox is not None
    return QueueStats(
        queued=int(deliveries["queued"] or 0),
        oldest_received_at=None if deliveries["oldest"] is None else float(deliveries["oldest"]),
        dead=int(deliveries["dead"] or 0),
        review_jobs_pending=int(jobs["n"]),
        outbox_pending=int(outbox["n"]),
    )
