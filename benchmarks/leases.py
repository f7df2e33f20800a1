"""Lease throughput on SQLite: what one worker and a crowd of processes get out of the store.

Measures, on a fresh workflow database in a temporary folder (or --dir):

  uncontended  one worker, acquire + release cycles on one target: cycles per second and
               p50/p99 of each call (every grant is covered by a synced reservation in
               the epoch ledger);
  heartbeats   one worker renewing its live lease: heartbeats per second, and the rows they
               added to the lease history (a renewal adds none: must be 0);
  contended    P OS processes (default 8) on ONE target, each looping acquire -> guarded
               write -> release (a refused acquire asks again after 1-3 ms, waiting in the
               target's line where the code has one, woken by its bell where the code
               rings one): completed cycles per second in
               total, refusals, "database is locked" errors (must be 0), and fairness:
               completed cycles per process and the ratio of the most to the fewest;
  spread       the same P processes, each on its own target: cycles per second in total.

After the contended run it checks the recorded history: epochs strictly increasing and one
holder per epoch. Exits non-zero on any lock error, history violation or history row added
by a heartbeat.

--before CHECKOUT runs the same benchmark on that checkout's src/ as well (the code before a
change), round by round in alternating order on a shared machine, and prints heartbeats/s,
cycles/s and acquire p99 of this checkout as ratios against it (min and median over the
rounds). Each measurement runs in a child process with its own PYTHONPATH.

    python benchmarks/leases.py
    python benchmarks/leases.py --cycles 2000 --processes 8 --seconds 5 --json
    python benchmarks/leases.py --before ../reviewbot-before --rounds 3   # an earlier checkout
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import multiprocessing
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore

HERE = Path(__file__).resolve().parent
HEAD = "ab" * 20


def target(number: int) -> LeaseTarget:
    return LeaseTarget("github", "bench/leases", number, Role.MERGER)


# --- the same calls on this code and on older checkouts (--before) ---------------------------


def open_leases(db: SQLiteDatabase) -> LeaseStore:
    opener = getattr(LeaseStore, "open", None)
    return opener(db) if opener is not None else LeaseStore(db)  # type: ignore[call-arg]


def register(store: LeaseStore, name: str, session: str) -> str:
    workers = getattr(store, "workers", None)
    registrar = workers.register if workers is not None else store.register_worker  # type: ignore[attr-defined]
    record = registrar(name, client="bench", session_id=session, role="merger")
    return str(record.identity)


def has_line(store: LeaseStore) -> bool:
    """Whether this code keeps a line of waiters (acquire takes ``wait``)."""
    return "wait" in inspect.signature(store.acquire).parameters


def open_bench_store(folder: Path) -> SQLiteDatabase:
    try:
        from reviewbot.workflowdb.bootstrap import open_store
    except ImportError:  # older checkouts
        from reviewbot.store.bootstrap import open_store  # type: ignore[no-redef]
    from reviewbot.workflowdb.paths import WorkflowPaths

    db = open_store(WorkflowPaths(folder))
    assert isinstance(db, SQLiteDatabase)
    return db


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def uncontended(db: SQLiteDatabase, cycles: int) -> dict[str, Any]:
    store = open_leases(db)
    worker = register(store, "solo", "u")
    t = target(1)
    acquire_ms: list[float] = []
    release_ms: list[float] = []
    start = time.perf_counter()
    for _ in range(cycles):
        a = time.perf_counter()
        lease = store.acquire(t, worker, HEAD)
        b = time.perf_counter()
        store.release(lease.claim)
        c = time.perf_counter()
        acquire_ms.append((b - a) * 1000)
        release_ms.append((c - b) * 1000)
    elapsed = time.perf_counter() - start

    lease = store.acquire(t, worker, HEAD)
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
        try:
            row = tx.one("SELECT count(*) FROM lease_history")
        except sqlite3.OperationalError:  # older code kept no history
            return 0
    return int(row[0]) if row else 0


def contender(
    db_path: str, index: int, number: int, seconds: float, out: str, start: Any, ready: Any
) -> None:
    """One process: acquire / guarded write / release on target ``number`` until time is up."""
    db = SQLiteDatabase(Path(db_path))
    store = open_leases(db)
    identity = register(store, f"proc{index}", str(index))
    t = target(number)
    queue = has_line(store)
    # Where the code has bells, a waiter binds its own before it first joins the line.
    bell = store.bell(t, identity) if hasattr(store, "bell") else None
    done = refused = locked = 0
    epochs: list[int] = []
    early: tuple[Any, int] | None = None
    if queue:  # in line before the clock starts, as every process registers before it
        early = wait_in_line(store, t, identity, time.monotonic(), stay=True, bell=bell)
    ready.put(index)
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if queue:
                got, early = early or wait_in_line(store, t, identity, deadline, bell=bell), None
                if got is None:
                    break
                lease, waits = got
                refused += waits
            else:
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
    if bell is not None:
        bell.close()
    store.close()
    db.close()


def wait_in_line(
    store: LeaseStore,
    t: LeaseTarget,
    identity: str,
    deadline: float,
    *,
    stay: bool = False,
    bell: Any = None,
) -> tuple[Any, int] | None:
    """Join the target's line and wait for the grant, as a waiting agent does: between two
    acquires it only reads whether it was granted (``granted``, no write lock), and asks
    again when the target is free, it is no longer in line, or to be heard from. With a
    ``bell`` it reads when the bell rings (or every 50 ms), else every millisecond.
    ``None``: time ran out (it leaves the line)."""
    waits = 0
    while True:
        try:
            return store.acquire(t, identity, HEAD, ttl_s=60, wait=True), waits  # type: ignore[call-arg]
        except LeaseRefused:
            waits += 1
        heard = time.monotonic()
        polls = 0
        while True:
            if time.monotonic() >= deadline:
                if not stay:
                    store.leave_line(t, identity)  # type: ignore[attr-defined]
                return None
            rang = False
            if bell is not None:
                rang = bell.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            else:
                # Without bells every waiter looks every millisecond: a place in line read a
                # while ago is stale (the line moves at every release), so looking less often
                # further back only delays the one that has just become first.
                time.sleep(0.001 * random.uniform(0.8, 1.2))
            granted = store.granted(t, identity)  # type: ignore[attr-defined]
            if granted is not None:
                return granted, waits
            polls += 1
            if (bell is not None and not rang) or polls % 16 == 0:
                status = store.line_status(t, identity)  # type: ignore[attr-defined]
                if status.free or status.position is None or time.monotonic() - heard > 2.0:
                    break


def crowd(
    db: SQLiteDatabase, folder: Path, processes: int, seconds: float, *, shared: bool
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    ready = ctx.Queue()
    tag = "shared" if shared else "spread"
    outs = [folder / f"{tag}-{i}.json" for i in range(processes)]
    numbers = [100 if shared else 200 + i for i in range(processes)]
    procs = [
        ctx.Process(
            target=contender,
            args=(str(db.path), i, numbers[i], seconds, str(outs[i]), start, ready),
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every process imported and registered before the clock starts
        ready.get(timeout=120)
    start.set()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a {tag} process failed: exit codes {[p.exitcode for p in procs]}")
    reports = [json.loads(out.read_text()) for out in outs]
    done = sum(r["done"] for r in reports)
    counts = [r["done"] for r in reports]
    result: dict[str, Any] = {
        "processes": processes,
        "seconds": seconds,
        "cycles": done,
        "cycles_per_s": done / seconds,
        "refused": sum(r["refused"] for r in reports),
        "lock_errors": sum(r["locked"] for r in reports),
        "per_process": counts,
        "fairness": max(counts) / min(counts) if min(counts) else float("inf"),
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


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run of every section on a fresh store, with the code on ``sys.path``."""
    with tempfile.TemporaryDirectory(prefix="lease-bench-") as tmp:
        folder = args.dir or Path(tmp)
        db = open_bench_store(folder / "data")
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
    return results


def child(src: Path, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`measure` in a child process on the code in ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--json", "--rounds", "1"]
    cmd += ["--cycles", str(args.cycles), "--processes", str(args.processes)]
    cmd += ["--seconds", str(args.seconds)]
    out = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
    if not out.stdout.strip():
        raise SystemExit(f"the benchmark on {src} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def describe(results: dict[str, Any]) -> str:
    u, c, s = results["uncontended"], results["contended"], results["spread"]
    return "\n".join(
        (
            f"SQLite {results['sqlite']}",
            f"uncontended: {u['cycles_per_s']:.0f} acquire+release/s over {u['cycles']} cycles"
            f" (acquire p50 {u['acquire_p50_ms']:.2f} ms, p99 {u['acquire_p99_ms']:.2f} ms;"
            f" release p50 {u['release_p50_ms']:.2f} ms); {u['heartbeats_per_s']:.0f} heartbeats/s"
            f" adding {u.get('history_rows_per_heartbeat', 0):g} history rows each",
            f"contended:   {c['processes']} processes on one target for {c['seconds']:g} s:"
            f" {c['cycles_per_s']:.0f} acquire+write+release cycles/s ({c['cycles']} cycles),"
            f" {c['refused']} refused acquires, {c['lock_errors']} lock errors,"
            f" {len(c['history_violations'])} history violations",
            f"fairness:    cycles per process {c['per_process']}, max/min {c['fairness']:.2f}",
            f"spread:      {s['processes']} processes, one target each, {s['seconds']:g} s:"
            f" {s['cycles_per_s']:.0f} cycles/s ({s['cycles']} cycles),"
            f" {s['lock_errors']} lock errors",
        )
    )


# (label, section, key, larger is better)
COMPARED = (
    ("heartbeats/s", "uncontended", "heartbeats_per_s", True),
    ("uncontended cycles/s", "uncontended", "cycles_per_s", True),
    ("acquire p99 ms", "uncontended", "acquire_p99_ms", False),
    ("contended cycles/s", "contended", "cycles_per_s", True),
    ("spread cycles/s", "spread", "cycles_per_s", True),
    ("fairness max/min", "contended", "fairness", False),
)


def compare(rounds: list[dict[str, dict[str, Any]]]) -> str:
    """This code against --before: each figure's min and median over the rounds, and the
    ratio of the medians (> 1 is better for this code, whichever way the figure runs)."""
    lines = [
        f"{'figure':22} {'now min':>9} {'now med':>9} {'before min':>10} {'before med':>10}"
        f" {'ratio':>7}"
    ]
    for label, section, key, larger in COMPARED:
        now = [r["now"][section][key] for r in rounds]
        old = [r["before"][section][key] for r in rounds]
        n_med, o_med = statistics.median(now), statistics.median(old)
        ratio = (n_med / o_med if larger else o_med / n_med) if n_med and o_med else float("nan")
        lines.append(
            f"{label:22} {min(now):9.2f} {n_med:9.2f} {min(old):10.2f} {o_med:10.2f} {ratio:7.2f}"
        )
    last = rounds[-1]
    lines.append(
        f"cycles per process, last round: now {last['now']['contended']['per_process']},"
        f" before {last['before']['contended']['per_process']}"
    )
    lines.append("ratio: this code's median over before's, oriented so that > 1 is better")
    return "\n".join(lines)


def failures(results: dict[str, Any]) -> bool:
    return bool(
        results["contended"]["lock_errors"]
        or results["spread"]["lock_errors"]
        or results["contended"]["history_violations"]
        or results["uncontended"].get("history_rows_per_heartbeat", 0)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="uncontended cycles")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each crowd run")
    parser.add_argument("--dir", type=Path, help="workflow folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (with --before)")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also measure this checkout's src/ in the same run, interleaved",
    )
    args = parser.parse_args()

    if args.before is None:
        results = measure(args)
        print(json.dumps(results, indent=2) if args.json else describe(results))
        return 1 if failures(results) else 0

    sources = {"now": HERE.parent / "src", "before": args.before.resolve() / "src"}
    rounds: list[dict[str, dict[str, Any]]] = []
    for n in range(args.rounds):
        order = ["now", "before"] if n % 2 == 0 else ["before", "now"]
        found: dict[str, dict[str, Any]] = {}
        for variant in order:
            print(f"round {n + 1}: {variant} ...", file=sys.stderr, flush=True)
            found[variant] = child(sources[variant], args)
        rounds.append(found)
    if args.json:
        print(json.dumps(rounds, indent=2))
    else:
        print(f"this code ({sources['now']}):\n{describe(rounds[-1]['now'])}\n")
        print(f"before ({sources['before']}):\n{describe(rounds[-1]['before'])}\n")
        print(compare(rounds))
    return 1 if any(failures(r["now"]) for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
