"""Lease throughput on SQLite: what one worker and a crowd of processes get out of the store.

Measures, on a fresh workflow database in a temporary folder (or --dir):

  uncontended  one worker, acquire + release cycles on one target: cycles per second and
               p50/p99 of each call (every grant is written durably to the epoch ledger);
  heartbeats   one worker renewing its live lease: heartbeats per second, and the rows they
               added to the lease history (a renewal updates its grant's row: must be 0);
  contended    P OS processes (default 8) on ONE target, each looping acquire -> guarded
               write -> release (a refused acquire retries after 1-3 ms): completed cycles
               per second in total, refusals, and "database is locked" errors (must be 0);
  spread       the same P processes, each on its own target: cycles per second in total.

After the contended run it checks the recorded history: epochs strictly increasing and one
holder per epoch. Exits non-zero on any lock error, history violation or history row added
by a heartbeat.

    python benchmarks/leases.py
    python benchmarks/leases.py --cycles 2000 --processes 8 --seconds 5 --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

HEAD = "ab" * 20


def target(number: int) -> LeaseTarget:
    return LeaseTarget("github", "bench/leases", number, Role.MERGER)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def uncontended(db: SQLiteDatabase, cycles: int) -> dict[str, Any]:
    store = LeaseStore.open(db)
    worker = store.workers.register("solo", client="bench", session_id="u", role="merger")
    t = target(1)
    acquire_ms: list[float] = []
    release_ms: list[float] = []
    start = time.perf_counter()
    for _ in range(cycles):
        a = time.perf_counter()
        lease = store.acquire(t, worker.identity, HEAD)
        b = time.perf_counter()
        store.release(lease.claim)
        c = time.perf_counter()
        acquire_ms.append((b - a) * 1000)
        release_ms.append((c - b) * 1000)
    elapsed = time.perf_counter() - start

    lease = store.acquire(t, worker.identity, HEAD)
    beats = cycles
    rows_before = history_rows(db)
    hb_start = time.perf_counter()
    for _ in range(beats):
        store.heartbeat(lease.claim)
    hb_elapsed = time.perf_counter() - hb_start
    rows_added = history_rows(db) - rows_before
    store.release(lease.claim)
    store.close()
    return {
        "cycles": cycles,
        "cycles_per_s": cycles / elapsed,
        "acquire_p50_ms": statistics.median(acquire_ms),
        "acquire_p99_ms": percentile(acquire_ms, 0.99),
        "release_p50_ms": statistics.median(release_ms),
        "heartbeats_per_s": beats / hb_elapsed,
        "history_rows_per_heartbeat": rows_added / beats,
    }


def history_rows(db: SQLiteDatabase) -> int:
    with db.read() as tx:
        row = tx.one("SELECT count(*) FROM lease_history")
    return int(row[0]) if row else 0


def contender(db_path: str, index: int, number: int, seconds: float, out: str, start: Any) -> None:
    """One process: acquire / guarded write / release on target ``number`` until time is up."""
    db = SQLiteDatabase(Path(db_path))
    store = LeaseStore.open(db)
    identity = store.workers.register(
        f"proc{index}", client="bench", session_id=str(index), role="merger"
    ).identity
    t = target(number)
    done = refused = locked = 0
    epochs: list[int] = []
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            lease = store.acquire(t, identity, HEAD, ttl_s=60)
            store.write_under(
                lease.claim,
                "INSERT INTO bench_acts (number, holder, epoch) VALUES (?, ?, ?)",
                (number, identity, lease.epoch),
            )
            store.release(lease.claim)
        except LeaseRefused:
            refused += 1
            time.sleep(random.uniform(0.001, 0.003))
            continue
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            locked += 1
            continue
        done += 1
        epochs.append(lease.epoch)
    Path(out).write_text(
        json.dumps({"done": done, "refused": refused, "locked": locked, "epochs": epochs})
    )
    store.close()
    db.close()


def crowd(
    db: SQLiteDatabase, folder: Path, processes: int, seconds: float, *, shared: bool
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    tag = "shared" if shared else "spread"
    outs = [folder / f"{tag}-{i}.json" for i in range(processes)]
    numbers = [100 if shared else 200 + i for i in range(processes)]
    procs = [
        ctx.Process(
            target=contender,
            args=(str(db.path), i, numbers[i], seconds, str(outs[i]), start),
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every process import and register before the clock starts
    start.set()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a {tag} process failed: exit codes {[p.exitcode for p in procs]}")
    reports = [json.loads(out.read_text()) for out in outs]
    done = sum(r["done"] for r in reports)
    result: dict[str, Any] = {
        "processes": processes,
        "seconds": seconds,
        "cycles": done,
        "cycles_per_s": done / seconds,
        "refused": sum(r["refused"] for r in reports),
        "lock_errors": sum(r["locked"] for r in reports),
        "per_process": [r["done"] for r in reports],
    }
    if shared:
        result["history_violations"] = check_history(db, 100)
    return result


def check_history(db: SQLiteDatabase, number: int) -> list[str]:
    with db.read() as tx:
        rows = tx.all(
            "SELECT holder, epoch FROM bench_acts WHERE number = ? ORDER BY id", (number,)
        )
    problems = []
    for (h1, e1), (h2, e2) in itertools.pairwise(rows):
        if not e1 < e2:
            problems.append(f"epoch {e2} ({h2}) acted after epoch {e1} ({h1})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="uncontended cycles")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each crowd run")
    parser.add_argument("--dir", type=Path, help="workflow folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="lease-bench-") as tmp:
        folder = args.dir or Path(tmp)
        db = open_store(WorkflowPaths(folder / "data"))
        with db.write() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS bench_acts (id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " number INTEGER, holder TEXT, epoch INTEGER)"
            )
        results: dict[str, Any] = {
            "sqlite": sqlite3.sqlite_version,
            "uncontended": uncontended(db, args.cycles),
            "contended": crowd(db, folder, args.processes, args.seconds, shared=True),
            "spread": crowd(db, folder, args.processes, args.seconds, shared=False),
        }
        db.close()

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        u, c, s = results["uncontended"], results["contended"], results["spread"]
        print(f"SQLite {results['sqlite']}")
        print(
            f"uncontended: {u['cycles_per_s']:.0f} acquire+release/s over {u['cycles']} cycles"
            f" (acquire p50 {u['acquire_p50_ms']:.2f} ms, p99 {u['acquire_p99_ms']:.2f} ms;"
            f" release p50 {u['release_p50_ms']:.2f} ms); {u['heartbeats_per_s']:.0f} heartbeats/s"
            f" adding {u['history_rows_per_heartbeat']:g} history rows each"
        )
        print(
            f"contended:   {c['processes']} processes on one target for {c['seconds']:g} s:"
            f" {c['cycles_per_s']:.0f} acquire+write+release cycles/s ({c['cycles']} cycles,"
            f" per process {c['per_process']}), {c['refused']} refused acquires,"
            f" {c['lock_errors']} lock errors, {len(c['history_violations'])} history violations"
        )
        print(
            f"spread:      {s['processes']} processes, one target each, {s['seconds']:g} s:"
            f" {s['cycles_per_s']:.0f} cycles/s ({s['cycles']} cycles),"
            f" {s['lock_errors']} lock errors"
        )
    failed = (
        results["contended"]["lock_errors"]
        or results["spread"]["lock_errors"]
        or results["contended"]["history_violations"]
        or results["uncontended"]["history_rows_per_heartbeat"]
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
