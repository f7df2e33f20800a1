"""Retention: the rows callers add are deleted once they are older than the settings keep.

Run after every reconcile sweep (at start, then every ``reconcile_interval_s``), and bounded:
at most :data:`PER_RUN` rows per table a run, in transactions of :data:`CHUNK`, so a run
never holds the store's write lock for long and a large backlog is worked off over a few
sweeps. What each table keeps, and why the others need no pruning, is in
``docs/operations.md`` ("What callers can grow and its bound"). The lease history is pruned
at every grant instead (:mod:`reviewbot.store.lease_history`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from reviewbot.config import RetentionSettings
from reviewbot.core.clock import Clock
from reviewbot.store import journal, sessions
from reviewbot.store.database import Database
from reviewbot.store.workers import prune_workers

log = logging.getLogger(__name__)

DAY_S = 86400.0
CHUNK = 500  # rows one transaction deletes
PER_RUN = 20_000  # rows one run deletes from one table, at most

Prune = Callable[[Database, float], int]  # (store, cutoff) -> rows deleted, one chunk


@dataclass
class RetentionReport:
    deleted: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


class Retention:
    def __init__(
        self,
        db: Database,
        settings: RetentionSettings,
        clock: Clock,
        *,
        chunk: int = CHUNK,
        per_run: int = PER_RUN,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.chunk = chunk
        self.per_run = per_run

    def _tables(self) -> list[tuple[str, float, Prune]]:
        """(what, days kept, prune one chunk) of every table a run prunes."""
        s, chunk = self.settings, self.chunk
        return [
            (
                "deliveries",
                s.journal_days,
                lambda db, before: journal.prune_ended(db, before, limit=chunk),
            ),
            (
                "tool calls",
                s.tool_calls_days,
                lambda db, before: sessions.prune_tool_calls(db, before, limit=chunk),
            ),
            ("workers", s.workers_days, lambda db, before: prune_workers(db, before, limit=chunk)),
        ]

    async def run(self) -> RetentionReport:
        """One bounded pass over every table; what it deleted, by table."""
        report = RetentionReport()
        now = self.clock()
        for what, days, prune in self._tables():
            if not days:
                continue  # 0: kept for good
            before = now - days * DAY_S
            deleted = 0
            while deleted < self.per_run:
                n = await self.db.run(prune, self.db, before)
                deleted += n
                if n < self.chunk:
                    break
            if deleted:
                report.deleted[what] = deleted
        if report.total:
            log.info(
                "retention: deleted %s",
                ", ".join(f"{n} {what}" for what, n in report.deleted.items()),
            )
        return report
