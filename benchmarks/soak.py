"""Soak: minutes of mixed webhooks against a real ``reviewbot serve`` while faults happen.

A forge simulator runs in this process with ``acme/api`` on GitHub and Gitea; the bot runs as
``python -m reviewbot serve`` with its SQLite file in a temporary folder. For ``--minutes``
(default 2) new PRs are opened and new heads pushed, each delivered as a webhook, with a
poison delivery now and then (a PR number past 64 bits, through the review API). Meanwhile:

- about one forge request in five fails (502, 503, 429, a read held past the client's
  timeout, a review applied whose answer is lost);
- every ``--kill-every`` seconds the server is killed with SIGKILL and started again;
- every ``--disk-every`` seconds its writes fail for a second (its file-size limit is
  lowered with ``prlimit``, so SQLite's writes fail as on a failing disk).

At the end the faults stop and the bot gets time to finish. It prints deliveries sent,
acknowledged, processed, dead (with reasons), lost (acknowledged and not in the journal:
must be 0), still queued when the settle time ran out, reviews posted, duplicates (more
than one review at one head: must be 0), heads left without a review, faults injected,
and the server's RSS at its start and end.

Usage:
  python benchmarks/soak.py                  # 2 minutes
  python benchmarks/soak.py --minutes 10 --seed 7
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import re
import signal
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from reviewbot.sim.serve_child import (
    BOT,
    FORGES,
    REPO,
    limit_file_size,
    prepare,
    serve_env,
    start_serve,
)
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.tokens import create_token
from reviewbot.workflowdb.bootstrap import open_store

SECRET = "soak-secret"
POISON_NUMBER = 2**63
FINISHED = ("done", "failed", "dead")


class Bot:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs  # each start's output goes to serve-N.log there
        self.starts = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.base = ""
        self.rss_kb: list[int] = []
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.starts += 1
        log = self.logs / f"serve-{self.starts}.log"

        def write(line: str) -> None:
            with log.open("a") as out:
                out.write(line)

        self.proc, self.base, self._reader = await start_serve(
            self.env, "--shutdown-grace", "2", on_line=write, line_s=60
        )

    def rss(self) -> int:
        assert self.proc is not None
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        m = re.search(r"VmRSS:\s+(\d+) kB", status)
        return int(m.group(1)) if m else 0

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 60)

    def disk(self, failing: bool) -> None:
        assert self.proc is not None
        if self.proc.returncode is not None:
            return
        limit_file_size(self.proc.pid, 0 if failing else None)


def forge_faults(sim: Simulator, rng: random.Random) -> None:
    """A new batch of forge faults: roughly one request in five of the next ones fails."""
    for forge in FORGES:
        kind = rng.choice(["502", "503", "429", "hold", "lost_review", "502_review"])
        if kind in ("502", "503"):
            sim.faults.add(forge, "GET", f"/repos/{REPO}/pulls/*", status=int(kind), times=2)
        elif kind == "429":
            sim.faults.add(forge, "GET", f"/repos/{REPO}/*", status=429, retry_after=0.1)
        elif kind == "hold":
            sim.faults.add(forge, "GET", f"/repos/{REPO}/commits/*", timeout=1.5)
        elif kind == "lost_review":
            sim.faults.add(
                forge, "POST", f"/repos/{REPO}/pulls/*/reviews", apply_then_fail=True, timeout=1.5
            )
        else:
            sim.faults.add(
                forge, "POST", f"/repos/{REPO}/pulls/*/reviews", apply_then_fail=True, status=502
            )


def rows(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    db = SQLiteDatabase(db_path, read_only=True)
    try:
        with db.read() as tx:
            return tx.all(sql, params)
    finally:
        db.close()


async def soak(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="reviewbot-soak-"))
    sim = Simulator()
    async with SimServer(sim) as sim_server, aiohttp.ClientSession() as http:
        tokens = prepare(sim)
        toml = tmp / "reviewbot.toml"
        toml.write_text(f'[repos."github:{REPO}"]\n[repos."gitea:{REPO}"]\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
        env |= serve_env(sim_server, tokens, config=toml, data_dir=tmp / "data", secret=SECRET)
        env |= {
            "REVIEWBOT_DELIVERY_MAX_ATTEMPTS": "3",
            "REVIEWBOT_DELIVERY_RETRY_BASE_S": "0.1",
            "REVIEWBOT_RECONCILE_INTERVAL_S": "5",
        }
        settings_db = tmp / "data" / "db" / "db.sqlite"
        from reviewbot.config import load_settings  # with the soak's environment

        os.environ.update({k: v for k, v in env.items() if k.startswith("REVIEWBOT_")})
        store = open_store(load_settings())
        review_token, _ = create_token(
            store, name="soak", scopes="review", repo=None, now=time.time()
        )
        store.close()

        bot = Bot(env, tmp)
        await bot.start()
        await asyncio.sleep(1.0)
        rss_start = bot.rss()
        for forge in FORGES:
            sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)

        counts: collections.Counter[str] = collections.Counter()
        acked: list[str] = []
        pulls: list[tuple[str, Any]] = []
        deadline = time.monotonic() + args.minutes * 60
        next_kill = time.monotonic() + args.kill_every
        next_disk = time.monotonic() + args.disk_every
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_kill:
                await bot.kill()
                counts["kills"] += 1
                await bot.start()
                for forge in FORGES:
                    sim.set_webhook(forge, url=f"{bot.base}/webhooks/{forge}", secret=SECRET)
                next_kill = time.monotonic() + args.kill_every
            if now >= next_disk:
                # Deliveries go on arriving while the disk fails for a second.
                bot.disk(True)
                counts["disk_faults"] += 1
                asyncio.get_running_loop().call_later(1.0, bot.disk, False)
                next_disk = time.monotonic() + args.disk_every
            if rng.random() < 0.2:
                forge_faults(sim, rng)
            forge = rng.choice(FORGES)
            mine = [p for f, p in pulls if f == forge]
            if mine and rng.random() < 0.3:
                pr = rng.choice(mine)
                sim.push(forge, REPO, pr.number)
                action = "synchronize"
            else:
                pr = sim.open_pr(forge, REPO, author="alice")
                pulls.append((forge, pr))
                action = "opened"
            head = sim.pull(forge, REPO, pr.number).head_sha
            sim.set_status(forge, REPO, head, "ci/test", "success")
            delivery = await sim.deliver_pull_request(forge, REPO, pr.number, action=action)
            counts["sent"] += 1
            if delivery.status is not None and 200 <= delivery.status < 300:
                acked.append(delivery.id)
            if rng.random() < 0.03:
                counts["sent"] += 1
                try:
                    async with http.post(
                        f"{bot.base}/api/v1/reviews",
                        json={"forge": "github", "repo": REPO, "number": POISON_NUMBER},
                        headers={"Authorization": f"Bearer {review_token}"},
                    ) as resp:
                        if resp.status == 202:
                            acked.append((await resp.json())["delivery_id"])
                            counts["poison"] += 1
                except aiohttp.ClientError:
                    pass
            await asyncio.sleep(args.pause)

        injected = sum(rule.hits for rule in sim.faults.rules)
        sim.faults.clear()
        rss_end = bot.rss()

        # The faults are over: give the bot time to finish what it acknowledged.
        marks = ",".join("?" * len(acked))
        settle_until = time.monotonic() + args.settle
        while time.monotonic() < settle_until:
            found = rows(
                settings_db,
                f"SELECT status FROM deliveries WHERE delivery_id IN ({marks})",
                tuple(acked),
            )
            jobs = rows(settings_db, "SELECT status FROM review_jobs WHERE status != 'done'")
            if len(found) == len(acked) and all(r[0] in FINISHED for r in found) and not jobs:
                break
            await asyncio.sleep(0.5)
        async with http.get(f"{bot.base}/readyz") as resp:
            ready = await resp.json()
        github_calls = sum(1 for r in sim.requests if r.forge == "github")
        await bot.stop()

        found = rows(
            settings_db,
            f"SELECT delivery_id, status, error FROM deliveries WHERE delivery_id IN ({marks})",
            tuple(acked),
        )
        status_of = {r[0]: r[1] for r in found}
        lost = [d for d in acked if d not in status_of]  # acknowledged, not in the journal
        unfinished = [d for d in acked if d in status_of and status_of[d] not in FINISHED]
        dead_reasons = collections.Counter(
            (r[2] or "?").split(":")[0][:60] for r in found if r[1] == "dead"
        )
        reviews = 0
        duplicates = 0
        heads_without_review = 0
        for forge, pr in pulls:
            pull = sim.pull(forge, REPO, pr.number)
            per_head = collections.Counter(r.commit_id for r in pull.reviews if r.user == BOT)
            reviews += sum(per_head.values())
            duplicates += sum(n - 1 for n in per_head.values() if n > 1)
            if per_head[pull.head_sha] == 0:
                heads_without_review += 1

    print(f"soak: {args.minutes:g} min, seed {args.seed} (data and server logs in {tmp})")
    print(f"deliveries sent:      {counts['sent']} ({counts['poison']} poison)")
    print(f"acknowledged:         {len(acked)} ({counts['sent'] - len(acked)} refused, not lost)")
    print(f"processed:            {sum(1 for s in status_of.values() if s in ('done', 'failed'))}")
    print(f"dead:                 {sum(dead_reasons.values())}")
    for reason, n in dead_reasons.most_common():
        print(f"  {n:4d} {reason}")
    print(f"lost:                 {len(lost)}")
    print(f"still queued at end:  {len(unfinished)} (in the journal; gated after a longer settle)")
    print(f"reviews posted:       {reviews} on {len(pulls)} PRs")
    print(f"duplicates:           {duplicates}")
    print(f"latest heads unreviewed: {heads_without_review}")
    print(
        f"faults injected:      {injected} forge, {counts['kills']} kill -9, "
        f"{counts['disk_faults']} disk"
    )
    start_mib, end_mib = rss_start / 1024, rss_end / 1024
    print(f"server RSS:           {start_mib:.1f} MiB at start, {end_mib:.1f} MiB at end")
    print(f"github requests:      {github_calls}")
    for check in ready.get("checks", []):
        print(f"  readyz {'ok  ' if check['ok'] else 'FAIL'} {check['name']}: {check['detail']}")
    if lost or duplicates:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill-every", type=float, default=40.0, metavar="SECONDS")
    parser.add_argument("--disk-every", type=float, default=25.0, metavar="SECONDS")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between deliveries")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to finish at the end")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    asyncio.run(soak(args))


if __name__ == "__main__":
    main()
