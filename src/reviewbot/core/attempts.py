"""How often and how soon a failed piece of work is tried again (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts before work is parked as dead, and the backoff between them."""

    max_attempts: int = 5
    base_s: float = 1.0
    max_s: float = 300.0

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt (doubling, capped)."""
        return float(min(self.base_s * 2.0 ** max(attempts - 1, 0), self.max_s))

    def exhausted(self, attempts: int) -> bool:
        return attempts >= self.max_attempts
