"""Replicas on PostgreSQL: end-to-end reviews per second and forge API calls per reviewed PR
with 1, 2 and 3 work replicas, against the forge simulator.

Needs a PostgreSQL server whose user may create databases, named by
``REVIEWBOT_TEST_DATABASE_URL`` (or ``--database-url``); it does not start one itself. The
throw-away cluster of ``.ci/postgres`` is the easy way:

    .ci/postgres .venv/bin/python benchmarks/replicas.py                # 200 PRs, 1, 2, 3
    .ci/postgres .venv/bin/python benchmarks/replicas.py --prs 100 --replicas 1,3 --json

For each replica count the run gets a fresh database (the bot's schema applied once, then
dropped at the end). The simulator runs in this process with ``acme/api`` requiring
``ci/test``; each replica is a real ``reviewbot serve`` (``--role all``: each acknowledges
and works) with its own data directory. The PRs are opened with green checks, then one
``opened`` webhook per PR is sent, round-robin over the replicas (a load balancer's view),
all at once (``--concurrency`` in flight). Timed from the first webhook to the last PR's
state comment (the last write of a PR). Reported per replica count: reviews per second and
the ratio to one replica, p50/p99 latency from webhook to posted review, duplicate reviews
(must be 0), and forge API calls per reviewed PR counted from the simulator's request log,
with ``304 Not Modified`` answers (ETag cache hits) counted apart, and by operation.

On a machine with few cores the replicas, PostgreSQL and the simulator share them: the
ratio says how far the work spreads, not what separate machines would give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import resource
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

sys.path.insert(0, str(Path(__file__).resolve().parent))
from review import BOT, REPO, SECRET, percentile

URL_ENV = "REVIEWBOT_TEST_DATABASE_URL"


@contextmanager
def fresh_database(admin_url: str) -> Any:
    """A new database on the server of ``admin_url`` with the bot's schema; dropped after."""
    name = f"rb_bench_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(admin_url)._replace(path="/" + name))
    try:
        with tempfile.TemporaryDirectory(prefix="reviewbot-bench-schema-") as tmp:
            open_store(WorkflowPaths(Path(tmp), None, url)).close()
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bot_env(
    tmp: Path, sim_server: SimServer, tokens: dict[str, str], url: str, workers: int
) -> dict[str, str]:
    config = tmp / "reviewbot.toml"
    config.write_text(f'[repos."github:{REPO}"]\nrequired_checks = ["ci/test"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    env.update(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATABASE_URL": url,
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITHUB__BOT_LOGIN": BOT,
            "REVIEWBOT_WORKERS": str(workers),
        }
    )
    return env


async def start_bot(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reviewbot",
        "serve",
        "--port",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        if not line:
            raise RuntimeError("reviewbot serve exited before listening")
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            # keep draining its output so the pipe never fills
            asyncio.get_running_loop().create_task(_drain(proc.stdout))
            return proc, m.group(1)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def run(
    admin_url: str, replicas: int, prs: int, concurrency: int, workers: int
) -> dict[str, Any]:
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = {"github": sim.add_user("github", BOT, bot=True)}
        sim.add_user("github", "alice")
        sim.create_repo("github", REPO)
        with fresh_database(admin_url) as url, tempfile.TemporaryDirectory() as tmp:
            procs: list[asyncio.subprocess.Process] = []
            own = resource.getrusage(resource.RUSAGE_SELF)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                env = bot_env(Path(tmp), sim_server, tokens, url, workers)
                started = await asyncio.gather(
                    *(
                        start_bot(env | {"REVIEWBOT_DATA_DIR": str(Path(tmp) / f"r{i}")})
                        for i in range(replicas)
                    )
                )
                procs = [p for p, _ in started]
                result = await _measure(sim, [base for _, base in started], prs, concurrency)
            finally:
                for proc in procs:
                    if proc.returncode is None:
                        proc.terminate()
                for proc in procs:
                    await proc.wait()
            # Where the CPU went (start-up included): the simulator with this driver, and
            # the replicas together. PostgreSQL's own is not counted.
            result["sim_cpu_s"] = round(cpu(resource.RUSAGE_SELF) - cpu_of(own), 1)
            result["replicas_cpu_s"] = round(cpu(resource.RUSAGE_CHILDREN) - cpu_of(children), 1)
            return result


def cpu_of(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def cpu(who: int) -> float:
    return cpu_of(resource.getrusage(who))


async def _measure(sim: Simulator, bases: list[str], prs: int, concurrency: int) -> dict[str, Any]:
    # Each replica's reconcile sweep lists the open PRs once at start; let those finish first
    # so they do not race the webhooks being measured.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = [r for r in sim.requests if r.method == "GET" and r.path == f"/repos/{REPO}/pulls"]
        if len(listed) >= len(bases):
            break
        await asyncio.sleep(0.05)
    pulls = []
    for n in range(prs):
        pr = sim.open_pr("github", REPO, author="alice", head_ref=f"feature-{n}", title=f"PR {n}")
        sim.set_status("github", REPO, pr.head_sha, "ci/test", "success")
        pulls.append(pr)
    sim.clear_requests()

    sent_at: dict[int, float] = {}
    gate = asyncio.Semaphore(concurrency)

    async def deliver(index: int, number: int) -> None:
        async with gate:
            sent_at[number] = sim.now()
            # Round-robin: the simulator reads its target before its first await, so setting
            # it here sends exactly this webhook to this replica.
            base = bases[index % len(bases)]
            sim.set_webhook("github", url=f"{base}/webhooks/github", secret=SECRET)
            delivery = await sim.deliver_pull_request("github", REPO, number, action="opened")
            if delivery.status != 202:
                raise RuntimeError(f"delivery for #{number} answered {delivery.status}")

    def state_comments() -> int:
        return sum(
            1 for p in pulls for c in sim.pull("github", REPO, p.number).comments if c.user == BOT
        )

    started = time.perf_counter()
    await asyncio.gather(*(deliver(i, pr.number) for i, pr in enumerate(pulls)))
    deadline = time.monotonic() + max(180.0, prs * 1.0)
    while time.monotonic() < deadline:
        if state_comments() >= len(pulls):
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await asyncio.sleep(1.0)  # anything late (a duplicate) would land now

    latencies = []
    duplicates = 0
    reviewed = 0
    for pr in pulls:
        mine = [r for r in sim.pull("github", REPO, pr.number).reviews if r.user == BOT]
        if mine:
            reviewed += 1
            first = min(r.submitted_at or r.updated_at for r in mine)
            latencies.append(first - sent_at[pr.number])
        duplicates += max(0, len(mine) - 1)

    calls: Counter[str] = Counter()
    cached: Counter[str] = Counter()
    for record in sim.requests:
        if record.forge != "github":
            continue
        op = record.operation_id or f"{record.method} {record.path}"
        (cached if record.status == 304 else calls)[op] += 1
    per = max(reviewed, 1)
    return {
        "replicas": len(bases),
        "prs": prs,
        "reviewed": reviewed,
        "duplicate_reviews": duplicates,
        "state_comments": state_comments(),
        "seconds": round(elapsed, 3),
        "reviews_per_second": round(reviewed / elapsed, 2) if elapsed else 0.0,
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "calls_per_pr": round(sum(calls.values()) / per, 3),
        "not_modified_304_per_pr": round(sum(cached.values()) / per, 3),
        "calls_per_pr_by_operation": {op: round(n / per, 3) for op, n in sorted(calls.items())},
        "not_modified_304_per_pr_by_operation": {
            op: round(n / per, 3) for op, n in sorted(cached.items())
        },
    }


def table(results: list[dict[str, Any]]) -> str:
    one = next((r for r in results if r["replicas"] == 1), results[0])
    head = (
        f"{'replicas':>8} {'PRs':>5} {'reviewed':>8} {'dup':>4} {'seconds':>8} "
        f"{'reviews/s':>9} {'vs 1':>5} {'p50 ms':>8} {'p99 ms':>8} {'calls/PR':>8} {'304/PR':>7}"
        f" {'sim CPU s':>9} {'bot CPU s':>9}"
    )
    lines = [head]
    for r in results:
        ratio = (
            r["reviews_per_second"] / one["reviews_per_second"] if one["reviews_per_second"] else 0
        )
        lines.append(
            f"{r['replicas']:>8} {r['prs']:>5} {r['reviewed']:>8} {r['duplicate_reviews']:>4} "
            f"{r['seconds']:>8.1f} {r['reviews_per_second']:>9.2f} {ratio:>5.2f} "
            f"{r['latency_p50_ms']:>8.0f} {r['latency_p99_ms']:>8.0f} "
            f"{r['calls_per_pr']:>8.2f} {r['not_modified_304_per_pr']:>7.2f}"
            f" {r.get('sim_cpu_s', 0):>9.1f} {r.get('replicas_cpu_s', 0):>9.1f}"
        )
    ops = sorted({op for r in results for op in r["calls_per_pr_by_operation"]})
    lines += ["", "GitHub calls per reviewed PR by operation (304 answers in brackets):"]
    for op in ops:
        cells = "".join(
            f" {r['calls_per_pr_by_operation'].get(op, 0):>6.2f}"
            f" [{r['not_modified_304_per_pr_by_operation'].get(op, 0):.2f}]"
            for r in results
        )
        lines.append(f"  {op:44}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=200, help="pull requests per run (200)")
    parser.add_argument("--replicas", default="1,2,3", help="replica counts to run (1,2,3)")
    parser.add_argument("--concurrency", type=int, default=32, help="webhooks in flight")
    parser.add_argument("--workers", type=int, default=4, help="gate workers per replica")
    parser.add_argument("--database-url", default=os.environ.get(URL_ENV))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error(f"no PostgreSQL server: set {URL_ENV} (e.g. run under .ci/postgres)")
    logging.basicConfig(level=logging.WARNING)
    counts = [int(n) for n in args.replicas.split(",")]
    results = []
    for n in counts:
        results.append(
            asyncio.run(run(args.database_url, n, args.prs, args.concurrency, args.workers))
        )
        if not args.json:
            print(f"{n} replica(s): {results[-1]['reviews_per_second']} reviews/s", file=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else table(results))
    ok = all(r["duplicate_reviews"] == 0 and r["reviewed"] == args.prs for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
