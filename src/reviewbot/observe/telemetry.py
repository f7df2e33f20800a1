"""What the service reports about its work: one log line and one metric per event.

A :class:`Telemetry` is owned by one service (``build_service`` makes it) and handed to the
parts that do the work as a constructor argument; its registry is the service's, never
prometheus-client's global one, so tests and several services in one process do not clash.
Each method is one event a person cares about; it writes the log line (stable keys, see
:mod:`reviewbot.observe.logs`) and moves the matching series.

Label values are bounded: forge names, sources, reason codes, verdicts, operations, status
codes. No PR numbers, SHAs, workers or repository names are labels (they are in the log).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from reviewbot.core.models import FORGES
from reviewbot.observe.logs import get_logger

log = get_logger("reviewbot")

# Seconds: an acknowledgement takes milliseconds; a review waits for CI (minutes).
_ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_REVIEW_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600)
_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_RUN_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


# Refusals of who the caller is or what it may do.
_AUTH_CODES = frozenset(
    {"unauthorized", "missing_scope", "repo_not_allowed", "signature_invalid", "not_worker_owner"}
)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


class Telemetry:
    """The service's metrics registry and its event log."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.deliveries_accepted = Counter(
            "reviewbot_deliveries_accepted",
            "Deliveries committed to the journal, by source",
            ["source"],
            registry=r,
        )
        self.deliveries_duplicate = Counter(
            "reviewbot_deliveries_duplicate",
            "Deliveries whose id was already in the journal, by source",
            ["source"],
            registry=r,
        )
        self.deliveries_refused = Counter(
            "reviewbot_deliveries_refused",
            "Deliveries refused before anything was stored, by source and reason",
            ["source", "reason"],
            registry=r,
        )
        self.decisions = Counter(
            "reviewbot_decisions",
            "Decisions recorded, by stage (gate or review), decision and reason code",
            ["stage", "decision", "reason"],
            registry=r,
        )
        self.reviews = Counter(
            "reviewbot_reviews_posted",
            "Native reviews posted (or adopted) on a forge, by verdict",
            ["forge", "verdict"],
            registry=r,
        )
        self.merges = Counter(
            "reviewbot_merges",
            "Merge attempts by outcome (merged, already_merged, refused, error) and reason",
            ["forge", "outcome", "reason"],
            registry=r,
        )
        self.lease_grants = Counter(
            "reviewbot_lease_grants",
            "Leases granted, by role and kind (granted, takeover, renewed)",
            ["role", "kind"],
            registry=r,
        )
        self.lease_refusals = Counter(
            "reviewbot_lease_refusals",
            "Lease calls refused, by role and reason code",
            ["role", "reason"],
            registry=r,
        )
        self.lease_takeovers = Counter(
            "reviewbot_lease_takeovers",
            "Leases taken over from a holder whose claim had lapsed",
            ["role"],
            registry=r,
        )
        self.lease_releases = Counter(
            "reviewbot_lease_releases", "Leases released by their holder", ["role"], registry=r
        )
        self.lease_expiries = Counter(
            "reviewbot_lease_expiries",
            "Lapsed claims found when a lease was granted again",
            ["role"],
            registry=r,
        )
        self.ack_latency = Histogram(
            "reviewbot_ack_latency_seconds",
            "From a delivery's request to its acknowledgement (journal commit)",
            ["source"],
            buckets=_ACK_BUCKETS,
            registry=r,
        )
        self.review_latency = Histogram(
            "reviewbot_delivery_to_review_seconds",
            "From a delivery's arrival to the native review it led to",
            ["forge"],
            buckets=_REVIEW_BUCKETS,
            registry=r,
        )
        self.forge_calls = Counter(
            "reviewbot_forge_calls",
            "HTTP exchanges with a forge by operation and status (304: served from the ETag "
            "cache; timeout / unreachable: no answer)",
            ["forge", "operation", "status"],
            registry=r,
        )
        self.forge_call_seconds = Histogram(
            "reviewbot_forge_call_duration_seconds",
            "Duration of one HTTP exchange with a forge",
            ["forge"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.rate_limit_remaining = Gauge(
            "reviewbot_forge_rate_limit_remaining",
            "Requests left in the forge's rate-limit window, as its last answer said",
            ["forge"],
            registry=r,
        )
        self.rate_limit_waits = Counter(
            "reviewbot_forge_rate_limit_waits",
            "Times a rate-limited request waited before being sent again",
            ["forge"],
            registry=r,
        )
        self.reviewer_runs = Counter(
            "reviewbot_reviewer_runs",
            "External reviewer commands run, by outcome (ok or the error kind)",
            ["outcome"],
            registry=r,
        )
        self.reviewer_seconds = Histogram(
            "reviewbot_reviewer_run_duration_seconds",
            "Duration of one run of a repository's external reviewers",
            ["outcome"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        # Per (source, duplicate): the ack latency and the accepted/duplicate counter.
        self._ack_series: dict[tuple[str, bool], tuple[Any, Any]] = {}
        self.errors = Counter(
            "reviewbot_errors",
            "Unexpected errors caught and logged, by component",
            ["component"],
            registry=r,
        )

    # -- deliveries --------------------------------------------------------------------------

    def delivery_received(
        self,
        delivery_id: str,
        source: str,
        event: str | None,
        *,
        duration_s: float,
        duplicate: bool = False,
    ) -> None:
        """Acknowledged: committed to the journal (or already there: ``duplicate``)."""
        series = self._ack_series.get((source, duplicate))
        if series is None:  # the children of a source's series, looked up once
            counted = self.deliveries_duplicate if duplicate else self.deliveries_accepted
            series = self._ack_series[source, duplicate] = (
                self.ack_latency.labels(source),
                counted.labels(source),
            )
        series[0].observe(duration_s)
        series[1].inc()
        log.info_soon(  # the acknowledgement's line: written with the others of its commit
            "delivery duplicate" if duplicate else "delivery received",
            delivery_id=delivery_id,
            source=source,
            forge=source if source in FORGES else None,
            _event=event,
            duration_ms=_ms(duration_s),
        )

    @staticmethod
    def request_refused(source: str | None, path: str, code: str, detail: str, **keys: Any) -> None:
        """A delivery (``source`` set) or another call was refused: why, never the body.
        Refused deliveries and credentials are warnings; an ordinary answer (a lease held,
        a bad request) is information."""
        serious = source is not None or code in _AUTH_CODES
        (log.warning if serious else log.info)(
            "delivery refused" if source else "request refused",
            source=source,
            path=path,
            reason_codes=[code],
            detail=detail,
            **keys,
        )

    def gated(self, row: Any) -> None:
        """One gate decision (a :class:`~reviewbot.core.models.DecisionRecord`)."""
        codes = [str(r.code) for r in row.reasons]
        for code in codes or ["none"]:
            self.decisions.labels("gate", row.decision, code).inc()
        log.info(
            "gated",
            delivery_id=row.delivery_id,
            forge=row.forge,
            repo=row.repo,
            pr=row.number,
            head=row.head_sha,
            _event=row.event,
            decision=row.decision,
            reason_codes=codes,
            detail="; ".join(r.detail for r in row.reasons if r.detail) or None,
        )

    # -- reviews -----------------------------------------------------------------------------

    def decided(self, decision: Any) -> None:
        """A review-stage decision (a ``NewDecision``): a verdict, a note, an error."""
        self.decisions.labels("review", decision.decision, decision.reason_code).inc()
        log.info(
            "review decided",
            delivery_id=decision.delivery_id,
            forge=decision.forge,
            repo=decision.repo,
            pr=decision.number,
            head=decision.head_sha,
            decision=decision.decision,
            reason_codes=[decision.reason_code],
            worker=decision.worker,
            epoch=decision.epoch,
            detail=decision.detail,
        )

    def review_posted(self, row: Any, review_id: int | None, *, adopted: bool) -> None:
        """A native review exists on the forge (an outbox row, posted or adopted)."""
        self.reviews.labels(row.forge, row.verdict).inc()
        log.info(
            "reviewed",
            forge=row.forge,
            repo=row.repo,
            pr=row.number,
            head=row.head_sha,
            decision=row.verdict,
            review_id=review_id,
            adopted=adopted,
            worker=row.worker,
            epoch=row.epoch,
        )

    def review_latency_observed(self, forge: str, delivery_id: str, seconds: float) -> None:
        self.review_latency.labels(forge).observe(seconds)
        log.debug(
            "delivery reviewed", delivery_id=delivery_id, forge=forge, duration_ms=_ms(seconds)
        )

    def reviewer_run(
        self,
        *,
        forge: str,
        repo: str,
        pr: int,
        head: str,
        delivery_id: str,
        results: Iterable[tuple[str, str | None]],
        duration_s: float,
    ) -> None:
        """The run finished; ``results`` is each reviewer's (command, error kind or None)."""
        outcomes = [(command, kind or "ok") for command, kind in results]
        overall = next((kind for _, kind in outcomes if kind != "ok"), "ok")
        for _, kind in outcomes:
            self.reviewer_runs.labels(kind).inc()
        self.reviewer_seconds.labels(overall).observe(duration_s)
        (log.info if overall == "ok" else log.warning)(
            "reviewer run finished",
            delivery_id=delivery_id,
            forge=forge,
            repo=repo,
            pr=pr,
            head=head,
            decision=overall,
            reviewers=[f"{command}: {kind}" for command, kind in outcomes],
            duration_ms=_ms(duration_s),
        )

    @staticmethod
    def reviewer_run_started(
        *, forge: str, repo: str, pr: int, head: str, delivery_id: str, commands: int
    ) -> None:
        log.info(
            "reviewer run started",
            delivery_id=delivery_id,
            forge=forge,
            repo=repo,
            pr=pr,
            head=head,
            reviewers=commands,
        )

    # -- merges ------------------------------------------------------------------------------

    def merge_finished(
        self,
        *,
        forge: str,
        repo: str,
        pr: int,
        head: str,
        worker: str,
        epoch: int,
        outcome: str,
        codes: Iterable[str],
        detail: str,
        duration_s: float,
    ) -> None:
        codes = list(codes)
        self.merges.labels(forge, outcome, codes[0] if codes else "").inc()
        (log.info if outcome in ("merged", "already_merged") else log.warning)(
            "merged" if outcome in ("merged", "already_merged") else "merge refused",
            forge=forge,
            repo=repo,
            pr=pr,
            head=head,
            worker=worker,
            epoch=epoch,
            decision=outcome,
            reason_codes=codes,
            detail=detail,
            duration_ms=_ms(duration_s),
        )

    # -- leases ------------------------------------------------------------------------------

    def lease_granted(self, lease: Any, kind: str, *, previous: str | None = None) -> None:
        role = str(lease.target.role)
        self.lease_grants.labels(role, kind).inc()
        keys = _lease_keys(lease.target, lease.holder, lease.head_sha)
        if kind == "takeover":
            self.lease_takeovers.labels(role).inc()
            log.warning("lease taken over", epoch=lease.epoch, previous_holder=previous, **keys)
        elif kind != "renewed":  # renewals are heartbeats: counted, not logged
            log.info("lease granted", epoch=lease.epoch, **keys)

    def lease_expired(self, lease: Any) -> None:
        self.lease_expiries.labels(str(lease.target.role)).inc()
        log.info(
            "lease expired",
            epoch=lease.epoch,
            expired_at=lease.expires_at,
            **_lease_keys(lease.target, lease.holder, lease.head_sha),
        )

    def lease_released(self, lease: Any) -> None:
        self.lease_releases.labels(str(lease.target.role)).inc()
        log.info(
            "lease released",
            epoch=lease.epoch,
            **_lease_keys(lease.target, lease.holder, lease.head_sha),
        )

    def lease_refused(self, target: Any, worker: str, code: str, detail: str) -> None:
        self.lease_refusals.labels(str(target.role), code).inc()
        log.info(
            "lease refused",
            reason_codes=[code],
            detail=detail,
            **_lease_keys(target, worker, None),
        )

    # -- forges ------------------------------------------------------------------------------

    def forge_watch(self, forge: str) -> ForgeWatch:
        return ForgeWatch(self, forge)

    # -- errors ------------------------------------------------------------------------------

    def error(self, component: str, msg: str, **keys: Any) -> None:
        """An unexpected error; call from an ``except`` block (the traceback is logged)."""
        self.errors.labels(component).inc()
        log.exception(msg, component=component, **keys)


def _lease_keys(target: Any, worker: str, head: str | None) -> dict[str, Any]:
    return {
        "forge": target.forge,
        "repo": target.repo,
        "pr": target.number,
        "role": str(target.role),
        "worker": worker,
        "head": head,
    }


class ForgeWatch:
    """What one forge's HTTP client reports (``forges.http.ForgeHttp(watch=...)``)."""

    def __init__(self, telemetry: Telemetry, forge: str) -> None:
        self.telemetry = telemetry
        self.forge = forge

    def answered(
        self, operation: str, status: int, headers: Mapping[str, str], duration_s: float
    ) -> None:
        t = self.telemetry
        t.forge_calls.labels(self.forge, operation, str(status)).inc()
        t.forge_call_seconds.labels(self.forge).observe(duration_s)
        remaining = headers.get("x-ratelimit-remaining", "")
        if remaining.strip().isdigit():
            t.rate_limit_remaining.labels(self.forge).set(int(remaining))
        if status >= 400 and status != 404:  # a 404 is an answer callers expect (no such PR)
            log.warning(
                "forge call failed",
                forge=self.forge,
                operation=operation,
                status=status,
                duration_ms=_ms(duration_s),
            )

    def unanswered(self, operation: str, why: str, detail: str, duration_s: float) -> None:
        self.telemetry.forge_calls.labels(self.forge, operation, why).inc()
        log.warning(
            "forge call failed",
            forge=self.forge,
            operation=operation,
            status=why,
            detail=detail,
            duration_ms=_ms(duration_s),
        )

    def rate_limit_wait(self, operation: str, status: int, wait_s: float, *, waits: bool) -> None:
        if waits:
            self.telemetry.rate_limit_waits.labels(self.forge).inc()
        log.warning(
            "forge rate limit" + (": waiting" if waits else ": giving up"),
            forge=self.forge,
            operation=operation,
            status=status,
            wait_s=round(wait_s, 1),
        )
