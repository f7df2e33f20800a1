"""The lease line across replicas: two real ``serve`` processes on one store (a SQLite data
directory shared by two ``--no-workers`` processes, or one PostgreSQL database), agents
calling each over HTTP. The line is the store's, so a waiter that joined on one replica is
granted before one that joined later on the other, whichever replica each asks."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from reviewbot.store.tokens import create_token
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.process_support import serve_process
from tests.integration.server_support import GITHUB_SECRET, WAIT_S
from tests.support.store_fixtures import seeded

pytestmark = pytest.mark.slow

HEAD = "a" * 40
TARGET = {"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger"}


class Agent:
    def __init__(self, http: aiohttp.ClientSession, token: str) -> None:
        self.http = http
        self.token = token

    async def call(self, base: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(base + path, json=body, headers=headers) as resp:
            return resp.status, await resp.json()

    async def register(self, base: str, name: str) -> str:
        body = {"name": name, "client": "agent", "session_id": name, "role": "merger"}
        status, answer = await self.call(base, "/api/v1/workers", body)
        assert status == 201, answer
        return str(answer["worker_identity"])

    async def acquire(self, base: str, worker: str, **extra: Any) -> tuple[int, Any]:
        body = {**TARGET, "worker_identity": worker, "head_sha": HEAD, **extra}
        return await self.call(base, "/api/v1/leases/acquire", body)

    async def release(self, base: str, worker: str, epoch: int) -> None:
        body = {**TARGET, "worker_identity": worker, "epoch": epoch}
        status, answer = await self.call(base, "/api/v1/leases/release", body)
        assert status == 200, answer


async def line_across_two_replicas(
    tmp_path: Path, paths: WorkflowPaths, env: dict[str, str]
) -> None:
    db = open_store(paths)
    try:
        token, _ = create_token(db, name="agents", scopes="lease,read", repo=None, now=time.time())
    finally:
        db.close()
    config = tmp_path / "reviewbot.toml"
    config.write_text("[defaults]\n")
    env = {
        **env,
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(paths.data_dir),
        "REVIEWBOT_GITHUB__WEBHOOK_SECRET": GITHUB_SECRET,
    }
    async with AsyncExitStack() as stack:
        one, two = [
            await stack.enter_async_context(serve_process("--no-workers", cwd=tmp_path, env=env))
            for _ in range(2)
        ]
        http = await stack.enter_async_context(aiohttp.ClientSession())
        agent = Agent(http, token)
        a = await agent.register(one.base, "a")
        b = await agent.register(two.base, "b")
        c = await agent.register(one.base, "c")

        status, held = await agent.acquire(one.base, a)
        assert status == 200, held
        status, refused = await agent.acquire(two.base, b, wait_s=0)
        assert (status, refused.get("position")) == (409, 1), refused
        status, refused = await agent.acquire(one.base, c, wait_s=0)
        assert (status, refused.get("position")) == (409, 2), refused
        # C asks on the other replica too: its place is the same, behind B
        status, refused = await agent.acquire(two.base, c, wait_s=0)
        assert (status, refused.get("position")) == (409, 2), refused

        # B waits on replica two; A releases on replica one: B's open call is granted
        waiting = asyncio.create_task(agent.acquire(two.base, b, wait_s=20))
        await asyncio.sleep(0.3)
        await agent.release(one.base, a, held["epoch"])
        status, granted = await asyncio.wait_for(waiting, WAIT_S)
        assert status == 200 and granted["holder"] == b, granted
        status, refused = await agent.acquire(two.base, c)
        assert (status, refused["holder"]) == (409, b)

        await agent.release(two.base, b, granted["epoch"])
        status, mine = await agent.acquire(one.base, c)
        assert status == 200 and mine["holder"] == c, mine
        assert mine["epoch"] > granted["epoch"]  # another process: above its reservation


async def test_the_line_holds_across_two_serve_processes_on_one_sqlite_store(
    tmp_path: Path,
) -> None:
    paths = WorkflowPaths(seeded(tmp_path / "data"))
    await line_across_two_replicas(tmp_path, paths, {})


async def test_the_line_holds_across_two_replicas_on_postgresql(
    tmp_path: Path, postgres_store_url: str
) -> None:
    paths = WorkflowPaths(tmp_path / "data", None, postgres_store_url)
    await line_across_two_replicas(tmp_path, paths, {"REVIEWBOT_DATABASE_URL": postgres_store_url})
