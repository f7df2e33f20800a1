"""The merge queue of this process: admission, removal, and the passes that move the trains.

Every change to a queue happens inside its base branch's merge lane
(``merge:<forge>:<repo>:<base>``, the lane automerge holds to merge into that branch), so one
process at a time, across every replica on the store, builds, lands or admits into it, and
each write to the store carries the lane's token (:mod:`reviewbot.store.queue`). A pass
(:meth:`QueueDriver.run`) is a :class:`~reviewbot.runtime.queue.session.QueueSession`;
:meth:`QueueDriver.kick` starts one in the background after an event (an enqueue, a status on
a queue branch); the reconcile sweep runs one over every queue (:meth:`QueueDriver.sweep`),
so a lost webhook or a stopped replica only delays the queue.

Admission (:meth:`QueueDriver.enqueue`) reads the PR's merge facts once
(:func:`~reviewbot.runtime.merge.facts.read_pr_facts`) and asks
:func:`reviewbot.core.queue.admit`: approved at its pinned head, its required checks green
there, and the head the caller expected. Its keys are the paths it changes against its base
(:func:`reviewbot.core.queue.entry_keys`); a change the forge lists only in part is serial.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reviewbot.config import RepoRules, Settings
from reviewbot.core import errors
from reviewbot.core.commit_routes import Registration
from reviewbot.core.models import PullRequestSnapshot, RepoRef, Trigger, repo_key
from reviewbot.core.queue import SERIAL_KEY, Entry, admit, entry_keys
from reviewbot.core.queue_control import Control, admission_hold
from reviewbot.core.reasons import ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.ingress.commands import QUEUE_COMMAND
from reviewbot.runtime.ingestion.listeners import CommitListeners, CommitNotice
from reviewbot.runtime.lanes import Lanes
from reviewbot.runtime.merge.facts import read_pr_facts
from reviewbot.runtime.queue.cars import BRANCH_PREFIX
from reviewbot.runtime.queue.session import LaneLost, PassReport, QueueSession, key_rules
from reviewbot.runtime.queue.spot import queue_spots
from reviewbot.store.queue import (
    EventKind,
    QueueControl,
    QueueEntry,
    QueueRef,
    QueueStore,
    QueueWriter,
)

log = logging.getLogger(__name__)

LANE_WAIT_S = 60.0
LISTENER = "reviewbot-queue"

# forge, repo, number: re-sync that PR's state comment.
StateCommentSync = Callable[[str, str, int], Awaitable[object]]
# A spot as the state comment shows it, less its estimate (which moves with the clock).
SpotKey = tuple[str, int, int, int | None, str | None]

T = TypeVar("T")


class QueueRefused(errors.Refused):
    """An enqueue or dequeue that was declined: ``code`` is a reason code."""


@dataclass(frozen=True)
class Enqueued:
    entry: QueueEntry
    already: bool = False  # it was queued at this head before the call


@dataclass
class SweepReport:
    queues: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class QueueDriver:
    def __init__(
        self,
        settings: Settings,
        forges: Mapping[str, Forge],
        store: QueueStore,
        lanes: Lanes,
        *,
        wait_s: float = LANE_WAIT_S,
        autorun: bool = True,
        state_comment: StateCommentSync | None = None,
    ) -> None:
        """``autorun`` False: no pass starts by itself (:meth:`kick` does nothing); the
        caller runs them (:meth:`run`, :meth:`sweep`). ``state_comment``: re-syncs a PR's
        state comment (its QUEUE line) after a change to the queue moved its spot."""
        self.settings = settings
        self.autorun = autorun
        self.forges = forges
        self.store = store
        self.lanes = lanes
        self.clock = store.clock
        self.wait_s = wait_s
        self._tasks: set[asyncio.Task[Any]] = set()
        self._again: set[tuple[str, str, str]] = set()
        self._listeners: CommitListeners | None = None
        self._watched: set[tuple[str, str]] = set()
        self._shas: dict[tuple[str, str, str], dict[str, Registration]] = {}
        self.state_comment = state_comment
        self._spots: dict[tuple[str, str, str], dict[int, SpotKey]] = {}

    # -- rules -------------------------------------------------------------------------------

    def rules(self, forge: str, repo: str) -> RepoRules | None:
        return self.settings.rules_for(RepoRef.parse(repo, forge=forge))

    def _forge(self, forge: str) -> Forge:
        found = self.forges.get(forge)
        if found is None:
            raise QueueRefused(
                f"no {forge} connection is configured", code=ReasonCode.FORGE_NOT_CONFIGURED
            )
        return found

    def _configured(self, forge: str, repo: str) -> RepoRules:
        rules = self.rules(forge, repo)
        if rules is None:
            raise QueueRefused(
                f"{forge}:{repo} is not configured", code=ReasonCode.REPO_NOT_CONFIGURED
            )
        return rules

    # -- admission and removal ---------------------------------------------------------------

    async def enqueue(
        self,
        forge_name: str,
        repo: str,
        number: int,
        *,
        expect_head_sha: str | None = None,
        priority: bool = False,
        actor: str = "",
    ) -> Enqueued:
        """Admit PR ``number`` into the queue of its base branch, or raise
        :class:`QueueRefused` with the first reason code (``codes`` has them all)."""
        rules = self._configured(forge_name, repo)
        forge = self._forge(forge_name)
        repo = repo_key(repo)
        try:
            facts = await read_pr_facts(forge, repo, number)
        except ForgeError as exc:
            raise QueueRefused(str(exc), code=reason_for(exc).value) from None
        pull = facts.pull
        admission = admit(facts, rules.required_checks, expect_head_sha)
        if not admission.admitted:
            first = admission.refusals[0]
            raise QueueRefused(
                "; ".join(f"{r.code.value}: {r.detail}" for r in admission.refusals),
                code=first.code.value,
                codes=[c.value for c in admission.codes],
                head_sha=pull.head_sha,
            )
        queue = QueueRef(forge_name, repo, pull.base_ref)
        self._watch(forge_name, repo)
        try:
            compared = await forge.ref_ops().compare(repo, pull.base_ref, pull.head_sha)
        except ForgeError as exc:
            raise QueueRefused(str(exc), code=reason_for(exc).value) from None
        queue_rules = rules.merge_queue
        keys = (
            entry_keys(compared.files, key_rules(queue_rules))
            if compared.files_complete
            else frozenset({SERIAL_KEY})
        )
        labelled = bool(set(pull.labels) & set(queue_rules.priority_labels))
        entry = Entry(number, pull.head_sha, keys, priority=priority or labelled)

        queued = await self.store.run(self.store.entry_of, forge_name, repo, number)
        if queued is not None and queued.base != pull.base_ref:  # its base was changed
            await self.dequeue(
                forge_name,
                repo,
                number,
                ReasonCode.BASE_MOVED,
                f"#{number} now targets {pull.base_ref}",
            )

        async def admit_entry(session: QueueSession) -> Enqueued:
            current = await self.store.run(self.store.entry_of, forge_name, repo, number)
            if current is not None and current.head_sha.lower() == pull.head_sha.lower():
                return Enqueued(current, already=True)
            await self._admissions_open(queue)
            if current is not None:
                await session.leave(
                    number, ReasonCode.HEAD_MOVED, f"#{number} enqueued again at a new head"
                )
            await session.enqueue(entry)
            made = await self.store.run(self.store.entry_of, forge_name, repo, number)
            assert made is not None
            log.info("queue %s: #%s admitted by %s", queue.lane, number, actor or "the bot")
            return Enqueued(made)

        done = await self._in_lane(queue, admit_entry)
        self.kick(queue)
        return done

    async def _admissions_open(self, queue: QueueRef) -> None:
        """A paused or draining queue admits nothing new (checked inside the lane, where
        pause and drain are set)."""
        control = await self.store.run(self.store.control, *queue.key)
        held = admission_hold(Control(paused=control.paused, draining=control.draining))
        if held is not None:
            raise QueueRefused(
                f"{queue.lane}: {held.detail} (set by {control.set_by})", code=held.code.value
            )

    async def set_control(
        self,
        forge_name: str,
        repo: str,
        base: str,
        *,
        paused: bool | None = None,
        draining: bool | None = None,
        actor: str,
    ) -> QueueControl:
        """Pause or resume, drain or stop draining the queue of (``repo``, ``base``); a
        change is recorded in the queue's event log. Fields left None keep their value."""
        queue = QueueRef(forge_name, repo_key(repo), base)
        self._configured(forge_name, repo)
        try:
            tip = await self._forge(forge_name).branch_head(queue.repo, base)
        except ForgeError as exc:
            raise QueueRefused(str(exc), code=reason_for(exc).value) from None
        if tip is None:
            raise QueueRefused(
                f"{forge_name}:{queue.repo} has no branch {base!r}",
                code=ReasonCode.BRANCH_NOT_FOUND,
            )

        async def change(session: QueueSession) -> QueueControl:
            now = await self.store.run(self.store.control, *queue.key)
            new_paused = now.paused if paused is None else paused
            new_draining = now.draining if draining is None else draining
            if (new_paused, new_draining) == (now.paused, now.draining):
                return now
            said = [
                ("paused" if new_paused else "resumed") if new_paused != now.paused else None,
                ("draining" if new_draining else "no longer draining")
                if new_draining != now.draining
                else None,
            ]
            code = (
                ReasonCode.QUEUE_PAUSED
                if new_paused
                else ReasonCode.QUEUE_DRAINING
                if new_draining
                else None
            )

            def record(w: QueueWriter) -> None:
                w.set_control(new_paused, new_draining, actor)
                w.event(
                    EventKind.CONTROL,
                    f"{' and '.join(s for s in said if s)} by {actor}",
                    code=code,
                    evidence={"paused": new_paused, "draining": new_draining},
                )

            await session.write(record)
            log.info("queue %s: %s by %s", queue.lane, said, actor)
            return await self.store.run(self.store.control, *queue.key)

        done = await self._in_lane(queue, change)
        self.kick(queue)
        return done

    async def dequeue(
        self, forge_name: str, repo: str, number: int, code: ReasonCode, detail: str
    ) -> QueueEntry:
        """Take PR ``number`` out of its queue with ``code``; ``not_queued`` when it is in none."""
        repo = repo_key(repo)
        entry = await self.store.run(self.store.entry_of, forge_name, repo, number)
        if entry is None:
            raise QueueRefused(f"#{number} is not in a queue", code=ReasonCode.NOT_QUEUED)
        queue = QueueRef(forge_name, repo, entry.base)

        async def leave(session: QueueSession) -> None:
            await session.leave(number, code, detail)

        await self._in_lane(queue, leave)
        self.kick(queue)
        return entry

    async def pull_changed(self, forge_name: str, repo: str, number: int) -> ReasonCode | None:
        """After an event of a queued PR (a push, a review, a close): it leaves when it is no
        longer admissible at its pinned head (the reason it left with), else nothing."""
        entry = await self.store.run(self.store.entry_of, forge_name, repo_key(repo), number)
        rules = self.rules(forge_name, repo)
        if entry is None or rules is None:
            return None
        facts = await read_pr_facts(self._forge(forge_name), repo, number)
        admission = admit(facts, rules.required_checks, entry.head_sha)
        if admission.admitted:
            return None
        first = admission.refusals[0]
        try:
            await self.dequeue(forge_name, repo, number, first.code, first.detail)
        except QueueRefused:
            return None
        return first.code

    async def after_event(self, pull: PullRequestSnapshot, trigger: Trigger) -> None:
        """After the review pipeline handled an eligible event of ``pull``: a
        ``/reviewbot queue`` comment (its author's write access checked by the gate) or the
        rules' ``queue = true`` enqueue it; a queued PR that is no longer admissible at its
        pinned head leaves. Never raises: the event is handled already."""
        forge, repo, number = pull.forge, pull.ref.full_name, pull.number
        rules = self.rules(forge, repo)
        if rules is None:
            return
        try:
            if trigger.extra.get("command") == QUEUE_COMMAND:
                await self.enqueue(forge, repo, number, actor=trigger.sender or "a comment")
            elif await self.store.run(self.store.entry_of, forge, repo_key(repo), number):
                await self.pull_changed(forge, repo, number)
            elif rules.queue and pull.state == "open" and not pull.merged:
                await self.enqueue(forge, repo, number, actor="queue = true")
        except QueueRefused as exc:
            log.info("queue: %s:%s#%s not admitted: %s", forge, repo, number, exc.detail)
        except Exception:
            log.exception("queue: handling an event of %s:%s#%s failed", forge, repo, number)

    # -- commit events on queue branches -----------------------------------------------------

    def listen(self, listeners: CommitListeners) -> None:
        """Hear statuses, checks and pushes on the queue branches of each repository with a
        queue (from its first enqueue, or the first pass after a restart) and on each car's
        commit."""
        self._listeners = listeners

    def _watch(self, forge: str, repo: str) -> None:
        if self._listeners is None or forge not in self.forges or (forge, repo) in self._watched:
            return
        self._listeners.register(
            LISTENER, self._heard, forge=forge, repo=repo, branch=f"{BRANCH_PREFIX}/*"
        )
        self._watched.add((forge, repo))

    async def _heard(self, notice: CommitNotice) -> None:
        await self.kick_repo(notice.event.forge, notice.event.repo)

    # -- passes ------------------------------------------------------------------------------

    async def run(self, queue: QueueRef) -> PassReport | None:
        """One pass over ``queue``; None when another process holds its lane."""

        async def one_pass(session: QueueSession) -> PassReport:
            if session.landing_hold is not None and (
                session.landing_hold.code is ReasonCode.QUEUE_PAUSED
            ):
                return PassReport()  # paused: nothing starts, nothing lands
            return await session.run_pass()

        try:
            report = await self._in_lane(queue, one_pass, wait=False)
        except QueueRefused as exc:
            if exc.code == ReasonCode.LEASE_HELD:
                return None
            raise
        self._watch(queue.forge, queue.repo)
        await self._watch_cars(queue)
        return report

    async def _watch_cars(self, queue: QueueRef) -> None:
        """Hear the statuses of each car in flight by its commit (a Gitea status names no
        branch); forget those of cars that are done."""
        if self._listeners is None:
            return
        cars = await self.store.run(self.store.cars, *queue.key)
        live = {c.tested_sha.lower() for c in cars if c.tested_sha}
        for sha, registration in list(self._shas.get(queue.key, {}).items()):
            if sha not in live:
                self._listeners.unregister(registration)
                del self._shas[queue.key][sha]
        known = self._shas.setdefault(queue.key, {})
        for sha in live - set(known):
            known[sha] = self._listeners.register(
                LISTENER, self._heard, forge=queue.forge, repo=queue.repo, sha=sha
            )

    async def sweep(self) -> SweepReport:
        """The reconcile sweep's part: every queue with an entry or a car in flight gets a
        pass, after each of its entries is read again (a lost push, close or unapproval
        webhook takes it out here). The pass itself reads the queue branches' CI from the
        forge and resumes what a stopped replica left, so nothing waits on a webhook."""
        report = SweepReport()
        for queue in await self.store.run(self.store.queues):
            if queue.forge not in self.forges:
                continue
            try:
                # The pass first: a landing a stopped replica made is recorded as one
                # before its PRs, merged now, are read again.
                await self.run(queue)
                for entry in await self.store.run(self.store.entries, *queue.key):
                    try:
                        await self.pull_changed(queue.forge, queue.repo, entry.number)
                    except ForgeError as exc:
                        report.errors.append(f"{queue.lane} #{entry.number}: {exc}")
                await self.run(queue)
                report.queues.append(queue.lane)
            except Exception as exc:  # one queue's trouble does not stop the others
                log.warning("queue %s: the pass failed: %s", queue.lane, exc, exc_info=True)
                report.errors.append(f"{queue.lane}: {exc}")
        return report

    async def sweep_errors(self) -> list[str]:
        """:meth:`sweep`, answering only its problems (the reconcile report's lines)."""
        return [f"merge queue {line}" for line in (await self.sweep()).errors]

    def kick(self, queue: QueueRef) -> None:
        """A pass over ``queue`` soon, in the background; one more after a running one."""
        if not self.autorun or queue.key in self._again:
            return
        self._again.add(queue.key)

        async def go() -> None:
            try:
                while queue.key in self._again:
                    self._again.discard(queue.key)
                    await self.run(queue)
            except Exception:
                log.exception("queue %s: the pass failed", queue.lane)
            finally:
                self._again.discard(queue.key)

        task = asyncio.create_task(go(), name=f"queue {queue.lane}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def kick_repo(self, forge_name: str, repo: str) -> None:
        """A pass over every queue of a repository (a status on one of its queue branches)."""
        for queue in await self.store.run(self.store.queues):
            if queue.forge == forge_name and queue.repo == repo_key(repo):
                self.kick(queue)

    async def idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _in_lane(
        self,
        queue: QueueRef,
        work: Callable[[QueueSession], Awaitable[T]],
        *,
        wait: bool = True,
    ) -> T:
        rules = self._configured(queue.forge, queue.repo)
        forge = self._forge(queue.forge)
        async with self.lanes.hold(queue.lane, wait_s=self.wait_s if wait else 0.0) as lane:
            if not lane.held or lane.hold is None:
                raise QueueRefused(
                    f"the lane {queue.lane} is held by {lane.busy_with}",
                    code=ReasonCode.LEASE_HELD,
                )
            session = QueueSession(
                queue,
                self.store,
                lane.hold,
                forge,
                rules,
                self.clock,
                lambda: self.lanes.confirm(lane),
            )
            await session.load()
            try:
                done = await work(session)
            except LaneLost:
                raise QueueRefused(
                    f"the lane {queue.lane} was lost mid-pass", code=ReasonCode.LANE_LOST
                ) from None
        await self._spots_moved(queue, rules)
        return done

    async def _spots_moved(self, queue: QueueRef, rules: RepoRules) -> None:
        """Re-sync the state comment of each PR whose spot changed since this process last
        looked (it joined, moved up, got a car, was promoted, landed or left)."""
        if self.state_comment is None:
            return
        spots = await self.store.run(
            queue_spots, self.store, rules.merge_queue, *queue.key, self.clock()
        )
        now = {n: (s.train, s.position, s.of, s.car, s.car_status) for n, s in spots.items()}
        before = self._spots.get(queue.key, {})
        self._spots[queue.key] = now
        for number in sorted(set(before) | set(now)):
            if before.get(number) == now.get(number):
                continue
            try:
                await self.state_comment(queue.forge, queue.repo, number)
            except Exception:  # the queue moved on; the comment catches up on the next event
                log.warning("queue %s: re-syncing #%s failed", queue.lane, number, exc_info=True)
