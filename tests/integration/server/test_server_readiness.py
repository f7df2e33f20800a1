"""``/healthz`` says the process serves; ``/readyz`` and ``reviewbot doctor`` say whether it
can do its work, naming each failing check."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.cli import main
from reviewbot.store import journal
from reviewbot.store.journal import NewDelivery
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.server_support import make_settings, running_server

OLD = 1_577_836_800.0  # 2020-01-01T00:00:00Z


async def test_readyz_names_a_dead_worker_and_an_old_queue(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", ready_max_queue_age_s=60)
    async with running_server(settings) as server:
        status, body = await server.get("/readyz")
        assert status == 200, body
        assert {c["name"] for c in body["checks"]} >= {
            "store_writable",
            "workers_alive",
            "queue_age",
        }
        pool = server.service.pool
        assert pool is not None
        # Idle first (the start-up look for work done): a worker cancelled in the middle of a
        # batch would leave the pool busy for good, and this test is about a dead idle worker.
        await server.settle()
        pool._tasks[0].cancel()  # a worker gone without the supervisor (what /readyz catches)
        await server.settle()
        status, body = await server.get("/readyz")
        assert status == 503
        assert body["error"] == "not_ready" and body["failing"] == ["workers_alive"]
        status, body = await server.get("/healthz")
        assert status == 200  # alive all the same

    async with running_server(settings, run_workers=False) as server:
        journal.insert_delivery(server.db, NewDelivery("stuck", "api", b"{}", OLD))
        status, body = await server.get("/readyz")
        assert status == 503 and body["failing"] == ["queue_age"]
        assert "limit 60 s" in body["detail"] or "queue_age" in body["detail"]


def test_doctor_exits_non_zero_naming_the_failing_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(data))
    monkeypatch.setenv("REVIEWBOT_READY_MAX_QUEUE_AGE_S", "60")
    assert main(["doctor"]) == 1  # no forge configured: not ready, and said so
    out = capsys.readouterr().out
    assert "ok   store_writable" in out and "not ready: forges" in out
    db = open_store(make_settings(data))
    try:
        journal.insert_delivery(db, NewDelivery("stuck", "api", b"{}", OLD))
    finally:
        db.close()
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL queue_age" in out and "not ready: queue_age, forges" in out


REVIEWED = {"github:acme/api": {"reviewers": ["lint"]}}


async def test_readyz_names_a_sandbox_that_cannot_contain_the_configured_reviewers(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "no-bwrap")
    settings = make_settings(tmp_path / "data", bwrap=missing, repos=REVIEWED)
    async with running_server(settings) as server:
        status, body = await server.get("/readyz")
        assert status == 503 and body["failing"] == ["sandbox"], body
        (check,) = [c for c in body["checks"] if c["name"] == "sandbox"]
        assert check["detail"].startswith("sandbox_unavailable: ")
        assert "no-bwrap" in check["detail"] and "is not installed" in check["detail"]
    # Without reviewers nothing waits on the sandbox: ready, and still named.
    async with running_server(make_settings(tmp_path / "data2", bwrap=missing)) as server:
        status, body = await server.get("/readyz")
        assert status == 200, body
        (check,) = [c for c in body["checks"] if c["name"] == "sandbox"]
        assert check["ok"] and "no repository has reviewers" in check["detail"]


def test_doctor_names_a_sandbox_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "reviewbot.toml"
    config.write_text('[repos."github:acme/api"]\nreviewers = ["lint"]\n')
    monkeypatch.setenv("REVIEWBOT_CONFIG", str(config))
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("REVIEWBOT_BWRAP", str(tmp_path / "no-bwrap"))
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL sandbox: sandbox_unavailable: " in out and "is not installed" in out
    assert "not ready: sandbox" in out  # (no forge is configured here either)
