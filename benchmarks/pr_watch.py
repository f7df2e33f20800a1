"""PR watch benchmark: what one look of a watcher (``watch_pr``, ``POST /api/v1/leases/watch``)
costs the store, against a baseline measured in the same run.

A watcher looks at its PR every 0.2 s while nothing changes. One look is
``runtime.pr_watch.read_snapshot``: the PR's latest gate decision, its latest verdict, its
merge attempts, its five latest deliveries (for the mergeability a forge event reported) and
its live leases. The baseline is ``LeaseStore.list_leases`` alone for the same PR, the read
any lease holder makes today. Prints microseconds per look of each and their ratio, on a
store holding PRS pull requests with DELIVERIES deliveries each.

Usage:
  python benchmarks/pr_watch.py            # 200 PRs x 20 deliveries, 2000 looks
  python benchmarks/pr_watch.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reviewbot.config import Settings
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.runtime.pr_watch import read_snapshot
from reviewbot.store import journal
from reviewbot.store.database import Database
from reviewbot.store.journal import NewDelivery
from reviewbot.store.leases import LeaseStore
from reviewbot.workflowdb.bootstrap import open_store

HEAD = "a" * 40


def fill(db: Database, prs: int, deliveries: int) -> None:
    body = b'{"action": "synchronize", "pull_request": {"mergeable": true, "head": {"sha": "%s"}}}'
    for number in range(1, prs + 1):
        for i in range(deliveries):
            delivery_id = f"d-{number}-{i}"
            journal.insert_delivery(
                db,
                NewDelivery(delivery_id=delivery_id, source="gitea", body=body % HEAD.encode(),
                            received_at=1.0, event="pull_request"),
            )  # fmt: skip
            with db.write() as tx:
                tx.execute(
                    "INSERT INTO pr_gate_decisions (delivery_id, source, forge, repo, number, "
                    "head_sha, decision, reason_code, decided_at) VALUES (?, 'gitea', 'gitea', "
                    "'acme/api', ?, ?, 'eligible', 'eligible', 1.0)",
                    (delivery_id, number, HEAD),
                )


def per_look(fn: Callable[[], object], looks: int) -> float:
    started = time.perf_counter()
    for _ in range(looks):
        fn()
    return (time.perf_counter() - started) / looks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    prs, deliveries, looks = (20, 5, 200) if args.quick else (200, 20, 2000)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        db = open_store(settings)
        leases = LeaseStore.open(db, settings.leases)
        fill(db, prs, deliveries)
        worker = leases.workers.register("bench", client="bench", session_id="b", role="m")
        target = LeaseTarget("gitea", "acme/api", prs // 2, Role.MERGER)
        leases.acquire(target, worker.identity, HEAD, ttl_s=600)
        number = prs // 2

        def baseline() -> None:
            leases.list_leases(forge="gitea", repo="acme/api", number=number, live_only=True)

        def look() -> None:
            read_snapshot(db, leases, time.time, "gitea", "acme/api", number)

        per_look(look, looks // 10)  # warm the caches alike
        base_us = per_look(baseline, looks)
        look_us = per_look(look, looks)
        leases.close()
        db.close()
    print(f"store: {prs} PRs x {deliveries} deliveries, {looks} looks each")
    print(f"baseline list_leases: {base_us:8.1f} us per look")
    print(f"watch read_snapshot:  {look_us:8.1f} us per look  ({look_us / base_us:.2f}x)")
    print(f"one watcher at a look every 0.2 s: {look_us * 5 / 1e4:.3f}% of one core")


if __name__ == "__main__":
    main()
