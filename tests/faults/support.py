"""The fault campaign's world: a forge simulator in the test process, ``reviewbot serve`` as a
real subprocess against it, and the real SQLite file both sides can read.

Every fault is injected at an edge a real deployment has: a signal to the process, the
simulator's fault rules (5xx, held answers), a socket that never finishes its body, and the
operating system's file-size limit of the server process (``prlimit``), which makes SQLite's
writes fail exactly as they fail on a full or failing disk.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from reviewbot.sim.serve_child import BOT as BOT  # the campaign's tests import these here
from reviewbot.sim.serve_child import FORGES as FORGES
from reviewbot.sim.serve_child import REPO as REPO
from reviewbot.sim.serve_child import (
    limit_file_size,
    prepare,
    serve_env,
    start_serve,
)
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import Database, SQLiteDatabase
from reviewbot.store.postgres import PostgresDatabase
from reviewbot.store.tokens import create_token
from tests.integration.process_support import clean_env
from tests.support.store_fixtures import seeded

SECRET = "s3cret"
APPROVED = "APPROVED"
FINISHED = ("done", "failed", "dead")
LIMIT_S = 40.0  # a bound for waits that normally end within a second or two


@dataclass
class Bot:
    """One ``reviewbot serve`` process."""

    proc: asyncio.subprocess.Process
    base: str
    output: list[str] = field(default_factory=list)  # every line it printed so far
    reader: asyncio.Task[None] | None = None

    def limit_file_size(self, limit: int | None) -> None:
        """A failing disk (see :func:`~reviewbot.sim.serve_child.limit_file_size`)."""
        limit_file_size(self.proc.pid, limit)


@dataclass
class World:
    tmp: Path
    sim: Simulator
    sim_server: SimServer
    env: dict[str, str]
    http: aiohttp.ClientSession

    @property
    def db_path(self) -> Path:
        return self.tmp / "data" / "db" / "db.sqlite"

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        db = SQLiteDatabase(self.db_path)
        try:
            with db.read() as tx:
                return [dict(r) for r in tx.all(sql, params)]
        finally:
            db.close()

    def token(self, scopes: str) -> str:
        url = self.env.get("REVIEWBOT_DATABASE_URL", "")
        db: Database = (
            PostgresDatabase(url, pool_size=1)
            if url.startswith("postgresql")
            else SQLiteDatabase(self.db_path)
        )
        try:
            plain, _ = create_token(
                db,
                name=f"t-{time.monotonic_ns()}",
                scopes=scopes,
                repo=None,
                now=time.time(),
            )
        finally:
            db.close()
        return plain

    def bot_reviews(self, forge: str, number: int) -> list[Any]:
        return [r for r in self.sim.pull(forge, REPO, number).reviews if r.user == BOT]

    def point_webhooks(self, bot: Bot) -> None:
        for forge in FORGES:
            self.sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)

    @asynccontextmanager
    async def serving(
        self, *args: str, env: Mapping[str, str] | None = None, kill: bool = True
    ) -> AsyncIterator[Bot]:
        """A ``reviewbot serve`` until the block ends (then SIGTERM, SIGKILL if it hangs)."""
        bot = await start(self.env | dict(env or {}), *args)
        self.point_webhooks(bot)
        try:
            yield bot
        finally:
            await stop(bot)

    async def get(self, bot: Bot, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.get(bot.base + path, headers=headers) as resp:
            return resp.status, await resp.json()

    async def post(
        self, bot: Bot, path: str, body: Any, token: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.post(bot.base + path, json=body, headers=headers) as resp:
            return resp.status, await resp.json()

    def run_cli(self, *args: str) -> tuple[int, str]:
        import subprocess  # only the CLI checks of a campaign start one-shot processes

        done = subprocess.run(
            [sys.executable, "-m", "reviewbot", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr


@asynccontextmanager
async def world(
    tmp: Path, *, rules: str = "", settings: Mapping[str, str] | None = None
) -> AsyncIterator[World]:
    """``rules``: TOML lines for both repositories' sections."""
    sim = Simulator()
    async with SimServer(sim) as sim_server, aiohttp.ClientSession() as http:
        tokens = prepare(sim)
        toml = tmp / "reviewbot.toml"
        toml.write_text(f'[repos."github:{REPO}"]\n{rules}\n[repos."gitea:{REPO}"]\n{rules}\n')
        env = clean_env(
            {
                **serve_env(
                    sim_server, tokens, config=toml, data_dir=seeded(tmp / "data"), secret=SECRET
                ),
                "REVIEWBOT_DELIVERY_RETRY_BASE_S": "0.05",
                **(settings or {}),
            }
        )
        yield World(tmp, sim, sim_server, env, http)


async def start(env: Mapping[str, str], *args: str) -> Bot:
    output: list[str] = []
    proc, base, reader = await start_serve(env, *args, on_line=output.append)
    return Bot(proc, base, output, reader)


async def stop(bot: Bot, timeout_s: float = 15.0) -> int:
    if bot.proc.returncode is None:
        bot.proc.terminate()
        try:
            await asyncio.wait_for(bot.proc.wait(), timeout_s)
        except TimeoutError:
            bot.proc.kill()
            await bot.proc.wait()
    assert bot.proc.returncode is not None
    return bot.proc.returncode


async def wait_for(
    predicate: Callable[[], bool],
    what: str,
    limit_s: float = LIMIT_S,
    explain: Callable[[], object] | None = None,
) -> None:
    """Until ``predicate`` holds; on timeout the failure carries ``explain()`` (the state
    that tells why, read at that moment)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            why = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out waiting for {what}{why}")
        await asyncio.sleep(0.05)


async def wait_ready(w: World, bot: Bot, limit_s: float = LIMIT_S) -> dict[str, Any]:
    """Until ``/readyz`` answers 200; its last answer."""
    deadline = time.monotonic() + limit_s
    while True:
        status, body = await w.get(bot, "/readyz")
        if status == 200:
            return dict(body)
        if time.monotonic() > deadline:
            raise AssertionError(f"never ready: {body}")
        await asyncio.sleep(0.1)


def acked_ids(deliveries: list[Any]) -> list[str]:
    """The simulator's deliveries the bot acknowledged (2xx)."""
    return [d.id for d in deliveries if d.status is not None and 200 <= d.status < 300]


def assert_every_acked_delivery_finished(w: World, ids: list[str]) -> None:
    """Nothing acknowledged lost nor processed twice: each id is in the journal, finished,
    and has one decision
    (``failed``: gated to an error decision such as ``forge_error``; ``dead``: its
    ``delivery_failed``)."""
    marks = ",".join("?" * len(ids))
    rows = w.rows(
        f"SELECT d.delivery_id, d.status, (SELECT count(*) FROM pr_gate_decisions c "
        f"WHERE c.delivery_id = d.delivery_id) AS n FROM deliveries d "
        f"WHERE d.delivery_id IN ({marks})",
        tuple(ids),
    )
    by_id = {r["delivery_id"]: r for r in rows}
    missing = sorted(set(ids) - set(by_id))
    assert not missing, f"acknowledged and lost: {missing}"
    unfinished = {i: r["status"] for i, r in by_id.items() if r["status"] not in FINISHED}
    assert not unfinished, unfinished
    undecided = [i for i, r in by_id.items() if r["n"] == 0]
    assert not undecided, f"finished without a decision: {undecided}"
    # Decisions and the finish commit together: a delivery gated twice would have two.
    twice = {i: r["n"] for i, r in by_id.items() if r["n"] > 1}
    assert not twice, f"processed more than once: {twice}"


def all_finished(w: World, ids: list[str]) -> bool:
    marks = ",".join("?" * len(ids))
    rows = w.rows(
        f"SELECT status FROM deliveries WHERE delivery_id IN ({marks})",
        tuple(ids),
    )
    return len(rows) == len(ids) and all(r["status"] in FINISHED for r in rows)


def review_jobs_settled(w: World) -> bool:
    jobs = w.rows("SELECT status FROM review_jobs")
    outbox = w.rows("SELECT status FROM review_outbox")
    return all(j["status"] == "done" for j in jobs) and all(
        o["status"] != "pending" for o in outbox
    )


def every_head_reviewed(w: World, pulls: list[tuple[str, Any]]) -> bool:
    """Each PR has a bot review at its head (posting may trail the job's own row)."""
    return all(
        pr.head_sha in {r.commit_id for r in w.bot_reviews(forge, pr.number)} for forge, pr in pulls
    )


def unreviewed(w: World, pulls: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each PR without a bot review at its head: its gate decisions and its review jobs."""
    out: dict[str, Any] = {}
    for forge, pr in pulls:
        if pr.head_sha in {r.commit_id for r in w.bot_reviews(forge, pr.number)}:
            continue
        decisions = w.rows(
            "SELECT d.delivery_id, d.decision, d.reason_code, j.status AS delivery"
            " FROM pr_gate_decisions d LEFT JOIN deliveries j ON j.delivery_id = d.delivery_id"
            " WHERE d.forge = ? AND d.number = ? ORDER BY d.id",
            (forge, pr.number),
        )
        jobs = w.rows(
            "SELECT status, attempts, last_error FROM review_jobs WHERE forge = ? AND number = ?",
            (forge, pr.number),
        )
        out[f"{forge}#{pr.number}"] = {"decisions": decisions, "jobs": jobs}
    return out


def assert_one_review_per_head(w: World, pulls: list[tuple[str, Any]]) -> None:
    """No review posted twice, and none missing: exactly one bot review per (PR, head)."""
    for forge, pr in pulls:
        heads = [r.commit_id for r in w.bot_reviews(forge, pr.number)]
        assert heads == [pr.head_sha], (forge, pr.number, heads)
