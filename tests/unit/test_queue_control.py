"""When a merge queue may land: freezes, merge windows, pause and drain (no wall clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from reviewbot.config import RepoRules
from reviewbot.core.queue_control import (
    RUNNING,
    Control,
    Schedule,
    admission_hold,
    landing_hold,
    parse_freeze,
    parse_window,
)
from reviewbot.core.reasons import ReasonCode


def at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


FREEZE = "2026-12-24T00:00Z/2026-12-27T00:00Z"
WORKDAYS = "Mon-Fri 08:00-18:00 UTC"


def code(schedule: Schedule, now: float, control: Control | None = None) -> ReasonCode | None:
    held = landing_hold(schedule, now, control or RUNNING)
    return None if held is None else held.code


def test_a_freeze_holds_from_its_start_up_to_its_end() -> None:
    s = Schedule.parse([FREEZE], [])
    assert code(s, at("2026-12-23T23:59Z")) is None
    assert code(s, at("2026-12-24T00:00Z")) is ReasonCode.QUEUE_FROZEN
    assert code(s, at("2026-12-26T23:59Z")) is ReasonCode.QUEUE_FROZEN
    assert code(s, at("2026-12-27T00:00Z")) is None
    held = landing_hold(s, at("2026-12-25T12:00Z"))
    assert held is not None and "2026-12-27T00:00Z" in held.detail


def test_offsets_are_honoured() -> None:
    (f,) = Schedule.parse(["2026-12-24T01:00+01:00/2026-12-24T02:00+01:00"], []).freezes
    assert (f.start, f.end) == (at("2026-12-24T00:00Z"), at("2026-12-24T01:00Z"))


def test_merge_windows_hold_outside_them() -> None:
    s = Schedule.parse([], [WORKDAYS])
    thursday = "2026-01-01"
    assert code(s, at(f"{thursday}T07:59Z")) is ReasonCode.QUEUE_OUTSIDE_WINDOW
    assert code(s, at(f"{thursday}T08:00Z")) is None
    assert code(s, at(f"{thursday}T17:59Z")) is None
    assert code(s, at(f"{thursday}T18:00Z")) is ReasonCode.QUEUE_OUTSIDE_WINDOW
    assert code(s, at("2026-01-03T12:00Z")) is ReasonCode.QUEUE_OUTSIDE_WINDOW  # Saturday


def test_days_wrap_and_lists_and_midnight() -> None:
    w = parse_window("Fri-Mon,Wed 00:00-24:00 UTC")
    assert w.days == frozenset({4, 5, 6, 0, 2})
    assert (w.start, w.end) == (0, 1440)
    assert parse_window("sun 10:00-11:00   UTC").days == frozenset({6})


def test_a_freeze_beats_a_window_and_a_pause_beats_both() -> None:
    s = Schedule.parse([FREEZE], ["Mon-Sun 00:00-24:00 UTC"])
    assert code(s, at("2026-12-25T12:00Z")) is ReasonCode.QUEUE_FROZEN
    assert code(s, at("2026-12-28T12:00Z")) is None
    assert code(s, at("2026-12-28T12:00Z"), Control(paused=True)) is ReasonCode.QUEUE_PAUSED
    assert code(s, at("2026-12-28T12:00Z"), Control(draining=True)) is None  # drain lands


def test_admission_is_closed_while_paused_or_draining() -> None:
    assert admission_hold(Control()) is None
    paused = admission_hold(Control(paused=True, draining=True))
    assert paused is not None and paused.code is ReasonCode.QUEUE_PAUSED
    draining = admission_hold(Control(draining=True))
    assert draining is not None and draining.code is ReasonCode.QUEUE_DRAINING


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "2026-12-24",
        "2026-12-24T00:00Z",
        "2026-12-24T00:00/2026-12-27T00:00",  # no offset: ambiguous
        "2026-12-27T00:00Z/2026-12-24T00:00Z",  # backwards
        "2026-12-24T00:00Z/2026-12-24T00:00Z",  # empty
        "2026-02-30T00:00Z/2026-03-01T00:00Z",  # no such day
        "2026-12-24T00:00Z/2026-12-27T00:00Z/2026-12-28T00:00Z",
        "x" * 10_000,
    ],
)
def test_malformed_freezes_are_refused(rule: str) -> None:
    with pytest.raises(ValueError):
        parse_freeze(rule)


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "Mon-Fri 08:00-18:00",  # no zone
        "Mon-Fri 08:00-18:00 CET",
        "Mon-Fri 8:00-18:00 UTC",
        "Mon-Fry 08:00-18:00 UTC",
        "Mon-Fri 18:00-08:00 UTC",  # backwards: two windows are needed
        "Mon-Fri 08:00-08:00 UTC",
        "Mon-Fri 24:00-24:00 UTC",
        "Mon-Fri 08:60-18:00 UTC",
        "Mon-Fri 08:00-24:01 UTC",
        "Monday 08:00-18:00 UTC",
        "Mon-Fri 08:00-18:00 UTC; rm -rf /",
        "Mon," * 5000 + "Tue 08:00-18:00 UTC",
    ],
)
def test_malformed_windows_are_refused(rule: str) -> None:
    with pytest.raises(ValueError):
        parse_window(rule)


def test_the_rules_refuse_a_malformed_window_at_load() -> None:
    with pytest.raises(ValidationError, match="merge window"):
        RepoRules.model_validate({"merge_queue": {"merge_windows": ["weekdays 9-5"]}})
    with pytest.raises(ValidationError, match="freeze"):
        RepoRules.model_validate({"merge_queue": {"freeze": ["christmas"]}})
    with pytest.raises(ValidationError, match="at most"):
        RepoRules.model_validate({"merge_queue": {"freeze": [FREEZE] * 101}})
    rules = RepoRules.model_validate({"merge_queue": {"freeze": [FREEZE], "merge_windows": []}})
    assert len(rules.merge_queue.schedule().freezes) == 1


moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(moments, st.integers(0, 1439), st.integers(1, 1440), st.sets(st.integers(0, 6), min_size=1))
def test_a_window_holds_exactly_on_its_days_and_minutes(
    moment: datetime, start: int, length: int, days: set[int]
) -> None:
    end = min(start + length, 1440)
    names = ",".join(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[d] for d in sorted(days))
    rule = f"{names} {start // 60:02}:{start % 60:02}-{end // 60:02}:{end % 60:02} UTC"
    window = parse_window(rule)
    minute = moment.hour * 60 + moment.minute
    inside = moment.weekday() in days and start <= minute < end
    assert window.holds(moment.timestamp()) is inside
    s = Schedule((), (window,))
    assert (code(s, moment.timestamp()) is None) is inside


@given(moments, st.integers(1, 10**7), st.integers(-(10**7), 2 * 10**7))
def test_a_freeze_holds_exactly_inside_it(start: datetime, length: int, offset: int) -> None:
    end = start + timedelta(seconds=length)
    rule = f"{start:%Y-%m-%dT%H:%M:%S}Z/{end:%Y-%m-%dT%H:%M:%S}Z"
    freeze = parse_freeze(rule)
    now = start.timestamp() + offset
    assert freeze.holds(now) is (0 <= offset < length)
