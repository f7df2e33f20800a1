"""``reviewbot db export`` / ``db import``: an SQLite store moved to PostgreSQL and back keeps
every row of the bot's tables; the new store goes on from there (ids, lease epochs); a file
that is cut off, altered or aimed at a store in use is refused with nothing imported."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.epochs import RESERVED_EPOCHS
from reviewbot.store.journal import NewDelivery
from reviewbot.store.leases import LeaseStore
from reviewbot.store.tokens import create_token
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.transfer import TransferError, export_lines, import_lines

HEAD = "d" * 40
TARGET = LeaseTarget("github", "acme/api", 7, Role.MERGER)
BODY = bytes(range(256)) * 3  # not UTF-8, NUL bytes included


def fill(db: Database) -> None:
    """A little of everything: a token, a delivery with a binary body, a worker, a lease
    granted three times, and one lease_epochs row deleted (the SQLite ledger remembers)."""
    create_token(db, name="ci", scopes="review", repo=None, now=1_767_225_600.0)
    journal.insert_delivery(
        db, NewDelivery("d-1", "github", BODY, 1_767_225_601.5, headers={"X-A": "é"})
    )
    leases = LeaseStore.open(db)
    try:
        worker = leases.workers.register("mover", client="t", session_id="s", role="merger")
        for _ in range(3):
            leases.release(leases.acquire(TARGET, worker.identity, HEAD).claim)
    finally:
        leases.close()
    with db.write() as tx:
        tx.execute("DELETE FROM lease_epochs")
        tx.execute("DELETE FROM leases")


def rows_by_table(db: Database) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in export_lines(db):
        item = json.loads(line)
        if "table" in item:
            out.setdefault(item["table"], []).append(item["row"])
    return out


def test_sqlite_to_postgresql_and_back_keeps_every_row(tmp_path: Path, postgres_url: str) -> None:
    sqlite_db = open_store(WorkflowPaths(tmp_path / "sqlite"))
    fill(sqlite_db)
    exported = list(export_lines(sqlite_db))
    original = rows_by_table(sqlite_db)
    sqlite_db.close()
    # From the ledger file (the table row was deleted): the reservation that covered the
    # three grants, so the new store never grants an epoch the old one may have granted.
    (mark,) = original["lease_epochs"]
    assert mark == {"forge": "github", "repo": "acme/api", "number": 7, "role": "merger",
                    "epoch": RESERVED_EPOCHS}  # fmt: skip

    pg = open_store(WorkflowPaths(tmp_path / "pg", None, postgres_url))
    try:
        result = import_lines(pg, exported)
        assert result.rows["deliveries"] == 1 and result.total == sum(map(len, original.values()))
        assert rows_by_table(pg) == original
        stored = journal.get_delivery(pg, "d-1")
        assert stored is not None and stored.body == BODY and stored.headers == {"X-A": "é"}
        # The new store goes on from the imported state.
        _, token = create_token(pg, name="next", scopes="review", repo=None, now=1_767_225_601.0)
        assert token.id > max(r["id"] for r in original["api_tokens"])
        leases = LeaseStore.open(pg)
        try:
            (worker,) = original["workers"]
            assert leases.acquire(TARGET, worker["identity"], HEAD).epoch == RESERVED_EPOCHS + 1
        finally:
            leases.close()
        back = list(export_lines(pg))
        moved = rows_by_table(pg)
    finally:
        pg.close()

    again = open_store(WorkflowPaths(tmp_path / "sqlite-again"))
    try:
        import_lines(again, back)
        assert rows_by_table(again) == moved
    finally:
        again.close()


@pytest.fixture
def exported(tmp_path: Path) -> list[str]:
    db = open_store(WorkflowPaths(tmp_path / "source"))
    try:
        fill(db)
        return list(export_lines(db))
    finally:
        db.close()


@pytest.fixture
def target(workflow_paths: WorkflowPaths) -> Any:
    db = open_store(workflow_paths)
    yield db
    db.close()


def alter(lines: list[str], index: int, change: Any) -> list[str]:
    item = json.loads(lines[index])
    change(item)
    return [*lines[:index], json.dumps(item) + "\n", *lines[index + 1 :]]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda lines: lines[:-1], "cut off"),
        (lambda lines: lines[:-2] + lines[-1:], "differ"),
        (lambda lines: ["{}\n", *lines[1:]], "not a reviewbot export"),
        (lambda lines: [*lines[:1], "not json\n", *lines[1:]], "not JSON"),
        (lambda lines: alter(lines, 1, lambda i: i["row"].update({"x; DROP": 1})), "no columns"),
        (lambda lines: alter(lines, 1, lambda i: i.update(table="sqlite_master")), "unknown"),
        (lambda lines: alter(lines, 1, lambda i: i.update(table="site_notes")), "unknown"),
        (lambda lines: alter(lines, 0, lambda i: i.update(version=99)), "version"),
    ],
)
def test_a_damaged_export_imports_nothing(
    exported: list[str], target: Database, damage: Any, message: str
) -> None:
    with pytest.raises(TransferError, match=message):
        import_lines(target, damage(exported))
    with target.read() as tx:
        assert tx.one("SELECT 1 FROM deliveries") is None
        assert tx.one("SELECT 1 FROM api_tokens") is None


def test_a_store_in_use_is_refused(exported: list[str], target: Database) -> None:
    create_token(target, name="live", scopes="review", repo=None, now=1_767_225_601.0)
    with pytest.raises(TransferError, match="already holds rows in api_tokens"):
        import_lines(target, exported)
    with target.read() as tx:
        assert tx.one("SELECT 1 FROM deliveries") is None


# --- the commands -------------------------------------------------------------------------


def test_the_commands_move_a_store_and_keep_the_file_private(
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "source"
    db = open_store(WorkflowPaths(source))
    fill(db)
    db.close()
    out = tmp_path / "export.jsonl"
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(source))
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", "read")
    assert main(["db", "export", "--output", str(out)]) != 0  # read access is not enough
    assert not out.exists()
    monkeypatch.setenv("REVIEWBOT_DB_ACCESS", "read-write")
    assert main(["db", "export", "--output", str(out)]) == 0
    assert os.stat(out).st_mode & 0o777 == 0o600
    assert main(["db", "export", "--output", str(out)]) != 0  # never overwritten
    capsys.readouterr()

    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "replica"))
    monkeypatch.setenv("REVIEWBOT_DATABASE_URL", postgres_url)
    assert main(["db", "import", str(out)]) == 0
    assert "imported" in capsys.readouterr().err
    assert main(["db", "import", str(out)]) != 0  # the second time the store is in use
    assert "already holds rows" in capsys.readouterr().err

    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert main(["db", "export"]) == 0
