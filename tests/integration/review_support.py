"""The review bot serving on loopback against the simulator, as the review tests run it:
one simulator, both forges' webhooks pointed at the real server, a real SQLite store."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.server.app import create_app
from reviewbot.server.tools_socket import service_tools_sockets
from reviewbot.service import Parts, Service, build_service
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.reviews import ReviewStore
from tests.integration.process_support import START_S, ServeProcess, clean_env, serve_process
from tests.support.store_fixtures import seeded

REPO = "acme/api"
SECRET = "s3cret"
BOT = "reviewbot"
APPROVED = {"github": "APPROVED", "gitea": "APPROVED"}
CHANGES = {"github": "CHANGES_REQUESTED", "gitea": "REQUEST_CHANGES"}
COMMENTED = {"github": "COMMENTED", "gitea": "COMMENT"}


@dataclass
class Bot:
    sim: Simulator
    sim_server: SimServer
    settings: Settings
    app: web.Application
    runner: web.AppRunner
    service: Service
    base_url: str

    @property
    def store(self) -> ReviewStore:
        assert self.service.review is not None
        return self.service.review.store

    async def settle(self, limit_s: float = 20.0) -> None:
        """Until every delivery is gated and every outbox row is finished."""
        st = self.service
        assert st.pool is not None
        deadline = time.monotonic() + limit_s
        while True:
            await asyncio.wait_for(st.pool.wait_idle(), limit_s)
            with self.store.db.read() as tx:
                row = tx.one("SELECT COUNT(*) AS n FROM review_outbox WHERE status = 'pending'")
            if row is not None and row["n"] == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError("outbox rows still pending")
            await asyncio.sleep(0.02)

    def bot_reviews(self, forge: str, number: int) -> list[Any]:
        return [r for r in self.sim.pull(forge, REPO, number).reviews if r.user == BOT]

    def bot_comments(self, forge: str, number: int) -> list[Any]:
        return [c for c in self.sim.pull(forge, REPO, number).comments if c.user == BOT]

    def decisions(self, forge: str, number: int) -> list[str]:
        """Review decisions, oldest first."""
        return [d.decision for d in reversed(self.store.decisions(forge, REPO, number))]


def make_settings(
    data_dir: Path, sim_server: SimServer, tokens: dict[str, str], **kw: Any
) -> Settings:
    values: dict[str, Any] = {
        "data_dir": seeded(data_dir),
        "github": {
            "api_url": sim_server.github_api_url,
            "token": tokens["github"],
            "webhook_secret": SECRET,
        },
        "gitea": {"url": sim_server.gitea_url, "token": tokens["gitea"], "webhook_secret": SECRET},
        "repos": {f"github:{REPO}": {}, f"gitea:{REPO}": {}},
        "leases": {"lease_s": 3.0, "renew_s": 2.0, "retry_s": 1.0},
        "reconcile_interval_s": 3600.0,
        "workers": 2,
    }
    values.update(kw)
    return Settings(**values)


def prepare_sim(sim: Simulator, required: tuple[str, ...] = ("ci/test",)) -> dict[str, str]:
    tokens = {}
    for forge in ("github", "gitea"):
        tokens[forge] = sim.add_user(forge, BOT, bot=True)
        sim.add_user(forge, "alice")
        sim.create_repo(forge, REPO)
        if required:
            sim.require_checks(forge, REPO, "main", list(required))
    return tokens


@contextlib.asynccontextmanager
async def running_bot(
    tmp_path: Path,
    *,
    required: tuple[str, ...] = ("ci/test",),
    clock: Clock = time.time,
    **kw: Any,
) -> AsyncIterator[Bot]:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim, required)
        settings = make_settings(tmp_path / "data", sim_server, tokens, **kw)
        service = build_service(
            settings,
            parts=Parts.SERVE & ~Parts.RECONCILE,
            backoff_base_s=0.05,
            shutdown_grace_s=2.0,
            clock=clock,
            tools_endpoint=service_tools_sockets,  # as ``reviewbot serve`` builds it
        )
        app = create_app(service)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        for forge in ("github", "gitea"):
            sim.set_webhook(forge, url=f"{base}/webhooks/{forge}", secret=SECRET)
        try:
            yield Bot(sim, sim_server, settings, app, runner, service, base)
        finally:
            await runner.cleanup()


def bot_env(tmp_path: Path, sim_server: SimServer, tokens: dict[str, str]) -> dict[str, str]:
    config = tmp_path / "reviewbot.toml"
    config.write_text(f'[repos."github:{REPO}"]\n[repos."gitea:{REPO}"]\n')
    return clean_env(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(seeded(tmp_path / "data")),
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
            "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_LEASES__LEASE_S": "2",
            "REVIEWBOT_LEASES__RENEW_S": "1.5",
            "REVIEWBOT_LEASES__RETRY_S": "1",
            "REVIEWBOT_WORKERS": "2",
        }
    )


async def serve_until_crash(
    tmp_path: Path, sim: Simulator, env: dict[str, str], forge: str, number: int, crash_at: str
) -> None:
    """A serve that exits as if killed at ``crash_at`` (status 137) once the PR's webhook
    has arrived."""
    crashing = {**env, "REVIEWBOT_TEST_CRASH_AT": crash_at}
    async with serve_process(cwd=tmp_path, env=crashing, start_s=START_S) as bot:
        sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
        await sim.deliver_pull_request(forge, REPO, number, action="opened")
        assert await asyncio.wait_for(bot.proc.wait(), 30) == 137


async def stop_bot(bot: ServeProcess) -> None:
    """SIGTERM; one that takes over 15 s is killed as the block ends (nothing after it
    depends on a graceful stop, and a loaded machine may stop slowly)."""
    bot.proc.terminate()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(bot.proc.wait(), 15)


def outbox_rows(tmp_path: Path) -> list[dict[str, Any]]:
    db = SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite")
    try:
        with db.read() as tx:
            return [dict(r) for r in tx.all("SELECT * FROM review_outbox ORDER BY id")]
    finally:
        db.close()


async def wait_for(predicate: Any, what: str, limit_s: float = 40.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)
