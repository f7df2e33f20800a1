"""Running the real server on loopback for the server tests, and talking to it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from reviewbot.config import GiteaSettings, GitHubSettings, RepoRules, Settings
from reviewbot.core.clock import Clock
from reviewbot.forges.base import Forge
from reviewbot.ingress.signatures import sign_gitea, sign_github
from reviewbot.runtime.ingestion.gate_runner import EligibleHook
from reviewbot.server.app import create_app
from reviewbot.server.app_keys import SERVICE
from reviewbot.service import Parts, Service, build_service
from reviewbot.store import decisions, journal
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.journal import StoredDelivery
from reviewbot.store.tokens import create_token
from tests.support.store_fixtures import seeded

GITHUB_SECRET = "github-webhook-secret"
GITEA_SECRET = "gitea-webhook-secret"
WAIT_S = 20.0  # a bound for waits that normally end in milliseconds, never a speed check


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "data_dir": seeded(data_dir),
        "github": GitHubSettings(webhook_secret=GITHUB_SECRET),
        "gitea": GiteaSettings(webhook_secret=GITEA_SECRET),
        "defaults": RepoRules(),
        "workers": 2,
    }
    fields.update(overrides)
    return Settings(**fields)


@dataclass
class Running:
    app: web.Application
    base: str
    http: aiohttp.ClientSession

    @property
    def service(self) -> Service:
        return self.app[SERVICE]

    @property
    def db(self) -> SQLiteDatabase:
        db = self.service.db
        assert db is not None
        return db

    def token(self, scopes: str, *, name: str | None = None, repo: str | None = None) -> str:
        plain, _ = create_token(
            self.db,
            name=name or f"t-{uuid.uuid4().hex[:8]}",
            scopes=scopes,
            repo=repo,
            now=1_767_225_600.0,
        )
        return plain

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        async with self.http.post(self.base + path, data=body, headers=dict(headers)) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else {}

    async def get(self, path: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.get(self.base + path, headers=headers) as resp:
            return resp.status, await resp.json()

    async def scrape(self) -> str:
        """The ``/metrics`` page, as a scraper holding a ``metrics`` token reads it."""
        headers = {"Authorization": f"Bearer {self.token('metrics')}"}
        async with self.http.get(self.base + "/metrics", headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.text()

    async def github(
        self,
        event: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = GITHUB_SECRET,
        signature: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        }
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        elif secret is not None:
            headers["X-Hub-Signature-256"] = sign_github(secret.encode(), body)
        headers.update(extra or {})
        return await self.post("/webhooks/github", body, headers)

    async def gitea(
        self,
        event_type: str,
        body: bytes,
        *,
        delivery_id: str | None = None,
        secret: str | None = GITEA_SECRET,
        forgejo: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        prefix = "X-Forgejo" if forgejo else "X-Gitea"
        headers = {
            "Content-Type": "application/json",
            f"{prefix}-Event-Type": event_type,
            f"{prefix}-Event": event_type.split("_review")[0]
            if "_review_" in event_type
            else event_type,
            f"{prefix}-Delivery": delivery_id or str(uuid.uuid4()),
            f"{prefix}-Signature": sign_gitea(secret.encode(), body) if secret else "",
        }
        headers.update(extra or {})
        return await self.post("/webhooks/gitea", body, headers)

    async def wait_done(self, delivery_id: str) -> StoredDelivery:
        """Until the worker finished the delivery (done or failed); 20 s at most."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            stored = journal.get_delivery(self.db, delivery_id)
            if stored is not None and stored.status in (journal.DONE, journal.FAILED):
                return stored
            if loop.time() > deadline:
                raise AssertionError(f"delivery {delivery_id} not finished: {stored}")
            await asyncio.sleep(0.02)

    async def settle(self) -> None:
        """Until the workers are idle: every batch recorded and its eligible hooks called."""
        pool = self.service.pool
        if pool is not None:
            await asyncio.wait_for(pool.wait_idle(), WAIT_S)

    async def decisions_of(self, delivery_id: str) -> list[DecisionRecord]:
        await self.wait_done(delivery_id)
        await self.settle()
        return decisions.for_delivery(self.db, delivery_id)

    def stored_ids(self) -> list[str]:
        with self.db.read() as tx:
            rows = tx.all("SELECT delivery_id FROM deliveries ORDER BY delivery_id")
        return [r["delivery_id"] for r in rows]


@asynccontextmanager
async def running_server(
    settings: Settings,
    *,
    forges: Mapping[str, Forge] | None = None,
    on_eligible: EligibleHook | None = None,
    run_workers: bool = True,
    shutdown_grace_s: float = 10.0,
    clock: Clock = time.time,
) -> AsyncIterator[Running]:
    # The gate and the lease and merge API, without the review pipeline: a test gives the
    # gate its own hook.
    parts = Parts.JOURNAL | Parts.MERGE | Parts.AUTOMERGE
    service = build_service(
        settings,
        forges=forges,
        on_eligible=on_eligible,
        parts=parts | Parts.WORKERS if run_workers else parts,
        shutdown_grace_s=shutdown_grace_s,
        clock=clock,
    )
    app = create_app(service)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            yield Running(app, f"http://127.0.0.1:{server.port}", http)
    finally:
        await server.close()


@dataclass
class SimWorld:
    """A forge simulator on loopback with ``acme/api`` on both forges, and settings for it."""

    sim: Any
    server: Any
    settings: Settings
    author_token: str


@asynccontextmanager
async def sim_world(data_dir: Path, **overrides: Any) -> AsyncIterator[SimWorld]:
    from reviewbot.sim import SimServer, Simulator

    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        tokens = {}
        for forge in ("github", "gitea"):
            tokens[forge] = sim.add_user(forge, "reviewbot", bot=True)
            author = sim.add_user(forge, "alice")
            sim.add_user(forge, "mallory")
            sim.create_repo(forge, "acme/api", default_branch="main")
            sim.set_permission(forge, "acme/api", "alice", "write")
            sim.set_permission(forge, "acme/api", "mallory", "read")
        fields: dict[str, Any] = {
            "github": GitHubSettings(
                api_url=sim_server.github_api_url,
                token=tokens["github"],
                webhook_secret=GITHUB_SECRET,
                bot_login="reviewbot",
            ),
            "gitea": GiteaSettings(
                url=sim_server.gitea_url,
                token=tokens["gitea"],
                webhook_secret=GITEA_SECRET,
                bot_login="reviewbot",
            ),
        }
        fields.update(overrides)
        yield SimWorld(sim, sim_server, make_settings(data_dir, **fields), author)


def point_webhooks(world: SimWorld, running: Running) -> None:
    world.sim.set_webhook("github", url=running.base + "/webhooks/github", secret=GITHUB_SECRET)
    world.sim.set_webhook("gitea", url=running.base + "/webhooks/gitea", secret=GITEA_SECRET)
