"""Progress lines for long operations: ``LABEL [i/n] what``, throttled.

A long operation (the demo's steps, a reconcile sweep over many repositories, the replay
of many deliveries) creates one :class:`Progress` with the number of items and calls
:meth:`Progress.advance` after each. Lines go to ``write`` (stderr by default, so a
command's ``--json`` output on stdout stays clean; a logger's ``info`` in the server).
With ``min_interval_s`` only one line per interval is written, plus always the last one,
so a fast operation prints little and a slow one shows it is moving.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Write = Callable[[str], None]


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    def __init__(
        self,
        label: str,
        total: int,
        *,
        write: Write = to_stderr,
        min_interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = max(0, total)
        self.write = write
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.done = 0
        self.lines = 0
        self._last: float | None = None

    def line(self, what: str) -> str:
        width = len(str(self.total))
        text = f"{self.label} [{self.done:>{width}}/{self.total}]"
        return f"{text} {what}" if what else text

    def advance(self, what: str = "") -> None:
        """One more item is finished; ``what`` says which (and how it went)."""
        self.done += 1
        now = self.clock()
        last = self.done >= self.total
        due = self._last is None or now - self._last >= self.min_interval_s
        if last or due:
            self.write(self.line(what))
            self.lines += 1
            self._last = now
