"""From a stored delivery to recorded decisions: parse, read the live PR once, gate, record.

Every delivery ends in at least one ``pr_gate_decisions`` row: an unreadable one is an
``error`` with the exact reason, an ignored event a ``skip`` with its reason, a forge
failure an ``error`` naming the status and message. A delivery with a new id but the same
semantic key as one already handled becomes ``duplicate_delivery`` and causes no action.

Eligible decisions are handed to the ``on_eligible`` hook after they are committed: the
review pipeline plugs in there. A status, check or push event on a commit a part of this
process registered for (:mod:`listeners`) is recorded as ``routed_to_listener`` and handed
to that part's listener after the commit, the same way.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from reviewbot.config import Settings
from reviewbot.core.attempts import RetryPolicy
from reviewbot.core.clock import Clock
from reviewbot.core.commit_routes import Registration, listener_names
from reviewbot.core.gate import (
    decision_without_gate,
    duplicate_decision,
    error_decision,
    gate,
    no_open_pulls_decision,
    routed_decision,
    unresolved_decision,
)
from reviewbot.core.models import Decision, PullRequestSnapshot, Reason, RepoRef, Trigger
from reviewbot.core.reasons import Outcome, ReasonCode
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, reason_for
from reviewbot.ingress.dispatch import parse_delivery
from reviewbot.ingress.errors import TriggerError
from reviewbot.observe import Telemetry
from reviewbot.runtime.ingestion.listeners import (
    WEBHOOK,
    CommitListeners,
    CommitNotice,
    commit_event,
    trigger_result,
)
from reviewbot.store import decisions, repositories
from reviewbot.store.database import Database, is_transient
from reviewbot.store.decisions import DecisionRecord, Recorded
from reviewbot.store.journal import StoredDelivery
from reviewbot.store.review_jobs import JobClaim

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class EligiblePull:
    """An eligible decision, committed: what the review pipeline receives."""

    delivery_id: str
    trigger: Trigger
    pull: PullRequestSnapshot
    decision: DecisionRecord
    job_id: int | None = None  # the durable review job written with the decision
    job_claim: JobClaim | None = None  # the claim it was written with
    received_at: float | None = None  # when the delivery arrived: review latency


EligibleHook = Callable[[EligiblePull], Awaitable[None]]


@dataclass(frozen=True)
class Routed:
    """A commit event for registered listeners, handed to them once it is recorded."""

    notice: CommitNotice
    registrations: tuple[Registration, ...]


@dataclass(frozen=True)
class Pending:
    """A delivery's decisions, decided but not yet recorded.

    The rows of ``gated`` come first, one per PR read, in order; a routed event's row
    follows them."""

    delivery: StoredDelivery
    rows: tuple[DecisionRecord, ...]
    semantic_key: str | None
    gated: tuple[tuple[Trigger, PullRequestSnapshot], ...] = ()
    routed: Routed | None = None

    def to_record(self, job_claim: JobClaim | None = None) -> decisions.ToRecord:
        errors = [r for r in self.rows if r.decision == Outcome.ERROR.value]
        sender = self.gated[0][0].sender if self.gated else None
        return decisions.ToRecord(
            self.rows,
            self.semantic_key,
            (not errors, errors[0].detail if errors else None),
            review_job=(job_claim, sender) if job_claim is not None and self.gated else None,
            held_by=self.delivery.held_by,
        )


# Turns a stored delivery into a trigger (given the configured forges); raises
# TriggerError with the exact reason.
ParseFn = Callable[[StoredDelivery, Sequence[str]], Trigger]
# The pure gate: trigger, live PR, the repository's rules (None: not configured), bot login.
GateFn = Callable[..., Decision]


class GateRunner:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        forges: Mapping[str, Forge],
        *,
        parse: ParseFn | None = None,
        gate_fn: GateFn | None = None,
        clock: Clock = time.time,
        on_eligible: EligibleHook | None = None,
        job_claim: Callable[[], JobClaim] | None = None,
        telemetry: Telemetry | None = None,
        listeners: CommitListeners | None = None,
    ) -> None:
        """``job_claim``: eligible decisions get a durable review job claimed this way;
        ``telemetry`` hears of every recorded decision; ``listeners``: the parts of this
        process that registered for commits (see :mod:`listeners`)."""
        self.listeners = listeners or CommitListeners()
        self.db = db
        self.telemetry = telemetry or Telemetry()
        self.job_claim = job_claim
        self.settings = settings
        self.forges = dict(forges)
        self._parse = parse or parse_stored_delivery
        self._gate = gate_fn or gate
        self.clock = clock
        self.on_eligible = on_eligible
        self.retry = RetryPolicy(settings.delivery_max_attempts, settings.delivery_retry_base_s)
        self._bot_logins: dict[str, str] = {}
        # Store calls run on threads of our own: close() waits until none is running.
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gate-record")

    async def _store(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def aclose(self) -> None:
        """Wait for store calls still running (a cancelled batch's), so the store can close."""
        await asyncio.get_running_loop().run_in_executor(None, self._threads.shutdown, True)

    async def process(self, delivery: StoredDelivery) -> Recorded:
        """Gate one delivery, record its decisions and finish it (one transaction)."""
        return (await self.process_batch([delivery]))[0]

    async def process_batch(self, batch: Sequence[StoredDelivery]) -> list[Recorded]:
        """Gate deliveries one after the other, then record them all in one transaction.

        Replays inside one batch are told apart in that transaction: the first claims the
        semantic key, the next becomes ``duplicate_delivery``. The eligible hook hears of
        each eligible decision after the commit. A delivery whose claim passed to another
        worker meanwhile is not recorded (``lost``): it is that worker's now.
        """
        pending = []
        for delivery in batch:
            pending.append(await self.evaluate(delivery))
            await asyncio.sleep(0)  # let waiting acknowledgements run between deliveries
        claim = self.job_claim() if self.job_claim is not None else None
        recorded = await self._store(
            functools.partial(
                decisions.record_many,
                self.db,
                [p.to_record(claim) for p in pending],
                retry=self.retry,
                now=self.clock(),
            )
        )
        for item, result in zip(pending, recorded, strict=True):
            if result.lost:
                log.warning(
                    "delivery %s: claim %s passed to another worker while it was gated;"
                    " its decisions are dropped",
                    item.delivery.delivery_id,
                    item.delivery.held_by,
                )
                continue
            if result.failed is None or result.dead:
                for row in result.records:
                    self.telemetry.gated(row)
            if result.failed is not None:
                log.warning(
                    "delivery %s not recorded (%s): %s",
                    item.delivery.delivery_id,
                    "dead" if result.dead else "will retry",
                    result.failed,
                )
            elif result.duplicate_of is None:
                await self._notify(item.delivery, result, item.gated, claim)
                if item.routed is not None:
                    await self._route(item.routed)
        return recorded

    async def evaluate(self, delivery: StoredDelivery) -> Pending:
        """The decisions of one delivery, not yet recorded (reads the forge, writes nothing)."""
        try:
            return await self._evaluate(delivery)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never leave a delivery without a decision
            if is_transient(exc):
                # A store fault (disk, lost server) is not this delivery's decision: the
                # batch goes back to the queue and is gated again once the store answers.
                raise
            self.telemetry.error("gate", "gate failed", delivery_id=delivery.delivery_id)
            detail = f"{type(exc).__name__}: {exc}"
            decision = Decision(Outcome.ERROR, (Reason(ReasonCode.INTERNAL_ERROR, detail),))
            return self._pending(delivery, None, [decision], None)

    async def _evaluate(self, delivery: StoredDelivery) -> Pending:
        try:
            trigger = self._parse(delivery, tuple(self.forges))
        except TriggerError as exc:
            return self._pending(delivery, None, [unresolved_decision(exc.detail)], None)

        trigger = await self._store(self._identify, trigger)
        if trigger.kind in ("ignored", "recorded"):
            return self._pending(delivery, trigger, [decision_without_gate(trigger)], None)
        routed = self._routed(delivery, trigger)
        if trigger.kind == "push":  # never gated: a PR hears of its pushes on its own
            return await self._push(delivery, trigger, routed)

        forge = self.forges.get(trigger.forge or "")
        if forge is None:
            detail = f"no {trigger.forge or 'forge'} connection is configured"
            decision = error_decision(ReasonCode.FORGE_NOT_CONFIGURED, detail, trigger=trigger)
            return self._pending(delivery, trigger, [decision], None)

        # A trigger without a SHA (an API call, a comment command) is about the live head:
        # its key is known only after the read, and the claim at record time decides.
        key = trigger.semantic_key() if (trigger.head_sha or trigger.commit_sha) else None
        if key is not None:
            first = await self._store(decisions.semantic_owner, self.db, key)
            if first is not None and first != delivery.delivery_id:
                decision = duplicate_decision(trigger, first)
                return self._pending(delivery, trigger, [decision], None)

        # A failed read of the PRs still routes the event: the listener's wait does not
        # depend on the PRs at that commit.
        with_routed = [routed_decision(trigger, routed.names)] if routed is not None else []
        try:
            pulls = await self._live_pulls(forge, trigger)
            bot = await self._bot_login(forge)
            permission = await self._commenter_permission(forge, trigger)
        except TriggerError as exc:
            decision = unresolved_decision(exc.detail, trigger=trigger)
            return self._pending(delivery, trigger, [decision, *with_routed], None, routed=routed)
        except ForgeError as exc:  # the code says what to fix (pr_not_found, forge_auth_failed...)
            decision = error_decision(reason_for(exc), str(exc), trigger=trigger)
            return self._pending(delivery, trigger, [decision, *with_routed], None, routed=routed)

        if not pulls:
            skipped = with_routed or [no_open_pulls_decision(trigger)]
            return self._pending(delivery, trigger, skipped, key, routed=routed)

        if key is None and trigger.kind == "pull":
            key = replace(trigger, head_sha=pulls[0].head_sha).semantic_key()
        rules = self.settings.rules_for(
            RepoRef.parse(trigger.repo_full_name or "", forge=trigger.forge)
        )
        gated: list[tuple[Trigger, PullRequestSnapshot]] = []
        found: list[Decision] = []
        for pull in pulls:
            per_pr = trigger
            if trigger.kind == "commit":
                per_pr = replace(trigger, number=pull.number, head_sha=trigger.commit_sha)
            found.append(
                self._gate(per_pr, pull, rules, bot_login=bot, commenter_permission=permission)
            )
            gated.append((per_pr, pull))
        return self._pending(delivery, trigger, [*found, *with_routed], key, gated, routed)

    def _routed(self, delivery: StoredDelivery, trigger: Trigger) -> _Routing | None:
        """The listeners a commit or push event goes to, if any registered for it."""
        event = commit_event(trigger)
        if event is None:
            return None
        found = self.listeners.match(event)
        if not found:
            return None
        notice = CommitNotice(
            event,
            trigger.event,
            WEBHOOK,
            result=trigger_result(trigger),
            url=trigger.extra.get("target_url") or None,
            delivery_id=delivery.delivery_id,
        )
        return _Routing(Routed(notice, found), listener_names(found))

    async def _push(
        self, delivery: StoredDelivery, trigger: Trigger, routed: _Routing | None
    ) -> Pending:
        if routed is None:  # as before pushes were routed: not a pull-request event
            return self._pending(delivery, trigger, [decision_without_gate(trigger)], None)
        key = trigger.semantic_key()
        first = await self._store(decisions.semantic_owner, self.db, key)
        if first is not None and first != delivery.delivery_id:
            return self._pending(delivery, trigger, [duplicate_decision(trigger, first)], None)
        decision = routed_decision(trigger, routed.names)
        return self._pending(delivery, trigger, [decision], key, routed=routed)

    async def _route(self, routed: Routed) -> None:
        """Hand a recorded event to its listeners; one that fails is logged by the registry
        and never fails the delivery (its decision is already committed)."""
        try:
            await self.listeners.deliver(routed.notice, routed.registrations)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("routing delivery %s to its listeners failed", routed.notice.delivery_id)

    def _identify(self, trigger: Trigger) -> Trigger:
        """The trigger under its repository's current key (a renamed repository's old name
        resolves to the new one). Only a signed webhook records the forge's spelling and
        numeric id, and adds the repository to the sweep."""
        repo = trigger.repo_full_name
        if trigger.forge is None or repo is None:
            return trigger
        signed = trigger.source == trigger.forge  # a webhook whose signature was checked
        key = repositories.observe(
            self.db,
            forge=trigger.forge,
            repo=repo,
            display_name=trigger.repo_spelling or repo,
            forge_id=trigger.repo_id if signed else None,
            signed=signed,
            seen_at=self.clock(),
        )
        if key == repo:
            return trigger
        owner, _, name = key.partition("/")
        return replace(trigger, owner=owner, name=name)

    async def _live_pulls(self, forge: Forge, trigger: Trigger) -> list[PullRequestSnapshot]:
        repo = trigger.repo_full_name
        if repo is None:
            raise TriggerError("the trigger names no repository")
        if trigger.kind == "commit":
            sha = trigger.commit_sha or trigger.head_sha
            if sha is None:
                raise TriggerError("the commit trigger names no SHA")
            if trigger.pull_numbers:  # the event lists its PRs: read those, keep the open
                listed = [await forge.get_pull(repo, n) for n in trigger.pull_numbers]
                return [p for p in listed if p.state == "open"]
            return await forge.pulls_for_sha(repo, sha)
        if trigger.number is None:
            raise TriggerError("the trigger names no pull request number")
        return [await forge.get_pull(repo, trigger.number)]

    async def _commenter_permission(self, forge: Forge, trigger: Trigger) -> str | None:
        """The forge permission of the user whose comment asked for a review, if any did."""
        user = trigger.extra.get("requires_write_access")
        if not user:
            return None
        return await forge.user_permission(trigger.repo_full_name or "", user)

    async def _bot_login(self, forge: Forge) -> str:
        login = self._bot_logins.get(forge.name)
        if login is None:
            login = await forge.bot_login()
            self._bot_logins[forge.name] = login
        return login

    async def _notify(
        self,
        delivery: StoredDelivery,
        recorded: Recorded,
        gated: Sequence[tuple[Trigger, PullRequestSnapshot]],
        claim: JobClaim | None = None,
    ) -> None:
        if self.on_eligible is None or not gated:
            return  # only gated decisions (one per PR read) can be eligible
        # The gated rows come first; a routed event's row may follow them.
        rows = recorded.records[: len(gated)]
        jobs = (recorded.jobs or (None,) * len(recorded.records))[: len(gated)]
        for row, job, (trigger, pull) in zip(rows, jobs, gated, strict=True):
            if row.decision != Outcome.ELIGIBLE.value:
                continue
            try:
                eligible = EligiblePull(
                    delivery.delivery_id, trigger, pull, row, job, claim, delivery.received_at
                )
                await self.on_eligible(eligible)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.telemetry.error("review", "review failed", delivery_id=delivery.delivery_id)

    def _pending(
        self,
        delivery: StoredDelivery,
        trigger: Trigger | None,
        found: list[Decision],
        semantic_key: str | None,
        gated: list[tuple[Trigger, PullRequestSnapshot]] | None = None,
        routed: _Routing | None = None,
    ) -> Pending:
        rows = tuple(self._row(delivery, trigger, d) for d in found)
        return Pending(
            delivery,
            rows,
            semantic_key,
            tuple(gated or ()),
            routed.routed if routed is not None else None,
        )

    def _row(
        self, delivery: StoredDelivery, trigger: Trigger | None, decision: Decision
    ) -> DecisionRecord:
        return DecisionRecord(
            delivery_id=delivery.delivery_id,
            source=delivery.source,
            decision=str(decision.outcome),
            reasons=decision.reasons,
            decided_at=self.clock(),
            forge=decision.forge or (trigger.forge if trigger else None) or delivery.forge,
            repo=decision.repo or (trigger.repo_full_name if trigger else None),
            number=decision.number,
            head_sha=decision.head_sha,
            event=(trigger.event if trigger else None) or delivery.event,
            action=trigger.action if trigger else None,
            semantic_key=trigger.semantic_key() if trigger else None,
        )


@dataclass(frozen=True)
class _Routing:
    routed: Routed
    names: tuple[str, ...]  # the listeners' names, each once, for the decision's detail


ENV_HEADER_PREFIX = "env:"


def parse_stored_delivery(
    delivery: StoredDelivery, configured_forges: Sequence[str] = ()
) -> Trigger:
    """The entry path's parser applied to a journalled delivery.

    Raises :class:`TriggerError` with the exact reason when it cannot be read. The
    ``VAR_*`` inputs of a delivery file are stored with it (as ``env:VAR_*`` headers), so
    a replay reads the same values.
    """
    env = {
        key.removeprefix(ENV_HEADER_PREFIX): value
        for key, value in delivery.headers.items()
        if key.startswith(ENV_HEADER_PREFIX)
    }
    return parse_delivery(
        delivery.source,
        delivery.headers,
        delivery.body,
        configured_forges=configured_forges,
        env=env,
        delivery_id=delivery.delivery_id,
        sender=delivery.headers.get("X-Reviewbot-Token"),
    )
