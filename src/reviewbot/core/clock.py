"""One clock and one way to write a moment.

A clock is a function returning UNIX seconds (``time.time`` in production, a fake in tests);
the composition root passes it to everything that needs the time. Moments are shown and
stored as ISO 8601 UTC with milliseconds and a ``Z``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]


def iso(ts: float, *, timespec: str = "milliseconds") -> str:
    """A UNIX time as ISO 8601 UTC, e.g. ``2026-11-30T23:35:03.120Z``.

    ``timespec="microseconds"`` is for the tables that always stored six digits (journal,
    gate and review records): their text stays sortable against the rows already there.
    """
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_iso(text: str) -> float:
    """The UNIX time of an ISO 8601 moment (a naive one is taken as UTC)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
