"""The reconcile sweep says where it is when it takes long, and stays quiet when it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.config import Settings
from reviewbot.forges.factory import make_forge
from reviewbot.runtime.review import reconcile
from reviewbot.runtime.review.reconcile import Reconciler
from reviewbot.service import Parts, build_service
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.journal import NewDelivery
from reviewbot.workflowdb.bootstrap import open_store

REPOS = ("acme/api", "acme/web", "acme/docs")


async def sweep_lines(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> list[str]:
    token = sim.add_user("github", "reviewbot", bot=True)
    sim.add_user("github", "alice")
    for repo in REPOS:
        sim.create_repo("github", repo)
    sim.open_pr("github", "acme/web", author="alice")
    settings = Settings(
        data_dir=tmp_path / "data",
        github={"api_url": sim_server.github_api_url, "token": token, "bot_login": "reviewbot"},
        repos={f"github:{repo}": {} for repo in REPOS},
    )
    db = open_store(settings)
    forge = make_forge(settings, "github")
    queued: list[NewDelivery] = []

    async def enqueue(delivery: NewDelivery) -> bool:
        queued.append(delivery)
        return True

    lines: list[str] = []
    try:
        service = build_service(
            settings, forges={"github": forge}, db=db, parts=Parts.REVIEW, client="sweep-test"
        )
        async with service:
            parts = service.review
            assert parts is not None
            sweeper = Reconciler(settings, parts.store, {"github": forge}, parts.pipeline, enqueue)
            report = await sweeper.sweep(progress=lines.append)
    finally:
        await forge.aclose()
        db.close()
    assert report.open_pulls == 1 and len(queued) == 1
    return lines


async def test_a_slow_sweep_reports_each_repository(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "PROGRESS_INTERVAL_S", 0.0)  # every repository is "late"
    lines = await sweep_lines(tmp_path, sim, sim_server)
    assert [line.split(";")[0] for line in lines] == [
        "reconcile sweep [1/3] github:acme/api",
        "reconcile sweep [2/3] github:acme/docs",
        "reconcile sweep [3/3] github:acme/web",
    ]
    assert lines[-1].endswith("so far 1 open pull requests, 1 queued, 0 re-evaluated")


async def test_a_fast_sweep_logs_nothing(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "PROGRESS_INTERVAL_S", 3600.0)
    assert await sweep_lines(tmp_path, sim, sim_server) == []
