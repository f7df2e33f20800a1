"""When a merge queue may land: freeze windows, merge windows, pause and drain.

Freezes and merge windows stop landing, not testing: cars are still built and tested, and
the first green car of a train lands once the hold ends. A repository's rules name them
(``[repos."...".merge_queue]``):

- ``freeze = ["2026-12-24T00:00Z/2026-12-27T00:00Z"]``: intervals ``START/END`` of two ISO
  8601 moments, each with its UTC offset (``Z`` or ``+01:00``), START before END; the start
  is inside, the end is not. A moment in a freeze holds landing with ``queue_frozen``.
- ``merge_windows = ["Mon-Fri 08:00-18:00 UTC"]``: ``DAYS HH:MM-HH:MM UTC``, DAYS a day
  (``Mon``), a range (``Mon-Fri``, ``Fri-Mon`` wraps) or a comma list of those; the start is
  inside, the end (``24:00`` allowed) is not, and the end is after the start. With windows
  configured, a moment in none of them holds landing with ``queue_outside_window``.

Pause and drain are set by hand per (repository, base): a paused queue starts nothing and
lands nothing (``queue_paused``); a draining queue admits nothing new
(``queue_draining``) while what is queued runs to the end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from reviewbot.core.clock import iso
from reviewbot.core.merge import Refusal
from reviewbot.core.reasons import ReasonCode

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_RULE = 200  # characters of one window
MAX_RULES = 100  # windows of one kind per repository
_WINDOW = re.compile(
    r"(?P<days>[A-Za-z]{3}(?:-[A-Za-z]{3})?(?:,[A-Za-z]{3}(?:-[A-Za-z]{3})?)*)"
    r" +(?P<h1>\d\d):(?P<m1>\d\d)-(?P<h2>\d\d):(?P<m2>\d\d) +UTC"
)
_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d{1,6})?)?(?:Z|[+-]\d\d:\d\d)")


@dataclass(frozen=True)
class Freeze:
    """A freeze: UNIX seconds ``start`` (inside) to ``end`` (outside)."""

    start: float
    end: float

    def holds(self, now: float) -> bool:
        return self.start <= now < self.end


@dataclass(frozen=True)
class MergeWindow:
    """Weekdays (0 Monday) and minutes of the UTC day, ``start`` inside, ``end`` outside."""

    days: frozenset[int]
    start: int
    end: int

    def holds(self, now: float) -> bool:
        moment = datetime.fromtimestamp(now, UTC)
        minute = moment.hour * 60 + moment.minute
        return moment.weekday() in self.days and self.start <= minute < self.end


def _moment(text: str, rule: str) -> float:
    if not _MOMENT.fullmatch(text):
        raise ValueError(
            f"freeze {rule!r}: {text[:40]!r} is not YYYY-MM-DDTHH:MM with Z or an offset"
        )
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ValueError(f"freeze {rule!r}: {exc}") from None


def parse_freeze(rule: str) -> Freeze:
    """One ``START/END`` freeze, or :class:`ValueError`."""
    if len(rule) > MAX_RULE:
        raise ValueError(f"freeze: longer than {MAX_RULE} characters")
    start_text, sep, end_text = rule.strip().partition("/")
    if not sep:
        raise ValueError(f"freeze {rule!r}: expected START/END")
    start, end = _moment(start_text, rule), _moment(end_text, rule)
    if end <= start:
        raise ValueError(f"freeze {rule!r}: the end is not after the start")
    return Freeze(start, end)


def _day(name: str, rule: str) -> int:
    try:
        return DAYS.index(name.lower())
    except ValueError:
        raise ValueError(f"merge window {rule!r}: {name!r} is not a day (Mon..Sun)") from None


def parse_window(rule: str) -> MergeWindow:
    """One ``DAYS HH:MM-HH:MM UTC`` merge window, or :class:`ValueError`."""
    if len(rule) > MAX_RULE:
        raise ValueError(f"merge window: longer than {MAX_RULE} characters")
    found = _WINDOW.fullmatch(rule.strip())
    if found is None:
        raise ValueError(f"merge window {rule!r}: expected e.g. 'Mon-Fri 08:00-18:00 UTC'")
    days: set[int] = set()
    for part in found["days"].split(","):
        first, _, last = part.partition("-")
        a = _day(first, rule)
        b = _day(last, rule) if last else a
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    h1, m1, h2, m2 = (int(found[k]) for k in ("h1", "m1", "h2", "m2"))
    if h1 > 23 or m1 > 59 or m2 > 59 or h2 > 24 or (h2 == 24 and m2):
        raise ValueError(f"merge window {rule!r}: not a time of day")
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if end <= start:
        raise ValueError(f"merge window {rule!r}: the end is not after the start")
    return MergeWindow(frozenset(days), start, end)


@dataclass(frozen=True)
class Schedule:
    """A repository's freezes and merge windows (no windows: any time outside a freeze)."""

    freezes: tuple[Freeze, ...] = ()
    windows: tuple[MergeWindow, ...] = ()

    @classmethod
    def parse(cls, freezes: Sequence[str], windows: Sequence[str]) -> Schedule:
        if len(freezes) > MAX_RULES or len(windows) > MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} freezes and {MAX_RULES} merge windows")
        return cls(tuple(parse_freeze(f) for f in freezes), tuple(parse_window(w) for w in windows))


@dataclass(frozen=True)
class Control:
    """A queue's hand-set state: ``paused`` starts and lands nothing, ``draining`` admits
    nothing new."""

    paused: bool = False
    draining: bool = False


RUNNING = Control()


def landing_hold(schedule: Schedule, now: float, control: Control = RUNNING) -> Refusal | None:
    """Why nothing may land at ``now`` (UNIX seconds), or None when landing may go on."""
    if control.paused:
        return Refusal(ReasonCode.QUEUE_PAUSED, "the queue is paused")
    freeze = next((f for f in schedule.freezes if f.holds(now)), None)
    if freeze is not None:
        until = iso(freeze.end, timespec="minutes")
        return Refusal(ReasonCode.QUEUE_FROZEN, f"a freeze window holds until {until}")
    if schedule.windows and not any(w.holds(now) for w in schedule.windows):
        return Refusal(ReasonCode.QUEUE_OUTSIDE_WINDOW, "outside every merge window")
    return None


def admission_hold(control: Control) -> Refusal | None:
    """Why a queue admits nothing new now, or None."""
    if control.paused:
        return Refusal(ReasonCode.QUEUE_PAUSED, "the queue is paused")
    if control.draining:
        return Refusal(ReasonCode.QUEUE_DRAINING, "the queue is draining: no new admissions")
    return None
