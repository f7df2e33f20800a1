"""The bot's merge queue itself on a compressed clock: real git, real HTTP, a real store.

``benchmarks/merge_queue.py`` runs every strategy's decisions over virtual commits. This runs
the bot's own queue runtime (``reviewbot.runtime.queue.QueueDriver``: admission, trains, the
landing line, cars merged and pushed, CI read back, fast-forward landings) on the same
workload (``make_scenario``) against the git-backed forge simulator over loopback HTTP, its
CI (``reviewbot.sim.ci``) and a real SQLite store, on the simulator's manual clock: every
virtual minute the PRs due arrive (a branch pushed by a developer's clone with ``git push``,
the PR opened, approved and green at its own head, then enqueued with ``expect_head_sha``),
the driver runs one pass, and the clock moves a minute on (CI builds due finish).

The simulated CI judges each commit's real tree: a PR that fails in the queue adds a file that
fails every commit holding it (a one-path conflict group), a semantic-conflict pair two files
that fail only together, and any build fails by chance at the flake rate. After the run:

  base_failures_after_landing  base commits whose tree fails CI (flakes aside; must be 0);
  merged_ne_tested             base commits without a passed CI build of their own (must be 0).

It prints the live row beside the simulated ``reviewbot`` row of the same workload and limits.

    python benchmarks/merge_queue_live.py                  # 2 hours of arrivals at 60/h
    python benchmarks/merge_queue_live.py --hours 1 --json
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from merge_queue import COLUMNS, Options, Pr, Workload, make_scenario, percentile, run, slope

from reviewbot.config import QueueRules, Settings
from reviewbot.core.queue_board import BoardLimits
from reviewbot.core.queue_cars import CarLimits
from reviewbot.runtime.lanes import Lanes
from reviewbot.runtime.queue.driver import QueueDriver, QueueRefused
from reviewbot.service import configured_forges
from reviewbot.sim import ManualClock, SimServer, Simulator
from reviewbot.sim.git import client_git
from reviewbot.store.queue import QueueRef, QueueStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

FORGE = "github"
REPO = "acme/app"
BOT = "reviewbot"
CONTEXT = "ci/test"
STEP_S = 60.0  # one pass per virtual minute


@dataclasses.dataclass(frozen=True)
class Limits:
    """The repository's ``merge_queue`` rules: the defaults, with the simulation's CI budget."""

    batch_max: int = QueueRules().batch_max
    cars_per_train: int = QueueRules().cars_per_train
    landing_batch_max: int = QueueRules().landing_batch_max
    landing_cars: int = QueueRules().landing_cars
    ci_budget: int = 48

    def board(self) -> BoardLimits:
        return BoardLimits(
            trains=CarLimits(self.cars_per_train, self.ci_budget, self.batch_max),
            landing=CarLimits(self.landing_cars, self.ci_budget, self.landing_batch_max),
            ci_budget=self.ci_budget,
        )


async def git(cwd: Path, *args: str, token: str = "") -> str:
    """Run git as the developer; the token goes in a header from the environment."""
    # Fixed dates: the same workload makes the same commits, and so the same CI draws.
    dates = {
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    result = await client_git(*args, cwd=cwd, user="alice", token=token, env=dates)
    if result.code:
        raise RuntimeError(f"git {' '.join(args)}: {result.err.strip()}")
    return result.out.strip()


def pr_files(pr: Pr) -> dict[str, str]:
    """The PR's change: new files only (no two PRs touch one file, so every merge is clean)
    in the areas the scenario gave it."""
    files = {
        f"{Path(f).parent}/pr{pr.number}_{i}.py": f"X = {pr.number}\n"
        for i, f in enumerate(pr.files)
    }
    if pr.bad:
        area = Path(pr.files[0]).parent
        files[f"{area}/bad{pr.number}.py"] = "raise SystemExit(1)\n"
    return files


def ci_groups(prs: Sequence[Pr], pairs: frozenset[frozenset[int]]) -> list[list[str]]:
    """The simulated CI's failure rules: a bad PR's file fails alone, a pair's files together."""
    by_number = {p.number: p for p in prs}
    groups = [[f for f in pr_files(p) if "/bad" in f] for p in prs if p.bad]
    for pair in sorted(sorted(p) for p in pairs):
        groups.append([next(iter(pr_files(by_number[n]))) for n in pair])
    return groups


async def live(w: Workload, limits: Limits, tmp: Path) -> dict[str, Any]:
    """The live row of ``w``: the queue driver's passes on the simulator's clock."""
    sim = Simulator(clock=ManualClock(), git=True)
    try:
        return await _live(sim, w, limits, tmp)
    finally:
        sim.close()


async def _live(sim: Simulator, w: Workload, limits: Limits, tmp: Path) -> dict[str, Any]:
    scenario = make_scenario(w)
    tokens = {user: sim.add_user(FORGE, user, bot=user == BOT) for user in (BOT, "alice", "bob")}
    sim.create_repo(FORGE, REPO, default_branch="main")
    for user in tokens:
        sim.set_permission(FORGE, REPO, user, "write")
    started = time.perf_counter()
    async with SimServer(sim, host="127.0.0.1", port=0) as server:
        work = tmp / "work"
        url = f"{server.base_url}/web/{REPO}.git"
        await git(tmp, "clone", "-q", url, str(work), token=tokens["alice"])
        for area in range(w.areas):
            (work / f"area{area}").mkdir()
            (work / f"area{area}" / "README.md").write_text(f"# area {area}\n")
        await git(work, "add", ".")
        await git(work, "commit", "-q", "-m", "The base")
        root = await git(work, "rev-parse", "HEAD")
        await git(work, "push", "-q", "origin", "HEAD:refs/heads/main", token=tokens["alice"])
        config = sim.configure_ci(
            FORGE,
            REPO,
            context=CONTEXT,
            duration=w.ci_minutes * 60,
            flake_rate=w.flake,
            conflicts=ci_groups(scenario.prs, scenario.pairs),
            branches=["reviewbot/queue/*"],
        )
        settings = Settings(
            data_dir=tmp / "data",
            github={"api_url": server.github_api_url, "token": tokens[BOT], "bot_login": BOT},
            repos={
                f"{FORGE}:{REPO}": {
                    "required_checks": [CONTEXT],
                    "merge_queue": dataclasses.asdict(limits),
                }
            },
        )
        db = open_store(WorkflowPaths.from_settings(settings))
        forges = configured_forges(settings)
        store = QueueStore(db, sim.clock)
        driver = QueueDriver(
            settings,
            forges,
            store,
            Lanes(db, "replica-1", term_s=300.0, clock=sim.clock),
            wait_s=1.0,
            autorun=False,
        )
        queue = QueueRef(FORGE, REPO, "main")
        admitted: dict[int, float] = {}
        refused: dict[int, str] = {}
        samples: list[tuple[float, int]] = []
        arrivals = list(scenario.prs)
        start = sim.now()
        end = (w.hours + w.drain_hours) * 3600
        try:
            while sim.now() - start < end:
                now = sim.now() - start
                while arrivals and arrivals[0].arrival * 60 <= now:
                    pr = arrivals.pop(0)
                    pull, head = await open_pull(sim, work, root, pr, tokens["alice"])
                    try:
                        await driver.enqueue(FORGE, REPO, pull, expect_head_sha=head)
                        admitted[pull] = now
                    except QueueRefused as exc:
                        refused[pull] = exc.code.value
                await driver.run(queue)
                if now <= w.hours * 3600:
                    samples.append((now / 60, len(store.entries(FORGE, REPO, "main"))))
                sim.advance(STEP_S)
            events = [e for n in admitted for e in store.events_of_pull(FORGE, REPO, n)]
            # A car still to be built after the drain is one the runtime never builds.
            stuck = [c for c in store.cars(FORGE, REPO, "main") if c.status == "building"]
        finally:
            for forge in forges.values():
                await forge.aclose()
            db.close()
            await sim.settle()
    seconds = time.perf_counter() - started
    landed = {e.number: e.at - start for e in events if e.kind == "landed" and e.number is not None}
    ejected = {e.number for e in events if e.kind == "ejected" and e.number is not None}
    in_window = [n for n, at in landed.items() if at <= w.hours * 3600]
    waits = [(at - admitted[n]) / 60 for n, at in landed.items() if n in admitted]
    builds = len(sim.ci.results) + len(sim.ci.jobs)
    moves = [m.after for m in sim.ref_moves if m.ref == "refs/heads/main" and m.after != root]
    strict = dataclasses.replace(config, flake_rate=0.0)
    passed = {r.job.sha for r in sim.ci.results if r.state == "success"}
    growth = slope([(t, q) for t, q in samples if t >= w.hours * 30])  # the second half
    return {
        "strategy": "reviewbot-live",
        "merged_per_hour": round(len(in_window) / w.hours, 1),
        "p50_min": round(percentile(waits, 0.5), 1),
        "p95_min": round(percentile(waits, 0.95), 1),
        "builds_per_merged": round(builds / max(1, len(landed)), 2),
        "ejected": len(ejected),
        "base_failures_after_landing": sum(
            sim.ci.decide(strict, sha, 1)[0] != "success" for sha in moves
        ),
        "merged_ne_tested": sum(sha not in passed for sha in moves),
        "backlog_end": samples[-1][1] if samples else 0,
        "backlog_slope_per_hour": round(growth, 1),
        "backlog_grows": growth > max(5.0, 0.1 * w.rate_per_hour),
        "refused_at_enqueue": len(refused),
        "cars_never_built": len(stuck),
        "landings": len(moves),
        "real_seconds": round(seconds, 1),
    }


async def open_pull(sim: Simulator, work: Path, root: str, pr: Pr, token: str) -> tuple[int, str]:
    """The PR's branch pushed with git, the PR opened on it, approved and green at its head."""
    branch = f"pr{pr.number}"
    await git(work, "checkout", "-q", "-B", branch, root)
    for name, text in pr_files(pr).items():
        (work / name).write_text(text)
    await git(work, "add", ".")
    await git(work, "commit", "-q", "-m", f"Change {pr.number}")
    await git(work, "push", "-q", "origin", f"HEAD:refs/heads/{branch}", token=token)
    pull = sim.open_pr(FORGE, REPO, "alice", head_ref=branch, title=f"Change {pr.number}")
    sim.submit_review(FORGE, REPO, pull.number, "bob", "APPROVED")
    sim.set_status(FORGE, REPO, pull.head_sha, CONTEXT, "success")
    sim.set_check_run(REPO, pull.head_sha, CONTEXT, conclusion="success")
    return pull.number, pull.head_sha


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=60.0, help="PRs arriving per hour")
    parser.add_argument("--hours", type=float, default=2.0, help="hours of arrivals")
    parser.add_argument("--drain-hours", type=float, default=1.0)
    parser.add_argument("--ci-minutes", type=float, default=20.0)
    parser.add_argument("--fail", type=float, default=0.1)
    parser.add_argument("--flake", type=float, default=0.02)
    parser.add_argument("--areas", type=int, default=8)
    parser.add_argument("--cross-area", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("needs the git program", file=sys.stderr)
        return 2
    w = Workload(
        rate_per_hour=args.rate,
        hours=args.hours,
        drain_hours=args.drain_hours,
        ci_minutes=args.ci_minutes,
        fail=args.fail,
        flake=args.flake,
        areas=args.areas,
        cross_area=args.cross_area,
        seed=args.seed,
    )
    limits = Limits()
    with tempfile.TemporaryDirectory(prefix="queue-live-") as tmp:
        row = asyncio.run(live(w, limits, Path(tmp)))
    simulated = run(w, Options(limits=limits.board()), ("reviewbot",))["rows"][0]
    report = {
        "workload": dataclasses.asdict(w),
        "limits": dataclasses.asdict(limits),
        "rows": [row, simulated],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    cells = [list(COLUMNS), *([str(r[c]) for c in COLUMNS] for r in report["rows"])]
    widths = [max(len(x) for x in column) for column in zip(*cells, strict=True)]
    for line in cells:
        print("  ".join(x.ljust(wd) for x, wd in zip(line, widths, strict=True)))
    print(
        f"live: {row['landings']} landings, {row['refused_at_enqueue']} refused at enqueue,"
        f" {row['real_seconds']} s of real time"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
