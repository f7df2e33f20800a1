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

import asyncio
import atexit
import collections
import datetime
import json
import logging
import re
import sys
import time
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
        if isinstance(value, dict):  # a key can hold a secret as well as a value
            return {self._key(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return self.text(str(value))

    def _key(self, key: Any) -> Any:
        return self.text(key) if isinstance(key, str) else key

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


# What every line carries, from structlog and from the standard library alike. (No
# ``merge_contextvars``: the bot binds no context variables, and looking for them cost a
# walk over every context variable of the request on every line.)
_SHARED: list[Any] = [
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

    def info_soon(self, msg: str, **keys: Any) -> None:
        """:meth:`info` for a line of a hot path on the event loop (a webhook's
        acknowledgement): stamped now, rendered and written at the end of this turn of the
        loop with the other lines of the turn, in one write. A line logged meanwhile any
        other way is written after them, so the order holds. Off the loop, or when the line
        would not take the direct way, it is :meth:`info`. The values must not change
        until the turn ends (the caller passes fresh ones)."""
        self._log(logging.INFO, "info", msg, keys, soon=True)

    def warning(self, msg: str, **keys: Any) -> None:
        self._log(logging.WARNING, "warning", msg, keys)

    def error(self, msg: str, **keys: Any) -> None:
        self._log(logging.ERROR, "error", msg, keys)

    def exception(self, msg: str, **keys: Any) -> None:
        """An error with the traceback being handled: always the structlog path."""
        self._structlog.exception(msg, **keys)

    def _log(
        self, level: int, method: str, msg: str, keys: dict[str, Any], *, soon: bool = False
    ) -> None:
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
        route.emit(std, method, msg, keys, soon=soon)


class _Direct:
    """The handler :func:`configure` installed and what its formatter runs after the
    structlog chain: what a direct line needs to come out exactly as a routed one.

    ``redactor`` set (JSON lines): a line whose keys are the caller's own builds the
    rendered dict in one pass, in the order and with the values the chain gives it (see
    :meth:`_json_line`); the chain's dozen calls per line were a fifth of the CPU of a
    webhook's acknowledgement. Such a line may also wait for the end of the event loop's
    turn (``soon``, :meth:`EventLogger.info_soon`): the lines a group commit's
    acknowledgements log together are rendered together and written in one call, which
    measured a third of the cost of rendering and writing each one in its handler."""

    def __init__(
        self,
        handler: logging.StreamHandler,  # type: ignore[type-arg]
        processors: list[Any],
        redactor: Redactor | None = None,
    ) -> None:
        self.handler = handler
        self.processors = processors
        self.redactor = redactor
        # Lines waiting for the end of the loop's turn: (ns stamp, logger, method, msg, keys).
        # A deque: a writer on another thread drains it while the loop appends, and a line
        # appended meanwhile is either written now or stays for the next write, never lost.
        self._soon: collections.deque[tuple[int, str, str, str, dict[str, Any]]] = (
            collections.deque()
        )
        # The loop whose turn a flush waits for the end of (a loop stopped before its next
        # turn never runs it: a line of another loop schedules its own).
        self._scheduled: asyncio.AbstractEventLoop | None = None

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

    def emit(
        self,
        logger: logging.Logger,
        method: str,
        msg: str,
        keys: dict[str, Any],
        *,
        soon: bool = False,
    ) -> None:
        redactor = self.redactor
        if redactor is not None and _OWN_KEYS.isdisjoint(keys):
            if soon and self._later():
                self._soon.append((time.time_ns(), logger.name, method, msg, keys))
                return
            event: Any = self._json_line(time.time_ns(), logger.name, method, msg, keys, redactor)
        else:
            event = {"event": msg, **keys}
            for step in _SHARED:
                event = step(logger, method, event)
            for step in self.processors:
                event = step(logger, method, event)
        self._write(event + self.handler.terminator, logger.name, msg)

    def flush(self) -> None:
        """Write the lines waiting for the end of the loop's turn (any thread, any time)."""
        if self._soon:
            self._write("", "reviewbot", "lines of the loop's turn")

    def _later(self) -> bool:
        """Whether this thread runs an event loop; a flush is scheduled for the end of its
        turn unless one is already."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._scheduled is not loop:
            self._scheduled = loop
            loop.call_soon(self._end_of_turn)
        return True

    def _end_of_turn(self) -> None:
        self._scheduled = None
        self.flush()

    def _write(self, text: str, name: str, msg: str) -> None:
        """Write the waiting lines, then ``text``, in one call under the handler's lock."""
        handler = self.handler
        handler.acquire()
        try:
            if self._soon:
                assert self.redactor is not None  # only fused lines wait
                text = self._drain(self.redactor, handler.terminator) + text
            handler.stream.write(text)
            handler.flush()
        except Exception:  # as StreamHandler.emit: reported, never raised at the caller
            record = logging.makeLogRecord({"name": name, "msg": msg})
            handler.handleError(record)
        finally:
            handler.release()

    def _drain(self, redactor: Redactor, end: str) -> str:
        """The waiting lines, rendered, in the order they were logged; the deque is left
        empty but for lines appended meanwhile."""
        rendered = []
        waiting = self._soon
        while waiting:
            rendered.append(self._json_line(*waiting.popleft(), redactor) + end)
        return "".join(rendered)

    @staticmethod
    def _json_line(
        at_ns: int, name: str, method: str, msg: str, keys: dict[str, Any], redactor: Redactor
    ) -> str:
        """The JSON line the chain renders at ``at_ns`` (``time.time_ns``) for ``keys`` none
        of which the chain sets itself: ``ts``, ``level``, ``msg``, the caller's keys in
        their order, ``logger``, then the forge's ``event`` (``_event``) when there is one;
        every value the caller gave is redacted, as the :class:`Redactor` does."""
        value = redactor.value
        line: dict[str, Any] = {"ts": iso_at(at_ns), "level": method, "msg": redactor.text(msg)}
        for key, given in keys.items():
            if key != "_event":
                line[key] = value(given)
        line["logger"] = name
        event = keys.get("_event")
        if event is not None:
            line["event"] = value(event)
        return _JSON.encode(line)


# Keys the chain sets or renames itself: a line with one of them takes the chain.
_OWN_KEYS = frozenset({"event", "msg", "ts", "level", "logger"})


def iso_at(at_ns: int) -> str:
    """``at_ns`` (``time.time_ns``) in UTC as structlog's ISO stamper writes it
    (``2026-12-06T19:28:18.238661Z``, no fraction on a whole second); the date and time of
    day are formatted once a second."""
    second, fraction = divmod(at_ns // 1000, 1_000_000)
    prefix = _SECOND[1] if _SECOND[0] == second else _format_second(second)
    return f"{prefix}.{fraction:06d}Z" if fraction else f"{prefix}Z"


def _format_second(second: int) -> str:
    text = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    _SECOND[:] = [second, text]
    return text


_SECOND: list[Any] = [None, ""]  # the last second formatted, and its text


# The direct route of the handler configure() installed (None: every line via structlog).
_DIRECT: list[_Direct | None] = [None]


@atexit.register
def flush() -> None:
    """Write any line still waiting for the end of a loop's turn (at exit, or before the
    handler is replaced)."""
    route = _DIRECT[0]
    if route is not None:
        route.flush()


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
    redactor = Redactor(secrets)
    rendering = [
        structlog.processors.EventRenamer("msg", "_event"),
        redactor,
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
    flush()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    _DIRECT[0] = _Direct(handler, rendering, redactor if chosen == "json" else None)
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
