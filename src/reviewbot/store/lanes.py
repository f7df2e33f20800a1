"""Named lanes: work one process at a time may do, across every process on the store.

A lane is a row of ``lanes`` (migration 0017): a holder, a term and a token. A grant takes
a free or lapsed lane in one statement (``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the
lane lapsed), so two processes asking at once cannot both get it, on SQLite (one writer) or
PostgreSQL (the upsert locks the row and re-reads it) alike, and no transaction stays open
while the lane is held: a merge holds its lane across forge calls lasting seconds. The
holder renews before the term ends; a holder that dies blocks the lane for at most one term.

The token rises with every grant and never falls (a release keeps the row): a holder that
was paused past its term and taken over still carries the old token, and its renewal or
release changes nothing. :func:`renew` is also how a holder confirms it still holds the
lane right before an action that must not overlap (the merge call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reviewbot.store.database import Database

_MAX_TEXT = 1024  # a lane names a repository and a branch (git allows long branch names)


@dataclass(frozen=True)
class LaneHold:
    """A granted lane: who holds it, with which token, until when (seconds)."""

    name: str
    holder: str
    token: int
    expires_at: float


@dataclass(frozen=True)
class LaneBusy:
    """Who holds a lane another caller asked for."""

    name: str
    holder: str
    token: int
    expires_at: float


def _check(name: str, holder: str, term_s: float) -> None:
    for field, value in (("lane", name), ("holder", holder)):
        if not value or len(value) > _MAX_TEXT or any(ord(c) < 32 for c in value):
            raise ValueError(f"{field} must be 1-{_MAX_TEXT} printable characters")
    if not (math.isfinite(term_s) and term_s > 0):
        raise ValueError(f"term must be a positive number of seconds, not {term_s!r}")


def try_acquire(
    db: Database, name: str, holder: str, term_s: float, now: float
) -> LaneHold | LaneBusy:
    """Take the lane if nobody holds it (or its holder's term lapsed); else who holds it.

    A lane is not re-entrant: its own holder asking again is answered busy too."""
    _check(name, holder, term_s)
    until = now + term_s
    with db.write(serialized=False) as tx:
        row = tx.one(
            "INSERT INTO lanes (name, holder, token, acquired_at, expires_at)"
            " VALUES (?, ?, 1, ?, ?) ON CONFLICT (name) DO UPDATE SET"
            " holder = excluded.holder, token = lanes.token + 1,"
            " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at"
            " WHERE lanes.expires_at <= ? RETURNING token",
            (name, holder, now, until, now),
        )
        if row is not None:
            return LaneHold(name, holder, int(row["token"]), until)
        held = tx.one("SELECT holder, token, expires_at FROM lanes WHERE name = ?", (name,))
    assert held is not None  # the upsert found the row it could not take
    return LaneBusy(name, str(held["holder"]), int(held["token"]), float(held["expires_at"]))


def renew(db: Database, hold: LaneHold, term_s: float, now: float) -> LaneHold | None:
    """Extend a lane still held (same holder and token, term not lapsed) by ``term_s``
    from ``now``; ``None`` when it was lost: lapsed, or granted to another since."""
    _check(hold.name, hold.holder, term_s)
    until = now + term_s
    with db.write(serialized=False) as tx:
        cur = tx.execute(
            "UPDATE lanes SET expires_at = ? WHERE name = ? AND holder = ? AND token = ?"
            " AND expires_at > ?",
            (until, hold.name, hold.holder, hold.token, now),
        )
        if cur.rowcount != 1:
            return None
    return LaneHold(hold.name, hold.holder, hold.token, until)


def release(db: Database, hold: LaneHold) -> bool:
    """Free the lane now, if this hold still has it (a stale token changes nothing)."""
    with db.write(serialized=False) as tx:
        cur = tx.execute(
            "UPDATE lanes SET expires_at = 0 WHERE name = ? AND holder = ? AND token = ?",
            (hold.name, hold.holder, hold.token),
        )
        return bool(cur.rowcount == 1)


def holder_of(db: Database, name: str, now: float) -> LaneBusy | None:
    """Who holds the lane now, if anyone."""
    with db.read() as tx:
        row = tx.one(
            "SELECT holder, token, expires_at FROM lanes WHERE name = ? AND expires_at > ?",
            (name, now),
        )
    if row is None:
        return None
    return LaneBusy(name, str(row["holder"]), int(row["token"]), float(row["expires_at"]))
