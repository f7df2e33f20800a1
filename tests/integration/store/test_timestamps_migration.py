"""Migration 0013: every timestamp column becomes REAL, and stored moments keep their instant.

A store is brought to 0012 through the managed route (as a release before 0013 left it),
filled with rows whose moments are ISO text, then opened as the bot opens it at start.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.clock import parse_iso
from reviewbot.store import decisions, journal, sessions, tokens
from reviewbot.store.database import SQLiteDatabase
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.bootstrap import install_migration, open_store
from reviewbot.workflowdb.migrations import (
    LEDGER_TABLE,
    MigrationError,
    apply_workflow_db_migration,
    list_backups,
    migration_log,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import bot_schema, packaged_migrations

CONVERSION = "0013_timestamps_real.sql"

# Every moment column 0013 converts: (table, column, may be NULL).
CONVERTED = [
    ("bot_meta", "updated_at", False),
    ("deliveries", "received_at", False),
    ("deliveries", "finished_at", True),
    ("deliveries", "next_attempt_at", True),
    ("pr_gate_decisions", "decided_at", False),
    ("delivery_semantic_keys", "claimed_at", False),
    ("api_tokens", "created_at", False),
    ("api_tokens", "revoked_at", True),
    ("review_decisions", "decided_at", False),
    ("review_outbox", "created_at", False),
    ("review_outbox", "finished_at", True),
    ("pr_state_comments", "updated_at", False),
    ("session_tool_calls", "called_at", False),
    ("review_reviewer_runs", "ran_at", False),
    ("repositories", "first_seen", False),
    ("repositories", "updated_at", False),
    ("repository_aliases", "renamed_at", False),
    ("review_jobs", "created_at", False),
    ("review_jobs", "finished_at", True),
    ("health_probe", "probed_at", False),
]

# Each shape of ISO text earlier releases wrote: milliseconds and microseconds with "Z",
# "+00:00", whole seconds (tokens), and one with a zone offset for good measure.
MOMENTS = {
    "ms": "2026-11-30T23:35:03.120Z",
    "us": "2026-11-30T23:35:03.123456Z",
    "plus": "2026-11-30T23:35:03.999999+00:00",
    "seconds": "2026-01-01T00:00:00Z",
    "offset": "2026-06-01T12:00:00.5+02:00",
}


@pytest.fixture
def paths(tmp_path: Path) -> WorkflowPaths:
    return WorkflowPaths(tmp_path / "data").ensure()


def store_at_0012(paths: WorkflowPaths) -> None:
    """The bot's migrations up to 0012, applied the way start-up applies them."""
    db = SQLiteDatabase(paths.db_file)
    try:
        for name, data in packaged_migrations():
            if name >= CONVERSION:
                break
            install_migration(paths, name, data)
            apply_workflow_db_migration(
                name,
                paths=paths,
                access=DBAccess.READ_WRITE,
                applied_by="an earlier release",
                db=db,
                skip_if_applied=True,
                packaged=True,
            )
    finally:
        db.close()


def fill(paths: WorkflowPaths, moment: str, *, nullable: str | None) -> None:
    """One row in every table 0013 converts, each moment column set to ``moment`` (the
    nullable ones to ``nullable``)."""
    m, n = moment, nullable
    rows: list[tuple[str, tuple[Any, ...]]] = [
        ("INSERT INTO bot_meta (key, value, updated_at) VALUES ('k', 'v', ?)", (m,)),
        (
            "INSERT INTO deliveries (delivery_id, source, received_at, status, finished_at,"
            " next_attempt_at) VALUES ('d-1', 'api', ?, 'done', ?, ?)",
            (m, n, n),
        ),
        ("INSERT INTO delivery_bodies (delivery_id, body) VALUES ('d-1', x'7b7d')", ()),
        (
            "INSERT INTO pr_gate_decisions (delivery_id, source, decision, reason_code,"
            " decided_at) VALUES ('d-1', 'api', 'skip', 'action_ignored', ?)",
            (m,),
        ),
        (
            "INSERT INTO delivery_semantic_keys (semantic_key, delivery_id, claimed_at)"
            " VALUES ('key', 'd-1', ?)",
            (m,),
        ),
        (
            "INSERT INTO api_tokens (name, token_hash, prefix, scopes, created_at, revoked_at)"
            " VALUES ('t', 'hash', 'rb_', 'read', ?, ?)",
            (m, n),
        ),
        (
            "INSERT INTO review_decisions (forge, repo, number, head_sha, decision,"
            " reason_code, decided_at) VALUES ('gitea', 'acme/api', 1, 'abc', 'waiting',"
            " 'waiting', ?)",
            (m,),
        ),
        (
            "INSERT INTO review_outbox (forge, repo, number, head_sha, verdict, event, body,"
            " created_at, finished_at) VALUES ('gitea', 'acme/api', 1, 'abc', 'approve',"
            " 'APPROVED', '', ?, ?)",
            (m, n),
        ),
        (
            "INSERT INTO pr_state_comments (forge, repo, number, comment_id, body_sha256,"
            " updated_at) VALUES ('gitea', 'acme/api', 1, 9, 'sha', ?)",
            (m,),
        ),
        (
            "INSERT INTO session_tool_calls (session_id, run_id, tool, outcome, called_at)"
            " VALUES ('s', 'r', 'query_workflow_db', 'ok', ?)",
            (m,),
        ),
        (
            "INSERT INTO review_reviewer_runs (forge, repo, number, head_sha, round, run_id,"
            " ran_at) VALUES ('gitea', 'acme/api', 1, 'abc', 0, 'r', ?)",
            (m,),
        ),
        (
            "INSERT INTO repositories (forge, repo, display_name, first_seen, updated_at)"
            " VALUES ('gitea', 'acme/api', 'Acme/API', ?, ?)",
            (m, m),
        ),
        (
            "INSERT INTO repository_aliases (forge, old_repo, repo, renamed_at)"
            " VALUES ('gitea', 'acme/old', 'acme/api', ?)",
            (m,),
        ),
        (
            "INSERT INTO review_jobs (decision_id, delivery_id, source, forge, repo, number,"
            " created_at, finished_at) VALUES (1, 'd-1', 'api', 'gitea', 'acme/api', 1, ?, ?)",
            (m, n),
        ),
        ("INSERT INTO health_probe (id, probed_at) VALUES (1, ?)", (m,)),
    ]
    with closing(sqlite3.connect(paths.db_file)) as conn, conn:
        for sql, params in rows:
            conn.execute(sql, params)


def stored(paths: WorkflowPaths, table: str, column: str) -> tuple[Any, str]:
    with closing(sqlite3.connect(paths.db_file)) as conn:
        row = conn.execute(f"SELECT {column}, typeof({column}) FROM {table}").fetchone()
    assert row is not None
    return row[0], row[1]


def declared_types(db_file: Path, table: str) -> dict[str, str]:
    with closing(sqlite3.connect(db_file)) as conn:
        rows = conn.execute("SELECT name, type FROM pragma_table_info(?)", (table,)).fetchall()
    return {str(name): str(kind).upper() for name, kind in rows}


@pytest.mark.parametrize("shape", sorted(MOMENTS))
def test_every_iso_moment_converts_to_its_own_instant(paths: WorkflowPaths, shape: str) -> None:
    moment = MOMENTS[shape]
    finished = "2026-12-01T00:00:00.000001Z"
    store_at_0012(paths)
    fill(paths, moment, nullable=finished)

    db = open_store(paths)
    try:
        for table, column, nullable in CONVERTED:
            value, kind = stored(paths, table, column)
            want = parse_iso(finished if nullable else moment)
            assert (kind, value) == ("real", want), f"{table}.{column}"
        # The store's own readers see the same instants.
        delivery = journal.get_delivery(db, "d-1")
        assert delivery is not None
        assert delivery.received_at == parse_iso(moment)
        assert delivery.finished_at == parse_iso(finished)
        assert [r.decided_at for r in decisions.for_delivery(db, "d-1")] == [parse_iso(moment)]
        [token] = tokens.list_tokens(db)
        assert token.created_at == parse_iso(moment) and token.revoked_at == parse_iso(finished)
        assert [c.called_at for c in sessions.tool_calls(db)] == [parse_iso(moment)]
    finally:
        db.close()


def test_null_moments_stay_null(paths: WorkflowPaths) -> None:
    store_at_0012(paths)
    fill(paths, MOMENTS["ms"], nullable=None)
    open_store(paths).close()
    for table, column, nullable in CONVERTED:
        if nullable:
            assert stored(paths, table, column) == (None, "null"), f"{table}.{column}"


def test_the_conversion_goes_through_the_ledger_after_a_backup(paths: WorkflowPaths) -> None:
    store_at_0012(paths)
    fill(paths, MOMENTS["us"], nullable=None)
    open_store(paths).close()

    db = SQLiteDatabase(paths.db_file)
    try:
        [entry] = [e for e in migration_log(db) if e["file_name"] == CONVERSION]
    finally:
        db.close()
    assert entry["destructive"] is True and entry["backup_path"] is not None
    # (a later migration that drops an index takes its own snapshot)
    [backup] = [b for b in list_backups(paths) if str(b) == entry["backup_path"]]
    # The snapshot holds the store as it was: the text moments can still be recovered.
    with closing(sqlite3.connect(backup)) as conn:
        assert conn.execute("SELECT received_at FROM deliveries").fetchone() == (MOMENTS["us"],)


def test_a_new_store_takes_no_backup(paths: WorkflowPaths) -> None:
    open_store(paths).close()
    assert list_backups(paths) == []


def test_an_unreadable_moment_fails_the_conversion_and_changes_nothing(
    paths: WorkflowPaths,
) -> None:
    store_at_0012(paths)
    fill(paths, "not a moment", nullable=None)
    with pytest.raises(MigrationError, match=CONVERSION):
        open_store(paths)
    assert stored(paths, "deliveries", "received_at") == ("not a moment", "text")
    assert declared_types(paths.db_file, "deliveries")["received_at"] == "TEXT"
    with closing(sqlite3.connect(paths.db_file)) as conn:
        files = {r[0] for r in conn.execute(f"SELECT file_name FROM {LEDGER_TABLE}")}
    assert CONVERSION not in files


def test_every_moment_column_of_the_bot_schema_is_real(paths: WorkflowPaths) -> None:
    """Also for tables added later: a moment is a column named *_at, *_ts or first_seen."""
    open_store(paths).close()
    found = 0
    for table in sorted(bot_schema().tables - {LEDGER_TABLE}):
        for column, kind in declared_types(paths.db_file, table).items():
            if column.endswith(("_at", "_ts")) or column == "first_seen":
                found += 1
                assert kind == "REAL", f"{table}.{column} is {kind}"
    assert found >= len(CONVERTED)


def test_the_converted_indexes_are_back(paths: WorkflowPaths) -> None:
    store_at_0012(paths)
    open_store(paths).close()
    with closing(sqlite3.connect(paths.db_file)) as conn:
        plan = " ".join(
            str(r[-1])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT delivery_id FROM deliveries WHERE status = 'queued'"
                " ORDER BY received_at"
            )
        )
    assert "deliveries_by_status" in plan
