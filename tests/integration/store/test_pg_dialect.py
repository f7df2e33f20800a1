"""The small dialect layer of the PostgreSQL store, against a real server."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import ConfigError
from reviewbot.store.postgres import PostgresDatabase, translate
from reviewbot.workflowdb.bootstrap import open_existing_store
from reviewbot.workflowdb.paths import WorkflowPaths


def test_placeholders_outside_quotes_and_comments_only() -> None:
    sql = "SELECT '?', \"a?\", x % 2 FROM t WHERE a = ? -- is it?\n AND b = ? /* ? */"
    assert translate(sql) == (
        "SELECT '?', \"a?\", x %% 2 FROM t WHERE a = %s -- is it?\n AND b = %s /* ? */"
    )
    assert translate("SELECT 'it''s ?' WHERE x = ?") == "SELECT 'it''s ?' WHERE x = %s"


def test_rows_by_name_and_position_and_percent_with_or_without_values(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url, pool_size=1)
    try:
        with db.read() as tx:
            row = tx.one("SELECT 7 % 3 AS r, 'a%' AS s")
            assert row is not None and (row["r"], row[1], dict(row)) == (
                1,
                "a%",
                {"r": 1, "s": "a%"},
            )
            row = tx.one("SELECT ? % 4 AS r, ? AS s", (9, "?"))
            assert row is not None and (row["r"], row["s"]) == (1, "?")
        with pytest.raises(Exception, match="read-only"), db.read() as tx:
            tx.execute("CREATE TABLE nope (id INTEGER)")
    finally:
        db.close()


def test_a_reader_never_creates_the_schema(postgres_url: str, tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data", None, postgres_url)
    with pytest.raises(ConfigError, match="no reviewbot store"):
        open_existing_store(paths)
    db = PostgresDatabase(postgres_url, pool_size=1)
    try:
        with db.read() as tx:
            assert (
                tx.one("SELECT 1 FROM information_schema.tables WHERE table_schema = 'public'")
                is None
            )
    finally:
        db.close()


def test_an_unreachable_server_is_a_configuration_error(tmp_path: Path) -> None:
    url = f"postgresql://bot:s3cret@/nowhere?host={tmp_path}&connect_timeout=1"
    with pytest.raises(ConfigError) as refused:
        open_existing_store(WorkflowPaths(tmp_path / "data", None, url))
    assert "s3cret" not in str(refused.value)
