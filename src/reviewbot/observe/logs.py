"""Log lines: one per event a person cares about, as JSON or for a console, never a secret.

:func:`configure` is called once per process by the commands that run the service (``serve``,
``mcp``, ``review``, ``merge``...). It routes structlog and the standard library's
``logging`` into one handler on standard error, so a library's warning lands in the same
stream, in the same format, as the bot's own events.

Stable keys (see ``docs/operations.md``): ``delivery_id``, ``forge``, ``repo``, ``pr``,
``head``, ``event`` (the forge's event name), ``decision``, ``reason_codes``, ``worker``,
``epoch``, ``duration_ms``; the line's own text is ``msg``. structlog calls its message
``event``, so code passes the forge's event as ``_event`` and the renderer renames both.

Every line passes :class:`Redactor` last: the configured secrets (webhook secrets, forge
tokens, the App key) and anything shaped like a bot token (``rbt_``/``rbs_``) or a PEM key
become ``[redacted]``, whatever key or exception text they hide in.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, Literal

import structlog

LogFormat = Literal["auto", "json", "console"]
LEVELS = ("debug", "info", "warning", "error", "critical")

REDACTED = "[redacted]"
# Bot API tokens (rbt_), reviewer session tokens (rbs_) and PEM private keys.
_SHAPED = re.compile(
    r"\brb[ts]_[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_MIN_SECRET = 4  # shorter configured "secrets" would redact ordinary words
_SHORTEST_SHAPED = len("rbt_") + 8  # the shortest text _SHAPED matches


class Redactor:
    """A structlog processor replacing secret values in every string of an event."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values: set[str] = set()
        for secret in secrets:
            if len(secret) >= _MIN_SECRET:
                values.add(secret)
                # A PEM key also leaks line by line (a traceback quoting the file).
                values.update(
                    line.strip()
                    for line in secret.splitlines()
                    if len(line.strip()) >= 16 and not line.startswith("-----")
                )
        # One pass per string: the configured values (longest first) or a shaped secret.
        known = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
        self._pattern = re.compile(
            f"{known}|{_SHAPED.pattern}" if known else _SHAPED.pattern, re.DOTALL
        )
        # A string shorter than anything the pattern matches is left as it is, unsearched:
        # most values of a line (a level, a source, a short id) are.
        self._shortest = min((len(v) for v in values), default=_SHORTEST_SHAPED)
        self._shortest = min(self._shortest, _SHORTEST_SHAPED)

    def text(self, value: str) -> str:
        if len(value) < self._shortest:
            return value
        return self._pattern.sub(REDACTED, value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, bytes):
            return self.text(value.decode("utf-8", "replace"))
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return self.text(str(value))

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event_dict.items():
            if key not in _STAMPED:
                event_dict[key] = self.value(value)
        return event_dict


# What the processors before the Redactor put there themselves, over any caller's value: no
# secret can be in them, so they are not searched (a quarter of a line's cost).
_STAMPED = frozenset({"ts", "level", "logger"})


# What every line carries, from structlog and from the standard library alike.
_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
]


def _leading_keys(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """When, how bad and what first: a person reading JSON lines scans these."""
    first = {k: event_dict.pop(k) for k in ("ts", "level", "msg") if k in event_dict}
    first.update(event_dict)
    return first


def _route_structlog_into_logging() -> None:
    # structlog's own default prints to stdout; the bot's events go where logging goes (and
    # obey its level), whether or not configure() has run in this process (tests, library use).
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_SHARED,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


_route_structlog_into_logging()


def get_logger(name: str) -> EventLogger:
    """A logger of the bot's events whose lines go through the standard library's handlers."""
    return EventLogger(name)


class EventLogger:
    """structlog's ``info(msg, **keys)`` and its siblings, with a direct path for a line.

    When this process's lines go to the handler :func:`configure` installed and nowhere
    else (no other handler or filter on the way, the usual case of a server), a line is
    built by the same processors, in the same order, and written to that handler's stream
    under its lock: the same text, without a ``LogRecord``, structlog's bound-logger
    machinery and the formatter's copy of the record (most of the cost of a line, paid on
    every acknowledgement). Otherwise (a test's capture handler, a library's own handler,
    a traceback to format) the line takes the ordinary structlog path.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._std = logging.getLogger(name)
        self._structlog = structlog.stdlib.get_logger(name)

    def debug(self, msg: str, **keys: Any) -> None:
        self._log(logging.DEBUG, "debug", msg, keys)

    def info(self, msg: str, **keys: Any) -> None:
        self._log(logging.INFO, "info", msg, keys)

    def warning(self, msg: str, **keys: Any) -> None:
        self._log(logging.WARNING, "warning", msg, keys)

    def error(self, msg: str, **keys: Any) -> None:
        self._log(logging.ERROR, "error", msg, keys)

    def exception(self, msg: str, **keys: Any) -> None:
        """An error with the traceback being handled: always the structlog path."""
        self._structlog.exception(msg, **keys)

    def _log(self, level: int, method: str, msg: str, keys: dict[str, Any]) -> None:
        std = self._std
        if not std.isEnabledFor(level):
            return
        route = _DIRECT[0]
        if (
            route is None
            or "exc_info" in keys
            or "stack_info" in keys
            or not route.serves(std, level)
        ):
            getattr(self._structlog, method)(msg, **keys)
            return
        route.emit(std, method, msg, keys)


class _Direct:
    """The handler :func:`configure` installed and what its formatter runs after the
    structlog chain: what a direct line needs to come out exactly as a routed one."""

    def __init__(self, handler: logging.StreamHandler, processors: list[Any]) -> None:  # type: ignore[type-arg]
        self.handler = handler
        self.processors = processors

    def serves(self, logger: logging.Logger, level: int) -> bool:
        """Whether a record of ``logger`` at ``level`` would reach this handler (and pass
        its level) and no other handler."""
        if logger.disabled or self.handler.filters or level < self.handler.level:
            return False
        current: logging.Logger | None = logger
        while current is not None:
            if current.filters:
                return False
            if current.parent is None:  # the root logger
                handlers = current.handlers
                return len(handlers) == 1 and handlers[0] is self.handler
            if current.handlers or not current.propagate:
                return False
            current = current.parent
        return False

    def emit(self, logger: logging.Logger, method: str, msg: str, keys: dict[str, Any]) -> None:
        event: Any = {"event": msg, **keys}
        for step in _SHARED:
            event = step(logger, method, event)
        for step in self.processors:
            event = step(logger, method, event)
        handler = self.handler
        handler.acquire()
        try:
            handler.stream.write(event + handler.terminator)
            handler.flush()
        except Exception:  # as StreamHandler.emit: reported, never raised at the caller
            record = logging.makeLogRecord({"name": logger.name, "msg": msg})
            handler.handleError(record)
        finally:
            handler.release()


# The direct route of the handler configure() installed (None: every line via structlog).
_DIRECT: list[_Direct | None] = [None]


# One encoder for every line: ``json.dumps`` with a ``default`` builds a new one per call.
# Past the Redactor every value is text, a number, a flag, None or a container of them.
_JSON = json.JSONEncoder(default=repr)


def _json_text(event: Any, **_options: Any) -> str:
    return _JSON.encode(event)


def resolve_format(fmt: LogFormat, stream: Any = None) -> Literal["json", "console"]:
    """``auto``: console lines for a person at a terminal, JSON for a collector."""
    if fmt != "auto":
        return fmt
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure(
    fmt: LogFormat = "auto",
    level: str = "info",
    *,
    secrets: Iterable[str] = (),
    stream: Any = None,
) -> None:
    """Send every log line of this process to ``stream`` (standard error) in ``fmt``.

    Called again (a test, a second command in one process), it replaces the handler it
    installed before; other handlers on the root logger are left alone.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    chosen = resolve_format(fmt, stream)
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_text)
        if chosen == "json"
        else structlog.dev.ConsoleRenderer(colors=False, event_key="msg")
    )
    # What a line goes through once its record's bookkeeping is gone and any traceback is
    # text (a direct line has neither).
    rendering = [
        structlog.processors.EventRenamer("msg", "_event"),
        Redactor(secrets),
        _leading_keys,
        renderer,
    ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            *rendering,
        ],
    )
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    _DIRECT[0] = _Direct(handler, rendering)
    root.setLevel(level.upper())
    # No line shows where in the code it was logged from, nor the thread or process: the
    # standard library need not look them up for every record (its documented switches).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # Each request is already one line of ours (or none), and every forge call is counted
    # (a failed one is logged): the access log and httpx's per-request lines would be noise.
    for chatty in ("aiohttp.access", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


_HANDLER_NAME = "reviewbot"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is written (a test harness or a
    daemon may replace it after logging was configured)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass
