"""The merge-queue benchmark's workload, run small: every queue strategy keeps the base green
and lands only tested commits. (Speed is the benchmark's to print, not a test's to assert.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "merge_queue.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("queue_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["queue_benchmark"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def small(bench: ModuleType, seed: int) -> Any:
    # many conflict pairs, half of them across areas, so the queues must catch them
    return bench.Workload(
        rate_per_hour=40, hours=2, drain_hours=1, conflicts=0.3, conflict_cross_area=0.5, seed=seed
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_queue_strategy_breaks_the_base_or_lands_an_untested_commit(
    bench: ModuleType, seed: int
) -> None:
    workload = small(bench, seed)
    report = bench.run(workload, bench.Options())
    assert report["workload"]["conflict_pairs"] > 5
    rows = {row["strategy"]: row for row in report["rows"]}
    assert set(rows) == {
        "reviewbot",
        "trains-direct",
        "trains-untested",
        "serial",
        "bors",
        "single-queue",
    }
    for name, row in rows.items():
        if name in bench.UNSAFE:  # lands untested merges by design
            continue
        assert row["merged"] > 0, row
        assert row["base_failures_after_landing"] == 0, row
        assert row["merged_ne_tested"] == 0, row


class Reckless:
    """Merges each PR as it arrives, untested: what the harness must catch."""

    name = "reckless"

    def __init__(self, h: Any) -> None:
        self.h = h

    def admit(self, pr: Any) -> None:
        self.h.fast_forward(self.h.commit(self.h.base, (pr.number,)).sha)


def test_the_harness_counts_untested_landings_and_a_broken_base(bench: ModuleType) -> None:
    h = bench.Harness(bench.make_scenario(small(bench, 1)), 1)
    h.run(Reckless(h))
    row = bench.score(h)
    assert row["merged_ne_tested"] == row["merged"] > 0
    assert row["base_failures_after_landing"] > 0


def test_the_base_moves_only_by_a_fast_forward(bench: ModuleType) -> None:
    h = bench.Harness(bench.make_scenario(small(bench, 1)), 1)
    first = h.commit(h.base, (1,))
    sibling = h.commit(h.base, (2,))
    assert h.fast_forward(first.sha)
    assert not h.fast_forward(sibling.sha)
    assert h.base == first and 2 not in h.merged


def test_the_json_report_has_a_row_per_strategy_with_the_issue_columns(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    code = bench.main(["--hours", "1", "--rate", "20", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    for row in report["rows"]:
        for column in (
            "merged_per_hour",
            "p50_min",
            "p95_min",
            "builds_per_merged",
            "base_failures_after_landing",
            "merged_ne_tested",
            "backlog_grows",
        ):
            assert column in row
