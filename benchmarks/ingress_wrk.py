"""Ingress benchmark with a C load generator: ``wrk`` against the durable baseline and serve.

Variants, measured in one run with the same pinning (server on core 0, wrk on core 1):

  journal   the durable group-commit receiver of ``benchmarks/ingress.py`` (HMAC check +
            an insert committed with synchronous=FULL before each 202): the baseline
  ingest    ``reviewbot serve --role ingest`` (acknowledge and journal only)
  all       ``reviewbot serve --role all`` (one process: ack path and gate workers)

Each request carries a signed real GitHub payload (``pull_request/opened``) and a delivery id
never sent before. Signing: a pool of distinct bodies (the real payload with its own PR
number and head SHA each) is signed here with HMAC-SHA256 and handed to the Lua script,
which picks the next body of the pool and makes a fresh ``X-GitHub-Delivery`` per request.
Before each point of ``all`` its workers are caught up, so one point's backlog does not
weigh on the next.

Prints, per variant and connection count: acked/s (2xx), the ratio to the baseline (median
and min over the rounds), p50/p99/max latency (wrk's own histogram), non-2xx answers and the
server's CPU milliseconds per acknowledgement.

Usage:
  python benchmarks/ingress_wrk.py                 # 10 s per point
  python benchmarks/ingress_wrk.py --seconds 5 --rounds 3
  python benchmarks/ingress_wrk.py --before ../main   # also serve as a main worktree has it

Needs ``wrk`` (Debian: ``apt-get install -y wrk``) and ``taskset`` for the pinning.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingress import SECRET, free_port, wait_listening  # noqa: E402 - the sibling benchmark
from review import process_cpu_s  # noqa: E402

PAYLOAD = "github/webhooks/pull_request/opened.json"
VARIANTS = ("journal", "ingest", "all")
LABELS = {
    "journal": "durable group-commit receiver",
    "ingest": "serve --role ingest",
    "all": "serve --role all",
    "before-ingest": "before: serve --no-workers",
    "before-all": "before: serve",
}
# --before SRC: the same serve variants from another checkout's src/ (the code before a
# change), measured in the same run.
BEFORE_SRC: list[str] = []
POOL = 256  # distinct signed bodies

LUA = r"""
local pool = {}
local n = 0
local counter = 0
local prefix = ""
local thread_id = 0
local threads = {}

function setup(thread)
   thread:set("thread_id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local f = assert(io.open(args[1], "rb"))
   while true do
      local sig = f:read("*l")
      if not sig then break end
      local len = tonumber(f:read("*l"))
      local body = f:read(len)
      f:read("*l")
      n = n + 1
      pool[n] = {sig, body}
   end
   f:close()
   prefix = args[2] .. "-" .. thread_id .. "-"
end

function request()
   counter = counter + 1
   local item = pool[(counter % n) + 1]
   local headers = {
      ["Content-Type"] = "application/json",
      ["X-GitHub-Event"] = "pull_request",
      ["X-GitHub-Delivery"] = prefix .. counter,
      ["X-Hub-Signature-256"] = "sha256=" .. item[1],
   }
   return wrk.format("POST", "/webhooks/github", headers, item[2])
end

function done(summary, latency, requests)
   local out = string.format(
      '{"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, ' ..
      '"p50_ms": %.3f, "p99_ms": %.3f, "max_ms": %.3f}',
      summary.requests, summary.duration, summary.errors.status,
      summary.errors.connect + summary.errors.read + summary.errors.write +
      summary.errors.timeout,
      latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000)
   io.stderr:write("WRKJSON " .. out .. "\n")
end
"""


def write_pool(reference: Path, target: Path) -> int:
    """Sign ``POOL`` variants of the real payload; the file the Lua script reads."""
    event = json.loads(reference.read_bytes())
    with target.open("wb") as out:
        for i in range(POOL):
            event["number"] = event["pull_request"]["number"] = 1000 + i
            event["pull_request"]["head"]["sha"] = hashlib.sha1(str(i).encode()).hexdigest()
            body = json.dumps(event).encode()
            sig = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
            out.write(f"{sig}\n{len(body)}\n".encode() + body + b"\n")
    return len(body)


def start(variant: str, port: int, data_dir: Path, core: int | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if variant == "journal":
        cmd = [sys.executable, str(HERE / "ingress.py"), "--serve", "journal"]
        cmd += ["--port", str(port), "--data-dir", str(data_dir)]
    else:
        (data_dir / "none.toml").write_text("")
        env.update(
            REVIEWBOT_DATA_DIR=str(data_dir),
            REVIEWBOT_GITHUB__WEBHOOK_SECRET=SECRET.decode(),
            REVIEWBOT_CONFIG=str(data_dir / "none.toml"),
        )
        cmd = [sys.executable, "-m", "reviewbot", "serve", "--port", str(port)]
        cmd += ROLE_ARGS[variant]
        if variant.startswith("before-"):
            env["PYTHONPATH"] = BEFORE_SRC[0]
    pinned = [] if core is None else ["taskset", "-c", str(core)]
    proc = subprocess.Popen(
        pinned + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_listening(port, proc)
    return proc


ROLE_ARGS: dict[str, list[str]] = {
    "ingest": ["--role", "ingest"],
    "all": ["--role", "all"],
    "before-ingest": ["--no-workers"],
    "before-all": [],
}


def drained(port: int, timeout_s: float = 600.0) -> float:
    """Until ``serve --role all`` has gated everything queued; seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as resp:
            counts = json.loads(resp.read())["deliveries"]
        if counts["queued"] == 0 and counts["processing"] == 0:
            break
        time.sleep(0.1)
    return time.monotonic() - started


def run_wrk(
    port: int, connections: int, seconds: float, pool: Path, run: str, core: int | None
) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(LUA)
    try:
        pinned = [] if core is None else ["taskset", "-c", str(core)]
        cmd = [
            *pinned,
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            script.name,
            f"http://127.0.0.1:{port}",
            "--",
            str(pool),
            run,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    finally:
        os.unlink(script.name)
    line = next(x for x in out.stderr.splitlines() if x.startswith("WRKJSON "))
    data: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    acked = data["requests"] - data["non2xx"]
    data["acked_per_s"] = acked / (data["duration_us"] / 1e6)
    return data


def measure(
    variant: str, args: argparse.Namespace, pool: Path, cores: tuple[int | None, int | None]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"wrk-{variant}-", dir=args.tmp) as tmp:
        port = free_port()
        proc = start(variant, port, Path(tmp), cores[0])
        out: dict[str, Any] = {}
        try:
            for c in args.connections:
                if variant.endswith("all"):
                    drained(port)
                run = f"{variant}-{c}-{time.monotonic_ns()}"
                cpu = process_cpu_s(proc.pid)
                point = run_wrk(port, c, args.seconds, pool, run, cores[1])
                # The server's CPU per acknowledgement: what a loaded machine distorts least.
                acked = max(1, point["requests"] - point["non2xx"])
                point["cpu_ms_per_ack"] = (process_cpu_s(proc.pid) - cpu) * 1000 / acked
                out[f"c{c}"] = point
            if variant.endswith("all"):
                out["drain_s"] = drained(port)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        return out


def label(variant: str) -> str:
    if variant.startswith("before-"):  # with the arguments given (--serve-args)
        return f"before: serve {' '.join(ROLE_ARGS[variant])}".rstrip()
    return LABELS[variant]


def report(rounds: list[dict[str, dict[str, Any]]], args: argparse.Namespace, size: int) -> str:
    lines = [
        f"ingress (wrk): {PAYLOAD} variants of {size} bytes, {args.seconds:g} s per point, "
        f"{len(rounds)} round(s), medians; server core 0, wrk core 1",
        "",
        f"{'variant':<32} {'conns':>5} {'acked/s':>9} {'vs base':>8} {'min':>5} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} {'non-2xx':>8} {'CPU ms/ack':>10}",
    ]
    variants = list(rounds[0])
    for variant in variants:
        for c in args.connections:
            key = f"c{c}"

            def med(name: str, v: str = variant, k: str = key) -> float:
                return float(statistics.median(r[v][k][name] for r in rounds))

            ratios = (
                [r[variant][key]["acked_per_s"] / r["journal"][key]["acked_per_s"] for r in rounds]
                if "journal" in variants
                else [float("nan")]
            )
            lines.append(
                f"{label(variant):<32} {c:>5} {med('acked_per_s'):>9.0f} "
                f"{statistics.median(ratios):>8.0%} {min(ratios):>5.0%} "
                f"{med('p50_ms'):>8.2f} {med('p99_ms'):>8.2f} {med('max_ms'):>8.2f} "
                f"{med('non2xx') + med('socket_errors'):>8.0f} {med('cpu_ms_per_ack'):>10.3f}"
            )
    lines.append("")
    for variant in (v for v in variants if v.endswith("all")):
        drain = statistics.median(r[variant]["drain_s"] for r in rounds)
        lines.append(f"{label(variant)}: {drain:.1f} s to gate the backlog after the last point")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="wrk duration per point")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; figures are medians")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--connections", default="16,64", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument(
        "--serve-args",
        action="append",
        default=[],
        metavar="VARIANT=ARGS",
        help="replace a variant's serve arguments, e.g. ingest=--no-workers",
    )
    parser.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also measure serve from this checkout (e.g. a worktree of main)",
    )
    parser.add_argument("--tmp", default=None, help="folder for the stores (default: tmp)")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install -y wrk)")
    for item in args.serve_args:
        name, _, rest = item.partition("=")
        ROLE_ARGS[name] = rest.split()
    reference = HERE.parent / "tests" / "fixtures" / PAYLOAD
    cores: tuple[int | None, int | None] = (None, None)
    if not args.no_pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        cores = (0, 1)
    variants = args.variants.split(",")
    if args.before is not None:
        BEFORE_SRC.append(str(args.before.resolve() / "src"))
        variants += ["before-ingest", "before-all"]
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="wrk-pool-") as tmp:
        pool = Path(tmp) / "pool.bin"
        size = write_pool(reference, pool)
        for n in range(args.rounds):
            # Rotated order: a slow spell of a shared machine falls on different variants.
            order = variants[n % len(variants) :] + variants[: n % len(variants)]
            results = {}
            for variant in order:
                print(f"round {n + 1}: {label(variant)} ...", file=sys.stderr, flush=True)
                results[variant] = measure(variant, args, pool, cores)
            rounds.append({v: results[v] for v in variants})
    if args.json:
        print(json.dumps(rounds, indent=2))
    else:
        print(report(rounds, args, size))


if __name__ == "__main__":
    main()
