"""The composition root: the whole service, built from settings in one place.

:func:`build_service` says what to build; :meth:`Service.start` runs the rows of
:data:`BUILDERS` this process wants (the store unless one is given, the forges, the parts),
each after the parts it needs and with its collaborators as constructor arguments;
:meth:`Service.aclose` stops what was built in :data:`STOP_ORDER`. A new part is one row.
``reviewbot serve`` builds every part, ``reviewbot review`` and ``reviewbot merge`` only
what a command needs, and the tests and the demo build through here too.

    journal ──► worker pool ──► gate runner ──► review pipeline ──► outbox drainer
                                                      │                  │
                                 state comments ◄─────┴──── merger ◄── automerger
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Flag, StrEnum, auto

from reviewbot.config import ConfigError, Settings, read_private_key
from reviewbot.core.clock import Clock
from reviewbot.core.quota import TokenBuckets
from reviewbot.forges.base import Forge
from reviewbot.forges.factory import make_forge
from reviewbot.forges.kinds import FORGE_ADAPTERS
from reviewbot.observe import Telemetry, logs
from reviewbot.runtime.health import Check, ForgeProbes, readiness
from reviewbot.runtime.ingestion.gate_runner import EligibleHook, EligiblePull, GateRunner
from reviewbot.runtime.ingestion.listeners import CommitListeners
from reviewbot.runtime.ingestion.watch import JournalWatch
from reviewbot.runtime.ingestion.workers import WorkerPool
from reviewbot.runtime.lanes import Lanes
from reviewbot.runtime.merge.after_merge import AfterMerge
from reviewbot.runtime.merge.automerge import AutoMerger
from reviewbot.runtime.merge.merger import Merger, ReReviewHook, ReviewRequestHook
from reviewbot.runtime.parity import Boot, ParityGate, RuntimeReport, boot_snapshot
from reviewbot.runtime.pull_locks import PullLocks
from reviewbot.runtime.queue.driver import QueueDriver
from reviewbot.runtime.retention import Retention
from reviewbot.runtime.reuse import Reused
from reviewbot.runtime.review.jobs import ReviewJobs
from reviewbot.runtime.review.outbox import OutboxDrainer, StoreReviewerLeases
from reviewbot.runtime.review.pipeline import ExternalReviewers, ReviewPipeline
from reviewbot.runtime.review.reconcile import QueueHead, Reconciler
from reviewbot.runtime.review.state_comment import StateComments
from reviewbot.runtime.reviewers.runner import ReviewerLimits, ToolsEndpoint
from reviewbot.runtime.reviewers.sandbox import Sandbox, announce
from reviewbot.runtime.reviewers.sessions import SessionManager
from reviewbot.runtime.reviewers.tools import ApiTokenCallers, ToolDispatcher, api_token_callers
from reviewbot.store.database import SQLITE, Database
from reviewbot.store.journal import GroupCommitJournal
from reviewbot.store.leases import LeaseStore
from reviewbot.store.merges import MergeStore
from reviewbot.store.process_lock import ProcessLock
from reviewbot.store.queue import QueueStore
from reviewbot.store.review_outbox import OutboxStore
from reviewbot.store.reviews import ReviewStore
from reviewbot.store.state_comments import StateCommentStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

log = logging.getLogger(__name__)

REVIEWER_NAME = "reviewbot"
MERGER_NAME = "reviewbot.merger"


class Parts(Flag):
    """What a process runs. ``SERVE`` is everything; commands pick what they need."""

    JOURNAL = auto()  # the delivery journal (group commit)
    WORKERS = auto()  # the gate runner and the worker pool draining the journal
    REVIEW = auto()  # the review pipeline, its outbox drainer and the state comment
    DRAIN = auto()  # the drainer's own loop (a command posts inline instead)
    RECONCILE = auto()  # the periodic sweep for lost webhooks
    MERGE = auto()  # the merger (the lease and merge API, ``reviewbot merge``)
    AUTOMERGE = auto()  # this process's merger worker taking approved PRs over
    SERVE = JOURNAL | WORKERS | REVIEW | DRAIN | RECONCILE | MERGE | AUTOMERGE
    # Wake the workers for deliveries other processes journal (``serve --role ingest``).
    WATCH = auto()


class Routes(Flag):
    """The route groups a server answers; the others answer 404 ``wrong_role``.
    Reads, ``/healthz``, ``/readyz`` and ``/metrics`` are served by every role."""

    NONE = 0
    INGRESS = auto()  # webhooks, Crew, ``POST /api/v1/reviews``: acknowledge and journal
    WORK = auto()  # the lease and merge API, the session tools of external reviewers


class Role(StrEnum):
    """What a ``serve`` process does: ``ingest`` acknowledges and journals, ``work`` gates,
    reviews and merges what any process journalled, ``all`` does both."""

    INGEST = "ingest"
    WORK = "work"
    ALL = "all"

    @property
    def parts(self) -> Parts:
        # A work process keeps a journal of its own: the sweep and a moved head queue there.
        return Parts.JOURNAL if self is Role.INGEST else Parts.SERVE | Parts.WATCH

    @property
    def routes(self) -> Routes:
        return {
            Role.INGEST: Routes.INGRESS,
            Role.WORK: Routes.WORK,
            Role.ALL: Routes.INGRESS | Routes.WORK,
        }[self]


WORKERS_LOCK = "workers.lock"  # beside the SQLite file: one process gates a store


@dataclass
class _ReviewBase:
    """What the merger needs of the review part before the drainer exists."""

    worker: str
    reviewer: StoreReviewerLeases
    store: ReviewStore
    outbox: OutboxStore
    locks: PullLocks
    comments: StateComments


@dataclass
class ReviewParts:
    pipeline: ReviewPipeline
    drainer: OutboxDrainer
    store: ReviewStore  # the review decisions
    outbox: OutboxStore  # the native reviews to post
    comments: StateComments
    worker: str  # the reviewer worker identity of this process
    jobs: ReviewJobs  # the durable review intent (claimed, renewed, resumed)


@dataclass
class MergeParts:
    merger: Merger
    merges: MergeStore
    automerge: AutoMerger | None
    worker: str | None  # this process's merger identity (automerge)
    leases: LeaseStore
    # The merge queue of every configured repository (None: a process without lanes).
    queue: QueueDriver | None = None


@dataclass
class Service:
    """Everything one process runs. Parts left out stay ``None``."""

    settings: Settings
    clock: Clock
    parts: Parts
    client: str
    sessions: SessionManager
    external: ExternalReviewers
    telemetry: Telemetry  # this service's metrics registry and event log
    on_eligible: EligibleHook | None = None
    worker: str | None = None  # a reviewer identity the caller registered (the command line)
    role: Role | None = None  # a ``serve`` process's role; commands have none
    shutdown_grace_s: float = 10.0
    backoff_base_s: float = 2.0
    db: Database | None = None
    forges: dict[str, Forge] = field(default_factory=dict)
    owns_db: bool = False
    owns_forges: bool = False
    journal: GroupCommitJournal | None = None
    runner: GateRunner | None = None
    pool: WorkerPool | None = None
    leases: LeaseStore | None = None
    # Merge lanes and sweep lanes, shared with every process on the store.
    lanes: Lanes | None = None
    review: ReviewParts | None = None
    merge: MergeParts | None = None
    reconciler: Reconciler | None = None
    tools: ToolDispatcher | None = None
    api_tokens: ApiTokenCallers | None = None
    watch: JournalWatch | None = None
    workers_lock: ProcessLock | None = None
    started: bool = False
    boot: Boot | None = None  # what this process started with (GET /api/v1/runtime)
    # Callers asking while a comparison with the disk runs share it (any entry path).
    runtime_reports: Reused[RuntimeReport] | None = None
    # Asked before each review and merge of this process: refused (``restart_required``)
    # once it is no longer the code, configuration or schema on disk. Built with the store.
    parity: ParityGate | None = None
    # False: leave deliveries another process may be gating alone (``mcp --stdio``).
    resume_deliveries: bool = True
    # Deletes the rows the retention settings no longer keep (after each reconcile sweep).
    retention: Retention | None = None
    # The rate limits of this process's write paths, per caller and route class.
    quota: TokenBuckets = field(default_factory=lambda: TokenBuckets({}))
    # Parts of this process that registered for commits no PR owns (in memory only): the
    # gate runner routes their events, the reconcile sweep polls their checks.
    listeners: CommitListeners = field(default_factory=CommitListeners)
    # Opens each review run's own tools socket (the server's tools handler over a Unix
    # socket, reviewbot.server.tools_socket): every process that reviews passes it, so its
    # reviewers reach their session tools whichever process claimed the review.
    tools_endpoint: Callable[[Service], ToolsEndpoint] | None = None
    # The parts built so far, in order (names of :data:`BUILDERS`).
    built: list[str] = field(default_factory=list, init=False)
    _base: _ReviewBase | None = field(default=None, init=False)

    @property
    def routes(self) -> Routes:
        """The route groups this process answers (a command's service: all of them)."""
        return (self.role or Role.ALL).routes

    @property
    def role_name(self) -> str:
        return (self.role or Role.ALL).value

    async def readiness(self, probes: ForgeProbes | None = None) -> list[Check]:
        """The readiness checks of this process's role: an ``ingest`` process neither gates
        nor calls a forge, so neither the queue's age nor a forge makes it unready (a load
        balancer must not take the acknowledgement path away because gating lags)."""
        ingest_only = self.role is Role.INGEST
        return await readiness(
            self.settings,
            self.db,
            {} if ingest_only else self.forges,
            self.clock,
            self.pool,
            expect_workers=self.runner is not None or self.pool is not None,
            queue_age=not ingest_only,
            probes=probes,  # the server's shared forge answers (an anonymous route)
            sandbox=None if ingest_only else self.external.sandbox.state,
        )

    # -- start -----------------------------------------------------------------------------

    async def start(self) -> Service:
        """Build the parts this process wants, each after what it needs (:data:`BUILDERS`):
        ``reviewbot serve`` all of them, a command only what it needs (``parts``).
        If one fails, the parts already built are stopped again before the error goes on."""
        try:
            for builder in start_order(BUILDERS):
                if builder.wanted(self) and all(n in self.built for n in builder.needs):
                    await builder.build(self)
                    self.built.append(builder.name)
        except BaseException:
            await self.aclose()
            raise
        self.started = True
        return self

    async def _open_store(self) -> None:
        if self.db is None:
            self.db = await asyncio.to_thread(open_store, self.settings)
            self.owns_db = True
        if self.boot is not None and self.parity is None:
            self.parity = ParityGate(self.boot, self.db, self.clock, self.settings.runtime_check_s)

    async def _open_forges(self) -> None:
        self.forges = configured_forges(self.settings, self.telemetry, self.clock)

    async def _build_tools(self) -> None:
        db = self._db
        # Tool calls are recorded at the service's time, which retention compares them with.
        self.tools = ToolDispatcher(self.sessions, audit=lambda: db, now=self.clock)
        self.retention = Retention(db, self.settings.retention, self.clock)
        self.api_tokens = api_token_callers(self.settings, lambda: db)

    async def _build_journal(self) -> None:
        db = self._db
        # With workers running, their connections checkpoint the WAL (they commit after
        # every batch); the journal writer then never pays for one on an acknowledgement.
        self.journal = GroupCommitJournal(
            WorkflowPaths.from_settings(self.settings).db_file,
            checkpoints=Parts.WORKERS not in self.parts,
            on_commit=self._committed,
            database=None if db.dialect == SQLITE else db,
        ).start()

    async def _build_leases(self) -> None:
        self.leases = LeaseStore.open(
            self._db,
            self.settings.leases,
            clock=self.clock,
            telemetry=self.telemetry,
            history_days=self.settings.retention.lease_history,
        )

    async def _build_lanes(self) -> None:
        host, pid = socket.gethostname(), os.getpid()
        holder = f"{self.client}/{host}/pid-{pid}/{uuid.uuid4().hex[:8]}"
        self.lanes = Lanes(self._db, holder, term_s=self.settings.leases.lease_s, clock=self.clock)

    async def _build_review_base(self) -> None:
        self._base = await self._review_base(self._db)

    async def _build_queued_merge(self) -> None:
        # Before the drainer, which wakes the automerger; a moved head goes to the gate.
        assert self.journal is not None
        queue = QueueHead(self.journal.append, self.clock)
        self.merge = await self._merge_parts(self._db, self._comments(), queue)

    async def _build_review(self) -> None:
        assert self._base is not None
        # Once, where reviewers may run: an uncontained reviewer is never a surprise.
        announce(self.external.sandbox.state)
        self.review = self._review_parts(self._base)

    async def _build_inline_merge(self) -> None:
        # No gate in this process: a moved head is reviewed here and now.
        hook = (
            None if self.review is None else ReviewRequestHook(self.review.pipeline, source="cli")
        )
        self.merge = await self._merge_parts(self._db, self._comments(), hook)

    async def _build_workers(self) -> None:
        self._start_workers(self._db)
        assert self.pool is not None
        await self.pool.start()

    async def _build_watch(self) -> None:
        # Another process's commits on SQLite; PostgreSQL replicas poll (POLL_MAX_S).
        assert self.pool is not None
        self.watch = JournalWatch(
            WorkflowPaths.from_settings(self.settings).db_file, self.pool.submit
        ).start()

    async def _start_drainer(self) -> None:
        assert self.review is not None
        self.review.drainer.start()

    async def _resume_jobs(self) -> None:
        # Reviews a stopped process left unfinished (their claims lapse).
        assert self.review is not None
        self.review.jobs.start()

    async def _build_reconciler(self) -> None:
        assert self.review is not None and self.journal is not None
        assert self.retention is not None
        automerge = self.merge.automerge if self.merge is not None else None
        self.reconciler = Reconciler(
            self.settings,
            self.review.store,
            self.forges,
            self.review.pipeline,
            self.journal.append,
            clock=self.clock,
            verify_merges=self.merge.merger.verify_unverified if self.merge else None,
            lanes=self.lanes,
            consider_merge=automerge.consider if automerge is not None else None,
            prune=self.retention.run,
            listeners=self.listeners,
            sweep_queues=self.merge.queue.sweep_errors
            if self.merge is not None and self.merge.queue is not None
            else None,
        )
        self.reconciler.start()

    @property
    def _db(self) -> Database:
        assert self.db is not None, "the store part is built first"
        return self.db

    def _comments(self) -> StateComments | None:
        return self._base.comments if self._base is not None else None

    def _lock_workers(self) -> None:
        """One process gates a SQLite store: two would take each other's claims back at
        start. Any number of ``ingest`` processes may journal beside it."""
        path = WorkflowPaths.from_settings(self.settings).db_file.with_name(WORKERS_LOCK)
        lock = ProcessLock(path)
        holder = lock.try_acquire()
        if holder is not None:
            raise ConfigError(
                f"another process already gates and reviews the store at {path.parent} "
                f"({holder}); start this one with --role ingest, or stop the other"
            )
        self.workers_lock = lock

    def _committed(self, delivery_ids: list[str]) -> None:
        """The journal committed new deliveries: hand them to the workers, when they run."""
        if self.pool is not None:
            self.pool.submit(delivery_ids)

    async def _register(self, name: str, role: str) -> str:
        assert self.leases is not None and self.db is not None
        record = await self.db.run(
            self.leases.workers.register,
            name,
            client=self.client,
            session_id=f"pid-{os.getpid()}",
            role=role,
        )
        return record.identity

    async def _review_base(self, db: Database) -> _ReviewBase:
        assert self.leases is not None
        worker = self.worker or await self._register(REVIEWER_NAME, "reviewer")
        reviewer = StoreReviewerLeases(self.leases, worker)
        store = ReviewStore(db, self.clock, telemetry=self.telemetry)
        outbox = OutboxStore(db, self.clock, telemetry=self.telemetry)
        locks = PullLocks()
        rows = StateCommentStore(db, self.clock)
        comments = StateComments(self.settings, store, outbox, rows, self.forges, reviewer, locks)
        return _ReviewBase(worker, reviewer, store, outbox, locks, comments)

    def _review_parts(self, base: _ReviewBase) -> ReviewParts:
        worker, reviewer, store, outbox, locks, comments = (
            base.worker,
            base.reviewer,
            base.store,
            base.outbox,
            base.locks,
            base.comments,
        )
        automerge = self.merge.automerge if self.merge is not None else None
        drainer = OutboxDrainer(
            outbox,
            self.forges,
            reviewer,
            clock=self.clock,
            backoff_base_s=self.backoff_base_s,
            locks=locks,
            on_finished=automerge.on_outbox_finished if automerge is not None else None,
            after_drain=comments.sync,
            telemetry=self.telemetry,
            parity=self.parity,
        )
        pipeline = ReviewPipeline(
            self.settings,
            store,
            self.forges,
            reviewer,
            drainer,
            clock=self.clock,
            comments=comments,
            external=dataclasses.replace(
                self.external,
                endpoint=None if self.tools_endpoint is None else self.tools_endpoint(self),
            ),
            telemetry=self.telemetry,
            parity=self.parity,
        )
        assert self.db is not None
        jobs = ReviewJobs(
            self.db, pipeline, worker, clock=self.clock, term_s=self.settings.leases.lease_s
        )
        return ReviewParts(pipeline, drainer, store, outbox, comments, worker, jobs)

    async def _merge_parts(
        self, db: Database, comments: StateComments | None, re_review: ReReviewHook | None
    ) -> MergeParts:
        assert self.leases is not None
        merges = MergeStore(db, self.leases, self.clock)
        merger = Merger(
            self.settings,
            self.forges,
            self.leases,
            merges,
            clock=self.clock,
            state_comment=comments.sync if comments is not None else None,
            re_review=re_review,
            telemetry=self.telemetry,
            parity=self.parity,
            after_merge=AfterMerge(self.settings, self.forges, db, self.clock),
        )
        queue = self._queue_driver(db, comments)
        if Parts.AUTOMERGE not in self.parts:
            return MergeParts(merger, merges, None, None, self.leases, queue)
        worker = await self._register(MERGER_NAME, "merger")
        assert self.lanes is not None
        automerge = AutoMerger(self.settings, self.forges, merger, self.leases, worker, self.lanes)
        return MergeParts(merger, merges, automerge, worker, self.leases, queue)

    def _queue_driver(self, db: Database, comments: StateComments | None) -> QueueDriver | None:
        """The merge queue, where this process holds lanes; it hears statuses and checks
        on every configured repository's queue branches, and re-syncs a PR's state comment
        when its spot in a queue changes."""
        if self.lanes is None:
            return None
        driver = QueueDriver(
            self.settings,
            self.forges,
            QueueStore(db, self.clock),
            self.lanes,
            state_comment=comments.sync if comments is not None else None,
        )
        driver.listen(self.listeners)
        return driver

    def _start_workers(self, db: Database) -> None:
        jobs = self.review.jobs if self.review is not None and self.on_eligible is None else None
        self.runner = GateRunner(
            db,
            self.settings,
            self.forges,
            clock=self.clock,
            on_eligible=self._eligible_hook(),
            job_claim=jobs.claim if jobs is not None else None,
            telemetry=self.telemetry,
            listeners=self.listeners,
        )
        self.pool = WorkerPool(
            db,
            self.runner.process_batch,
            size=self.settings.workers,
            ingress_busy=self.journal.busy if self.journal is not None else None,
            clock=self.clock,
            retry=self.runner.retry,
            # Replicas share a PostgreSQL store: each claims deliveries for a term.
            claim_as=None
            if db.dialect == SQLITE
            else (
                f"{self.client}/pid-{os.getpid()}/{uuid.uuid4().hex[:8]}",
                self.settings.delivery_claim_s,
            ),
            resume=self.resume_deliveries,
        )

    def _eligible_hook(self) -> EligibleHook | None:
        if self.on_eligible is not None:
            return self.on_eligible
        if self.review is None:
            return None
        pipeline = self.review.pipeline
        jobs = self.review.jobs
        automerge = self.merge.automerge if self.merge is not None else None
        queue = self.merge.queue if self.merge is not None else None

        async def review_then_merge(eligible: EligiblePull) -> None:
            await jobs.run(
                eligible.job_id,
                eligible.job_claim,
                1,
                lambda fence: pipeline.on_eligible(eligible, fence=fence),
            )
            if automerge is not None:  # a review or a check may have made it mergeable
                await automerge.after_event(eligible.pull)
            if queue is not None:  # it may leave its queue, or join one
                await queue.after_event(eligible.pull, eligible.trigger)

        return review_then_merge

    # -- stop ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop what was built, in :data:`STOP_ORDER`: the sweep and the drainer, merges
        in flight, the workers (work in flight finishes within the grace period or goes back
        to the queue), then the store."""
        built = set(self.built)
        for name in STOP_ORDER:
            stop = BUILDERS_BY_NAME[name].stop
            if name in built and stop is not None:
                await stop(self)
        self.built.clear()

    async def _stop_review(self) -> None:
        assert self.review is not None
        await self.review.jobs.stop()
        await self.review.drainer.stop()

    async def _stop_merge(self) -> None:
        if self.merge is not None and self.merge.automerge is not None:
            await self.merge.automerge.idle()

    async def _stop_workers(self) -> None:
        if self.pool is not None:
            await self.pool.stop(self.shutdown_grace_s)
        if self.runner is not None:
            await self.runner.aclose()

    async def _close_forges(self) -> None:
        for forge in self.forges.values():
            try:
                await forge.aclose()
            except Exception:
                log.exception("closing the %s client failed", forge.name)

    async def _close_store(self) -> None:
        if self.owns_db and self.db is not None:
            self.db.close()

    async def __aenter__(self) -> Service:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


Step = Callable[[Service], Awaitable[None]]


@dataclass(frozen=True)
class Builder:
    """One part of the service. It is built after everything in ``needs`` and ``after``,
    and only when ``wanted`` says this process runs it and every part in ``needs`` was
    built; ``stop`` undoes it (in :data:`STOP_ORDER`). A new part is one more row."""

    name: str
    build: Step
    wanted: Callable[[Service], bool] = lambda service: True
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # built first when this process has them; not required
    stop: Step | None = None


def _has(*parts: Parts) -> Callable[[Service], bool]:
    return lambda service: any(part in service.parts for part in parts)


def _on_sqlite(service: Service) -> bool:
    return service.db is not None and service.db.dialect == SQLITE


async def _lock_workers(service: Service) -> None:
    service._lock_workers()


async def _release_workers_lock(service: Service) -> None:
    if service.workers_lock is not None:
        service.workers_lock.release()


async def _close_journal(service: Service) -> None:
    if service.journal is not None:
        await asyncio.to_thread(service.journal.close)


async def _close_leases(service: Service) -> None:
    if service.leases is not None:
        service.leases.close()


async def _close_lanes(service: Service) -> None:
    if service.lanes is not None:
        service.lanes.close()  # a merge waiting for another replica's lane gives up


async def _stop_watch(service: Service) -> None:
    if service.watch is not None:
        await service.watch.stop()


async def _stop_reconciler(service: Service) -> None:
    if service.reconciler is not None:
        await service.reconciler.stop()


BUILDERS: tuple[Builder, ...] = (
    Builder("store", Service._open_store, stop=Service._close_store),
    # On SQLite one process gates a store; PostgreSQL replicas share it through claims.
    Builder(
        "workers_lock",
        _lock_workers,
        wanted=lambda s: s.role is not None and Parts.WORKERS in s.parts and _on_sqlite(s),
        needs=("store",),
        stop=_release_workers_lock,
    ),
    Builder(
        "forges",
        Service._open_forges,
        wanted=lambda s: s.owns_forges,
        after=("workers_lock",),
        stop=Service._close_forges,
    ),
    Builder("tools", Service._build_tools, needs=("store",)),
    Builder(
        "journal",
        Service._build_journal,
        wanted=_has(Parts.JOURNAL),
        needs=("store",),
        stop=_close_journal,
    ),
    Builder(
        "leases",
        Service._build_leases,
        wanted=_has(Parts.REVIEW, Parts.MERGE),
        needs=("store",),
        stop=_close_leases,
    ),
    Builder(
        "lanes",
        Service._build_lanes,
        wanted=_has(Parts.AUTOMERGE, Parts.RECONCILE),
        needs=("store",),
        stop=_close_lanes,
    ),
    Builder(
        "review_base",
        Service._build_review_base,
        wanted=_has(Parts.REVIEW),
        needs=("leases",),
        after=("forges", "lanes"),
    ),
    # With a journal, the merger is built before the review part (its drainer wakes the
    # automerger) and a moved head goes to the gate; without one, after it, reviewing a
    # moved head inline.
    Builder(
        "queued_merge",
        Service._build_queued_merge,
        wanted=_has(Parts.MERGE),
        needs=("journal", "leases"),
        after=("review_base",),
        stop=Service._stop_merge,
    ),
    Builder(
        "review",
        Service._build_review,
        needs=("review_base", "tools"),  # each run's tools socket answers with the tools
        after=("queued_merge",),
        stop=Service._stop_review,
    ),
    Builder(
        "inline_merge",
        Service._build_inline_merge,
        wanted=lambda s: Parts.MERGE in s.parts and s.merge is None,
        needs=("leases",),
        after=("review",),
        stop=Service._stop_merge,
    ),
    Builder(
        "workers",
        Service._build_workers,
        wanted=_has(Parts.WORKERS),
        needs=("store",),
        after=("journal", "review", "queued_merge", "inline_merge"),
        stop=Service._stop_workers,
    ),
    Builder(
        "watch",
        Service._build_watch,
        wanted=lambda s: Parts.WATCH in s.parts and _on_sqlite(s),
        needs=("workers",),
        stop=_stop_watch,
    ),
    Builder("drain", Service._start_drainer, wanted=_has(Parts.DRAIN), needs=("review",)),
    Builder(
        "resume_jobs",
        Service._resume_jobs,
        wanted=lambda s: s.on_eligible is None,
        needs=("review", "workers"),
    ),
    Builder(
        "reconciler",
        Service._build_reconciler,
        wanted=_has(Parts.RECONCILE),
        needs=("review", "journal", "tools"),
        after=("queued_merge", "inline_merge", "lanes"),
        stop=_stop_reconciler,
    ),
)
BUILDERS_BY_NAME = {builder.name: builder for builder in BUILDERS}

# Not simply the reverse of the start: the lanes close before merges go idle, so a merge
# waiting for another replica's lane gives up instead of holding the stop; merges go idle
# before the workers stop, and the store closes after everything that writes to it.
STOP_ORDER: tuple[str, ...] = (
    "watch",
    "reconciler",
    "review",
    "lanes",
    "queued_merge",
    "inline_merge",
    "workers",
    "journal",
    "leases",
    "forges",
    "store",
    "workers_lock",
)


def start_order(builders: Sequence[Builder]) -> list[Builder]:
    """``builders`` with each after its ``needs`` and ``after`` (otherwise in list order).

    Raises :class:`ValueError` for an unknown name or a cycle: a wiring mistake.
    """
    by_name = {b.name: b for b in builders}
    done: list[Builder] = []
    placed: set[str] = set()
    visiting: set[str] = set()

    def place(builder: Builder) -> None:
        if builder.name in placed:
            return
        if builder.name in visiting:
            raise ValueError(f"the parts {sorted(visiting)} wait for each other")
        visiting.add(builder.name)
        for name in (*builder.needs, *builder.after):
            if name not in by_name:
                raise ValueError(f"part {builder.name!r} waits for {name!r}, which is no part")
            place(by_name[name])
        visiting.discard(builder.name)
        placed.add(builder.name)
        done.append(builder)

    for builder in builders:
        place(builder)
    return done


def configured_forges(
    settings: Settings, telemetry: Telemetry | None = None, clock: Clock = time.time
) -> dict[str, Forge]:
    """The forges the settings configure, by name (their calls reported to ``telemetry``),
    on ``clock`` (the service's: a read's age is measured on the clock the rest uses)."""
    found: dict[str, Forge] = {}
    for name, kind in FORGE_ADAPTERS.items():
        if kind.section(settings).configured:
            watch = telemetry.forge_watch(name) if telemetry is not None else None
            found[name] = make_forge(settings, name, watch=watch, clock=clock)
    return found


def secret_values(settings: Settings) -> list[str]:
    """Every secret these settings hold, as text: what a log line must never show."""
    sections = [kind.section(settings) for kind in FORGE_ADAPTERS.values()]
    found = [
        secret.get_secret_value()
        for section in sections
        for secret in (section.token, section.webhook_secret)
        if secret is not None
    ]
    if settings.github.private_key_path is not None:
        # An unreadable key is reported where it is used, and cannot be logged either.
        with contextlib.suppress(ConfigError, UnicodeDecodeError):
            found.append(read_private_key(settings.github.private_key_path).decode("ascii"))
    return found


MCP_SESSION_LOGGER = "mcp.server.streamable_http_manager"


def configure_logging(
    settings: Settings,
    *,
    log_format: logs.LogFormat | None = None,
    level: str | None = None,
    stream: object = None,
) -> None:
    """Once per process, by each command that runs the service (``serve`` after its
    settings are final): structured lines on standard error, the settings' secrets
    redacted. ``log_format`` and ``level`` (command-line flags) win over the settings."""
    chosen = level or settings.log_level
    logs.configure(
        log_format or settings.log_format,
        chosen,
        secrets=secret_values(settings),
        stream=stream,
    )
    # The MCP SDK's session manager logs "started" and "shutting down" at every start and
    # stop; around a start error they read as part of it. News only at debug level.
    logging.getLogger(MCP_SESSION_LOGGER).setLevel(
        logging.DEBUG if str(chosen).lower() == "debug" else logging.WARNING
    )


def build_service(
    settings: Settings,
    *,
    clock: Clock = time.time,
    forges: Mapping[str, Forge] | None = None,
    db: Database | None = None,
    parts: Parts | None = None,
    role: Role | None = None,
    client: str = "reviewbot-serve",
    on_eligible: EligibleHook | None = None,
    worker: str | None = None,
    sessions: SessionManager | None = None,
    shutdown_grace_s: float = 10.0,
    backoff_base_s: float = 2.0,
    reload_settings: Callable[[], Settings] | None = None,
    telemetry: Telemetry | None = None,
    resume_deliveries: bool = True,
    tools_endpoint: Callable[[Service], ToolsEndpoint] | None = None,
) -> Service:
    """The service these settings describe; nothing runs until :meth:`Service.start`.

    ``forges`` and ``db`` default to the configured ones (opened at start, closed at the
    end); given ones stay the caller's. ``on_eligible`` replaces the review pipeline as the
    gate's hook (tests of the gate alone). ``worker`` is a reviewer identity the caller
    registered itself (``reviewbot merge`` reviews a moved head under its own worker).
    ``reload_settings`` reads the settings again the way they were read (``serve`` passes
    it), so the runtime view can tell when the configuration on disk changed.
    ``telemetry`` defaults to a new one with its own metrics registry.
    ``resume_deliveries=False``: the workers reset no delivery left ``processing`` at start.
    ``role`` (``serve``) picks the parts and the routes, unless ``parts`` is given too.
    ``tools_endpoint`` opens each review run's tools socket
    (``reviewbot.server.tools_socket.service_tools_sockets``); without it, reviewers get no
    ``REVIEWBOT_TOOLS_SOCKET`` and their session tools are out of their reach.
    """
    manager = sessions if sessions is not None else SessionManager()
    return Service(
        settings=settings,
        clock=clock,
        parts=parts if parts is not None else (role or Role.ALL).parts,
        client=client,
        sessions=manager,
        # External reviewers run as sessions of the manager the tools route answers for,
        # inside the sandbox these settings ask for (probed once per process).
        external=ExternalReviewers(
            manager,
            limits=ReviewerLimits.from_settings(settings),
            sandbox=Sandbox.from_settings(settings),
        ),
        telemetry=telemetry if telemetry is not None else Telemetry(),
        on_eligible=on_eligible,
        worker=worker,
        role=role,
        shutdown_grace_s=shutdown_grace_s,
        backoff_base_s=backoff_base_s,
        db=db,
        forges=dict(forges) if forges is not None else {},
        owns_forges=forges is None,
        boot=boot_snapshot(settings, started_at=clock(), reload=reload_settings),
        runtime_reports=Reused(clock),
        resume_deliveries=resume_deliveries,
        tools_endpoint=tools_endpoint,
        quota=TokenBuckets(settings.rate_limits.rates()),
    )
