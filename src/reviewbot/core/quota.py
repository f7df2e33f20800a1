"""Rate limits: how many calls of one kind a caller may make, and how fast.

Every caller (an API token, a reviewer's session) has one token bucket per route class: a
bucket holds up to ``burst`` tokens and gains ``per_s`` a second, and each admitted call
takes one. A call that finds its bucket empty is refused with the seconds until a token is
back. The classes are the write paths, grouped by what a call costs:

- ``review``: a review request (``POST /api/v1/reviews``, ``/webhooks/crew``, MCP
  ``review_pr``), each a journaled delivery and at least one forge read;
- ``lease``: worker registrations and heartbeats, lease acquires, heartbeats and releases;
- ``merge``: a merge attempt, several forge reads and a write;
- ``tools``: a workflow-DB tool call, a statement on the two query threads;
- ``forge_reads``: a read answered from the forge (a PR's state, a capability), each one
  or more forge requests spent from the bot's own quota.

Pure: the caller passes the time (from the clock it was given) and holds whatever lock its
callers need; the server calls it from its one event loop. Buckets live in one process, so
with several replicas a caller's limit is per replica.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

MAX_BUCKETS = 10_000  # beyond this, full buckets are forgotten (a full bucket is no bucket)


class RouteClass(StrEnum):
    REVIEW = "review"
    LEASE = "lease"
    MERGE = "merge"
    TOOLS = "tools"
    FORGE_READS = "forge_reads"


@dataclass(frozen=True)
class Rate:
    """``per_s`` tokens a second, at most ``burst`` saved up."""

    per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.per_s > 0 and self.burst >= 1):
            raise ValueError(f"a rate needs per_s > 0 and burst >= 1, not {self}")


@dataclass
class _Bucket:
    tokens: float
    at: float  # when ``tokens`` was counted


class TokenBuckets:
    """The buckets of every (caller, route class); a class without a rate is not limited."""

    def __init__(
        self, rates: Mapping[RouteClass, Rate | None], *, max_buckets: int = MAX_BUCKETS
    ) -> None:
        self.rates = dict(rates)
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[tuple[str, RouteClass], _Bucket] = OrderedDict()

    def rate(self, route: RouteClass) -> Rate | None:
        return self.rates.get(route)

    def take(self, caller: str, route: RouteClass, now: float) -> float | None:
        """Admit one call of ``caller`` on ``route`` at ``now``: ``None`` when admitted (a
        token is taken), else the seconds until one would be (nothing is taken)."""
        rate = self.rates.get(route)
        if rate is None:
            return None
        key = (caller, route)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(rate.burst), now)
            self._forget_full(now)
        else:
            self._buckets.move_to_end(key)
            # A clock that went back refills nothing (and takes nothing back).
            elapsed = max(0.0, now - bucket.at)
            bucket.tokens = min(float(rate.burst), bucket.tokens + elapsed * rate.per_s)
            bucket.at = max(bucket.at, now)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate.per_s

    def _forget_full(self, now: float) -> None:
        """Keep the number of buckets bounded: drop those that have refilled (the same as
        no bucket), then, only if that was not enough, the least recently used."""
        if len(self._buckets) <= self.max_buckets:
            return
        for key, bucket in list(self._buckets.items()):
            rate = self.rates.get(key[1])
            if rate is None or bucket.tokens + max(0.0, now - bucket.at) * rate.per_s >= rate.burst:
                del self._buckets[key]
        while len(self._buckets) > self.max_buckets:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_s(wait_s: float) -> int:
    """Whole seconds to wait (``Retry-After`` takes an integer), never 0."""
    return max(1, math.ceil(wait_s))
