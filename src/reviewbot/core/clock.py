"""One clock and one way to write a moment.

A clock is a function returning UNIX seconds (``time.time`` in production, a fake in tests);
the composition root passes it to everything that needs the time. Moments are stored as
that float (every timestamp column is REAL) and shown, only at the edges (API JSON, command
output, explain), as ISO 8601 UTC with a ``Z``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]


def iso(ts: float, *, timespec: str = "milliseconds") -> str:
    """A UNIX time as ISO 8601 UTC, e.g. ``2026-11-30T23:35:03.120Z``.

    ``timespec="microseconds"`` is for the records that were always shown with six digits
    (journal, gate and review records), so their answers keep that shape.
    """
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def iso_or_none(ts: float | None, *, timespec: str = "milliseconds") -> str | None:
    """:func:`iso` of a moment that may be missing (a column that may be NULL)."""
    return None if ts is None else iso(ts, timespec=timespec)


def parse_iso(text: str) -> float:
    """The UNIX time of an ISO 8601 moment (a naive one is taken as UTC)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
