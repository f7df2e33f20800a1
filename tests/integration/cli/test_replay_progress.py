"""``reviewbot replay`` of many deliveries: each is gated again, with a progress line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reviewbot.cli import main
from reviewbot.config import load_settings
from reviewbot.store import decisions, journal
from reviewbot.store.journal import NewDelivery
from reviewbot.workflowdb.bootstrap import open_store


def store_deliveries(ids: list[str]) -> None:
    db = open_store(load_settings())
    try:
        for delivery_id in ids:
            journal.insert_delivery(
                db,
                NewDelivery(
                    delivery_id=delivery_id,
                    source="github",
                    body=b'{"zen": "Keep it logically awesome.", "hook_id": 1}',
                    received_at=1_767_225_600.0,
                    forge="github",
                    event="ping",
                    headers={"X-GitHub-Event": "ping", "Content-Type": "application/json"},
                ),
            )
    finally:
        db.close()


def test_many_deliveries_replay_in_order_with_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    ids = ["d-1", "d-2", "d-3"]
    store_deliveries(ids)
    assert main(["replay", *ids, "--json"]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if line.startswith("replay [")]
    assert [line.split(":")[0] for line in progress] == [
        "replay [1/3] d-1",
        "replay [2/3] d-2",
        "replay [3/3] d-3",
    ]
    replayed = json.loads(captured.out)["replayed"]
    assert [r["delivery_id"] for r in replayed] == ids
    assert all(r["decisions"] for r in replayed)
    db = open_store(load_settings())
    try:
        assert all(decisions.for_delivery(db, d) for d in ids)
    finally:
        db.close()


def test_one_delivery_keeps_its_shape_and_prints_no_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    store_deliveries(["only"])
    assert main(["replay", "only", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["delivery_id"] == "only"
    assert "replay [" not in captured.err


def test_an_unknown_id_replays_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    store_deliveries(["known"])
    assert main(["replay", "known", "unknown"]) == 1
    captured = capsys.readouterr()
    assert "no delivery 'unknown'" in captured.err
    db = open_store(load_settings())
    try:
        assert decisions.for_delivery(db, "known") == []
    finally:
        db.close()
