"""The whole bot (server, review pipeline, lease and merge API) against the forge simulator.

Both run on loopback over real HTTP; the store is a real SQLite file in the test's folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.server.app import create_app
from reviewbot.service import MergeParts, Parts, Service, build_service
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.tokens import create_token
from tests.support.store_fixtures import seeded

REPO = "acme/api"


def queued_repo(sim: Simulator, forge: str, ci_s: float) -> None:
    """Make ``REPO`` ready for the merge queue: its CI takes ``ci_s`` on the simulator's
    clock, and on Gitea it allows the manual merges the queue records landed PRs with
    (docs/merge-queue.md)."""
    sim.configure_ci(forge, REPO, duration=ci_s)
    sim.repo(forge, REPO).allow_manual_merge = True


SECRET = "s3cret"
BOT = "reviewbot"
FORGES = ("github", "gitea")
APPROVED = "APPROVED"
CHANGES = {"github": "CHANGES_REQUESTED", "gitea": "REQUEST_CHANGES"}
WAIT_S = 30.0  # a bound for waits that normally end in milliseconds, never a speed check


def prepare_sim(sim: Simulator, required: tuple[str, ...]) -> dict[str, str]:
    tokens = {}
    for forge in FORGES:
        tokens[forge] = sim.add_user(forge, BOT, bot=True)
        for user in ("alice", "bob", "carol"):
            sim.add_user(forge, user)
        sim.create_repo(forge, REPO, default_branch="main")
        if required:
            sim.require_checks(forge, REPO, "main", list(required))
    return tokens


def set_check(w: Any, forge: str, sha: str, state: str, context: str = "ci/test") -> Any:
    """A commit status of the required check (with a link, as CI systems send)."""
    sim = w.sim if hasattr(w, "sim") else w
    return sim.set_status(
        forge, REPO, sha, context, state, target_url=f"https://ci.example/{sha[:8]}"
    )


def bot_settings(
    data_dir: Path, sim_server: SimServer, tokens: dict[str, str], **kw: Any
) -> Settings:
    rules = kw.pop("rules", {})
    values: dict[str, Any] = {
        "data_dir": seeded(data_dir),
        "github": {
            "api_url": sim_server.github_api_url,
            "token": tokens["github"],
            "webhook_secret": SECRET,
            "bot_login": BOT,
        },
        "gitea": {
            "url": sim_server.gitea_url,
            "token": tokens["gitea"],
            "webhook_secret": SECRET,
            "bot_login": BOT,
        },
        "repos": {f"github:{REPO}": dict(rules), f"gitea:{REPO}": dict(rules)},
        "reconcile_interval_s": 3600.0,
        "workers": 2,
    }
    values.update(kw)
    return Settings(**values)


@dataclass
class World:
    sim: Simulator
    sim_server: SimServer
    settings: Settings
    app: web.Application
    service: Service
    base: str
    http: aiohttp.ClientSession

    @property
    def db(self) -> SQLiteDatabase:
        db = self.service.db
        assert db is not None
        return db

    @property
    def api(self) -> MergeParts:
        assert self.service.merge is not None
        return self.service.merge

    def token(self, scopes: str, *, repo: str | None = None) -> str:
        plain, _ = create_token(
            self.db,
            name=f"t-{uuid.uuid4().hex[:8]}",
            scopes=scopes,
            repo=repo,
            now=1_767_225_600.0,
        )
        return plain

    async def call(
        self, method: str, path: str, token: str | None, body: Any = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as r:
            return r.status, await r.json()

    async def post_bytes(self, path: str, token: str, data: bytes) -> tuple[int, dict[str, Any]]:
        """POST ``data`` as it is (a body no model would write), as JSON."""
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        async with self.http.post(self.base + path, data=data, headers=headers) as r:
            return r.status, await r.json()

    async def settle(self) -> None:
        """Until every delivery is handled, every outbox row finished and no merge runs."""
        st = self.service
        assert st.pool is not None
        deadline = time.monotonic() + WAIT_S
        while True:
            await asyncio.wait_for(st.pool.wait_idle(), WAIT_S)
            await asyncio.wait_for(self.api.automerge.idle(), WAIT_S)
            with self.db.read() as tx:
                pending = tx.one("SELECT COUNT(*) AS n FROM review_outbox WHERE status = 'pending'")
                queued = tx.one(
                    "SELECT COUNT(*) AS n FROM deliveries WHERE status IN ('queued', 'processing')"
                )
            if pending is not None and queued is not None and pending["n"] == queued["n"] == 0:
                await asyncio.wait_for(st.pool.wait_idle(), WAIT_S)
                if not self.api.automerge._tasks:
                    return
            if time.monotonic() > deadline:
                raise AssertionError("the bot did not settle")
            await asyncio.sleep(0.02)

    def bot_reviews(self, forge: str, number: int) -> list[Any]:
        return [r for r in self.sim.pull(forge, REPO, number).reviews if r.user == BOT]

    def merge_requests(self, forge: str, number: int) -> list[Any]:
        method = "PUT" if forge == "github" else "POST"
        path = f"/repos/{REPO}/pulls/{number}/merge"
        return [r for r in self.sim.requests if r.method == method and r.path.endswith(path)]


@contextlib.asynccontextmanager
async def bot_world(
    tmp_path: Path,
    sim: Simulator,
    sim_server: SimServer,
    *,
    required: tuple[str, ...] = ("ci/test",),
    clock: Clock = time.time,
    **kw: Any,
) -> AsyncIterator[World]:
    """``clock``: the bot's (the simulator's, for a test that moves time by hand)."""
    tokens = prepare_sim(sim, required)
    settings = bot_settings(tmp_path / "data", sim_server, tokens, **kw)
    service = build_service(
        settings,
        clock=clock,
        parts=Parts.SERVE & ~Parts.RECONCILE,
        backoff_base_s=0.05,
        shutdown_grace_s=2.0,
    )
    app = create_app(service)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    for forge in FORGES:
        sim.set_webhook(forge, url=f"{base}/webhooks/{forge}", secret=SECRET)
    try:
        async with aiohttp.ClientSession() as http:
            yield World(sim, sim_server, settings, app, service, base, http)
    finally:
        await runner.cleanup()


def green_approved_pr(w: World, forge: str, *, reviewer: str = "bob") -> Any:
    pr = w.sim.open_pr(forge, REPO, author="alice")
    set_check(w, forge, pr.head_sha, "success")
    w.sim.submit_review(forge, REPO, pr.number, reviewer=reviewer, state="APPROVED")
    return pr


class Merger:
    """An outside merger session using only the HTTP API."""

    def __init__(self, w: World, name: str = "agent") -> None:
        self.w = w
        self.name = name
        self.token = w.token("lease,merge,read")
        self.identity = ""

    async def register(self) -> str:
        status, body = await self.w.call(
            "POST",
            "/api/v1/workers",
            self.token,
            {"name": self.name, "client": "test", "session_id": "s", "role": "merger"},
        )
        assert status == 201, body
        self.identity = body["worker_identity"]
        return self.identity

    async def acquire(self, forge: str, number: int, head: str) -> int:
        status, body = await self.w.call(
            "POST",
            "/api/v1/leases/acquire",
            self.token,
            {
                "forge": forge,
                "repo": REPO,
                "number": number,
                "role": "merger",
                "worker_identity": self.identity,
                "head_sha": head,
            },
        )
        assert status == 200, body
        epoch: int = body["epoch"]
        return epoch

    async def release(self, forge: str, number: int, epoch: int) -> None:
        status, body = await self.w.call(
            "POST",
            "/api/v1/leases/release",
            self.token,
            {
                "forge": forge,
                "repo": REPO,
                "number": number,
                "role": "merger",
                "worker_identity": self.identity,
                "epoch": epoch,
            },
        )
        assert status == 200, body

    async def merge(
        self, forge: str, number: int, head: str, epoch: int, **extra: Any
    ) -> tuple[int, dict[str, Any]]:
        return await self.w.call(
            "POST",
            "/api/v1/merges",
            self.token,
            {
                "forge": forge,
                "repo": REPO,
                "number": number,
                "head_sha": head,
                "worker_identity": self.identity,
                "epoch": epoch,
                **extra,
            },
        )

    async def lease(self, forge: str, number: int) -> dict[str, Any]:
        status, body = await self.w.call(
            "GET", f"/api/v1/leases?forge={forge}&repo={REPO}&number={number}", self.token
        )
        assert status == 200
        merger = [x for x in body["leases"] if x["target"]["role"] == "merger"]
        assert len(merger) == 1
        return merger[0]
