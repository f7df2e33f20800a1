"""Log lines: JSON or console, the library's lines folded in, secrets never shown."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

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
    structlog.contextvars.bind_contextvars(request_id="r-1")
    try:
        for method in ("debug", "info", "warning", "error"):
            getattr(logs.get_logger("reviewbot"), method)("an event", **keys)
            getattr(structlog.stdlib.get_logger("reviewbot"), method)("an event", **keys)
    finally:
        structlog.contextvars.clear_contextvars()
    written = out.getvalue().splitlines()
    assert len(written) == 8 and SECRET not in out.getvalue()
    stamp = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")
    for direct, routed in zip(written[::2], written[1::2], strict=True):
        assert stamp.sub("TS", direct) == stamp.sub("TS", routed)
        assert "request_id" in direct


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
