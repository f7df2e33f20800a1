"""One pass over one queue, under its branch's merge lane: the train machines meet the forge.

A :class:`QueueSession` loads the queue's trains (:mod:`reviewbot.core.queue_train` states)
from the store, feeds them what the forge shows (the base moved; a car's CI passed, failed or
timed out) and performs the actions they answer: build a car, cancel one, eject an entry,
fast-forward the base. Every change is written to the store under the lane's token before
the next forge write depends on it, so a replica that stops at any point leaves a state the
next pass resumes from:

- a car planned but not built is built again (its queue branch made anew);
- a landing whose fast-forward reached the forge but not the store is found by the base
  being at the car's tested commit, and recorded then (the fast-forward is not repeated);
- the CI of a car is read from the forge on every pass, so a lost webhook costs nothing but
  the wait until the next pass.

The queue runs as the board of :mod:`reviewbot.core.queue_board`: the trains test their
entries in parallel, and a train's first car that passes is *promoted*: its entries join the
landing line (the train named :data:`LANDING`), one more train whose cars are the base plus
the landing cars ahead plus a batch of promoted entries. Only the landing line's first green
car lands, so one landing carries the work of several trains and a landing never makes
another landing car stale. A train's green car lands directly instead when the landing line
is empty and its tested commit is still a fast-forward of the base.

The base moves only by :meth:`RefOps.fast_forward` to a green car's tested commit, so the
merged commit is the tested commit. A train's green car whose base moved (another train
landed) is promoted and tested again in the landing line, unless the landing line is empty
and the rules allow an untested landing of a car disjoint from what landed
(:func:`~reviewbot.core.queue_cars.may_land_rebased`): it then lands as a merge of the new
base and its tested commit, and its ``landed`` event records both commits.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reviewbot.config import QueueRules, RepoRules
from reviewbot.core import errors
from reviewbot.core.merge import Refusal
from reviewbot.core.models import RequiredChecks
from reviewbot.core.queue import SERIAL_KEY, Entry, KeyRules, entry_keys
from reviewbot.core.queue_board import home_train, lands_directly
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
    Left,
    may_land_rebased,
)
from reviewbot.core.queue_control import Control, landing_hold
from reviewbot.core.queue_train import TrainState, land, plan, queued, release, step
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, NotFastForward, NotFound, reason_for
from reviewbot.forges.refs import RefOps
from reviewbot.runtime.queue import cars as carwork
from reviewbot.runtime.queue.codec import state_back, state_json
from reviewbot.store.lanes import LaneHold
from reviewbot.store.queue import (
    CarState,
    EntryState,
    EventKind,
    QueueCar,
    QueueEntry,
    QueueRef,
    QueueStore,
    QueueWriter,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

LANDING = "landing"  # the landing line's train name (the trains are named t<entry id>)


class LaneLost(errors.ReviewbotError):
    """The lane was lost before a write to the forge that must not overlap another holder."""

    code = ReasonCode.LANE_LOST.value


@dataclass
class Train:
    name: str
    keys: set[str]
    state: TrainState
    dirty: bool = False


@dataclass
class PassReport:
    """What one pass did (for logs, tests and the sweep's report)."""

    built: list[int] = field(default_factory=list)
    landed: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    ejected: list[tuple[int, str]] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # cars left to build again, and why


def key_rules(rules: QueueRules) -> KeyRules:
    return KeyRules(tuple(rules.path_groups.items()), tuple(rules.serial_paths))


def limits_of(rules: QueueRules, train: str) -> CarLimits:
    """The car limits of ``train`` (the landing line has its own)."""
    if train == LANDING:
        return CarLimits(rules.landing_cars, rules.ci_budget, rules.landing_batch_max)
    return CarLimits(rules.cars_per_train, rules.ci_budget, rules.batch_max)


def _home_keys(keys: Iterable[str]) -> set[str]:
    """The home keys of a train started by an entry with ``keys`` (the serial train's when
    it touches a serial path)."""
    keys = set(keys)
    return {SERIAL_KEY} if SERIAL_KEY in keys else keys


def _train_number(name: str) -> int:
    """A train's number (``t<entry id>``): the order trains were formed in."""
    return int(name[1:]) if name[1:].isdigit() else 0


class QueueSession:
    def __init__(
        self,
        queue: QueueRef,
        store: QueueStore,
        hold: LaneHold,
        forge: Forge,
        rules: RepoRules,
        clock: Callable[[], float],
        confirm: Callable[[], Awaitable[bool]],
    ) -> None:
        self.queue = queue
        self.store = store
        self.hold = hold
        self.forge = forge
        self.ops: RefOps = forge.ref_ops()
        self.rules = rules
        self.clock = clock
        self.confirm = confirm  # async: renews the lane; False once lost
        self.trains: dict[str, Train] = {}
        self.entries: dict[int, QueueEntry] = {}
        self.car_rows: dict[tuple[str, int], QueueCar] = {}
        self.tip = ""
        self.protection: RequiredChecks | None = None
        self.landing_hold: Refusal | None = None  # why nothing lands this pass
        self.report = PassReport()
        self._struck: set[int] = set()

    # -- loading and writing -----------------------------------------------------------------

    async def load(self) -> None:
        q = self.queue
        records = await self.store.run(self.store.trains, *q.key)
        self.trains = {r.train: Train(r.train, set(r.keys), state_back(r.state)) for r in records}
        entries = await self.store.run(self.store.entries, *q.key)
        self.entries = {e.number: e for e in entries}
        self._struck = {e.number for e in entries if e.strikes}
        for train in self.trains.values():
            # Home keys are the oldest queued entry's (a store written before trains stopped
            # merging kept the union of every entry's keys: such a train drew in every PR).
            oldest = next((e for e in entries if e.train == train.name), None)
            if train.name != LANDING and oldest is not None:
                train.keys = _home_keys(oldest.keys)
        rows = await self.store.run(self.store.cars, *q.key)
        self.car_rows = {(r.train, r.car): r for r in rows}
        self.tip = await self._base_tip()
        control = await self.store.run(self.store.control, *q.key)
        self.landing_hold = landing_hold(
            self.rules.merge_queue.schedule(),
            self.clock(),
            Control(paused=control.paused, draining=control.draining),
        )

    async def _base_tip(self) -> str:
        tip = await self.forge.branch_head(self.queue.repo, self.queue.base)
        if tip is None:
            raise NotFound(f"the base branch {self.queue.base} is gone", operation="branch_head")
        return tip

    async def write(self, fn: Callable[[QueueWriter], T]) -> T:
        """``fn`` in one transaction fenced by the lane, with every changed train's state."""

        def run() -> T:
            with self.store.fenced(self.queue, self.hold) as w:
                out = fn(w)
                for train in self.trains.values():
                    if train.dirty:
                        w.save_train(train.name, sorted(train.keys), state_json(train.state))
                        for number in train.state.strikes - self._struck:
                            w.update_entry(number, strikes=1)  # retried once as a flake
                            self._struck.add(number)
                return out

        out = await self.store.run(run)
        for train in self.trains.values():
            train.dirty = False
        return out

    async def refresh_rows(self) -> None:
        rows = await self.store.run(self.store.cars, *self.queue.key)
        self.car_rows = {(r.train, r.car): r for r in rows}

    # -- admission and removal ---------------------------------------------------------------

    def train_for(self, keys: frozenset[str]) -> Train | None:
        """The train an entry with ``keys`` joins, as the board routes it
        (:func:`~reviewbot.core.queue_board.home_train`): the train whose home keys it shares
        most (the oldest on a tie; an entry touching a serial path joins the serial train);
        None when it shares none. Trains never merge: an entry that also touches another
        train's keys is tested in its home train; what lands is tested on the base with all
        that landed before it, so a conflict between the two is caught when the second is
        tested on top of the first."""
        trains = [t for t in self.trains.values() if t.name != LANDING]
        homes = {_train_number(t.name): frozenset(t.keys) for t in trains}
        home = home_train(homes, keys)
        return next((t for t in trains if _train_number(t.name) == home), None)

    async def enqueue(self, entry: Entry) -> str:
        """Admit ``entry`` (its admission already decided) into its home train
        (:meth:`train_for`), a new train when it has none; its train's name."""
        into = self.train_for(entry.keys)
        # A new train's home keys are its first entry's.
        train = Train("", _home_keys(entry.keys), TrainState()) if into is None else into
        train.state, _ = step(train.state, Enqueued(entry.number, entry.priority))
        train.dirty = True
        if into is None:
            self.trains[""] = train  # named by its first entry's row, inside the write

        def admit(w: QueueWriter) -> None:
            entry_id = w.enqueue(
                entry.number,
                entry.head_sha,
                sorted(entry.keys),
                train.name,
                priority=entry.priority,
            )
            if not train.name:
                train.name = f"t{entry_id}"
                w.update_entry(entry.number, train=train.name)
            w.event(
                EventKind.ENQUEUED,
                f"admitted at {entry.head_sha[:12]} into train {train.name}"
                f" (keys: {', '.join(sorted(entry.keys)) or 'none'})",
                number=entry.number,
                sha=entry.head_sha,
            )

        await self.write(admit)
        if into is None:
            self.trains[train.name] = self.trains.pop("")
        self.entries = {
            e.number: e for e in await self.store.run(self.store.entries, *self.queue.key)
        }
        return train.name

    async def leave(self, number: int, code: ReasonCode, detail: str) -> bool:
        """Entry ``number`` leaves the queue with ``code``; False when it is not queued."""
        entry = self.entries.get(number)
        if entry is None:
            return False
        train = self.trains.get(entry.train)
        actions: tuple[Action, ...] = ()
        if train is not None:
            train.state, actions = step(train.state, Left(number, code))
            train.dirty = True

        def record(w: QueueWriter) -> None:
            w.end_entry(number, EntryState.LEFT, code)
            w.event(EventKind.LEFT, detail, number=number, code=code)

        await self.write(record)
        self.entries.pop(number, None)
        if train is not None:
            await self.perform(train, actions)
        return True

    # -- one pass ----------------------------------------------------------------------------

    def _order(self) -> list[str]:
        """The landing line first (it lands before any train may land directly), then the
        trains in the order they were formed."""
        return sorted(self.trains, key=lambda name: (name != LANDING, _train_number(name), name))

    async def run_pass(self) -> PassReport:
        """The landing line, then every train: resume cars left half-built, read CI, land or
        promote; then plan new cars, the landing line first."""
        self.protection = await self.forge.required_checks(self.queue.repo, self.queue.base)
        await self._adopt_orphans()
        for name in self._order():
            train = self.trains.get(name)
            if train is None:
                continue
            await self._resume_builds(train)
            await self._read_ci(train)
            await self._land(train)
        for name in self._order():
            train = self.trains.get(name)
            if train is None:
                continue
            await self._plan(train)
            await self._drop_if_empty(train)
        return self.report

    async def _adopt_orphans(self) -> None:
        """Queued entries whose train has no stored state (an operator deleted its row) wait
        in a train of their own again."""
        stored = set(self.trains)
        for number, entry in sorted(self.entries.items(), key=lambda item: item[1].id):
            if entry.train in stored:
                continue
            train = self.trains.get(entry.train)  # every orphan of the train, not only the first
            if train is None:
                keys = set() if entry.train == LANDING else _home_keys(entry.keys)
                train = self.trains[entry.train] = Train(
                    entry.train, keys, TrainState(), dirty=True
                )
            train.state, _ = step(train.state, Enqueued(number, entry.priority))

    def in_flight(self) -> int:
        return sum(t.state.in_flight for t in self.trains.values())

    async def _plan(self, train: Train) -> None:
        limits = limits_of(self.rules.merge_queue, train.name)
        train.state, actions = plan(train.state, limits, self.in_flight())
        if actions:
            train.dirty = True
        await self.perform(train, actions)

    async def _drop_if_empty(self, train: Train) -> None:
        s = train.state
        if s.waiting or s.line or s.splits or s.bisections:
            return
        if any(e.train == train.name for e in self.entries.values()):
            return
        del self.trains[train.name]
        name = train.name
        await self.write(lambda w: w.drop_train(name))

    # -- actions -----------------------------------------------------------------------------

    async def feed(self, train: Train, event: Event) -> None:
        train.state, actions = step(train.state, event)
        train.dirty = True
        await self.perform(train, actions)

    async def perform(self, train: Train, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, BuildCar):
                await self._build(train, action.car)
            elif isinstance(action, CancelCar):
                await self._cancel(train, action.car_id, "cancelled")
            elif isinstance(action, Eject):
                await self._eject(train, action)
            elif isinstance(action, FastForward):  # only land() asks for one
                raise AssertionError("a fast-forward is performed by the landing")
        if train.dirty:
            await self.write(lambda w: None)

    def _start(self, train: Train, car: Car) -> tuple[str, tuple[int, ...]]:
        """Where a car's branch starts and what it merges: on the built car whose entries
        are exactly those ahead of it, else on the base with every entry ahead that is still
        queued merged. An entry ahead that is no longer queued landed (the base holds it) or
        was ejected or left (it must not ride in): either way it is not merged. (The car
        ahead is gone when it landed or was promoted; a bisection's halves of a car behind
        it, or a train's car behind a promoted one, are built on the base then.)"""
        if car.ahead:
            for other in train.state.line + train.state.splits:
                if other.entries == car.ahead and other.tested_sha is not None:
                    return other.tested_sha, car.batch
        ahead = tuple(n for n in car.ahead if n in self.entries)
        return self.tip, ahead + car.batch

    async def _build(self, train: Train, car: Car) -> None:
        q = self.queue
        branch = carwork.car_branch(q.base, train.name, car.id)
        row = self.car_rows.get((train.name, car.id))
        if row is None:
            row_id = await self.write(
                lambda w: w.add_car(
                    train.name, car.id, car.batch, car.ahead, branch, split_of=car.split_of
                )
            )
            await self.refresh_rows()
        else:
            row_id = row.id
        start, merges = self._start(train, car)
        heads = {n: self.entries[n].head_sha for n in merges if n in self.entries}
        missing = [n for n in merges if n not in heads]
        if missing:  # an entry of its batch left meanwhile: that leave cancels the car
            return
        if not await self.confirm():
            raise LaneLost(q.lane)
        try:
            built = await carwork.build(self.ops, q.repo, branch, start, merges, heads)
        except carwork.BranchMoved as exc:
            # Someone else's push: the car stays to be built, on the next pass, from the
            # start; the other trains and the landings of this pass go on.
            log.warning("queue %s: car %s-%s: %s", q.lane, train.name, car.id, exc)
            self.report.errors.append(str(exc))
            return
        self.report.built.append(row_id)
        if built.sha is None:
            detail = f"#{built.conflict} does not merge cleanly: {built.detail}"

            def conflict(w: QueueWriter) -> None:
                w.update_car(
                    row_id, CarState.FAILED, base_sha=self.tip, check_name=carwork.MERGE_CHECK
                )
                w.event(EventKind.CAR_FAILED, detail, car=row_id, code=ReasonCode.CHECKS_FAILED)

            await self.write(conflict)
            await self.feed(train, CarFailed(car.id, carwork.MERGE_CHECK))
            return
        sha = built.sha
        train.state, _ = step(train.state, CarBuilt(car.id, sha))
        train.dirty = True

        def record(w: QueueWriter) -> None:
            w.update_car(row_id, CarState.TESTING, base_sha=self.tip, tested_sha=sha)
            w.event(
                EventKind.CAR_BUILT,
                f"car {train.name}-{car.id} ({_numbers(car.batch)} on {_numbers(car.ahead)})"
                f" pushed to {branch}",
                car=row_id,
                sha=sha,
            )

        await self.write(record)
        await self.refresh_rows()

    async def _cancel(self, train: Train, car_id: int, why: str) -> None:
        row = self.car_rows.get((train.name, car_id))
        if row is None:
            return

        def record(w: QueueWriter) -> None:
            w.update_car(row.id, CarState.CANCELLED)
            w.event(EventKind.CAR_CANCELLED, f"car {train.name}-{car_id}: {why}", car=row.id)

        await self.write(record)
        self.car_rows.pop((train.name, car_id), None)
        await self._delete_branch(row.branch)
        if row.status == CarState.BUILDING:  # a build stopped half-way left its work branch
            await self._delete_branch(carwork.work_branch(row.branch))

    async def _delete_branch(self, branch: str) -> None:
        try:
            await self.ops.delete_branch(self.queue.repo, branch)
        except NotFound:
            pass
        except ForgeError as exc:  # a leftover branch harms nothing; the next build remakes it
            log.warning("deleting the queue branch %s failed: %s", branch, exc)

    async def _eject(self, train: Train, action: Eject) -> None:
        ev = action.evidence
        failed = self.car_rows.get((train.name, ev.car_id))
        evidence: dict[str, Any] = {
            "failure": ev.failure.value,
            "check": ev.check,
            "check_url": failed.check_url if failed is not None else None,
            "car": failed.id if failed is not None else None,
            "batch": list(ev.batch),
            "ahead": list(ev.ahead),
            "tested_sha": failed.tested_sha if failed is not None else None,
            # What it was tested on: the base and the entries ahead of it.
            "conflicts_with": {
                "base_sha": failed.base_sha if failed else None,
                "entries": list(ev.ahead),
            },
        }
        number = action.number

        def record(w: QueueWriter) -> None:
            w.end_entry(number, EntryState.EJECTED, action.code)
            w.event(
                EventKind.EJECTED,
                f"#{number} ejected: {ev.check} failed ({ev.failure.value}) in car"
                f" {train.name}-{ev.car_id}",
                number=number,
                code=action.code,
                sha=evidence["tested_sha"],
                evidence=evidence,
            )

        await self.write(record)
        self.entries.pop(number, None)
        self.report.ejected.append((number, action.code.value))

    # -- CI ----------------------------------------------------------------------------------

    @staticmethod
    def _current(train: Train, car_id: int) -> Car | None:
        """The car as the train holds it now (an earlier action may have changed it)."""
        return next((c for c in train.state.line + train.state.splits if c.id == car_id), None)

    async def _resume_builds(self, train: Train) -> None:
        """Cars the machine holds as building (a pass stopped before their push) are built."""
        for car in list(train.state.line + train.state.splits):
            current = self._current(train, car.id)
            if current is not None and current.status is CarStatus.BUILDING:
                await self._build(train, current)

    async def _read_ci(self, train: Train) -> None:
        timeout = self.rules.merge_queue.car_timeout_s
        assert self.protection is not None
        for car in list(train.state.line + train.state.splits):
            current = self._current(train, car.id)
            if current is None or current.status is not CarStatus.TESTING:
                continue
            row = self.car_rows.get((train.name, car.id))
            if row is None or current.tested_sha is None:
                continue
            answer = await carwork.read_ci(
                self.forge,
                self.queue.repo,
                current.tested_sha,
                self.protection,
                self.rules.required_checks,
            )
            if answer.passed is None:
                if self.clock() - row.updated_at < timeout:
                    continue
                await self._car_failed(train, row, answer.check or "ci", None, timed_out=True)
            elif answer.passed:
                await self._car_passed(train, row)
            else:
                await self._car_failed(train, row, answer.check, answer.url, timed_out=False)

    async def _car_passed(self, train: Train, row: QueueCar) -> None:
        train.state, actions = step(train.state, CarPassed(row.car))
        train.dirty = True

        # A half of a failed batch only tells which half failed: it is done once it passed.
        status = CarState.GREEN if row.split_of is None else CarState.PASSED
        # A train's half that passed was tested on the base plus the entries ahead of it: its
        # entries passed their train and are promoted at once rather than tested again.
        moving: tuple[int, ...] = ()
        if row.split_of is not None and train.name != LANDING:
            moving = tuple(n for n in row.batch if n in queued(train.state))
            train.state = release(train.state, moving)
            self._enter_landing(moving)

        def record(w: QueueWriter) -> None:
            w.update_car(row.id, status)
            w.event(
                EventKind.CAR_PASSED,
                f"car {train.name}-{row.car} ({_numbers(row.batch)}) passed",
                car=row.id,
                sha=row.tested_sha,
                code=ReasonCode.CHECKS_PASSED,
            )
            self._record_promotion(w, f"{train.name}-{row.car}", row, moving)

        await self.write(record)
        self._moved_to_landing(moving)
        self.car_rows[(train.name, row.car)] = _with_status(row, status)
        await self.perform(train, actions)
        if row.split_of is not None:
            self.car_rows.pop((train.name, row.car), None)
            await self._delete_branch(row.branch)

    async def _car_failed(
        self, train: Train, row: QueueCar, check: str, url: str | None, *, timed_out: bool
    ) -> None:
        status = CarState.TIMED_OUT if timed_out else CarState.FAILED
        code = ReasonCode.CAR_TIMED_OUT if timed_out else ReasonCode.CHECKS_FAILED

        def record(w: QueueWriter) -> None:
            w.update_car(row.id, status, check_name=check or None, check_url=url)
            w.event(
                EventKind.CAR_TIMED_OUT if timed_out else EventKind.CAR_FAILED,
                f"car {train.name}-{row.car} ({_numbers(row.batch)}): {check} "
                + ("did not finish in time" if timed_out else "failed"),
                car=row.id,
                sha=row.tested_sha,
                code=code,
                evidence={"check": check, "check_url": url},
            )

        await self.write(record)
        self.report.failed.append(row.id)
        self.car_rows[(train.name, row.car)] = _with_status(row, status, check, url)
        train.state, actions = step(train.state, CarFailed(row.car, check, timed_out=timed_out))
        train.dirty = True
        await self.perform(train, actions)
        self.car_rows.pop((train.name, row.car), None)
        await self._delete_branch(row.branch)

    # -- landing -----------------------------------------------------------------------------

    async def _is_ancestor(self, older: str, newer: str) -> bool:
        if older == newer:
            return True
        return (await self.ops.compare(self.queue.repo, older, newer)).base_is_ancestor

    async def _rebased(self, train: Train, car: Car) -> str | None:
        """The commit a green car whose base moved lands as without a new test (a merge of
        the base and its tested commit), where :func:`may_land_rebased` allows it."""
        rules = self.rules.merge_queue
        row = self.car_rows.get((train.name, car.id))
        if not rules.land_disjoint_untested or row is None or row.base_sha is None:
            return None
        assert car.tested_sha is not None
        since = await self.ops.compare(self.queue.repo, row.base_sha, self.tip)
        landed = entry_keys(since.files, key_rules(rules)) if since.files_complete else {SERIAL_KEY}
        held = await self._car_keys(car)
        if not since.base_is_ancestor or not may_land_rebased(held, landed, allowed=True):
            return None
        branch = f"{carwork.work_branch(row.branch)}-on-{self.tip[:12]}"  # out of CI's sight
        try:
            await self.ops.create_branch(self.queue.repo, branch, self.tip)
            merged = await self.ops.merge_into(
                self.queue.repo,
                branch,
                car.tested_sha,
                f"Merge {row.branch} into {self.queue.base}",
            )
        except ForgeError as exc:  # a conflict after all, or the branch is left over
            log.info("queue %s: %s is retested: %s", self.queue.lane, row.branch, exc)
            return None
        finally:
            await self._delete_branch(branch)
        if merged.onto != self.tip:  # someone else pushed to the branch: their commit rode in
            log.warning(
                "queue %s: %s moved to %s before the merge; %s is retested",
                self.queue.lane,
                branch,
                merged.onto,
                row.branch,
            )
            return None
        return merged.sha

    async def _lands_directly(self, car: Car) -> bool:
        """:func:`~reviewbot.core.queue_board.lands_directly` for a train's car (the landed
        entries are read only when every entry ahead has left the queue)."""
        busy = self._landing_busy()
        if busy or any(n in self.entries for n in car.ahead):
            return False
        landed = (
            await self.store.run(self.store.landed_numbers, *self.queue.key) if car.ahead else set()
        )
        return lands_directly(car.ahead, landed, landing_busy=busy)

    async def _car_keys(self, car: Car) -> set[str]:
        """Every key of the PRs in the car's commit (a train's home keys miss those of a PR
        that rides it but also touches another train's)."""
        keys = {k for n in car.entries if n in self.entries for k in self.entries[n].keys}
        gone = set(car.entries) - set(self.entries)
        if gone:
            every = await self.store.run(self.store.entries, *self.queue.key, state=None)
            keys |= {k for e in every if e.number in gone for k in e.keys}
        return keys

    def _landing_busy(self) -> bool:
        """Does the landing line hold entries (a train's car may then not land directly)?"""
        line = self.trains.get(LANDING)
        return line is not None and bool(queued(line.state))

    async def _land(self, train: Train) -> None:
        """Land the train's first car while it is green, at exactly its tested commit (or,
        where the rules allow it, as an untested merge of a moved base and that commit).
        A train's car lands only while the landing line is empty; otherwise, or when the
        base moved under it, it is promoted into the landing line (:meth:`_promote`)."""
        if self.landing_hold is not None:
            await self._hold_landing(train, self.landing_hold)
            return
        while train.state.line and train.state.line[0].status is CarStatus.GREEN:
            car = train.state.line[0]
            assert car.tested_sha is not None
            # The base holds the car already: a landing a stopped pass did not record.
            landed_already = await self._is_ancestor(car.tested_sha, self.tip)
            if not landed_already and not await self._entries_unchanged(train, car):
                continue  # an entry left; its cars are rebuilt
            ancestor = landed_already or await self._is_ancestor(self.tip, car.tested_sha)
            direct = train.name == LANDING or landed_already or await self._lands_directly(car)
            rebased = None
            if direct and not ancestor and train.name != LANDING:
                rebased = await self._rebased(train, car)
            lands = landed_already or (direct and (ancestor or rebased is not None))
            if train.name != LANDING and not lands:
                await self._promote(train, car)
                continue
            facts = LandingFacts(base_is_ancestor_of_tested=ancestor or rebased is not None)
            state, actions = land(train.state, car.id, facts)
            forward = next((a for a in actions if isinstance(a, FastForward)), None)
            if forward is None:
                if facts.base_is_ancestor_of_tested:
                    return
                # The base moved under the car (another train landed): the line is rebuilt.
                train.state = state
                train.dirty = True
                await self.write(
                    lambda w: w.event(
                        EventKind.CAR_CANCELLED,
                        f"the base moved to {self.tip[:12]}: train {train.name} is rebuilt",
                        code=ReasonCode.BASE_MOVED,
                    )
                )
                await self.perform(train, actions)
                return
            target = self.tip if landed_already else rebased or forward.sha
            if not landed_already:
                if not await self.confirm():
                    raise LaneLost(self.queue.lane)
                try:
                    await self.ops.fast_forward(self.queue.repo, self.queue.base, target)
                except NotFastForward:
                    self.tip = await self._base_tip()
                    continue  # read again: the next round finds the base moved
            self.tip = target
            train.state = state
            train.dirty = True
            await self._record_landing(train, car, forward, target)

    async def _promote(self, train: Train, car: Car) -> None:
        """The train's first car passed but may not land now: its entries passed their train
        and join the landing line, where they are tested on the base and the landing cars
        ahead, and land with them (:mod:`reviewbot.core.queue_board`)."""
        state, actions = land(train.state, car.id, LandingFacts(base_is_ancestor_of_tested=True))
        forward = next(a for a in actions if isinstance(a, FastForward))
        train.state = state
        train.dirty = True
        self._enter_landing(forward.merged)
        row = self.car_rows.get((train.name, car.id))

        def record(w: QueueWriter) -> None:
            if row is not None:
                w.update_car(row.id, CarState.PASSED)
            self._record_promotion(w, f"{train.name}-{car.id}", row, forward.merged)

        await self.write(record)
        self._moved_to_landing(forward.merged)
        self.car_rows.pop((train.name, car.id), None)
        if row is not None:
            await self._delete_branch(row.branch)

    def _enter_landing(self, numbers: Iterable[int]) -> None:
        """``numbers`` wait in the landing line (made when it has none), hotfixes first."""
        line = self.trains.get(LANDING)
        if line is None:
            line = self.trains[LANDING] = Train(LANDING, set(), TrainState())
        for number in numbers:
            entry = self.entries.get(number)
            priority = entry.priority if entry is not None else False
            line.state, _ = step(line.state, Enqueued(number, priority))
            line.dirty = True

    @staticmethod
    def _record_promotion(
        w: QueueWriter, car: str, row: QueueCar | None, numbers: Iterable[int]
    ) -> None:
        for number in numbers:
            w.update_entry(number, train=LANDING)
            sha = row.tested_sha if row is not None else None
            w.event(
                EventKind.PROMOTED,
                f"#{number} passed car {car}"
                + (f" at {sha[:12]}" if sha else "")
                + ": it joins the landing line",
                number=number,
                car=row.id if row is not None else None,
                sha=sha,
            )

    def _moved_to_landing(self, numbers: Iterable[int]) -> None:
        for number in numbers:
            entry = self.entries.get(number)
            if entry is not None:
                self.entries[number] = replace(entry, train=LANDING)

    async def _hold_landing(self, train: Train, why: Refusal) -> None:
        """A freeze, a closed merge window or a pause holds the train's green first car: it
        stays green and lands when the hold ends; the hold is recorded once per car."""
        if not train.state.line or train.state.line[0].status is not CarStatus.GREEN:
            return
        car = train.state.line[0]
        row = self.car_rows.get((train.name, car.id))
        if row is None or await self.store.run(
            self.store.held_recorded, self.queue, row.id, why.code
        ):
            return

        def record(w: QueueWriter) -> None:
            for number in car.batch:
                w.event(
                    EventKind.HELD,
                    f"car {car.id} of train {train.name} is green; landing held: {why.detail}",
                    number=number,
                    car=row.id,
                    code=why.code,
                    sha=car.tested_sha,
                )

        await self.write(record)

    async def _entries_unchanged(self, train: Train, car: Car) -> bool:
        """Each PR the car lands is still open at its pinned head; one that is not leaves."""
        for number in car.batch:
            entry = self.entries.get(number)
            pull = await self.forge.get_pull(self.queue.repo, number)
            if entry is None:
                continue
            if pull.state != "open" or pull.merged:
                await self.leave(number, ReasonCode.PR_CLOSED, f"#{number} was closed")
                return False
            if pull.head_sha.lower() != entry.head_sha.lower():
                await self.leave(
                    number,
                    ReasonCode.HEAD_MOVED,
                    f"#{number} moved to {pull.head_sha[:12]} (queued at {entry.head_sha[:12]})",
                )
                return False
        return True

    async def _record_landing(self, train: Train, car: Car, forward: FastForward, sha: str) -> None:
        """Record that the base is at ``sha``: the car's tested commit (``forward.sha``), or
        a commit containing it (an untested merge the rules allowed)."""
        row = self.car_rows.get((train.name, car.id))
        tested = forward.sha
        how = (
            f"fast-forwarded to the tested commit {sha[:12]}"
            if sha == tested
            else f"moved to {sha[:12]}, a merge of the base and the tested commit {tested[:12]}"
            " (landed untested: nothing that landed since touches its keys)"
        )

        def record(w: QueueWriter) -> None:
            if row is not None:
                w.update_car(row.id, CarState.LANDED)
            for number in forward.merged:
                w.end_entry(number, EntryState.MERGED, None)
                w.event(
                    EventKind.LANDED,
                    f"{self.queue.base} {how}",
                    number=number,
                    car=row.id if row else None,
                    sha=sha,
                    evidence={"tested_sha": tested, "merged_sha": sha, "batch": list(car.batch)},
                )

        await self.write(record)
        self.report.landed.append((forward.merged, sha))
        for number in forward.merged:
            self.entries.pop(number, None)
        self.car_rows.pop((train.name, car.id), None)
        if row is not None:
            await self._delete_branch(row.branch)
        for number in forward.merged:
            await self._mark_merged(number, sha)

    async def _mark_merged(self, number: int, sha: str) -> None:
        try:
            await self.ops.record_landed(self.queue.repo, number, sha)
        except ForgeError as exc:
            # Its commits are on the base all the same; the PR stays open on the forge, and
            # ``explain`` says why (a Gitea repository without manual merges, a permission).
            log.warning("marking #%s merged by %s: %s", number, sha[:12], exc)
            code, detail = reason_for(exc), f"#{number} landed in {sha[:12]}; not marked: {exc}"
            await self.write(
                lambda w: w.event(EventKind.NOT_MARKED, detail, number=number, code=code, sha=sha)
            )
            return
        try:
            pull = await self.forge.get_pull(self.queue.repo, number)
        except ForgeError as exc:  # marked all the same: only the `merged` event is missing
            log.warning("reading #%s after marking it merged: %s", number, exc)
            return
        if pull.merged:
            await self.write(
                lambda w: w.event(
                    EventKind.MERGED, f"#{number} shows merged", number=number, sha=sha
                )
            )


def _numbers(numbers: Iterable[int]) -> str:
    shown = ", ".join(f"#{n}" for n in numbers)
    return shown or "the base"


def _with_status(
    row: QueueCar, status: CarState, check: str | None = None, url: str | None = None
) -> QueueCar:
    return replace(
        row,
        status=status.value,
        check_name=check or row.check_name,
        check_url=url or row.check_url,
    )
