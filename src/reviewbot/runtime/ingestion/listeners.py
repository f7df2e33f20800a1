"""Commit listeners: parts of this process that hear of events on commits no PR owns.

A part registers interest in a commit SHA or a branch pattern of one repository
(:meth:`CommitListeners.register`) and supplies a listener: a callback (plain or async) or
an :class:`asyncio.Queue`. The gate runner hands it every status, check or push delivery
that matches (after the delivery's decision is recorded, as ``routed_to_listener``), and
the reconcile sweep polls the check results of registered SHAs, so a lost webhook never
leaves a part waiting.

Registrations live in this process's memory only: a restart forgets them, and another
process (a replica, an ``ingest`` process) knows nothing of them. The part registers again
when it starts; the sweep's poll then catches it up on what it missed meanwhile.

A listener hears a given (commit, check context, state) once, whether a webhook or a poll
brought it. A listener that raises (or whose queue is full) is logged and does not hear it
as heard: the next poll offers the result again. It never affects the delivery, whose
decision is already recorded.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from reviewbot.core.commit_routes import (
    CommitEvent,
    CommitResult,
    Registration,
    matching,
    polled_commits,
    result_key,
)
from reviewbot.core.models import CheckState, Trigger
from reviewbot.core.policy import newest_results
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError
from reviewbot.forges.github import CHECK_RUN_CONCLUSIONS
from reviewbot.forges.normalize import status_state

log = logging.getLogger(__name__)

WEBHOOK = "webhook"  # any journalled delivery: a forge's webhook, a replayed one
POLL = "poll"  # the reconcile sweep read the forge


@dataclass(frozen=True)
class CommitNotice:
    """What a listener hears: one event on one commit it registered for."""

    event: CommitEvent
    kind: str  # status, check_run, check_suite or push
    via: str  # WEBHOOK or POLL
    result: CommitResult | None = None  # the check report; None for a push
    url: str | None = None  # the report's link, when it has one
    delivery_id: str | None = None  # the journalled delivery it came with (not a poll)


Callback = Callable[[CommitNotice], Awaitable[None] | None]
Listener = Callback | asyncio.Queue[CommitNotice]


@dataclass
class PollReport:
    """What one poll of the registered commits did."""

    commits: list[str] = field(default_factory=list)  # FORGE:OWNER/NAME@SHA read
    handed: list[str] = field(default_factory=list)  # "LISTENER: CONTEXT=STATE at SHA"
    errors: list[str] = field(default_factory=list)


class CommitListeners:
    """The registrations of this process and their listeners (in memory, see the module)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._registrations: dict[int, Registration] = {}
        self._listeners: dict[str, Listener] = {}  # one listener per name
        self._heard: dict[str, set[tuple[str, str, str, str, str]]] = {}

    def register(
        self,
        name: str,
        listener: Listener,
        *,
        forge: str,
        repo: str,
        sha: str | None = None,
        branch: str | None = None,
    ) -> Registration:
        """Route events on ``sha``, or on a branch matching the fnmatch pattern ``branch``,
        of ``forge:repo`` to ``listener`` under ``name``. ``ValueError`` for a bad SHA,
        pattern or repository, or a name already bound to another listener."""
        bound = self._listeners.get(name)
        if bound is not None and bound != listener:  # bound methods are equal, not identical
            raise ValueError(f"listener {name!r} is registered with another callback")
        registration = Registration(next(self._ids), name, forge, repo, sha=sha, branch=branch)
        self._registrations[registration.id] = registration
        self._listeners[name] = listener
        self._heard.setdefault(name, set())
        return registration

    def unregister(self, registration: Registration) -> bool:
        """Remove one registration; the listener's last one takes its name and memory of
        what it heard with it. ``False`` when it was already removed."""
        if self._registrations.pop(registration.id, None) is None:
            return False
        name = registration.listener
        if not any(r.listener == name for r in self._registrations.values()):
            self._listeners.pop(name, None)
            self._heard.pop(name, None)
        return True

    def unregister_listener(self, name: str) -> int:
        """Remove every registration of ``name``; how many there were."""
        found = [r for r in self._registrations.values() if r.listener == name]
        for registration in found:
            self.unregister(registration)
        return len(found)

    def registrations(self) -> tuple[Registration, ...]:
        return tuple(self._registrations.values())

    def match(self, event: CommitEvent) -> tuple[Registration, ...]:
        return matching(self._registrations.values(), event)

    async def deliver(
        self, notice: CommitNotice, registrations: Iterable[Registration] | None = None
    ) -> tuple[str, ...]:
        """Hand ``notice`` to each listener that registered for it (among
        ``registrations`` when given, as matched earlier, if they still stand); the names
        that took it. A result a listener already heard is not handed again."""
        current = self.match(notice.event)
        if registrations is not None:
            wanted = {r.id for r in registrations}
            current = tuple(r for r in current if r.id in wanted)
        took: list[str] = []
        for name in dict.fromkeys(r.listener for r in current):
            if await self._hand(name, notice):
                took.append(name)
        return tuple(took)

    async def poll(self, forges: Mapping[str, Forge]) -> PollReport:
        """Read the check results of every registered SHA and hand the listeners what
        they have not heard: a webhook that never came is made up for here. A forge that
        fails is reported and the other commits are still read."""
        report = PollReport()
        for forge_name, repo, sha in polled_commits(self._registrations.values()):
            where = f"{forge_name}:{repo}@{sha[:12]}"
            forge = forges.get(forge_name)
            if forge is None:
                report.errors.append(f"{where}: no {forge_name} connection is configured")
                continue
            try:
                results = await forge.check_results(repo, sha)
            except ForgeError as exc:
                report.errors.append(f"{where}: {exc}")
                log.warning("polling the checks of %s for its listeners failed: %s", where, exc)
                continue
            report.commits.append(where)
            event = CommitEvent(forge_name, repo, sha)
            for result in newest_results(results).values():
                heard = CommitResult(result.name, result.state.value)
                notice = CommitNotice(event, result.source, POLL, heard, url=result.url)
                for name in await self.deliver(notice):
                    report.handed.append(f"{name}: {heard.context}={heard.state} at {sha[:12]}")
        return report

    async def _hand(self, name: str, notice: CommitNotice) -> bool:
        listener = self._listeners.get(name)
        heard = self._heard.get(name)
        if listener is None or heard is None:
            return False
        key = result_key(notice.event, notice.result) if notice.result is not None else None
        if key is not None:
            if key in heard:
                return False
            heard.add(key)  # before the call: a poll racing a webhook finds it taken
        try:
            if isinstance(listener, asyncio.Queue):
                listener.put_nowait(notice)
            else:
                outcome = listener(notice)
                if inspect.isawaitable(outcome):
                    await outcome
        except asyncio.CancelledError:
            raise
        except Exception:
            if key is not None:
                heard.discard(key)  # not heard: the next poll offers it again
            log.exception(
                "commit listener %s failed on %s %s of %s:%s@%s",
                name,
                notice.via,
                notice.kind,
                notice.event.forge,
                notice.event.repo,
                (notice.event.sha or "")[:12],
            )
            return False
        return True


def commit_event(trigger: Trigger) -> CommitEvent | None:
    """The commit a ``commit`` or ``push`` trigger is about, for matching."""
    sha = trigger.commit_sha or trigger.head_sha
    if trigger.kind not in ("commit", "push") or trigger.forge is None or sha is None:
        return None
    repo = trigger.repo_full_name
    if repo is None:
        return None
    return CommitEvent(trigger.forge, repo, sha, trigger.branches)


def trigger_result(trigger: Trigger) -> CommitResult | None:
    """The check report a status or check trigger carries, in the poll's vocabulary."""
    extra = trigger.extra
    if trigger.event == "status":
        return CommitResult(extra.get("context", ""), status_state(extra.get("state")).value)
    if trigger.event in ("check_run", "check_suite"):
        conclusion = extra.get("conclusion", "")
        # As the forge adapter reads it: no conclusion yet is pending, an unknown one is
        # never taken for a success.
        state = (
            CHECK_RUN_CONCLUSIONS.get(conclusion, CheckState.ERROR)
            if conclusion
            else CheckState.PENDING
        )
        name = extra.get("check", "")
        context = name if trigger.event == "check_run" else f"suite:{name}"
        return CommitResult(context, state.value)
    return None
