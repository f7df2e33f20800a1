"""Review throughput: N pull requests with green checks, webhook -> posted native review.

Runs the forge simulator in this process and the real server (``reviewbot serve``: journal,
worker pool, gate, review pipeline, outbox drainer, state comment) as a child process, over
loopback HTTP, with a SQLite store in a temporary folder. Reports reviews per second,
p50/p99 latency from the webhook delivery to the posted review, the forge API calls per
reviewed PR by operation id, counted from the simulator's request log (304 answers from the
ETag cache are shown apart), and duplicate reviews (which must be 0).

What a reviewed PR costs against the forge's rate limits (``request_cost``): GitHub GraphQL
points and requests, REST calls that count, and REST 304s (which do not). With
``--rest-baseline`` the same run is repeated with GitHub's GraphQL read turned off, and the
ratio of rate-counted requests (GraphQL requests plus counted REST calls) is printed.

    python benchmarks/review.py             # 500 PRs on GitHub
    python benchmarks/review.py --prs 50 --forge gitea --json
    python benchmarks/review.py --prs 300 --before ../before   # interleaved, with ratios
    python benchmarks/review.py --prs 100 --rest-baseline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from reviewbot.sim.github_graphql import load_schema, schema_path
from reviewbot.sim.serve_child import start_serve
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator

REPO = "acme/api"
SECRET = "bench-secret"
BOT = "reviewbot"


CHILD_CPU_S = [0.0]  # RUSAGE_CHILDREN at the end of the previous run


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def bot_env(
    data_dir: Path,
    sim_server: SimServer,
    tokens: dict[str, str],
    forge: str,
    workers: int,
    src: str | None = None,
    graphql: bool = True,
) -> dict[str, str]:
    config = data_dir.parent / "reviewbot.toml"
    # The required check is named in the rules as well as in branch protection: code that
    # reads protection only from its admin endpoint (which answers 404 to the bot) still
    # requires it, so every version under comparison reviews the same way.
    config.write_text(f'[repos."{forge}:{REPO}"]\nrequired_checks = ["ci/test"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    env.update(
        {
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(data_dir),
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
            "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
            "REVIEWBOT_WORKERS": str(workers),
        }
    )
    if not graphql:  # only when off: code from before the setting would refuse the key
        env["REVIEWBOT_GITHUB__GRAPHQL"] = "false"
    if src is not None:  # serve from another checkout's src/ (--before)
        env["PYTHONPATH"] = src
    return env


async def run(
    prs: int,
    forge: str,
    concurrency: int,
    workers: int,
    rate: float = 0.0,
    src: str | None = None,
    graphql: bool = True,
) -> dict[str, Any]:
    """The simulator runs here; the bot is a real ``reviewbot serve`` process."""
    load_schema(schema_path())  # built before the clock starts, not on the first query
    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = {f: sim.add_user(f, BOT, bot=True) for f in ("github", "gitea")}
        sim.add_user(forge, "alice")
        sim.create_repo(forge, REPO)
        sim.require_checks(forge, REPO, "main", ["ci/test"])
        with tempfile.TemporaryDirectory(prefix="reviewbot-bench-") as tmp:
            env = bot_env(Path(tmp) / "data", sim_server, tokens, forge, workers, src, graphql)
            # Its output is read and dropped, so the pipe never fills.
            proc, base, _reader = await start_serve(env, on_line=lambda _: None, line_s=60)
            sim.set_webhook(forge, url=f"{base}/webhooks/{forge}", secret=SECRET)
            sim_cpu = resource.getrusage(resource.RUSAGE_SELF)
            started_cpu = process_cpu_s(proc.pid)
            try:
                result = await _measure(sim, forge, prs, concurrency, rate)
                # The bot's CPU from its start listening to the last review (not its start).
                result["bot_cpu_workload_s"] = round(process_cpu_s(proc.pid) - started_cpu, 2)
                result.update(request_cost(sim, forge, result["reviewed"]))
            finally:
                proc.terminate()
                await proc.wait()
            own = resource.getrusage(resource.RUSAGE_SELF)
            child = resource.getrusage(resource.RUSAGE_CHILDREN)
            # RUSAGE_CHILDREN adds up every child waited for: the bots of earlier runs too.
            child_before = CHILD_CPU_S[0]
            CHILD_CPU_S[0] = child.ru_utime + child.ru_stime
            # Where the CPU went: the simulator (and this driver) versus the bot process.
            result["sim_cpu_s"] = round(
                own.ru_utime + own.ru_stime - sim_cpu.ru_utime - sim_cpu.ru_stime, 1
            )
            result["bot_cpu_s"] = round(CHILD_CPU_S[0] - child_before, 1)
            return result


async def _measure(
    sim: Simulator, forge: str, prs: int, concurrency: int, rate: float
) -> dict[str, Any]:
    # The reconcile sweep lists the open PRs once at start; let it finish first so that it
    # does not race the webhooks being measured.
    deadline = time.monotonic() + 30
    while not any(r.method == "GET" and r.path == f"/repos/{REPO}/pulls" for r in sim.requests):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    pulls = []
    for n in range(prs):
        pr = sim.open_pr(forge, REPO, author="alice", head_ref=f"feature-{n}", title=f"PR {n}")
        sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        pulls.append(pr)
    sim.clear_requests()

    sent_at: dict[int, float] = {}
    gate = asyncio.Semaphore(concurrency)

    async def deliver(index: int, number: int) -> None:
        if rate > 0:  # paced: the n-th webhook leaves n / rate seconds after the first
            await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
        async with gate:
            sent_at[number] = sim.now()
            delivery = await sim.deliver_pull_request(forge, REPO, number, action="opened")
            if delivery.status != 202:
                raise RuntimeError(f"delivery for #{number} answered {delivery.status}")

    def state_comments() -> int:
        return sum(
            1 for p in pulls for c in sim.pull(forge, REPO, p.number).comments if c.user == BOT
        )

    started = time.perf_counter()
    await asyncio.gather(*(deliver(i, pr.number) for i, pr in enumerate(pulls)))
    deadline = time.monotonic() + max(120.0, prs * 0.5)
    while time.monotonic() < deadline:
        if state_comments() >= len(pulls):  # the state comment is the last write of a PR
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await asyncio.sleep(1.0)  # anything late (a duplicate) would land now

    latencies = []
    duplicates = 0
    reviewed = 0
    for pr in pulls:
        mine = [r for r in sim.pull(forge, REPO, pr.number).reviews if r.user == BOT]
        if mine:
            reviewed += 1
            first = min(r.submitted_at or r.updated_at for r in mine)
            latencies.append(first - sent_at[pr.number])
        duplicates += max(0, len(mine) - 1)

    calls: Counter[str] = Counter()
    cached: Counter[str] = Counter()
    for record in sim.requests:
        if record.forge != forge:
            continue
        op = record.operation_id or f"{record.method} {record.path}"
        calls[op] += 1
        if record.status == 304:
            cached[op] += 1
    per = max(reviewed, 1)
    return {
        "forge": forge,
        "prs": prs,
        "webhook_rate_per_s": rate or "unpaced",
        "reviewed": reviewed,
        "duplicate_reviews": duplicates,
        "state_comments": state_comments(),
        "seconds": round(elapsed, 3),
        "reviews_per_second": round(reviewed / elapsed, 2) if elapsed else None,
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "latency_mean_ms": round(statistics.fmean(latencies) * 1000, 1) if latencies else None,
        "api_calls_per_pr": round(sum(calls.values()) / per, 3),
        "api_calls_per_pr_by_operation": {op: round(n / per, 3) for op, n in sorted(calls.items())},
        "not_modified_304_per_pr": {op: round(n / per, 3) for op, n in sorted(cached.items())},
    }


def compare(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``--before``: the same workload against this checkout and another one's ``src/``,
    interleaved (before, after, before, after, ...) in one run; the rounds and a table with
    the bot CPU per review, the reviews per second and the ratios after/before."""
    before_src = str(Path(args.before).resolve() / "src")
    rounds: list[dict[str, Any]] = []
    for n in range(args.rounds):
        for label, src in (("before", before_src), ("after", None)):
            print(f"round {n + 1}: {label} ...", file=sys.stderr, flush=True)
            result = asyncio.run(
                run(args.prs, args.forge, args.concurrency, args.workers, args.rate, src)
            )
            result["variant"] = label
            result["round"] = n + 1
            rounds.append(result)
    return rounds, comparison_table(rounds)


def comparison_table(rounds: list[dict[str, Any]]) -> str:
    def per_review_ms(r: dict[str, Any], key: str) -> float:
        return 1000.0 * float(r[key]) / max(int(r["reviewed"]), 1)

    metrics = {
        "bot CPU ms/review (workload)": lambda r: per_review_ms(r, "bot_cpu_workload_s"),
        "bot CPU ms/review (with start)": lambda r: per_review_ms(r, "bot_cpu_s"),
        "reviews/s": lambda r: float(r["reviews_per_second"] or 0.0),
        "latency p50 ms": lambda r: float(r["latency_p50_ms"]),
    }
    lines = [
        f"{'metric':<32} {'round':>5} {'before':>9} {'after':>9} {'after/before':>13}",
    ]
    ratios: dict[str, list[float]] = {name: [] for name in metrics}
    n_rounds = max(int(r["round"]) for r in rounds)
    for name, get in metrics.items():
        for n in range(1, n_rounds + 1):
            b = get(next(r for r in rounds if r["round"] == n and r["variant"] == "before"))
            a = get(next(r for r in rounds if r["round"] == n and r["variant"] == "after"))
            ratio = a / b if b else float("nan")
            ratios[name].append(ratio)
            lines.append(f"{name:<32} {n:>5} {b:>9.2f} {a:>9.2f} {ratio:>13.2f}")
    lines.append("")
    for name, values in ratios.items():
        lines.append(
            f"{name:<32} after/before median {statistics.median(values):.2f}"
            f" (min {min(values):.2f}, max {max(values):.2f})"
        )
    return "\n".join(lines)


def request_cost(sim: Simulator, forge: str, reviewed: int) -> dict[str, Any]:
    """Per reviewed PR: GitHub GraphQL requests and points (``rateLimit.cost`` of each
    answer), REST calls that count against the rate limit, and REST 304s (which do not)."""
    graphql = points = rest = not_modified = 0
    for record in sim.requests:
        if record.forge != forge:
            continue
        if record.operation_id == "graphql":
            graphql += 1
            data = (
                record.response_body.get("data") if isinstance(record.response_body, dict) else None
            )
            cost = ((data or {}).get("rateLimit") or {}).get("cost")
            points += cost if isinstance(cost, int) else 1
        elif record.status == 304:
            not_modified += 1
        else:
            rest += 1
    per = max(reviewed, 1)
    return {
        "graphql_requests_per_pr": round(graphql / per, 3),
        "graphql_points_per_pr": round(points / per, 3),
        "rest_counted_calls_per_pr": round(rest / per, 3),
        "rest_304_per_pr": round(not_modified / per, 3),
        "rate_counted_requests_per_pr": round((graphql + rest) / per, 3),
    }


def rest_baseline(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    """The same run with GitHub's GraphQL read off (REST only), and the cost ratios."""
    rest = asyncio.run(
        run(args.prs, args.forge, args.concurrency, args.workers, args.rate, graphql=False)
    )
    keys = ("rate_counted_requests_per_pr", "rest_counted_calls_per_pr", "rest_304_per_pr")
    baseline = {f"rest_path_{key}": rest[key] for key in keys}
    counted, before = result["rate_counted_requests_per_pr"], rest["rate_counted_requests_per_pr"]
    baseline["rate_counted_ratio_vs_rest_path"] = round(counted / before, 3) if before else None
    return baseline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=500, help="pull requests (default 500)")
    parser.add_argument("--forge", choices=("github", "gitea"), default="github")
    parser.add_argument("--concurrency", type=int, default=32, help="webhooks in flight")
    parser.add_argument("--workers", type=int, default=8, help="gate workers")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="webhooks per second (default: all at once, which measures the backlog)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--before",
        metavar="CHECKOUT",
        help="also run serve from this checkout's src/, interleaved, and print the ratios",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --before: pairs to run")
    parser.add_argument(
        "--rest-baseline",
        action="store_true",
        help="run again with GitHub's GraphQL read off and print the cost ratio",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.before:
        rounds, table = compare(args)
        print(json.dumps(rounds, indent=2) if args.json else table)
        return 0 if all(r["duplicate_reviews"] == 0 for r in rounds) else 1
    result = asyncio.run(run(args.prs, args.forge, args.concurrency, args.workers, args.rate))
    if args.rest_baseline:
        result.update(rest_baseline(args, result))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    return 0 if result["duplicate_reviews"] == 0 and result["reviewed"] == args.prs else 1


if __name__ == "__main__":
    sys.exit(main())
