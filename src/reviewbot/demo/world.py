"""The demo's world: the forge simulator and the real bot, on free loopback ports.

Both run in this process: the simulator serves the GitHub and Gitea API subsets over HTTP,
the bot is the real server application (webhooks, journal, worker pool, gate, review
pipeline, outbox drainer, merger) over a real SQLite store in the data dir. They talk only
over HTTP: the simulator sends signed webhooks to the bot, the bot calls the simulated
forge APIs with its tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from reviewbot.config import Settings
from reviewbot.core.errors import ReviewbotError
from reviewbot.core.reasons import Outcome
from reviewbot.server.app import create_app
from reviewbot.server.tools_socket import service_tools_sockets
from reviewbot.service import Service, build_service, configure_logging
from reviewbot.sim import SimServer, Simulator
from reviewbot.sim.state import SimPull, SimReview
from reviewbot.store import decisions as decision_store
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.reviews import ReviewDecision, ReviewStore
from reviewbot.store.tokens import create_token

BOT = "reviewbot"
GITHUB_REPO = "acme/api"
GITEA_REPO = "acme/web"
GITHUB_CHECKS = ("ci/test", "ci/lint")
GITEA_CHECKS = ("ci/test",)
WAIT_S = 10.0  # a bound on each wait; every outcome normally shows in milliseconds


class DemoSettings(Settings):
    """Settings built only from what the demo passes: no ``reviewbot.toml``, no
    ``REVIEWBOT_*`` variables, so a configured machine runs the same demo as a fresh one."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def demo_settings(data_dir: Path, sim_server: SimServer, tokens: dict[str, str]) -> Settings:
    """Both forges pointed at the simulator, fresh webhook secrets, the demo's repo rules."""
    return DemoSettings(
        data_dir=data_dir,
        host="127.0.0.1",
        port=0,
        github={
            "api_url": sim_server.github_api_url,
            "token": tokens["github"],
            "webhook_secret": secrets.token_hex(16),
            "bot_login": BOT,
        },
        gitea={
            "url": sim_server.gitea_url,
            "token": tokens["gitea"],
            "webhook_secret": secrets.token_hex(16),
            "bot_login": BOT,
        },
        repos={
            f"github:{GITHUB_REPO}": {"required_checks": list(GITHUB_CHECKS)},
            f"gitea:{GITEA_REPO}": {"required_checks": list(GITEA_CHECKS)},
        },
        workers=2,
        # One sweep at start (the story waits for it), none while the story plays.
        reconcile_interval_s=3600.0,
    )


def prepare_forges(sim: Simulator) -> dict[str, str]:
    """The bot's accounts, the authors, the two repositories and their branch protection."""
    tokens = {forge: sim.add_user(forge, BOT, bot=True) for forge in ("github", "gitea")}
    sim.add_user("github", "alice")
    sim.add_user("gitea", "bob")
    sim.create_repo("github", GITHUB_REPO, default_branch="main")
    sim.create_repo("gitea", GITEA_REPO, default_branch="main")
    sim.require_checks("github", GITHUB_REPO, "main", list(GITHUB_CHECKS))
    sim.require_checks("gitea", GITEA_REPO, "main", list(GITEA_CHECKS))
    return tokens


class Timeout(ReviewbotError):
    """A wait ran out; the message says what it waited for."""


@dataclass
class DemoWorld:
    sim: Simulator
    sim_server: SimServer
    settings: Settings
    app: web.Application
    service: Service
    base_url: str
    http: aiohttp.ClientSession
    wait_s: float = WAIT_S

    @property
    def db(self) -> Database:
        db = self.service.db
        assert db is not None
        return db

    @property
    def store(self) -> ReviewStore:
        assert self.service.review is not None
        return self.service.review.store

    # -- waiting --------------------------------------------------------------------------

    async def wait_for(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.wait_s
        while not await asyncio.to_thread(done):
            if time.monotonic() > deadline:
                raise Timeout(f"timed out after {self.wait_s:g} s waiting for {what}")
            await asyncio.sleep(0.01)

    async def settle(self, delivery_id: str | None = None) -> None:
        """Until the delivery is gated, the review pipeline decided on it, every review is
        posted and every merge attempt has ended."""
        if delivery_id is not None:
            await self.wait_for(
                f"delivery {delivery_id} to be gated", lambda: self._gated(delivery_id)
            )
            if await asyncio.to_thread(self._eligible, delivery_id):
                await self.wait_for(
                    f"the review pipeline to decide on delivery {delivery_id}",
                    lambda: self._reviewed(delivery_id),
                )
        await self.wait_for("every review to be posted", self._outbox_drained)
        merge = self.service.merge
        if merge is not None and merge.automerge is not None:
            try:
                await asyncio.wait_for(merge.automerge.idle(), self.wait_s)
            except TimeoutError:
                raise Timeout(f"timed out after {self.wait_s:g} s waiting for the merge") from None

    def _gated(self, delivery_id: str) -> bool:
        stored = journal.get_delivery(self.db, delivery_id)
        return stored is not None and stored.status in (journal.DONE, journal.FAILED)

    def _eligible(self, delivery_id: str) -> bool:
        return any(
            row.decision == Outcome.ELIGIBLE.value
            for row in decision_store.for_delivery(self.db, delivery_id)
        )

    def _reviewed(self, delivery_id: str) -> bool:
        with self.db.read() as tx:
            row = tx.one(
                "SELECT 1 FROM review_decisions WHERE delivery_id = ? AND decision NOT IN "
                "('superseded', 'reopened') LIMIT 1",  # recorded before the evaluation
                (delivery_id,),
            )
        return row is not None

    def _outbox_drained(self) -> bool:
        with self.db.read() as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM review_outbox WHERE status = 'pending'")
        return row is not None and row["n"] == 0

    # -- what happened --------------------------------------------------------------------

    def pull(self, forge: str, repo: str, number: int) -> SimPull:
        return self.sim.pull(forge, repo, number)

    def bot_reviews(self, forge: str, repo: str, number: int) -> list[SimReview]:
        return [r for r in self.pull(forge, repo, number).reviews if r.user == BOT]

    def latest(self, forge: str, repo: str, number: int) -> ReviewDecision | None:
        return self.store.latest_verdict(forge, repo, number)

    def decisions(self, forge: str, repo: str, number: int) -> list[ReviewDecision]:
        """Review decisions of the PR, oldest first."""
        return list(reversed(self.store.decisions(forge, repo, number)))

    def journal_size(self) -> int:
        with self.db.read() as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM deliveries")
        return int(row["n"]) if row is not None else 0

    def in_journal(self, delivery_id: str) -> bool:
        return journal.get_delivery(self.db, delivery_id) is not None

    async def counter(self, name: str, **labels: str) -> float:
        """A counter of the bot's ``/metrics`` (0 when it has no such sample yet), read as
        a scraper does: with a token of scope ``metrics``."""
        plain, _ = create_token(
            self.db,
            name=f"demo-scrape-{secrets.token_hex(4)}",
            scopes="metrics",
            repo=None,
            now=time.time(),
        )
        headers = {"Authorization": f"Bearer {plain}"}
        async with self.http.get(self.base_url + "/metrics", headers=headers) as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0


async def _first_sweep(service: Service, wait_s: float) -> None:
    """The start-up reconcile sweep ends before the story begins (it would otherwise race
    the first pull request)."""
    deadline = time.monotonic() + wait_s
    while service.reconciler is not None and service.reconciler.sweeps < 1:
        if time.monotonic() > deadline:
            raise Timeout("timed out waiting for the start-up reconcile sweep")
        await asyncio.sleep(0.01)


async def _quiesce(service: Service, wait_s: float) -> None:
    """Let the workers finish what they hold before the server stops: the story may end
    (a failed step) while a delivery is still being reviewed."""
    pool = service.pool
    if pool is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pool.wait_idle(), wait_s)


@contextlib.asynccontextmanager
async def demo_world(
    data_dir: Path, *, wait_s: float = WAIT_S, log: TextIO | None = None
) -> AsyncIterator[DemoWorld]:
    """Start the simulator and the bot; stop both (work in flight finishes) on exit.

    ``log``: the bot's log lines go there as JSON (its secrets redacted), one line per
    delivery, decision, review and merge, so each step can be found in it afterwards."""
    sim = Simulator()
    async with contextlib.AsyncExitStack() as stack:
        sim_server = await stack.enter_async_context(SimServer(sim, host="127.0.0.1", port=0))
        tokens = prepare_forges(sim)
        settings = demo_settings(data_dir, sim_server, tokens)
        if log is not None:
            configure_logging(settings, log_format="json", stream=log)
        service = build_service(
            settings,
            backoff_base_s=0.05,
            shutdown_grace_s=2.0,
            tools_endpoint=service_tools_sockets,
        )
        app = create_app(service)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            base = f"http://{host}:{port}"
            for forge in ("github", "gitea"):
                section: Any = getattr(settings, forge)
                sim.set_webhook(
                    forge,
                    url=f"{base}/webhooks/{forge}",
                    secret=section.webhook_secret.get_secret_value(),
                )
            await _first_sweep(service, wait_s)
            async with aiohttp.ClientSession() as http:
                yield DemoWorld(sim, sim_server, settings, app, service, base, http, wait_s)
        finally:
            await _quiesce(service, wait_s)
            await runner.cleanup()
