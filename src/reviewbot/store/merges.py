"""Merges and merge attempts in the workflow database, each write fenced by the merger lease.

Every write goes through :meth:`LeaseStore.under`, which checks (holder, epoch) in the same
``BEGIN IMMEDIATE`` transaction and aborts it when the claim is not the live one, so a holder
that was superseded while it waited for the forge records nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.core.leases import LeaseClaim
from reviewbot.core.models import repo_key
from reviewbot.store.database import Database, OnDatabase, Row, Tx, row_as
from reviewbot.store.leases import LeaseStore

SENDING = "sending"
MERGED = "merged"
REFUSED = "refused"
HEAD_MOVED = "head_moved"
NOT_MERGEABLE = "not_mergeable"
UNKNOWN = "unknown"
# The forge answered the merge call, but a re-read did not confirm it (merged flag and merge
# commit): the lease stays held and the reconcile sweep reads the PR again.
UNVERIFIED = "unverified"
UNVERIFIED_CODE = "merge_unverified"  # the refusal code the caller sees
CONFIRMED_LATER = "merged (confirmed by a later read)"


@dataclass(frozen=True)
class MergeRecord:
    forge: str
    repo: str
    number: int
    head_sha: str
    merge_commit_sha: str | None
    method: str
    holder: str
    epoch: int
    merged_at: float

    @classmethod
    def from_row(cls, row: Row) -> MergeRecord:
        return row_as(cls, row)

    def to_json(self) -> dict[str, Any]:
        return {
            "forge": self.forge,
            "repo": self.repo,
            "number": self.number,
            "head_sha": self.head_sha,
            "merge_commit_sha": self.merge_commit_sha,
            "method": self.method,
            "holder": self.holder,
            "epoch": self.epoch,
            "merged_at": iso(self.merged_at),
        }


@dataclass(frozen=True)
class MergeAttempt:
    id: int
    forge: str
    repo: str
    number: int
    head_sha: str
    holder: str
    epoch: int
    method: str
    status: str
    codes: tuple[str, ...]
    detail: str
    started_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Row) -> MergeAttempt:
        return row_as(cls, row, codes=lambda r: tuple(c for c in str(r["codes"]).split(",") if c))


class MergeStore(OnDatabase):
    def __init__(self, db: Database, leases: LeaseStore, clock: Callable[[], float]) -> None:
        self.db = db
        self.leases = leases
        self.clock = clock

    # -- fenced writes -----------------------------------------------------------------------

    def begin(self, claim: LeaseClaim, head_sha: str, method: str) -> int:
        """Record that a merge call is about to be sent; raises ``LeaseRefused`` if not held."""
        t = claim.target
        with self.leases.under(claim) as tx:
            row = tx.one(
                "INSERT INTO merge_attempts (forge, repo, number, head_sha, holder, epoch,"
                " method, status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    t.forge,
                    t.repo,
                    t.number,
                    head_sha,
                    claim.worker,
                    claim.epoch,
                    method,
                    SENDING,
                    self.clock(),
                ),
            )
            assert row is not None
            return int(row["id"])

    def refused(
        self, claim: LeaseClaim, head_sha: str, method: str, codes: tuple[str, ...], detail: str
    ) -> int:
        """Record a refusal found before anything was sent (fenced like every write)."""
        t = claim.target
        now = self.clock()
        with self.leases.under(claim) as tx:
            row = tx.one(
                "INSERT INTO merge_attempts (forge, repo, number, head_sha, holder, epoch,"
                " method, status, codes, detail, started_at, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    t.forge,
                    t.repo,
                    t.number,
                    head_sha,
                    claim.worker,
                    claim.epoch,
                    method,
                    REFUSED,
                    ",".join(codes),
                    detail[:2000],
                    now,
                    now,
                ),
            )
            assert row is not None
            return int(row["id"])

    def finish(
        self,
        claim: LeaseClaim,
        attempt_id: int,
        status: str,
        *,
        codes: tuple[str, ...] = (),
        detail: str = "",
        merge_commit_sha: str | None = None,
    ) -> None:
        """Close an attempt; a ``merged`` one also records the merge, in one transaction."""
        with self.leases.under(claim) as tx:
            self._finish(tx, claim, attempt_id, status, codes, detail, merge_commit_sha)

    def _finish(
        self,
        tx: Any,
        claim: LeaseClaim,
        attempt_id: int,
        status: str,
        codes: tuple[str, ...],
        detail: str,
        merge_commit_sha: str | None,
    ) -> None:
        now = self.clock()
        row = tx.one(
            "UPDATE merge_attempts SET status = ?, codes = ?, detail = ?, finished_at = ?"
            " WHERE id = ? AND holder = ? AND epoch = ? RETURNING *",
            (status, ",".join(codes), detail[:2000], now, attempt_id, claim.worker, claim.epoch),
        )
        if row is None:
            raise KeyError(f"no merge attempt {attempt_id} of epoch {claim.epoch}")
        if status == MERGED:
            _record_merged(tx, row, merge_commit_sha, claim.worker, claim.epoch, now)

    def confirm(self, attempt_id: int, merge_commit_sha: str | None) -> bool:
        """Record an ``unverified`` attempt (or a ``sending`` one its process left behind) as
        merged, once the forge shows it merged.

        Not fenced: the merge call was made under the live claim, and what the forge shows
        afterwards is a fact to record even when that claim has since lapsed. False when the
        attempt is no longer ``unverified`` (another reader recorded it first).
        """
        with self.db.write() as tx:
            row = tx.one(
                "UPDATE merge_attempts SET status = ?, detail = ?, finished_at = ?"
                " WHERE id = ? AND status IN (?, ?) RETURNING *",
                (MERGED, CONFIRMED_LATER, self.clock(), attempt_id, UNVERIFIED, SENDING),
            )
            if row is None:
                return False
            _record_merged(tx, row, merge_commit_sha, row["holder"], row["epoch"], self.clock())
            return True

    def give_up(self, attempt_id: int, detail: str) -> None:
        """An ``unverified`` or left-behind ``sending`` attempt whose lease ended
        unconfirmed ends ``unknown``."""
        with self.db.write() as tx:
            tx.execute(
                "UPDATE merge_attempts SET status = ?, detail = ?, finished_at = ?"
                " WHERE id = ? AND status IN (?, ?)",
                (UNKNOWN, detail[:2000], self.clock(), attempt_id, UNVERIFIED, SENDING),
            )

    # -- reads -------------------------------------------------------------------------------

    def unverified(
        self,
        forge: str | None = None,
        repo: str | None = None,
        number: int | None = None,
        *,
        sending: bool = False,
    ) -> list[MergeAttempt]:
        """Attempts still waiting for the forge to confirm the merge, oldest first; with
        ``sending``, also those whose merge call has no recorded answer yet."""
        statuses = [UNVERIFIED, SENDING] if sending else [UNVERIFIED]
        sql = f"SELECT * FROM merge_attempts WHERE status IN ({', '.join('?' * len(statuses))})"
        params: list[Any] = list(statuses)
        for column, value in (("forge", forge), ("repo", repo), ("number", number)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        with self.db.read() as tx:
            rows = tx.all(sql + " ORDER BY id", params)
        return [MergeAttempt.from_row(r) for r in rows]

    def merge_of(self, forge: str, repo: str, number: int) -> MergeRecord | None:
        repo = repo_key(repo)
        with self.db.read() as tx:
            row = tx.one(
                "SELECT * FROM merged_pulls WHERE forge = ? AND repo = ? AND number = ?",
                (forge, repo, number),
            )
        return None if row is None else MergeRecord.from_row(row)

    def attempts(self, forge: str, repo: str, number: int) -> list[MergeAttempt]:
        """Oldest first."""
        repo = repo_key(repo)
        with self.db.read() as tx:
            rows = tx.all(
                "SELECT * FROM merge_attempts WHERE forge = ? AND repo = ? AND number = ?"
                " ORDER BY id",
                (forge, repo, number),
            )
        return [MergeAttempt.from_row(r) for r in rows]


def _record_merged(
    tx: Tx,
    attempt: Row,
    merge_commit_sha: str | None,
    holder: str,
    epoch: int,
    at: float,
) -> None:
    """The pull of ``attempt`` is merged (the first record stands: a pull merges once)."""
    tx.execute(
        "INSERT INTO merged_pulls (forge, repo, number, head_sha, merge_commit_sha, method,"
        " holder, epoch, merged_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (forge, repo, number) DO NOTHING",
        (
            attempt["forge"],
            attempt["repo"],
            attempt["number"],
            attempt["head_sha"],
            merge_commit_sha,
            attempt["method"],
            holder,
            epoch,
            at,
        ),
    )
