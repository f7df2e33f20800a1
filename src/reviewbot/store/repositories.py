"""Repository identities: the canonical key, the forge's spelling and numeric id, renames.

Every table names a repository by its canonical key (see :class:`~reviewbot.core.models.RepoRef`).
This module keeps what the key alone cannot say:

- the spelling the forge last used in a signed webhook (``display_name``), for answers;
- the forge's numeric repository id, which survives a rename or a transfer;
- whether a signed webhook named the repository (only those, and the configured ones, are
  swept: an API caller naming a repository cannot grow the sweep).

A repository seen again with a known id under a new name is the same repository: in one
transaction every row keyed on the old key is rewritten to the new key (lease epochs keep
the larger epoch, so fencing tokens never go back), and the old key is kept as an alias
that :func:`resolve` turns into the new key for callers that still use the old name.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from reviewbot.store.database import SQLITE, Database, Tx

# Every table whose ``repo`` column holds a canonical key, with the columns that together
# with (forge, repo) identify a row (a rewrite that would collide leaves the old row).
KEYED_TABLES = (
    "pr_gate_decisions",
    "leases",
    "review_decisions",
    "review_outbox",
    "review_missing_checks",
    "pr_state_comments",
    "merged_pulls",
    "merge_attempts",
    "review_reviewer_runs",
)


@dataclass(frozen=True)
class KnownRepository:
    forge: str
    repo: str  # the canonical key
    display_name: str
    forge_id: int | None
    signed: bool


def observe(
    db: Database,
    *,
    forge: str,
    repo: str,
    display_name: str,
    forge_id: int | None,
    signed: bool,
    seen_at: float,
) -> str:
    """Record that ``forge:repo`` was named; returns the key to use from now on.

    Only signed webhooks should pass ``signed=True`` and a ``forge_id``: they are the forge's
    own word. A rename (a known id under a new key) rewrites the old rows to the new key.
    """
    with db.read() as tx:
        row = tx.one("SELECT * FROM repositories WHERE forge = ? AND repo = ?", (forge, repo))
        if row is not None and (
            not signed
            or (
                row["signed"]
                and row["display_name"] == display_name
                and row["forge_id"] == forge_id
            )
        ):
            return repo  # nothing new: most deliveries end here, without a write
        if not signed:
            # Only a signed webhook may add a repository or set its spelling.
            return _resolve(tx, forge, repo)
    with db.write() as tx:
        if forge_id is not None:
            row = tx.one(
                "SELECT repo FROM repositories WHERE forge = ? AND forge_id = ?", (forge, forge_id)
            )
            if row is not None and row["repo"] != repo:
                _rename(tx, forge, str(row["repo"]), repo, seen_at)
        # The forge says this name is a repository now: it is no longer an old name of
        # another (a new repository may take the name a renamed one left).
        tx.execute("DELETE FROM repository_aliases WHERE forge = ? AND old_repo = ?", (forge, repo))
        tx.execute(
            "INSERT INTO repositories (forge, repo, display_name, forge_id, signed, first_seen,"
            " updated_at) VALUES (?, ?, ?, ?, 1, ?, ?) ON CONFLICT (forge, repo) DO UPDATE SET"
            " display_name = excluded.display_name,"
            " forge_id = COALESCE(excluded.forge_id, repositories.forge_id),"
            " signed = 1, updated_at = excluded.updated_at",
            (forge, repo, display_name, forge_id, seen_at, seen_at),
        )
        return repo


def resolve(db: Database, forge: str, repo: str) -> str:
    """The current key of ``repo`` (itself unless the repository was renamed)."""
    with db.read() as tx:
        return _resolve(tx, forge, repo)


def known(db: Database) -> list[KnownRepository]:
    with db.read() as tx:
        rows = tx.all("SELECT * FROM repositories ORDER BY forge, repo")
    return [
        KnownRepository(
            forge=str(r["forge"]),
            repo=str(r["repo"]),
            display_name=str(r["display_name"]),
            forge_id=None if r["forge_id"] is None else int(r["forge_id"]),
            signed=bool(r["signed"]),
        )
        for r in rows
    ]


def signed_repos(db: Database) -> set[tuple[str, str]]:
    """(forge, key) of every repository a signed webhook named."""
    return {(r.forge, r.repo) for r in known(db) if r.signed}


def display_names(db: Database) -> dict[tuple[str | None, str | None], str]:
    """(forge, key) -> the forge's spelling, for every repository a webhook spelled."""
    return {(r.forge, r.repo): r.display_name for r in known(db)}


def display_name(db: Database, forge: str, repo: str) -> str:
    """The forge's spelling of ``repo`` when a webhook told it, else the key itself."""
    with db.read() as tx:
        row = tx.one(
            "SELECT display_name FROM repositories WHERE forge = ? AND repo = ?", (forge, repo)
        )
    return str(row["display_name"]) if row is not None else repo


def _resolve(tx: Tx, forge: str, repo: str) -> str:
    row = tx.one(
        "SELECT repo FROM repository_aliases WHERE forge = ? AND old_repo = ?", (forge, repo)
    )
    return str(row["repo"]) if row is not None else repo


def _move_rows(tx: Tx, table: str, forge: str, old: str, new: str) -> None:
    """Re-key the rows of ``old`` to ``new``; a row whose new key is taken stays as it is."""
    if tx.dialect == SQLITE:
        tx.execute(
            f"UPDATE OR IGNORE {table} SET repo = ? WHERE forge = ? AND repo = ?",
            (new, forge, old),
        )
        return
    # PostgreSQL has no UPDATE OR IGNORE: each row moves in a savepoint of its own.
    rows = tx.all(
        f"SELECT ctid::text AS at FROM {table} WHERE forge = ? AND repo = ?", (forge, old)
    )
    for row in rows:
        tx.execute("SAVEPOINT move_row")
        try:
            tx.execute(f"UPDATE {table} SET repo = ? WHERE ctid = ?::tid", (new, row["at"]))
        except psycopg.errors.UniqueViolation:
            tx.execute("ROLLBACK TO SAVEPOINT move_row")
        tx.execute("RELEASE SAVEPOINT move_row")


def _rename(tx: Tx, forge: str, old: str, new: str, at: float) -> None:
    for table in KEYED_TABLES:
        _move_rows(tx, table, forge, old, new)
    # Fencing epochs only grow: the new key keeps the larger of the two.
    tx.execute(
        "INSERT INTO lease_epochs (forge, repo, number, role, epoch)"
        " SELECT forge, ?, number, role, epoch FROM lease_epochs WHERE forge = ? AND repo = ?"
        " ON CONFLICT (forge, repo, number, role) DO UPDATE SET"
        " epoch = CASE WHEN excluded.epoch > lease_epochs.epoch THEN excluded.epoch"
        " ELSE lease_epochs.epoch END",
        (new, forge, old),
    )
    tx.execute("DELETE FROM lease_epochs WHERE forge = ? AND repo = ?", (forge, old))
    tx.execute(
        "UPDATE api_tokens SET repo = ? WHERE repo = ?", (f"{forge}:{new}", f"{forge}:{old}")
    )
    tx.execute("DELETE FROM repositories WHERE forge = ? AND repo = ?", (forge, new))
    tx.execute("UPDATE repositories SET repo = ? WHERE forge = ? AND repo = ?", (new, forge, old))
    # Older aliases follow the repository to its new key; the new key is no alias any more.
    tx.execute(
        "UPDATE repository_aliases SET repo = ? WHERE forge = ? AND repo = ?", (new, forge, old)
    )
    tx.execute("DELETE FROM repository_aliases WHERE forge = ? AND old_repo = ?", (forge, new))
    tx.execute(
        "INSERT INTO repository_aliases (forge, old_repo, repo, renamed_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (forge, old_repo) DO UPDATE SET repo = excluded.repo,"
        " renamed_at = excluded.renamed_at",
        (forge, old, new, at),
    )
