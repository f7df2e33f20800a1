"""Merge-queue throughput on a compressed virtual clock: the bot's queue against the usual ones.

(Named merge_queue.py, not queue.py: a queue.py here would stand in for the standard
library's queue module for every script in this folder.)

A discrete-event simulation (no network, no database, virtual minutes) of PRs arriving at a
merge queue whose CI takes about D minutes. Every strategy sees the same workload (same seed):

  reviewbot      the bot's own decisions: keys from reviewbot.core.queue, trains and the
                 landing line from reviewbot.core.queue_board, each driven by the state
                 machine of reviewbot.core.queue_train (cars, bisection, flake retry, landing
                 only as a fast-forward to the tested commit);
  trains-direct  the same trains without the landing line, each landing its own first car
                 (a landing makes the other trains' tested commits stale: they are rebuilt);
  trains-untested  trains-direct with the rule land_disjoint_untested: a stale green car
                 whose keys nothing landed since touches lands as an untested merge onto the
                 new base (it is exempt from the two invariants below: it breaks them);
  serial         kodiak-style: update the PR with the base, test it, merge it, one at a time;
  bors           one staging batch (base + everything waiting, up to --bors-batch), bisected
                 in halves on failure, one build at a time;
  single-queue   GitHub-style: one ordered speculative queue, each entry tested on the base
                 plus every entry ahead (up to --sq-slots builds at once), a failing entry
                 ejected and those behind rebuilt.

serial, bors and single-queue are what users would otherwise pick: the last line compares
reviewbot's merged-per-hour with the best of them.

The simulated CI evaluates what a commit really contains: a commit fails when it holds a PR
that fails in the queue (probability p per PR: green at its own head, red against the moving
base), or both PRs of a semantic-conflict pair (each green alone, red together); any run also
fails by chance with the flake rate. The base branch moves only through the harness, which
refuses anything but a fast-forward and after each landing evaluates the base's content:

  base_failures_after_landing  landings after which the base's content fails CI (must be 0);
  merged_ne_tested             landings of a commit that never passed CI itself (must be 0).

A broken base fails every car built on it, so after one bad landing trains-untested ejects
nearly everything: its row shows what an untested landing costs, not a steady state.

Reported per strategy: merged PRs per hour during the arrival window, p50/p95 minutes from
admission to merge, CI builds started (cancelled ones included) per merged PR, ejections, the
backlog at the end and whether it grows (least-squares slope of the queued count over the
second half of the window above 10% of the arrival rate, and above 5 PRs per hour).

    python benchmarks/merge_queue.py
    python benchmarks/merge_queue.py --rate 60 --ci-minutes 20 --fail 0.1 --flake 0.02 --json
"""

from __future__ import annotations

import argparse
import functools
import heapq
import itertools
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from reviewbot.core.queue import KeyRules, entry_keys
from reviewbot.core.queue_board import (
    LANDING,
    Board,
    BoardLimits,
    Promote,
    Routed,
    enqueue,
    home_train,
    on_car,
    settle,
)
from reviewbot.core.queue_cars import (
    Action,
    BuildCar,
    CancelCar,
    Car,
    CarBuilt,
    CarFailed,
    CarLimits,
    CarPassed,
    CarStatus,
    Eject,
    Enqueued,
    Event,
    FastForward,
    LandingFacts,
)
from reviewbot.core.queue_train import TrainState, land, plan, queued, step


@dataclass(frozen=True)
class Workload:
    rate_per_hour: float = 60.0
    hours: float = 8.0
    drain_hours: float = 1.0
    ci_minutes: float = 20.0
    fail: float = 0.1  # a PR fails in the queue (green alone, red against the moving base)
    flake: float = 0.02  # any CI run fails by chance
    areas: int = 8
    cross_area: float = 0.1  # share of PRs touching two areas
    conflicts: float = 0.02  # share of PRs forming a semantic-conflict pair with an earlier PR
    conflict_cross_area: float = 0.3  # share of those pairs whose PRs touch different areas
    seed: int = 1


@dataclass(frozen=True)
class Pr:
    number: int
    arrival: float  # minutes
    files: tuple[str, ...]
    bad: bool


@dataclass(frozen=True)
class Scenario:
    workload: Workload
    prs: tuple[Pr, ...]
    pairs: frozenset[frozenset[int]]


def make_scenario(w: Workload) -> Scenario:
    """The PRs and conflict pairs of a workload; the same for every strategy."""
    rng = random.Random(w.seed)
    prs: list[Pr] = []
    areas_of: dict[int, tuple[str, ...]] = {}
    pairs: set[frozenset[int]] = set()
    t = 0.0
    end = w.hours * 60
    for number in itertools.count(1):
        t += rng.expovariate(w.rate_per_hour / 60)
        if t >= end:
            break
        first = rng.randrange(w.areas)
        areas = [f"area{first}"]
        if w.areas > 1 and rng.random() < w.cross_area:
            areas.append(f"area{rng.choice([a for a in range(w.areas) if a != first])}")
        files = tuple(f"{a}/m{rng.randrange(40)}.py" for a in areas for _ in range(2))
        prs.append(Pr(number, t, files, rng.random() < w.fail))
        areas_of[number] = tuple(areas)
        if prs[:-1] and rng.random() < w.conflicts:
            recent = [p.number for p in prs[-21:-1]]
            cross = rng.random() < w.conflict_cross_area
            fits = [n for n in recent if bool(set(areas_of[n]) & set(areas)) != cross]
            if fits:
                pairs.add(frozenset({rng.choice(fits), number}))
    return Scenario(w, tuple(prs), frozenset(pairs))


@dataclass(frozen=True)
class Commit:
    sha: str
    history: tuple[int, ...]  # PRs applied on top of the initial base, in order


class Harness:
    """The forge and CI every strategy acts on: builds and tests commits, moves the base only
    by a fast-forward, and keeps the score."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self.w = scenario.workload
        self.rng = random.Random(seed)
        self.now = 0.0
        self.base = Commit("c0", ())
        self.commits: dict[str, Commit] = {"c0": self.base}
        self.passed: set[str] = set()
        self.bad = {p.number for p in scenario.prs if p.bad}
        self.arrival = {p.number: p.arrival for p in scenario.prs}
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.sha_seq = itertools.count(1)
        self.cancelled: set[str] = set()
        self.builds = 0
        self.merged: dict[int, float] = {}
        self.ejected: set[int] = set()
        self.base_failures = 0
        self.merged_ne_tested = 0
        self.samples: list[tuple[float, int]] = []

    # the forge
    def commit(self, parent: Commit, entries: Sequence[int]) -> Commit:
        """A merge commit of ``entries`` on ``parent`` (entries already in it are skipped)."""
        have = set(parent.history)
        sha = f"c{next(self.sha_seq)}"
        made = Commit(sha, parent.history + tuple(n for n in entries if n not in have))
        self.commits[sha] = made
        return made

    def is_fast_forward(self, sha: str) -> bool:
        history = self.commits[sha].history
        return history[: len(self.base.history)] == self.base.history

    def fast_forward(self, sha: str) -> bool:
        """Move the base to ``sha`` if that is a fast-forward; score the landing."""
        if not self.is_fast_forward(sha):
            return False
        target = self.commits[sha]
        landed = target.history[len(self.base.history) :]
        self.base = target
        for number in landed:
            self.merged[number] = self.now
        if sha not in self.passed:
            self.merged_ne_tested += 1
        if self.broken(target.history):
            self.base_failures += 1
        return True

    def eject(self, number: int) -> None:
        self.ejected.add(number)

    # the CI
    def broken(self, history: Sequence[int]) -> bool:
        content = set(history)
        if content & self.bad:
            return True
        return any(pair <= content for pair in self.scenario.pairs)

    def test(self, sha: str, done: Callable[[bool], None]) -> None:
        """Run CI on ``sha``; ``done(passed)`` is called about D minutes later unless cancelled."""
        self.builds += 1
        passed = not self.broken(self.commits[sha].history) and self.rng.random() >= self.w.flake
        minutes = self.w.ci_minutes * self.rng.uniform(0.9, 1.1)

        def finish() -> None:
            if sha in self.cancelled:
                return
            if passed:
                self.passed.add(sha)
            done(passed)

        self.at(self.now + minutes, finish)

    def cancel(self, sha: str) -> None:
        self.cancelled.add(sha)

    # the clock
    def at(self, when: float, run: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), run))

    def queued(self) -> int:
        arrived = sum(1 for p in self.scenario.prs if p.arrival <= self.now)
        return arrived - len(self.merged) - len(self.ejected)

    def run(self, strategy: Strategy) -> None:
        for pr in self.scenario.prs:
            self.at(pr.arrival, functools.partial(strategy.admit, pr))
        step_minutes = 10.0
        for k in itertools.count():
            if k * step_minutes > self.w.hours * 60:
                break
            self.at(k * step_minutes, lambda: self.samples.append((self.now, self.queued())))
        end = (self.w.hours + self.w.drain_hours) * 60
        while self.events and self.events[0][0] <= end:
            when, _, run = heapq.heappop(self.events)
            self.now = when
            run()


class Strategy(Protocol):
    name: str

    def admit(self, pr: Pr) -> None: ...


# Strategies users would otherwise pick


class Serial:
    """Kodiak-style: update the first PR with the base, test it, merge it; one at a time."""

    name = "serial"

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.waiting: list[int] = []
        self.busy = False

    def admit(self, pr: Pr) -> None:
        self.waiting.append(pr.number)
        self.next()

    def next(self) -> None:
        if self.busy or not self.waiting:
            return
        number = self.waiting.pop(0)
        commit = self.h.commit(self.h.base, (number,))
        self.busy = True

        def done(passed: bool) -> None:
            self.busy = False
            if not passed or not self.h.fast_forward(commit.sha):
                self.h.eject(number)
            self.next()

        self.h.test(commit.sha, done)


class Bors:
    """One staging build at a time: base + the waiting batch; a failed batch is bisected."""

    name = "bors"

    def __init__(self, h: Harness, batch_max: int) -> None:
        self.h = h
        self.batch_max = batch_max
        self.waiting: list[int] = []
        self.bisect: list[tuple[int, ...]] = []  # halves still to test, first first
        self.busy = False

    def admit(self, pr: Pr) -> None:
        self.waiting.append(pr.number)
        self.next()

    def next(self) -> None:
        if self.busy:
            return
        if self.bisect:
            batch = self.bisect.pop(0)
        elif self.waiting:
            batch, self.waiting = (
                tuple(self.waiting[: self.batch_max]),
                self.waiting[self.batch_max :],
            )
        else:
            return
        commit = self.h.commit(self.h.base, batch)
        self.busy = True

        def done(passed: bool) -> None:
            self.busy = False
            if passed and self.h.fast_forward(commit.sha):
                pass
            elif len(batch) == 1:
                self.h.eject(batch[0])
            else:
                middle = (len(batch) + 1) // 2
                self.bisect[:0] = [batch[:middle], batch[middle:]]
            self.next()

        self.h.test(commit.sha, done)


@dataclass
class _SqCar:
    number: int
    commit: Commit
    green: bool = False


class SingleQueue:
    """GitHub-style: one ordered speculative queue; each entry is tested on the base plus the
    entries ahead; a failing entry is ejected and the entries behind it rebuilt."""

    name = "single-queue"

    def __init__(self, h: Harness, slots: int) -> None:
        self.h = h
        self.slots = slots
        self.waiting: list[int] = []
        self.line: list[_SqCar] = []

    def admit(self, pr: Pr) -> None:
        self.waiting.append(pr.number)
        self.fill()

    def fill(self) -> None:
        while self.waiting and len(self.line) < self.slots:
            number = self.waiting.pop(0)
            parent = self.line[-1].commit if self.line else self.h.base
            car = _SqCar(number, self.h.commit(parent, (number,)))
            self.line.append(car)
            self.h.test(car.commit.sha, functools.partial(self.done, car))

    def done(self, car: _SqCar, passed: bool) -> None:
        if car not in self.line:
            return
        if passed:
            car.green = True
        else:
            index = self.line.index(car)
            behind = self.line[index + 1 :]
            for other in behind:
                self.h.cancel(other.commit.sha)
            self.line = self.line[:index]
            self.h.eject(car.number)
            self.waiting[:0] = [c.number for c in behind]
        while self.line and self.line[0].green:
            head = self.line.pop(0)
            if not self.h.fast_forward(head.commit.sha):  # never: only the queue moves the base
                raise AssertionError("the head of the queue is not a fast-forward")
        self.fill()


# The bot's own queue


class Reviewbot:
    """The bot's decisions: entry keys from :func:`entry_keys`, trains and the landing line
    from :mod:`reviewbot.core.queue_board` (each a :mod:`reviewbot.core.queue_train` machine).
    This class only performs their actions on the harness, as the runtime does on a forge."""

    name = "reviewbot"

    def __init__(self, h: Harness, limits: BoardLimits, rules: KeyRules) -> None:
        self.h = h
        self.limits = limits
        self.rules = rules
        self.board = Board()
        self.shas: dict[tuple[int, int], str] = {}  # (train, car) -> the car's commit

    def admit(self, pr: Pr) -> None:
        self.board, actions = enqueue(self.board, pr.number, entry_keys(pr.files, self.rules))
        self._perform(actions)
        self.settle()

    def settle(self) -> None:
        self.board, actions = settle(self.board, self.limits, self.h.is_fast_forward)
        self._perform(actions)

    def _perform(self, actions: Sequence[Routed]) -> None:
        for routed in actions:
            tid, action = routed.train, routed.action
            if isinstance(action, BuildCar):
                self._build(tid, action.car)
            elif not isinstance(action, Promote):  # a promotion does nothing on the forge
                perform_on_forge(self.h, self.shas, tid, action)

    def _build(self, tid: int, car: Car) -> None:
        line = self.board.landing.line if tid == LANDING else self.board.trains[tid].line
        commit = self.h.commit(parent(self.h, self.shas, tid, line, car), car.entries)
        self.shas[(tid, car.id)] = commit.sha
        self.board, actions = on_car(self.board, tid, CarBuilt(car.id, commit.sha))
        self._perform(actions)

        def done(passed: bool) -> None:
            if self.shas.get((tid, car.id)) != commit.sha:
                return  # cancelled
            event = CarPassed(car.id) if passed else CarFailed(car.id, "ci/test")
            self.board, actions = on_car(self.board, tid, event)
            self._perform(actions)
            self.settle()

        self.h.test(commit.sha, done)


def parent(
    h: Harness, shas: dict[tuple[int, int], str], tid: int, line: Sequence[Car], car: Car
) -> Commit:
    """The commit a car is merged onto: the car ahead of it on its line whose entries are the
    car's ``ahead``, else the base (as the runtime builds a car on the car ahead)."""
    for other in line:
        sha = shas.get((tid, other.id))
        if other.entries == car.ahead and sha is not None:
            return h.commits[sha]
    return h.base


def perform_on_forge(
    h: Harness, shas: dict[tuple[int, int], str], tid: int, action: Action
) -> None:
    """Cancel a car, eject an entry, or land: what a runtime does on the forge."""
    if isinstance(action, CancelCar):
        sha = shas.pop((tid, action.car_id), None)
        if sha is not None:
            h.cancel(sha)
    elif isinstance(action, Eject):
        h.eject(action.number)
    elif isinstance(action, FastForward) and not h.fast_forward(action.sha):
        raise AssertionError("the core landed a commit that is not a fast-forward")


class TrainsDirect:
    """The trains alone (no landing line), each landing its own first car by a fast-forward:
    a landing makes every other train's tested commit stale, and it is rebuilt
    (``base_moved``). Shown to measure what the landing line buys."""

    name = "trains-direct"

    def __init__(
        self, h: Harness, limits: CarLimits, rules: KeyRules, *, untested: bool = False
    ) -> None:
        self.h = h
        self.limits = limits
        self.rules = rules
        self.untested = untested
        self.keys: dict[int, frozenset[str]] = {}
        self.trains: dict[int, TrainState] = {}
        self.homes: dict[int, frozenset[str]] = {}
        self.ids = itertools.count(1)
        self.shas: dict[tuple[int, int], str] = {}

    def admit(self, pr: Pr) -> None:
        keys = entry_keys(pr.files, self.rules)
        self.keys[pr.number] = keys
        tid = home_train(self.homes, keys)
        if tid is None:
            tid = next(self.ids)
            self.trains[tid], self.homes[tid] = TrainState(), keys
        self._step(tid, Enqueued(pr.number))
        self.settle()

    def _step(self, tid: int, event: Event) -> None:
        self.trains[tid], actions = step(self.trains[tid], event)
        self._perform(tid, actions)

    def _perform(self, tid: int, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, BuildCar):
                car = action.car
                base = parent(self.h, self.shas, tid, self.trains[tid].line, car)
                commit = self.h.commit(base, car.entries)
                self.shas[(tid, car.id)] = commit.sha
                self._step(tid, CarBuilt(car.id, commit.sha))
                self.h.test(commit.sha, functools.partial(self._done, tid, car, commit.sha))
            else:
                perform_on_forge(self.h, self.shas, tid, action)

    def _lands_untested(self, car: Car) -> bool:
        """``land_disjoint_untested``: a green car whose base another train moved, when
        nothing that landed since touches its train's keys, lands as a merge of the new base
        and its entries, a commit no CI ran on."""
        if not self.untested or car.tested_sha is None:
            return False
        tid = next(t for t, s in self.trains.items() if car in s.line)
        tested = set(self.h.commits[car.tested_sha].history)
        since = [n for n in self.h.base.history if n not in tested]
        mine = {k for n in car.entries for k in self.keys[n]}
        if any(self.keys[n] & mine for n in since):
            return False
        merged = self.h.commit(self.h.base, car.entries)
        if not self.h.fast_forward(merged.sha):
            raise AssertionError("a merge onto the base is always a fast-forward")
        self.trains[tid], actions = land(self.trains[tid], car.id, LandingFacts(True))
        self.shas.pop((tid, car.id), None)
        self._perform(tid, [a for a in actions if not isinstance(a, FastForward)])
        return True

    def _done(self, tid: int, car: Car, sha: str, passed: bool) -> None:
        if tid not in self.trains or self.shas.get((tid, car.id)) != sha:
            return
        self._step(tid, CarPassed(car.id) if passed else CarFailed(car.id, "ci/test"))
        self.settle()

    def settle(self) -> None:
        for tid in list(self.trains):
            while (line := self.trains[tid].line) and line[0].status is CarStatus.GREEN:
                first = line[0]
                facts = LandingFacts(self.h.is_fast_forward(first.tested_sha or ""))
                if not facts.base_is_ancestor_of_tested and self._lands_untested(first):
                    continue
                self.trains[tid], actions = land(self.trains[tid], first.id, facts)
                self._perform(tid, actions)
                if not facts.base_is_ancestor_of_tested:
                    break
        for tid in list(self.trains):
            in_flight = sum(t.in_flight for t in self.trains.values())
            self.trains[tid], actions = plan(self.trains[tid], self.limits, in_flight)
            self._perform(tid, actions)
            if not queued(self.trains[tid]) and not self.trains[tid].in_flight:
                del self.trains[tid], self.homes[tid]


# Scoring


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def slope(samples: Sequence[tuple[float, int]]) -> float:
    """Least-squares slope of (minute, queued) samples, in PRs per hour."""
    if len(samples) < 2:
        return 0.0
    xs = [t / 60 for t, _ in samples]
    ys = [float(q) for _, q in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def score(h: Harness) -> dict[str, Any]:
    w = h.w
    window = w.hours * 60
    merged_in_window = [n for n, t in h.merged.items() if t <= window]
    waits = [t - h.arrival[n] for n, t in h.merged.items()]
    second_half = [(t, q) for t, q in h.samples if t >= window / 2]
    growth = slope(second_half)
    return {
        "merged": len(h.merged),
        "merged_per_hour": round(len(merged_in_window) / w.hours, 1),
        "p50_min": round(percentile(waits, 0.5), 1),
        "p95_min": round(percentile(waits, 0.95), 1),
        "builds": h.builds,
        "builds_per_merged": round(h.builds / max(1, len(h.merged)), 2),
        "ejected": len(h.ejected),
        "base_failures_after_landing": h.base_failures,
        "merged_ne_tested": h.merged_ne_tested,
        "backlog_end": h.samples[-1][1] if h.samples else 0,
        "backlog_slope_per_hour": round(growth, 1),
        "backlog_grows": growth > max(5.0, 0.1 * w.rate_per_hour),
    }


@dataclass(frozen=True)
class Options:
    limits: BoardLimits = field(default_factory=BoardLimits)
    direct: CarLimits = field(default_factory=CarLimits)  # trains-direct: the core's defaults
    bors_batch: int = 8
    sq_slots: int = 20


OTHERS = ("serial", "bors", "single-queue")  # what users would otherwise pick
# Lands commits no CI ran on, by design: not held to the two invariants.
UNSAFE = ("trains-untested",)
STRATEGIES: dict[str, Callable[[Harness, Options], Strategy]] = {
    "reviewbot": lambda h, o: Reviewbot(h, o.limits, KeyRules()),
    "trains-direct": lambda h, o: TrainsDirect(h, o.direct, KeyRules()),
    "trains-untested": lambda h, o: TrainsDirect(h, o.direct, KeyRules(), untested=True),
    "serial": lambda h, o: Serial(h),
    "bors": lambda h, o: Bors(h, o.bors_batch),
    "single-queue": lambda h, o: SingleQueue(h, o.sq_slots),
}


def run(
    workload: Workload, options: Options, names: Sequence[str] = tuple(STRATEGIES)
) -> dict[str, Any]:
    """One JSON-ready report: the workload, then a row per strategy."""
    scenario = make_scenario(workload)
    rows = []
    for name in names:
        h = Harness(scenario, workload.seed)
        h.run(STRATEGIES[name](h, options))
        rows.append({"strategy": name, **score(h)})
    others = [r["merged_per_hour"] for r in rows if r["strategy"] in OTHERS]
    ours = next((r for r in rows if r["strategy"] == "reviewbot"), None)
    ratio = (
        round(ours["merged_per_hour"] / max(others), 2)
        if ours is not None and others and max(others)
        else None
    )
    return {
        "workload": {
            **workload.__dict__,
            "prs": len(scenario.prs),
            "conflict_pairs": len(scenario.pairs),
        },
        "limits": {
            "trains": options.limits.trains.__dict__,
            "landing": options.limits.landing.__dict__,
            "ci_budget": options.limits.ci_budget,
        },
        "rows": rows,
        "reviewbot_vs_best_other_merged_per_hour": ratio,
    }


COLUMNS = (
    "strategy",
    "merged_per_hour",
    "p50_min",
    "p95_min",
    "builds_per_merged",
    "ejected",
    "base_failures_after_landing",
    "merged_ne_tested",
    "backlog_end",
    "backlog_grows",
)


def table(report: dict[str, Any]) -> str:
    rows = [[str(r[c]) for c in COLUMNS] for r in report["rows"]]
    heads = [
        "strategy",
        "merged/h",
        "p50 min",
        "p95 min",
        "builds/merged",
        "ejected",
        "base fail",
        "merged!=tested",
        "backlog",
        "grows",
    ]
    widths = [max(len(x) for x in col) for col in zip(heads, *rows, strict=False)]
    lines = [
        "  ".join(x.ljust(wd) for x, wd in zip(r, widths, strict=True)) for r in [heads, *rows]
    ]
    ratio = report["reviewbot_vs_best_other_merged_per_hour"]
    return "\n".join([*lines, f"reviewbot / best other strategy, merged per hour: {ratio}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Workload()
    parser.add_argument("--rate", type=float, default=d.rate_per_hour, help="PRs per hour")
    parser.add_argument("--hours", type=float, default=d.hours)
    parser.add_argument("--ci-minutes", type=float, default=d.ci_minutes, help="CI duration D")
    parser.add_argument("--fail", type=float, default=d.fail, help="in-queue failure rate p")
    parser.add_argument("--flake", type=float, default=d.flake)
    parser.add_argument("--areas", type=int, default=d.areas)
    parser.add_argument("--cross-area", type=float, default=d.cross_area)
    parser.add_argument("--conflicts", type=float, default=d.conflicts)
    parser.add_argument("--seed", type=int, default=d.seed)
    limits = BoardLimits()
    parser.add_argument("--batch-max", type=int, default=limits.trains.batch_max)
    parser.add_argument("--per-train", type=int, default=limits.trains.per_train)
    parser.add_argument("--landing-batch-max", type=int, default=limits.landing.batch_max)
    parser.add_argument("--landing-cars", type=int, default=limits.landing.per_train)
    parser.add_argument("--ci-budget", type=int, default=limits.ci_budget)
    parser.add_argument("--bors-batch", type=int, default=8)
    parser.add_argument("--sq-slots", type=int, default=20)
    parser.add_argument("--only", nargs="*", choices=tuple(STRATEGIES), default=tuple(STRATEGIES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workload = Workload(
        rate_per_hour=args.rate,
        hours=args.hours,
        ci_minutes=args.ci_minutes,
        fail=args.fail,
        flake=args.flake,
        areas=args.areas,
        cross_area=args.cross_area,
        conflicts=args.conflicts,
        seed=args.seed,
    )
    board_limits = BoardLimits(
        trains=CarLimits(args.per_train, args.ci_budget, args.batch_max),
        landing=CarLimits(args.landing_cars, args.ci_budget, args.landing_batch_max),
        ci_budget=args.ci_budget,
    )
    options = Options(board_limits, bors_batch=args.bors_batch, sq_slots=args.sq_slots)
    report = run(workload, options, args.only)
    print(json.dumps(report) if args.json else table(report))
    bad = [
        r
        for r in report["rows"]
        if r["strategy"] not in UNSAFE
        and (r["base_failures_after_landing"] or r["merged_ne_tested"])
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
