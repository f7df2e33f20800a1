"""Every train of one (repository, base) queue and the landing line, as one pure state machine.

The base moves only by a fast-forward to a tested commit, so two trains cannot both land what
they tested: the first landing makes every other train's tested commit stale (its base is no
longer the base). Retesting each stale car after every landing serializes the trains again.
So a queue runs in two stages, both :class:`~reviewbot.core.queue_train.TrainState` machines:

- **Trains** (one per group of entries whose keys overlap, :mod:`reviewbot.core.queue`) test
  each entry on the base plus the entries ahead of it in its train. They catch the entries
  that fail against the base or their neighbours, in parallel and with bisection, and never
  wait for each other. A train's first car that passes is *promoted*: its batch joins the
  landing line (:class:`Promote`). When the landing line is empty, the car sits on nothing but
  the base and its tested commit is still a fast-forward, it lands directly instead.
- **The landing line** is one more train holding every promoted entry: its cars are the base
  plus the landing cars ahead plus a batch of promoted entries (batches grow with the backlog),
  and only its first green car lands, by a fast-forward to exactly its tested commit. Entries
  that passed their train rarely fail here (a flake, or a conflict between trains), so the
  landing line is seldom broken, and one landing carries the work of several trains.

Actions and events are addressed by train: ``LANDING`` (0) is the landing line; train ids
start at 1. Freezes stop landing, not testing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from reviewbot.core.queue import SERIAL_KEY
from reviewbot.core.queue_cars import (
    Action,
    CarLimits,
    CarPassed,
    CarStatus,
    Enqueued,
    Event,
    FastForward,
    LandingFacts,
    Left,
)
from reviewbot.core.queue_train import TrainState, land, plan, queued, release, step
from reviewbot.core.reasons import ReasonCode

LANDING = 0


@dataclass(frozen=True)
class Promote:
    """A train's first car passed: ``merged`` join the landing line (they are not merged yet)."""

    car_id: int
    sha: str
    merged: tuple[int, ...]


@dataclass(frozen=True)
class Routed:
    """An action of train ``train`` (``LANDING`` for the landing line)."""

    train: int
    action: Action | Promote


@dataclass(frozen=True)
class BoardLimits:
    """``trains``: cars per train and entries per car; ``landing``: the landing line's;
    ``ci_budget``: cars in flight over every train and the landing line together."""

    trains: CarLimits = field(default_factory=lambda: CarLimits(2, 48, 4))
    landing: CarLimits = field(default_factory=lambda: CarLimits(4, 48, 8))
    ci_budget: int = 48

    def __post_init__(self) -> None:
        if self.ci_budget < 1:
            raise ValueError("the CI budget must be at least 1")


@dataclass(frozen=True)
class Board:
    trains: Mapping[int, TrainState] = field(default_factory=dict)
    homes: Mapping[int, frozenset[str]] = field(default_factory=dict)  # each train's home keys
    landing: TrainState = field(default_factory=TrainState)
    merged: frozenset[int] = frozenset()  # landed entries some train's car still sits on
    priority: frozenset[int] = frozenset()  # queued hotfix entries: first in every line
    next_train: int = 1

    @property
    def in_flight(self) -> int:
        return self.landing.in_flight + sum(t.in_flight for t in self.trains.values())

    def train_of(self, number: int) -> int | None:
        """The train holding ``number`` (``LANDING`` once promoted), or None."""
        if number in queued(self.landing):
            return LANDING
        return next((tid for tid, t in self.trains.items() if number in queued(t)), None)


def _route(tid: int, actions: Iterable[Action | Promote]) -> tuple[Routed, ...]:
    return tuple(Routed(tid, a) for a in actions)


def _with_train(board: Board, tid: int, state: TrainState) -> Board:
    if tid == LANDING:
        return replace(board, landing=state)
    return replace(board, trains={**board.trains, tid: state})


def enqueue(
    board: Board, number: int, keys: frozenset[str], *, priority: bool = False
) -> tuple[Board, tuple[Routed, ...]]:
    """Admit ``number`` with its keys into its home train (:func:`home_train`), a new train
    when it has none. An entry already queued changes nothing."""
    if board.train_of(number) is not None:
        return board, ()
    board = replace(
        board,
        merged=board.merged - {number},
        priority=(board.priority | {number}) if priority else board.priority - {number},
    )
    tid = home_train(board.homes, keys)
    if tid is None:
        tid = board.next_train
        home = frozenset({SERIAL_KEY}) if SERIAL_KEY in keys else keys
        board = replace(
            board,
            next_train=tid + 1,
            trains={**board.trains, tid: TrainState()},
            homes={**board.homes, tid: home},
        )
    state, actions = step(board.trains[tid], Enqueued(number, priority))
    return _with_train(board, tid, state), _route(tid, actions)


def lands_directly(ahead: Iterable[int], landed: AbstractSet[int], *, landing_busy: bool) -> bool:
    """May a train's green first car skip the landing line (it must still be a fast-forward
    of the base)? Only while nothing waits there and every entry ahead of it landed: one
    promoted and then ejected since is in its tested commit."""
    return not landing_busy and set(ahead) <= landed


def home_train(homes: Mapping[int, frozenset[str]], keys: frozenset[str]) -> int | None:
    """The train an entry with ``keys`` joins: an entry touching a serial path joins the
    serial train; any other the train whose home keys it shares most (the oldest on a tie);
    None when it shares none (it starts a train whose home keys are its own)."""
    if SERIAL_KEY in keys:
        return next((tid for tid, home in sorted(homes.items()) if SERIAL_KEY in home), None)
    best = max(((len(home & keys), -tid) for tid, home in homes.items()), default=(0, 0))
    return -best[1] if best[0] else None


def on_car(board: Board, tid: int, event: Event) -> tuple[Board, tuple[Routed, ...]]:
    """A car event (built, passed, failed) of train ``tid``; an unknown train changes nothing.
    A half of a train's failed batch that passes has passed its train (it was tested on the
    base plus the entries ahead): it is promoted at once rather than tested again."""
    state = board.landing if tid == LANDING else board.trains.get(tid)
    if state is None:
        return board, ()
    half = None
    if tid != LANDING and isinstance(event, CarPassed):
        half = next((c for c in state.splits if c.id == event.car_id), None)
    state, actions = step(state, event)
    if half is None:
        return _with_train(board, tid, state), _route(tid, actions)
    moving = tuple(n for n in half.batch if n in queued(state))
    state = release(state, moving)
    board = _promote(_with_train(board, tid, state), moving)
    promoted = Promote(half.id, half.tested_sha or "", moving)
    return board, (*_route(tid, actions), Routed(tid, promoted))


def _promote(board: Board, numbers: Iterable[int]) -> Board:
    """``numbers`` join the landing line (hotfix entries first)."""
    landing = board.landing
    for number in numbers:
        landing, _ = step(landing, Enqueued(number, number in board.priority))
    return replace(board, landing=landing)


def leave(board: Board, number: int, reason: ReasonCode) -> tuple[Board, tuple[Routed, ...]]:
    """``number`` leaves the queue (push, close, unapproval, dequeue) wherever it is."""
    tid = board.train_of(number)
    if tid is None:
        return board, ()
    state = board.landing if tid == LANDING else board.trains[tid]
    state, actions = step(state, Left(number, reason))
    return _with_train(board, tid, state), _route(tid, actions)


def settle(
    board: Board,
    limits: BoardLimits,
    is_fast_forward: Callable[[str], bool],
    *,
    frozen: bool = False,
) -> tuple[Board, tuple[Routed, ...]]:
    """Land the landing line's green first cars; promote (or land directly, see the module
    docstring) every train's green first car; then fill free slots within the CI budget, the
    landing line first; drop empty trains. ``is_fast_forward(sha)``: is the base an ancestor
    of ``sha`` now (read before the call; the actions move it)? ``frozen``: a freeze window
    holds, nothing lands (trains still test and promote)."""
    actions: list[Routed] = []
    board, landed = _land(board, is_fast_forward, frozen)
    actions += landed
    # Once the base moved in this call, only that line's next cars still descend from it.
    moved_by = LANDING if landed else None
    for tid in sorted(board.trains):
        state = board.trains[tid]
        while state.line and state.line[0].status is CarStatus.GREEN:
            first = state.line[0]
            direct = (
                moved_by in (None, tid)
                and not frozen
                and lands_directly(
                    first.ahead, board.merged, landing_busy=bool(queued(board.landing))
                )
                and first.tested_sha is not None
                and is_fast_forward(first.tested_sha)
            )
            state, done = land(state, first.id, LandingFacts(base_is_ancestor_of_tested=True))
            if not any(isinstance(action, FastForward) for action in done):
                break  # refused (no tested commit): nothing moves on
            for action in done:
                if not isinstance(action, FastForward):
                    actions.append(Routed(tid, action))
                elif direct:
                    actions.append(Routed(tid, action))
                    board = replace(board, merged=board.merged | set(action.merged))
                    moved_by = tid
                else:
                    actions.append(Routed(tid, Promote(first.id, action.sha, action.merged)))
                    board = _promote(board, action.merged)
        board = _with_train(board, tid, state)
    landing_limits = replace(limits.landing, global_budget=limits.ci_budget)
    state, built = plan(board.landing, landing_limits, board.in_flight)
    board = replace(board, landing=state)
    actions += _route(LANDING, built)
    train_limits = replace(limits.trains, global_budget=limits.ci_budget)
    for tid in sorted(board.trains):
        state, built = plan(board.trains[tid], train_limits, board.in_flight)
        board = _with_train(board, tid, state)
        actions += _route(tid, built)
    empty = [tid for tid, t in board.trains.items() if not queued(t) and not t.in_flight]
    trains = {tid: t for tid, t in board.trains.items() if tid not in empty}
    homes = {tid: h for tid, h in board.homes.items() if tid not in empty}
    sitting_on = {n for t in trains.values() for car in t.line for n in car.ahead}
    board = replace(
        board,
        trains=trains,
        homes=homes,
        merged=board.merged & sitting_on,
        priority=frozenset(n for n in board.priority if board.train_of(n) is not None),
    )
    return board, tuple(actions)


def _land(
    board: Board, is_fast_forward: Callable[[str], bool], frozen: bool
) -> tuple[Board, list[Routed]]:
    """Land the landing line's green first cars, one after the other (each sits on the one
    before, so each is a fast-forward once the one before landed)."""
    actions: list[Routed] = []
    state = board.landing
    while state.line and state.line[0].status is CarStatus.GREEN:
        first = state.line[0]
        if first.tested_sha is None:
            break
        facts = LandingFacts(is_fast_forward(first.tested_sha), frozen=frozen)
        state, done = land(state, first.id, facts)
        actions += _route(LANDING, done)
        landed = [n for a in done if isinstance(a, FastForward) for n in a.merged]
        if not landed:
            break
        board = replace(board, merged=board.merged | set(landed))
    return replace(board, landing=state), actions
