"""Log lines: JSON or console, the library's lines folded in, secrets never shown."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.observe import Telemetry, logs

SECRET = "hook-secret-7c1d9e"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----\n"
)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == "reviewbot"]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only the handler ``configure`` installs is on the root logger, as in a server: the
    test runner's own capture handlers (there already, or added around each test) are
    left out, and put back afterwards."""
    root = logging.getLogger()
    others = list(root.handlers)
    for handler in others:
        root.removeHandler(handler)
    original = logging.Logger.addHandler

    def add(self: logging.Logger, handler: logging.Handler) -> None:
        if self is logging.getLogger() and handler.get_name() != "reviewbot":
            return
        original(self, handler)

    monkeypatch.setattr(logging.Logger, "addHandler", add)
    yield
    for handler in others:
        original(root, handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_event_is_one_json_line_with_the_stable_keys() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    Telemetry().delivery_received("d-1", "gitea", "pull_request", duration_s=0.0042)
    [line] = lines(out)
    assert list(line)[:3] == ["ts", "level", "msg"]
    assert line["msg"] == "delivery received" and line["level"] == "info"
    assert line["event"] == "pull_request"  # the forge's event, not structlog's message
    assert line["delivery_id"] == "d-1" and line["forge"] == "gitea"
    assert line["duration_ms"] == 4.2


def test_library_lines_land_in_the_same_stream_and_format() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    logging.getLogger("httpx").warning("retrying %s after %d s", "connect", 3)
    [line] = lines(out)
    assert line["msg"] == "retrying connect after 3 s"
    assert line["logger"] == "httpx" and line["level"] == "warning"


def test_the_level_drops_what_is_less_important() -> None:
    out = io.StringIO()
    logs.configure("json", "warning", stream=out)
    logging.getLogger("reviewbot.x").info("not shown")
    Telemetry().delivery_received("d-1", "github", "ping", duration_s=0.001)
    logging.getLogger("reviewbot.x").error("shown")
    assert [line["msg"] for line in lines(out)] == ["shown"]


def test_configured_secrets_tokens_and_keys_are_redacted_everywhere() -> None:
    out = io.StringIO()
    logs.configure("json", "debug", secrets=[SECRET, PEM], stream=out)
    log = logging.getLogger("reviewbot.test")
    log.info("signed with %s", SECRET)
    log.info("token rbt_AbCdEf0123456789_-xyz and session rbs_0123456789abcdef")
    log.info("key line %s", PEM.splitlines()[1])
    log.info("key %s", PEM)
    try:
        raise RuntimeError(f"the forge said no to {SECRET}")
    except RuntimeError:
        log.exception("failed")
    Telemetry().request_refused("api", "/api/v1/reviews", "unauthorized", f"bad {SECRET}")
    text = out.getvalue()
    assert SECRET not in text and "rbt_AbCdEf" not in text and "rbs_0123" not in text
    assert "PRIVATE KEY" not in text and "MIIEowIBAAKCAQEA" not in text
    assert text.count(logs.REDACTED) >= 6
    assert "RuntimeError" in text  # the exception is still there, only the secret is not


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "structlog"])
def test_a_secret_passed_as_a_stamped_key_is_written_over(
    request: pytest.FixtureRequest, direct: bool
) -> None:
    """The Redactor leaves ``ts``, ``level`` and ``logger`` unsearched: the processors before
    it set them, whatever a caller passed."""
    if direct:
        request.getfixturevalue("alone")
    out = io.StringIO()
    logs.configure("json", "info", secrets=[SECRET], stream=out)
    logs.get_logger("reviewbot.test").info("stamped", ts=SECRET, level=SECRET, logger=SECRET)
    (line,) = lines(out)
    assert SECRET not in out.getvalue()
    assert (line["level"], line["logger"]) == ("info", "reviewbot.test")


def test_redaction_reaches_nested_values_and_leaves_short_values_alone() -> None:
    redact = logs.Redactor(["s3cr3t-value", "ab"])
    event = {"msg": "x", "list": ["a s3cr3t-value b"], "nested": {"k": b"s3cr3t-value"}, "n": 3}
    assert redact(None, "info", event) == {
        "msg": "x",
        "list": [f"a {logs.REDACTED} b"],
        "nested": {"k": logs.REDACTED},
        "n": 3,
    }
    assert redact.text("about tabs") == "about tabs"  # a two-letter "secret" redacts nothing


def test_console_lines_for_a_terminal_and_json_for_a_collector() -> None:
    assert logs.resolve_format("auto", Tty()) == "console"
    assert logs.resolve_format("auto", io.StringIO()) == "json"
    out = Tty()
    logs.configure("auto", "info", stream=out)
    logging.getLogger("reviewbot.x").info("hello %s", "there")
    text = out.getvalue()
    assert "hello there" in text and not text.startswith("{")


def test_configuring_again_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    logs.configure("json", "info", stream=first)
    logs.configure("json", "info", stream=second)
    logging.getLogger("reviewbot.x").warning("once")
    assert first.getvalue() == "" and len(lines(second)) == 1


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log level must be one of"):
        logs.configure("json", "loud")


def test_lines_follow_stderr_when_it_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    logs.configure("json", "info")  # no stream: standard error, whatever it is then
    later = io.StringIO()
    monkeypatch.setattr("sys.stderr", later)
    logging.getLogger("reviewbot.x").warning("after the swap")
    assert lines(later)[0]["msg"] == "after the swap"


@pytest.mark.usefixtures("alone")
def test_the_delivery_line_keeps_every_field() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    telemetry = Telemetry()
    telemetry.delivery_received("d-1", "github", "pull_request", duration_s=0.0042)
    telemetry.delivery_received("d-1", "crew", None, duration_s=0.001, duplicate=True)
    received, duplicate = lines(out)
    assert received.pop("ts").endswith("Z")
    assert received == {
        "level": "info",
        "msg": "delivery received",
        "delivery_id": "d-1",
        "source": "github",
        "forge": "github",
        "duration_ms": 4.2,
        "logger": "reviewbot",
        "event": "pull_request",
    }
    assert set(duplicate) == {"ts", "level", "msg", "delivery_id", "source", "forge"} | {
        "duration_ms",
        "logger",
    }
    assert duplicate["msg"] == "delivery duplicate" and duplicate["forge"] is None


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.usefixtures("alone")
def test_a_direct_line_is_the_line_structlog_writes(fmt: logs.LogFormat) -> None:
    """The bot's event lines skip structlog's logger and the log record when only the
    configured handler would see them; the text is the same as the routed line's."""
    out = io.StringIO()
    logs.configure(fmt, "debug", secrets=[SECRET], stream=out)
    keys: dict[str, Any] = {
        "delivery_id": f"d-{SECRET}",
        "forge": "gitea",
        "_event": "pull_request",
        "reason_codes": ["a", "b"],
        "detail": None,
        "token": "rbt_AbCdEf0123456789",
        "nested": {"k": [1, SECRET]},
    }
    # The forge's event absent, and keys the chain sets itself (the line takes the chain).
    variants = [keys, {**keys, "_event": None}, {"level": "mine", "logger": "x", "n": 1}]
    for line_keys in variants:
        for method in ("debug", "info", "warning", "error"):
            getattr(logs.get_logger("reviewbot"), method)("an event", **line_keys)
            getattr(structlog.stdlib.get_logger("reviewbot"), method)("an event", **line_keys)
    written = out.getvalue().splitlines()
    assert len(written) == 24 and SECRET not in out.getvalue()
    for direct, routed in zip(written[::2], written[1::2], strict=True):
        assert STAMP.sub("TS", direct) == STAMP.sub("TS", routed)


STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")
_TEXT = st.text(st.sampled_from('ab_ -{}"\\\n\u00e9'), max_size=12) | st.sampled_from(
    [SECRET, f"x{SECRET}y", "rbt_AbCdEf0123456789", "rbs_short"]
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    msg=_TEXT,
    keys=st.dictionaries(
        st.sampled_from(["_event", "delivery_id", "forge", "repo", "pr", "duration_ms", "z"]),
        _VALUES,
        max_size=6,
    ),
)
def test_a_direct_json_line_is_the_line_structlog_writes_for_any_keys(
    msg: str, keys: dict[str, Any]
) -> None:
    """The JSON line built in one pass has the chain's keys, order and redacted values."""
    root = logging.getLogger()
    others = list(root.handlers)
    for handler in others:
        root.removeHandler(handler)
    out = io.StringIO()
    try:
        logs.configure("json", "info", secrets=[SECRET], stream=out)
        logs.get_logger("reviewbot").info(msg, **keys)
        structlog.stdlib.get_logger("reviewbot").info(msg, **keys)
    finally:
        for handler in [h for h in root.handlers if h.get_name() == "reviewbot"]:
            root.removeHandler(handler)
        for handler in others:
            root.addHandler(handler)
    direct, routed = out.getvalue().splitlines()
    assert STAMP.sub("TS", direct) == STAMP.sub("TS", routed)
    assert SECRET not in direct


def test_the_stamp_is_the_iso_utc_time_structlog_writes() -> None:
    assert logs.iso_at(1_796_584_981_792_290_123) == "2026-12-06T19:23:01.792290Z"
    assert logs.iso_at(1_796_584_981_000_000_999) == "2026-12-06T19:23:01Z"  # no fraction
    assert logs.iso_at(1_796_584_982_000_001_000) == "2026-12-06T19:23:02.000001Z"
    assert logs.iso_at(0) == "1970-01-01T00:00:00Z"


class CountingStream(io.StringIO):
    """Counts the calls that wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.mark.usefixtures("alone")
def test_lines_logged_soon_are_written_together_at_the_end_of_the_loops_turn() -> None:
    out = CountingStream()
    logs.configure("json", "info", stream=out)
    log = logs.get_logger("reviewbot")

    async def acknowledgements() -> tuple[str, list[str], int]:
        log.info_soon("delivery received", delivery_id="d-1", _event="push")
        log.info_soon("delivery received", delivery_id="d-2", _event="push")
        during = out.getvalue()
        await asyncio.sleep(0)  # the turn ends: both lines, one write
        after = [json.loads(x)["delivery_id"] for x in out.getvalue().splitlines()]
        return during, after, out.writes

    during, after, writes = asyncio.run(acknowledgements())
    assert during == "" and after == ["d-1", "d-2"] and writes == 1


@pytest.mark.usefixtures("alone")
def test_a_line_logged_at_once_comes_after_the_lines_waiting_for_the_turn() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    log = logs.get_logger("reviewbot")

    async def mixed() -> None:
        log.info_soon("delivery received", delivery_id="d-1")
        log.warning("something else", n=2)  # written now, after d-1
        log.info_soon("delivery received", delivery_id="d-3")

    asyncio.run(mixed())
    written = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["msg"] for x in written] == [
        "delivery received",
        "something else",
        "delivery received",
    ]
    assert [x.get("delivery_id") for x in written] == ["d-1", None, "d-3"]


@pytest.mark.usefixtures("alone")
def test_no_line_is_lost_while_another_thread_writes_the_waiting_ones() -> None:
    """A worker thread's line writes the loop's waiting lines too, while the loop adds more."""
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    log = logs.get_logger("reviewbot")

    def worker() -> None:
        for n in range(2000):
            log.info("from a worker", n=n)

    async def acknowledgements() -> None:
        thread = threading.Thread(target=worker)
        thread.start()
        for n in range(2000):
            log.info_soon("delivery received", n=n)
            if n % 50 == 0:
                await asyncio.sleep(0)
        await asyncio.to_thread(thread.join)

    asyncio.run(acknowledgements())
    written = [json.loads(x) for x in out.getvalue().splitlines()]
    ours = [x["n"] for x in written if x["msg"] == "delivery received"]
    theirs = [x["n"] for x in written if x["msg"] == "from a worker"]
    assert ours == list(range(2000)) and theirs == list(range(2000))


@pytest.mark.usefixtures("alone")
def test_a_loop_that_stopped_before_its_flush_does_not_hold_back_the_next_loops_lines() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    log = logs.get_logger("reviewbot")

    def last_of_its_loop() -> None:
        first.stop()  # this turn is the loop's last: the flush it schedules never runs
        log.info_soon("delivery received", delivery_id="d-1")

    first = asyncio.new_event_loop()
    first.call_soon(last_of_its_loop)
    first.run_forever()
    first.close()
    assert out.getvalue() == ""

    async def then() -> list[str]:
        log.info_soon("delivery received", delivery_id="d-2")
        await asyncio.sleep(0)
        return [json.loads(x)["delivery_id"] for x in out.getvalue().splitlines()]

    assert asyncio.run(then()) == ["d-1", "d-2"]


@pytest.mark.usefixtures("alone")
def test_off_the_loop_a_line_logged_soon_is_written_at_once() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    logs.get_logger("reviewbot").info_soon("delivery received", delivery_id="d-1")
    assert json.loads(out.getvalue())["delivery_id"] == "d-1"


def test_a_line_still_waiting_when_the_loop_stops_is_written_at_exit(tmp_path: Path) -> None:
    """A loop stopped before its next turn (the line's flush never ran) loses no line."""
    script = tmp_path / "exit_early.py"
    script.write_text(
        "import asyncio\n"
        "from reviewbot.observe import logs\n"
        "logs.configure('json', 'info')\n"
        "loop = asyncio.new_event_loop()\n"
        "def last():\n"
        "    loop.stop()\n"
        "    logs.get_logger('reviewbot').info_soon('delivery received', delivery_id='d-9')\n"
        "loop.call_soon(last)\n"
        "loop.run_forever()\n"
        "print(loop._ready and 'flush pending')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "flush pending"  # the loop stopped before the flush
    assert [json.loads(x)["delivery_id"] for x in done.stderr.splitlines()] == ["d-9"]


@pytest.mark.usefixtures("alone")
def test_another_handler_still_gets_every_event_line() -> None:
    out, other = io.StringIO(), io.StringIO()
    logs.configure("json", "info", stream=out)
    extra = logging.StreamHandler(other)
    logging.getLogger("reviewbot").addHandler(extra)
    try:
        Telemetry().delivery_received("d-1", "github", "push", duration_s=0.001)
    finally:
        logging.getLogger("reviewbot").removeHandler(extra)
    Telemetry().delivery_received("d-2", "github", "push", duration_s=0.001)
    assert [line["delivery_id"] for line in lines(out)] == ["d-1", "d-2"]
    assert "delivery received" in other.getvalue() and "d-2" not in other.getvalue()


@pytest.mark.usefixtures("alone")
def test_an_event_line_makes_no_log_record_when_only_the_configured_handler_listens() -> None:
    """The acknowledgement path's line costs no ``LogRecord`` nor its formatter's copy."""
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    factory = logging.getLogRecordFactory()
    made: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        made.append(record.name)
        return record

    logging.setLogRecordFactory(counting)
    try:
        Telemetry().delivery_received("d-1", "github", "push", duration_s=0.001)
    finally:
        logging.setLogRecordFactory(factory)
    assert made == [] and lines(out)[0]["delivery_id"] == "d-1"


@pytest.mark.usefixtures("alone")
def test_the_handlers_own_level_still_drops_event_lines() -> None:
    out = io.StringIO()
    logs.configure("json", "debug", stream=out)
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "reviewbot"]
    handler.setLevel(logging.WARNING)
    Telemetry().delivery_received("d-1", "github", "push", duration_s=0.001)
    logs.get_logger("reviewbot").warning("shown")
    assert [line["msg"] for line in lines(out)] == ["shown"]
