"""``reviewbot db ...`` on the command line: output, --json, --access and refusals.

The tests on a store the bot has started (``data_dir``) run on both stores; on PostgreSQL
the store is a database of its own, named by ``REVIEWBOT_DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import packaged_migrations
from tests.support.store_fixtures import AUTO_ID


@pytest.fixture
def fresh_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory no bot has started in yet (nothing on disk)."""
    data = tmp_path / "data"
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(data))
    return data


@pytest.fixture
def data_dir(
    fresh_data_dir: Path,
    store_kind: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Path:
    """A data directory as ``serve`` leaves it: the store with the bot's schema."""
    url = None
    if store_kind == "postgresql":
        url = request.getfixturevalue("postgres_store_url")
        monkeypatch.setenv("REVIEWBOT_DATABASE_URL", url)
    open_store(WorkflowPaths(fresh_data_dir, None, url)).close()
    return fresh_data_dir


def sqlite_only(store_kind: str) -> None:
    if store_kind == "postgresql":
        pytest.skip("SQLite's own files and catalog; PostgreSQL's are tested in test_pg_*")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def add_migration(data_dir: Path, name: str, sql: str) -> None:
    folder = WorkflowPaths(data_dir).migrations_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(sql)


def test_log_lists_the_bot_s_own_migrations(
    data_dir: Path, capsys: pytest.CaptureFixture[str], store_kind: str
) -> None:
    rows = cli_json(capsys, "db", "log")
    assert [r["file_name"] for r in rows] == [n for n, _ in packaged_migrations(store_kind)]
    code, out, _ = cli(capsys, "db", "log")
    assert code == 0 and "0001_foundation.sql" in out and "migrations applied" in out


def test_apply_query_mutate_round_trip(
    data_dir: Path, capsys: pytest.CaptureFixture[str], store_kind: str
) -> None:
    add_migration(
        data_dir,
        "site_0100_notes.sql",
        f"CREATE TABLE IF NOT EXISTS notes (id {AUTO_ID[store_kind]}, body TEXT);",
    )
    applied = cli_json(capsys, "db", "apply", "site_0100_notes.sql", "--by", "ops")
    assert applied["file_name"] == "site_0100_notes.sql"
    assert applied["destructive"] is False and applied["backup_path"] is None
    assert applied["applied_by"] == "ops"

    changed = cli_json(
        capsys,
        "db",
        "mutate",
        "INSERT INTO notes (body) VALUES (?) RETURNING id",
        "--params",
        '["hi"]',
    )
    assert changed == {"columns": ["id"], "rows": [[1]], "rowcount": 1, "truncated": False}

    rows = cli_json(capsys, "db", "query", "SELECT id, body FROM notes")
    assert rows["rows"] == [[1, "hi"]]
    code, out, _ = cli(capsys, "db", "query", "describe notes")
    assert code == 0 and "body" in out and "(2 rows)" in out
    if store_kind == "postgresql":
        return  # backups there: test_migrations_stores.py

    add_migration(data_dir, "site_0101_drop.sql", "ALTER TABLE notes DROP COLUMN body;")
    code, out, _ = cli(capsys, "db", "apply", "site_0101_drop.sql")
    assert code == 0 and "destructive, backup " in out
    backups = cli_json(capsys, "db", "backups")
    assert len(backups) == 1 and Path(backups[0]["path"]).is_file()
    log = cli_json(capsys, "db", "log")
    assert log[-1]["backup_path"] == backups[0]["path"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["db", "apply", "../evil.sql"], "contains '..'"),
        (["db", "apply", "missing.sql"], "not found"),
        (["db", "query", "DELETE FROM bot_meta"], "DELETE is not allowed"),
        (["db", "query", "SELECT 1; SELECT 2"], "exactly one statement"),
        (["db", "mutate", "DROP TABLE bot_meta"], "DROP is not allowed"),
        (["db", "mutate", "PRAGMA foreign_keys = OFF"], "PRAGMA is not allowed|does not parse"),
        (["db", "mutate", "DELETE FROM bot_meta", "--params", "{}"], "must be a JSON array"),
        (["db", "mutate", "DELETE FROM bot_meta", "--params", "[1"], "not JSON"),
    ],
)
def test_refusals_are_one_line_and_non_zero(
    data_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = cli(capsys, *argv)
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("reviewbot: ")
    assert re.search(message, err), err


def test_forbidden_statement_in_a_file_is_refused(
    data_dir: Path, capsys: pytest.CaptureFixture[str], store_kind: str
) -> None:
    sqlite_only(store_kind)
    add_migration(data_dir, "bad.sql", "CREATE TABLE IF NOT EXISTS ok (a);\n-- x\nATTACH 'x' AS y;")
    code, _, err = cli(capsys, "db", "apply", "bad.sql")
    assert code == 1
    assert "bad.sql: statement 2 (line 3: ATTACH 'x' AS y) is not allowed" in err
    tables = cli_json(capsys, "db", "query", "SELECT name FROM sqlite_master WHERE name = 'ok'")
    assert tables["rows"] == []


def test_access_flag_lowers_access(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "db", "log")
    code, _, err = cli(capsys, "db", "mutate", "DELETE FROM bot_meta", "--access", "read")
    assert code == 1
    assert err == "reviewbot: requires read-write DB access; this process has read\n"
    assert cli_json(capsys, "db", "query", "SELECT 1", "--access", "read")["rows"] == [[1]]


@pytest.mark.parametrize("access", ["read", "read-write"])
@pytest.mark.parametrize("argv", [("db", "log"), ("db", "query", "SELECT 1")])
def test_read_commands_do_not_create_the_store(
    fresh_data_dir: Path, capsys: pytest.CaptureFixture[str], access: str, argv: tuple[str, ...]
) -> None:
    code, _, err = cli(capsys, *argv, "--access", access)
    assert code == 2
    assert f"no reviewbot store at {fresh_data_dir.absolute()}" in err
    assert not fresh_data_dir.exists()


def test_unknown_access_value_means_none(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", "admin")
    code, _, err = cli(capsys, "db", "query", "SELECT 1", "--access", "read-write")
    assert code == 1
    assert err == "reviewbot: requires read DB access; this process has none\n"


@pytest.mark.parametrize("command", ["apply", "query", "mutate", "log", "backups"])
def test_every_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["db", command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "Example:" in out and f"reviewbot db {command}" in out
    assert "--json" in out and "--access" in out


# --- as a real process ------------------------------------------------------------------------


def run_cli(
    data_dir: Path, *argv: str, access: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    env["REVIEWBOT_DATA_DIR"] = str(data_dir)
    if access is not None:
        env["REVIEWBOT_DB_ACCESS"] = access
    return subprocess.run(
        [sys.executable, "-m", "reviewbot", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_process_with_read_access_cannot_raise_it_with_a_flag(tmp_path: Path) -> None:
    data = tmp_path / "data"
    open_store(WorkflowPaths(data)).close()
    first = run_cli(data, "db", "log", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)[0]["file_name"] == "0001_foundation.sql"

    add_migration(data, "site_0100_x.sql", "CREATE TABLE IF NOT EXISTS x (a);")
    for argv in (
        ["db", "apply", "site_0100_x.sql", "--access", "read-write"],
        ["db", "mutate", "DELETE FROM bot_meta", "--access", "read-write"],
    ):
        refused = run_cli(data, *argv, access="read")
        assert refused.returncode == 1
        assert refused.stdout == ""
        assert refused.stderr == "reviewbot: requires read-write DB access; this process has read\n"

    allowed = run_cli(data, "db", "query", "SELECT count(*) FROM bot_meta", "--json", access="read")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["rows"] == [[0]]


@pytest.mark.slow
def test_process_applies_a_migration_and_reports_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_migration(data, "site_0100_x.sql", "BEGIN;\nCREATE TABLE IF NOT EXISTS x (a);\nCOMMIT;\n")
    done = run_cli(data, "db", "apply", "site_0100_x.sql", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statements"] == 1 and result["log_id"] > 1
    bad = run_cli(data, "db", "apply", "/etc/passwd")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "absolute path" in bad.stderr


def test_pruning_a_backup_that_cannot_be_deleted_never_fails_the_migration(
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    store_kind: str,
) -> None:
    sqlite_only(store_kind)
    add_migration(data_dir, "site_t.sql", "CREATE TABLE IF NOT EXISTS t (a, b);")
    assert cli(capsys, "db", "apply", "site_t.sql")[0] == 0
    backups = WorkflowPaths(data_dir).backups_dir
    backups.mkdir(parents=True)
    (backups / "1-pre-migration.sqlite").mkdir()  # the oldest "snapshot" is a folder
    for stamp in range(2, 22):
        (backups / f"{stamp}-pre-migration.sqlite").write_bytes(b"old")
    add_migration(data_dir, "site_drop.sql", "ALTER TABLE t DROP COLUMN b;")

    applied = cli_json(capsys, "db", "apply", "site_drop.sql")

    assert applied["destructive"] and Path(applied["backup_path"]).is_file()
    assert cli_json(capsys, "db", "log")[-1]["file_name"] == "site_drop.sql"
    assert (backups / "1-pre-migration.sqlite").is_dir()  # skipped, not fatal
    assert not (backups / "2-pre-migration.sqlite").exists()  # the rest was pruned
    assert "could not prune the backup" in caplog.text


@pytest.mark.parametrize(
    ("name", "sql", "message"),
    [
        ("site_drop.sql", "DROP TABLE IF EXISTS api_tokens;", "api_tokens is one of reviewbot's"),
        ("0100_notes.sql", "CREATE TABLE IF NOT EXISTS n (a);", "belong to reviewbot"),
        ("0002_journal.sql", "", "the name of one of reviewbot's own migrations"),
    ],
)
def test_db_apply_refuses_migrations_on_the_bot_schema(
    data_dir: Path, capsys: pytest.CaptureFixture[str], name: str, sql: str, message: str
) -> None:
    before = cli_json(capsys, "db", "log")
    if sql:
        add_migration(data_dir, name, sql)
    code, _, err = cli(capsys, "db", "apply", name)
    assert code != 0 and message in err
    assert cli_json(capsys, "db", "log") == before
    # Tokens still work: the table is intact.
    assert cli(capsys, "token", "create", "--name", "ops", "--scopes", "read")[0] == 0


def test_db_mutate_names_the_bot_table_it_refuses(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_json(capsys, "db", "log")
    code, _, err = cli(capsys, "db", "mutate", "DELETE FROM bot_meta")
    assert code != 0 and "bot_meta is one of reviewbot's own tables" in err


@pytest.mark.parametrize("value", [" read-write", "read-write ", "Read", "rw"])
def test_access_must_be_spelled_exactly(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", value)
    code, _, err = cli(capsys, "db", "log")
    assert code != 0 and "this process has none" in err


def test_a_runaway_cli_query_is_cancelled_at_the_configured_time_limit(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_json(capsys, "db", "log")
    monkeypatch.setenv("REVIEWBOT_QUERY_TIMEOUT_S", "0.2")
    runaway = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT max(i) FROM c"
    code, _, err = cli(capsys, "db", "query", runaway)
    assert code != 0 and "ran longer than 0.2 s and was cancelled" in err
