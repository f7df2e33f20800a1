"""Progress lines for long operations: ``LABEL [i/n] what``, throttled.

A long operation (the demo's steps, a reconcile sweep over many repositories, the replay
of many deliveries) creates one :class:`Progress` with the number of items and calls
:meth:`Progress.advance` after each. Lines go to ``write`` (stderr by default, so a
command's ``--json`` output on stdout stays clean; a logger's ``info`` in the server).
With ``min_interval_s`` a line is written only once that long has passed since the start
or the previous line, plus the last one, so a fast operation prints one line and a slow
one shows it is moving. ``only_if_slow`` drops even that last line when nothing was
written before it (a background job that is quiet unless it takes long).
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
        only_if_slow: bool = False,
    ) -> None:
        self.label = label
        self.total = max(0, total)
        self.write = write
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.only_if_slow = only_if_slow
        self.done = 0
        self.lines = 0
        self._last = clock()

    def line(self, what: str) -> str:
        width = len(str(self.total))
        text = f"{self.label} [{self.done:>{width}}/{self.total}]"
        return f"{text} {what}" if what else text

    def advance(self, what: str = "") -> None:
        """One more item is finished; ``what`` says which (and how it went)."""
        self.done += 1
        now = self.clock()
        due = now - self._last >= self.min_interval_s
        last = self.done >= self.total and not (self.only_if_slow and self.lines == 0)
        if due or last:
            self.write(self.line(what))
            self.lines += 1
            self._last = now
