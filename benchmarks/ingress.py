"""Ingress benchmark: how fast webhook deliveries are acknowledged, against three baselines.

Drives real servers on loopback with a signed real GitHub payload (an aiohttp client in
another process) and prints, measured in one run with the same core pinning:

  (a) bare     aiohttp handler that reads the body and answers 202
  (b) hmac     (a) + HMAC-SHA256 check of the raw body
  (c) journal  (b) + a durable journal insert with group commit (synchronous=FULL; each
               202 waits for the commit of the batch that holds it)
  (d) reviewbot the real server (``python -m reviewbot serve``), workers running

For each: acknowledged deliveries per second with 16 and 64 connections, and p50/p99 time
to acknowledge at a fixed offered rate (default 200/s for 30 s).

Usage:
  python benchmarks/ingress.py            # full run
  python benchmarks/ingress.py --quick    # a few seconds each

With two or more cores the servers run on core 0 and the load generator on core 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import queue
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

SECRET = b"benchmark-secret"
PAYLOAD = "github/webhooks/pull_request/opened.json"
VARIANTS = ("bare", "hmac", "journal", "reviewbot", "reviewbot-ingest")
LABELS = {
    "bare": "(a) bare aiohttp: read body, 202",
    "hmac": "(b) HMAC check only",
    "journal": "(c) HMAC + group-commit journal",
    "reviewbot": "(d) reviewbot serve",
    "reviewbot-ingest": "    reviewbot serve --no-workers",
}


# --- baseline servers (a)-(c) --------------------------------------------------------------


class GroupCommitWriter:
    """The reference durable journal: one writer thread, one transaction per waiting batch."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS deliveries (delivery_id TEXT PRIMARY KEY, "
            "source TEXT, event TEXT, headers TEXT, body BLOB, received_at TEXT)"
        )
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    async def insert(self, row: tuple[Any, ...]) -> bool:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self.q.put((row, fut, loop))
        return await fut

    def _run(self) -> None:
        while True:
            batch = [self.q.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 1024:
                    batch.append(self.q.get_nowait())
            self.conn.execute("BEGIN IMMEDIATE")
            results = [
                self.conn.execute(
                    "INSERT OR IGNORE INTO deliveries VALUES (?, ?, ?, ?, ?, ?)", row
                ).rowcount
                == 1
                for row, _, _ in batch
            ]
            self.conn.execute("COMMIT")
            loop = batch[0][2]
            loop.call_soon_threadsafe(
                _resolve, [(f, r) for (_, f, _), r in zip(batch, results, strict=True)]
            )


def _resolve(pairs: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for fut, result in pairs:
        if not fut.done():
            fut.set_result(result)


def _verify(body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header[7:])


def baseline_app(variant: str, data_dir: Path) -> Any:
    from aiohttp import web

    writer = GroupCommitWriter(data_dir / "journal.sqlite") if variant == "journal" else None

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if variant != "bare" and not _verify(body, request.headers.get("X-Hub-Signature-256")):
            return web.json_response({"error": "signature_invalid"}, status=401)
        delivery_id = request.headers.get("X-GitHub-Delivery", "")
        if writer is not None:
            headers = json.dumps({"X-GitHub-Event": request.headers.get("X-GitHub-Event", "")})
            received = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            await writer.insert((delivery_id, "github", "pull_request", headers, body, received))
        return web.json_response({"delivery_id": delivery_id, "status": "queued"}, status=202)

    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhooks/github", handle)
    return app


def serve_baseline(variant: str, port: int, data_dir: Path) -> None:
    from aiohttp import web

    web.run_app(
        baseline_app(variant, data_dir), host="127.0.0.1", port=port, access_log=None, print=None
    )


# --- load generator ------------------------------------------------------------------------


def _headers(body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest(),
    }


async def _post(session: Any, url: str, body: bytes) -> tuple[int, float]:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=_headers(body)) as resp:
        await resp.read()
        return resp.status, time.perf_counter() - started


async def closed_loop(url: str, body: bytes, connections: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    acked = 0
    other = 0
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, force_close=False)
    ) as session:
        # Warm-up: open the connections.
        await asyncio.gather(*(_post(session, url, body) for _ in range(connections)))
        stop_at = time.perf_counter() + seconds

        async def one() -> None:
            nonlocal acked, other
            while time.perf_counter() < stop_at:
                status, _ = await _post(session, url, body)
                if status == 202:
                    acked += 1
                else:
                    other += 1

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return {"per_s": acked / elapsed, "acked": acked, "other": other}


async def fixed_rate(url: str, body: bytes, rate: float, seconds: float) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    other = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:
        await asyncio.gather(*(_post(session, url, body) for _ in range(16)))

        async def one() -> None:
            nonlocal other
            status, took = await _post(session, url, body)
            if status == 202:
                latencies.append(took)
            else:
                other += 1

        tasks = []
        started = time.perf_counter()
        total = int(rate * seconds)
        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    latencies.sort()
    ms = [x * 1000 for x in latencies]
    return {
        "sent": total,
        "acked": len(ms),
        "other": other,
        "p50_ms": statistics.median(ms) if ms else float("nan"),
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan"),
        "max_ms": ms[-1] if ms else float("nan"),
    }


async def drained(health_url: str | None) -> float:
    """Until the server's workers have gated everything queued (reviewbot only)."""
    import aiohttp

    if health_url is None:
        return 0.0
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(health_url) as resp:
                counts = (await resp.json())["deliveries"]
            if counts["queued"] == 0 and counts["processing"] == 0:
                return time.perf_counter() - started
            await asyncio.sleep(0.1)


def run_load(url: str, body_file: Path, spec: dict[str, Any]) -> dict[str, Any]:
    body = body_file.read_bytes()
    health = spec.get("health_url")

    async def main() -> dict[str, Any]:
        # Each phase starts with the workers caught up, so a backlog from the phase before
        # does not compete with it.
        out: dict[str, Any] = {}
        for c in (16, 64):
            await drained(health)
            out[f"c{c}"] = await closed_loop(url, body, c, spec["throughput_s"])
        out["drain_s"] = await drained(health)
        out["rate"] = await fixed_rate(url, body, spec["rate"], spec["duration"])
        out["rate"]["drain_after_s"] = await drained(health)
        return out

    return asyncio.run(main())


# --- orchestration -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(core: int | None) -> None:
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("server did not start listening")


def start_server(
    variant: str, port: int, data_dir: Path, core: int | None
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if variant.startswith("reviewbot"):
        env.update(
            {
                "REVIEWBOT_DATA_DIR": str(data_dir),
                "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET.decode(),
                "REVIEWBOT_CONFIG": str(data_dir / "none.toml"),
            }
        )
        (data_dir / "none.toml").write_text("")
        cmd = [sys.executable, "-m", "reviewbot", "serve", "--port", str(port)]
        if variant == "reviewbot-ingest":
            cmd.append("--no-workers")
    else:
        cmd = [
            sys.executable,
            __file__,
            "--serve",
            variant,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]
    core_arg = [] if core is None else ["taskset", "-c", str(core)]
    proc = subprocess.Popen(
        core_arg + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_listening(port, proc)
    return proc


def measure(
    variant: str, body_file: Path, spec: dict[str, Any], cores: tuple[int | None, int | None]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"ingress-{variant}-", dir=spec["tmp"]) as tmp:
        port = free_port()
        proc = start_server(variant, port, Path(tmp), cores[0])
        spec = dict(spec)
        if variant == "reviewbot":
            spec["health_url"] = f"http://127.0.0.1:{port}/healthz"
        try:
            load_cmd = [
                sys.executable,
                __file__,
                "--load",
                f"http://127.0.0.1:{port}/webhooks/github",
                "--body-file",
                str(body_file),
                "--spec",
                json.dumps(spec),
            ]
            core_arg = [] if cores[1] is None else ["taskset", "-c", str(cores[1])]
            out = subprocess.run(core_arg + load_cmd, capture_output=True, check=True)
            result: dict[str, Any] = json.loads(out.stdout)
            return result
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def median_results(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant and figure, the median over the rounds."""
    out: dict[str, dict[str, Any]] = {}
    for variant in rounds[0]:
        out[variant] = {}
        for phase, figures in rounds[0][variant].items():
            if not isinstance(figures, dict):
                out[variant][phase] = statistics.median(r[variant][phase] for r in rounds)
                continue
            out[variant][phase] = {
                key: statistics.median(r[variant][phase][key] for r in rounds) for key in figures
            }
    return out


def report(
    results: dict[str, dict[str, Any]],
    spec: dict[str, Any],
    rounds: list[dict[str, dict[str, Any]]],
) -> str:
    lines = [
        f"ingress benchmark: payload {PAYLOAD} ({spec['body_bytes']} bytes), "
        f"throughput {spec['throughput_s']:g} s per point, fixed rate {spec['rate']:g}/s for "
        f"{spec['duration']:g} s, cores server={spec['cores'][0]} load={spec['cores'][1]}, "
        f"{len(rounds)} round(s), medians",
        "",
        f"{'variant':<36} {'acked/s c16':>12} {'acked/s c64':>12} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'non-202':>8}",
    ]
    for variant, r in results.items():
        non = r["c16"]["other"] + r["c64"]["other"] + r["rate"]["other"]
        lines.append(
            f"{LABELS[variant]:<36} {r['c16']['per_s']:>12.0f} {r['c64']['per_s']:>12.0f} "
            f"{r['rate']['p50_ms']:>8.2f} {r['rate']['p99_ms']:>8.2f} "
            f"{r['rate']['max_ms']:>8.2f} {non:>8.0f}"
        )
    if "journal" in results and "reviewbot" in results:
        lines.append("")
        for c in ("c16", "c64"):
            ratios = [r["reviewbot"][c]["per_s"] / r["journal"][c]["per_s"] for r in rounds]
            each = ", ".join(f"{x:.0%}" for x in ratios)
            lines.append(
                f"reviewbot / (c) at {c[1:]} connections: median "
                f"{statistics.median(ratios):.0%} (rounds: {each}; target >= 80%)"
            )
        if "bare" in results:
            for name in ("journal", "reviewbot"):
                ratio = results[name]["c16"]["per_s"] / results["bare"]["c16"]["per_s"]
                lines.append(f"{name} / (a) at 16 connections: {ratio:.0%}")
        p99 = results["reviewbot"]["rate"]["p99_ms"]
        lines.append(f"reviewbot p99 at {spec['rate']:g}/s: {p99:.2f} ms (target < 25 ms)")
        lines.append(
            f"reviewbot workers: {results['reviewbot']['drain_s']:.1f} s to gate the "
            f"64-connection backlog; {results['reviewbot']['rate']['drain_after_s']:.1f} s "
            "behind after the fixed-rate phase"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "tests" / "fixtures",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds at the fixed rate")
    parser.add_argument("--rate", type=float, default=200.0, help="offered deliveries per second")
    parser.add_argument("--throughput-seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="3 s throughput, 5 s fixed rate")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; figures are medians")
    parser.add_argument("--variants", default=",".join(VARIANTS[:4]))
    parser.add_argument("--tmp", default=None, help="folder for the journals (default: system tmp)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--json", action="store_true")
    # internal modes
    parser.add_argument("--serve", choices=VARIANTS[:3], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--body-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.serve:
        serve_baseline(args.serve, args.port, args.data_dir)
        return
    if args.load:
        print(json.dumps(run_load(args.load, args.body_file, json.loads(args.spec))))
        return

    body_file = args.reference_dir / PAYLOAD
    if not body_file.is_file():
        raise SystemExit(f"payload not found: {body_file} (pass --reference-dir)")
    cores: tuple[int | None, int | None] = (None, None)
    if not args.no_pin and (os.cpu_count() or 1) >= 2:
        cores = (0, 1)
    spec = {
        "duration": 5.0 if args.quick else args.duration,
        "rate": args.rate,
        "throughput_s": 3.0 if args.quick else args.throughput_seconds,
        "body_bytes": body_file.stat().st_size,
        "cores": list(cores),
        "tmp": args.tmp,
    }
    variants = args.variants.split(",")
    rounds: list[dict[str, dict[str, Any]]] = []
    for n in range(args.rounds):
        # Each round runs every variant once, in a rotated order, so the slow spells of a
        # shared machine fall on different variants.
        order = variants[n % len(variants) :] + variants[: n % len(variants)]
        results: dict[str, dict[str, Any]] = {}
        for variant in order:
            print(f"round {n + 1}: {LABELS[variant].strip()} ...", file=sys.stderr, flush=True)
            results[variant] = measure(variant, body_file, spec, cores)
        rounds.append({v: results[v] for v in variants})
    if args.json:
        print(json.dumps({"spec": spec, "rounds": rounds}, indent=2))
    else:
        print(report(median_results(rounds), spec, rounds))


if __name__ == "__main__":
    main()
