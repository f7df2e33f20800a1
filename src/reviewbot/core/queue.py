"""The merge queue's pure rules: who may enter, what each entry touches, which trains form.

A queue tests the commit that will land (the base plus the entries ahead) and then moves the
base to exactly that commit (docs: the merge-queue design). This module holds the first three
rules; :mod:`reviewbot.core.queue_cars` holds the cars, their failures and their landing.

- **Admission** (:func:`admit`): an entry is admitted only when every merge blocker of
  :func:`reviewbot.core.merge.merge_blockers` is clear at its pinned head, and the live head is
  the one the caller expected (``head_moved`` otherwise). An admitted entry leaves on a push,
  new changes requested, a close or an unapproval (:func:`leave_reason`).
- **Keys** (:func:`entry_keys`): each changed path maps to one area: the first configured path
  group whose glob matches, else its top-level directory (``/`` for a file at the root). A
  serial path (lockfile, changelog) maps to :data:`SERIAL_KEY`, the key of the one serial train.
- **Trains** (:func:`reviewbot.core.queue_board.home_train`): an entry joins the train whose
  home keys it shares most, or starts one; trains never merge, and run in parallel. Entries of
  different trains meet in the landing line, which tests them together before they land.

Globs follow :func:`fnmatch.fnmatchcase`: ``*`` also matches ``/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase

from reviewbot.core.merge import PrFacts, Refusal, merge_blockers, same_sha
from reviewbot.core.reasons import ReasonCode

# Not a path any forge reports, so it never collides with a real area.
SERIAL_KEY = "<serial>"
ROOT_KEY = "/"


@dataclass(frozen=True)
class Admission:
    """Admit, or refuse with every reason (merge blockers first, as a merge reports them)."""

    refusals: tuple[Refusal, ...] = ()

    @property
    def admitted(self) -> bool:
        return not self.refusals

    @property
    def codes(self) -> tuple[ReasonCode, ...]:
        return tuple(r.code for r in self.refusals)


def admit(
    facts: PrFacts, configured_checks: Sequence[str], expect_head_sha: str | None = None
) -> Admission:
    """May this PR enter the queue at ``facts.head``? Every merge blocker refuses it (a queue
    entry must be mergeable on its own: open, not a draft, approved at the head by someone
    other than the author, no changes requested, its required checks green there); so does a
    live head other than ``expect_head_sha`` when the caller gave one (``head_moved``)."""
    refusals: list[Refusal] = []
    if expect_head_sha is not None and not same_sha(expect_head_sha, facts.pull.head_sha):
        refusals.append(
            Refusal(
                ReasonCode.HEAD_MOVED,
                f"the head is {facts.pull.head_sha}, not the expected {expect_head_sha}",
            )
        )
    for blocker in merge_blockers(facts, configured_checks):
        refusal = Refusal(blocker.refusal_code, blocker.detail)
        if refusal not in refusals:
            refusals.append(refusal)
    return Admission(tuple(refusals))


class LeaveEvent(StrEnum):
    """What makes an admitted entry leave the queue."""

    PUSH = "push"
    CHANGES_REQUESTED = "changes_requested"
    CLOSE = "close"
    UNAPPROVAL = "unapproval"


_LEAVE_CODES = {
    LeaveEvent.PUSH: ReasonCode.HEAD_MOVED,
    LeaveEvent.CHANGES_REQUESTED: ReasonCode.CHANGES_REQUESTED,
    LeaveEvent.CLOSE: ReasonCode.PR_CLOSED,
    LeaveEvent.UNAPPROVAL: ReasonCode.NOT_APPROVED,
}


def leave_reason(event: LeaveEvent) -> ReasonCode:
    """The reason code an entry leaves the queue with on ``event``."""
    return _LEAVE_CODES[event]


@dataclass(frozen=True)
class KeyRules:
    """How changed paths map to keys: ``groups`` are (glob, area) pairs, first match wins;
    ``serial_paths`` are globs whose files put an entry in the one serial train."""

    groups: tuple[tuple[str, str], ...] = ()
    serial_paths: tuple[str, ...] = ()


def path_key(path: str, rules: KeyRules) -> str:
    """The key of one changed path (see the module docstring)."""
    path = path.lstrip("/")
    if any(fnmatchcase(path, glob) for glob in rules.serial_paths):
        return SERIAL_KEY
    for glob, area in rules.groups:
        if fnmatchcase(path, glob):
            return area
    top, sep, _ = path.partition("/")
    return top if sep else ROOT_KEY


def entry_keys(paths: Iterable[str], rules: KeyRules) -> frozenset[str]:
    """Every key the changed ``paths`` of one entry touch."""
    return frozenset(path_key(p, rules) for p in paths)


@dataclass(frozen=True)
class Entry:
    """An admitted entry: its PR number, the head it was admitted at, its keys, and whether
    it is a priority (hotfix) entry. Entries are given in admission order."""

    number: int
    head_sha: str
    keys: frozenset[str]
    priority: bool = False


def keys_overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    """Do two entries' keys overlap: a shared key, or a serial key on either side (it
    overlaps every entry that touches anything)?"""
    return bool(a & b) or (bool(a) and bool(b) and SERIAL_KEY in a | b)


@dataclass(frozen=True)
class QueuedEntry:
    """An entry in the queue as a prediction sees it: its PR, keys and the train holding it
    (the landing line included)."""

    number: int
    keys: frozenset[str]
    train: str


@dataclass(frozen=True)
class Overlap:
    """A queued entry a planned change would overlap, and the keys they share (the serial
    key when either side touches a serial path and they share nothing else)."""

    number: int
    train: str
    shared: tuple[str, ...]


@dataclass(frozen=True)
class Prediction:
    """What a planned change would meet in the queue: its own keys, whether it touches a
    serial path, the queued entries it overlaps (queue order) and the trains holding them
    (first overlap first). No overlap: it would ride a train of its own."""

    keys: tuple[str, ...]
    serial: bool
    entries: tuple[Overlap, ...]
    trains: tuple[str, ...]

    @property
    def independent(self) -> bool:
        return not self.entries


def queue_predict(
    files: Iterable[str], rules: KeyRules, queued: Sequence[QueuedEntry]
) -> Prediction:
    """Which of the ``queued`` entries (in queue order) and trains a change to ``files``
    would overlap, by the repository's path groups and serial paths (``rules``); the change
    is not written yet, so this is the question an author asks before writing code."""
    keys = entry_keys(files, rules)
    overlaps: list[Overlap] = []
    for entry in queued:
        if not keys_overlap(keys, entry.keys):
            continue
        shared = keys & entry.keys or frozenset({SERIAL_KEY})
        overlaps.append(Overlap(entry.number, entry.train, tuple(sorted(shared))))
    trains = tuple(dict.fromkeys(o.train for o in overlaps))
    return Prediction(tuple(sorted(keys)), SERIAL_KEY in keys, tuple(overlaps), trains)
