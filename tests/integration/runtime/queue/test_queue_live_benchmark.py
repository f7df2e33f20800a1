"""The live merge-queue benchmark, run small: the bot's queue runtime against the git-backed
simulator keeps the base green and lands only tested commits on the benchmark's workload.
(Speed is the benchmark's to print, not a test's to assert.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.runtime.queue.queue_support import needs_git

BENCHMARKS = Path(__file__).resolve().parents[4] / "benchmarks"

pytestmark = [needs_git, pytest.mark.git]


@pytest.fixture(scope="module")
def live() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # the live benchmark builds on merge_queue.py
    try:
        spec = importlib.util.spec_from_file_location(
            "merge_queue_live", BENCHMARKS / "merge_queue_live.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["merge_queue_live"] = module  # dataclasses resolve their module by name
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.slow
async def test_the_live_queue_lands_only_green_tested_commits_and_builds_every_car(
    live: ModuleType, tmp_path: Path
) -> None:
    # The benchmark's workload for one hour (seed 2): failing PRs, a conflict pair, and
    # entries that land through the landing line while their train plans cars after them
    # (such cars were once never built).
    workload = live.Workload(hours=1.0, drain_hours=0.5, seed=2)
    scenario = live.make_scenario(workload)
    assert any(p.bad for p in scenario.prs)

    row = await live.live(workload, live.Limits(), tmp_path)

    assert row["landings"] > 0 and row["merged_per_hour"] > 0
    assert row["base_failures_after_landing"] == 0
    assert row["merged_ne_tested"] == 0
    assert row["ejected"] >= 1
    assert row["refused_at_enqueue"] == 0
    assert row["cars_never_built"] == 0


def test_the_ci_rules_fail_a_bad_pr_alone_and_a_pair_only_together(live: ModuleType) -> None:
    bad = live.Pr(1, 0.0, ("area0/m1.py", "area0/m2.py"), True)
    a = live.Pr(2, 1.0, ("area1/m3.py",), False)
    b = live.Pr(3, 2.0, ("area2/m4.py",), False)
    groups = live.ci_groups([bad, a, b], frozenset({frozenset({2, 3})}))
    assert groups == [["area0/bad1.py"], ["area1/pr2_0.py", "area2/pr3_0.py"]]
    assert set(live.pr_files(bad)) == {"area0/pr1_0.py", "area0/pr1_1.py", "area0/bad1.py"}
