"""The lease store against a simple model, over a real SQLite file, with a fake clock.

Any interleaving of register / worker heartbeat / acquire / heartbeat / release / guarded
write / expire (the clock moves) / head change / deleted rows must keep: at most one live
holder per target; epochs strictly increasing per target; a claim no longer live than its
worker (a worker silent for one lease term loses its claims, and a late sign of life does not
revive them); a call from a holder that is no longer the live one changes nothing at all;
and a history with one grant and at most one end per claim.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from reviewbot.config import LeaseSettings
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Phase, Role, check_fence
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths

TIMING = LeaseSettings()  # 15 s lease
TARGETS = [
    LeaseTarget("gitea", "acme/api", number, role)
    for number in (1, 2)
    for role in (Role.REVIEWER, Role.MERGER)
]
HEADS = ["a" * 40, "b" * 40, "c" * 40]
TTLS = [None, 5.0, 30.0]
# 0 is the newest claim: the one most worth poking at, so it comes up most often.
CLAIM_CHOICE = st.one_of(st.just(0), st.just(1), st.integers(0, 99))

_template: Path | None = None


def template_db() -> Path:
    """A migrated database, made once and copied for every example (fast and identical)."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="lease-template-"))
        atexit.register(shutil.rmtree, folder, True)
        open_store(WorkflowPaths(folder)).close()
        _template = folder / "db" / "db.sqlite"
    return _template


@dataclass
class ModelLease:
    holder: str
    epoch: int
    head: str
    phase: Phase
    ttl: float
    expires_at: float


class _RollBack(Exception):
    pass


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lease-sm-"))
        path = self.dir / "db.sqlite"
        shutil.copyfile(template_db(), path)
        self.db = SQLiteDatabase(path)
        self.clock = Clock()
        self.store = LeaseStore.open(self.db, TIMING, clock=self.clock)
        with self.db.write() as tx:
            tx.execute(
                "CREATE TABLE acts (id INTEGER PRIMARY KEY, target TEXT, holder TEXT, epoch INT)"
            )
        self.workers: list[str] = []
        self.model: dict[LeaseTarget, ModelLease] = {}
        self.max_epoch: dict[LeaseTarget, int] = dict.fromkeys(TARGETS, 0)
        self.claims: list[LeaseClaim] = []
        self.worker_hb: dict[str, float] = {}

    def teardown(self) -> None:
        self.store.close()
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ------------------------------------------------------------------------------

    def snapshot(self) -> list[Any]:
        with self.db.read() as tx:
            return [
                [tuple(r) for r in tx.all(f"SELECT * FROM {table} ORDER BY 1, 2")]
                for table in ("workers", "leases", "lease_epochs", "acts")
            ]

    def seen_expiry(self, m: ModelLease) -> float:
        """A claim lives no longer than its worker's heartbeat (one lease term)."""
        if m.phase is not Phase.CLAIMED:
            return m.expires_at
        return min(m.expires_at, self.worker_hb[m.holder] + TIMING.lease_s)

    def model_live(self, target: LeaseTarget) -> ModelLease | None:
        m = self.model.get(target)
        if m is not None and m.phase is Phase.CLAIMED and self.clock.now < self.seen_expiry(m):
            return m
        return None

    def touch(self, worker: str) -> None:
        """A sign of life: claims lost while the worker was silent stay lost."""
        lapse = self.worker_hb[worker] + TIMING.lease_s
        if self.clock.now >= lapse:
            for m in self.model.values():
                if m.holder == worker and m.phase is Phase.CLAIMED:
                    m.expires_at = min(m.expires_at, lapse)
        self.worker_hb[worker] = self.clock.now

    def holds(self, claim: LeaseClaim) -> bool:
        m = self.model_live(claim.target)
        return m is not None and (m.holder, m.epoch) == (claim.worker, claim.epoch)

    def sql_fence_passes(self, claim: LeaseClaim) -> bool:
        """The store's own fence (the conditional write), in a transaction rolled back after."""
        try:
            with self.db.write() as tx:
                self.store.check_held(tx, claim)
                raise _RollBack
        except _RollBack:
            return True
        except LeaseRefused:
            return False

    def pick(self, c: int) -> LeaseClaim:
        return self.claims[-1 - c % len(self.claims)]

    def expect_refusal_changes_nothing(self, claim: LeaseClaim, call: Any) -> None:
        before = self.snapshot()
        with pytest.raises(LeaseRefused) as refused:
            call()
        assert self.snapshot() == before
        m = self.model.get(claim.target)
        if m is not None and claim.epoch < m.epoch:
            assert refused.value.code == "superseded"
        else:
            assert refused.value.code in ("superseded", "lease_not_held")

    # --- rules --------------------------------------------------------------------------------

    @initialize(name=st.sampled_from(["rev", "merge"]))
    def first_worker(self, name: str) -> None:
        self.register(name)

    @rule(name=st.sampled_from(["rev", "merge", "agent"]))
    def register(self, name: str) -> None:
        record = self.store.workers.register(name, client="sm", session_id="s", role="merger")
        assert record.identity not in self.workers
        self.workers.append(record.identity)
        self.worker_hb[record.identity] = self.clock.now

    @rule(w=st.integers(0, 9))
    def worker_heartbeat(self, w: int) -> None:
        worker = self.workers[w % len(self.workers)]
        self.store.worker_heartbeat(worker)
        self.touch(worker)

    @rule(
        w=st.integers(0, 9),
        t=st.sampled_from(TARGETS),
        head=st.sampled_from(HEADS),
        ttl=st.sampled_from(TTLS),
    )
    def acquire(self, w: int, t: LeaseTarget, head: str, ttl: float | None) -> None:
        worker = self.workers[w % len(self.workers)]
        live = self.model_live(t)
        now = self.clock.now
        if live is not None and live.holder != worker:
            before = self.snapshot()
            with pytest.raises(LeaseRefused) as refused:
                self.store.acquire(t, worker, head, ttl_s=ttl)
            assert refused.value.code == "lease_held"
            assert (refused.value.holder, refused.value.expires_at) == (
                live.holder,
                self.seen_expiry(live),
            )
            assert self.snapshot() == before
            return
        lease = self.store.acquire(t, worker, head, ttl_s=ttl)
        self.touch(worker)
        term = TIMING.lease_s if ttl is None else ttl
        if live is not None and live.head == head:
            assert lease.epoch == live.epoch  # renewed
        else:
            # a new epoch: strictly above every epoch this target ever had (not always the
            # next one: a grant after the marks were deleted goes above the ledger file)
            assert lease.epoch > self.max_epoch[t]
            self.max_epoch[t] = lease.epoch
            self.claims.append(lease.claim)
        assert (lease.holder, lease.head_sha, lease.expires_at) == (worker, head, now + term)
        self.model[t] = ModelLease(worker, lease.epoch, head, Phase.CLAIMED, term, now + term)

    @precondition(lambda self: bool(self.claims))
    @rule(c=CLAIM_CHOICE)
    def heartbeat(self, c: int) -> None:
        claim = self.pick(c)
        if self.holds(claim):
            lease = self.store.heartbeat(claim)
            self.touch(claim.worker)
            m = self.model[claim.target]
            m.expires_at = self.clock.now + m.ttl
            assert lease.expires_at == m.expires_at
        else:
            self.expect_refusal_changes_nothing(claim, lambda: self.store.heartbeat(claim))

    @precondition(lambda self: bool(self.claims))
    @rule(c=CLAIM_CHOICE)
    def release(self, c: int) -> None:
        claim = self.pick(c)
        if self.holds(claim):
            self.store.release(claim)
            self.touch(claim.worker)
            m = self.model[claim.target]
            m.phase, m.expires_at = Phase.RELEASED, self.clock.now
        else:
            self.expect_refusal_changes_nothing(claim, lambda: self.store.release(claim))

    @precondition(lambda self: bool(self.claims))
    @rule(c=CLAIM_CHOICE)
    def act(self, c: int) -> None:
        claim = self.pick(c)

        def write() -> None:
            self.store.write_under(
                claim,
                "INSERT INTO acts (target, holder, epoch) VALUES (?, ?, ?)",
                (str(claim.target), claim.worker, claim.epoch),
            )

        if self.holds(claim):
            write()
        else:
            self.expect_refusal_changes_nothing(claim, write)

    @rule(seconds=st.sampled_from([0.5, 3.0, 4.999, 5.0, 10.0, 14.999, 15.0, 31.0]))
    def expire(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(number=st.sampled_from([1, 2]), head=st.sampled_from(HEADS))
    def head_change(self, number: int, head: str) -> None:
        changed = self.store.supersede_head("gitea", "acme/api", number, head)
        expected = set()
        for t, m in self.model.items():
            if t.number == number and m.phase is Phase.CLAIMED and m.head != head:
                m.phase = Phase.SUPERSEDED
                m.expires_at = min(m.expires_at, self.clock.now)
                expected.add(t)
        assert {lease.target for lease in changed} == expected

    @rule(also_marks=st.booleans())
    def delete_rows(self, also_marks: bool) -> None:
        with self.db.write() as tx:
            tx.execute("DELETE FROM leases")
            if also_marks:
                tx.execute("DELETE FROM lease_epochs")
        self.model.clear()

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        now = self.clock.now
        seen = {lease.target: lease for lease in self.store.list_leases()}
        assert set(seen) == set(self.model)
        for t, m in self.model.items():
            lease = seen[t]
            expiry = self.seen_expiry(m)
            assert (lease.holder, lease.epoch, lease.head_sha, lease.expires_at) == (
                m.holder,
                m.epoch,
                m.head,
                expiry,
            )
            phase = Phase.EXPIRED if m.phase is Phase.CLAIMED and now >= expiry else m.phase
            assert lease.phase is phase

    @invariant()
    def at_most_one_live_holder_per_target(self) -> None:
        now = self.clock.now
        with self.db.read() as tx:
            rows = {t: self.store.seen_in(tx, self.store.lease_in(tx, t)) for t in TARGETS}
        for t in TARGETS:
            current = rows[t]
            passing = [
                c for c in self.claims if c.target == t and check_fence(current, c, now) is None
            ]
            assert len(passing) <= 1
            assert len(passing) == (1 if self.model_live(t) else 0)

    @invariant()
    def the_sql_fence_passes_exactly_the_live_claims(self) -> None:
        for claim in set(self.claims):
            assert self.sql_fence_passes(claim) == self.holds(claim), claim

    @invariant()
    def history_has_one_grant_and_at_most_one_end_per_claim(self) -> None:
        with self.db.read() as tx:
            rows = tx.all("SELECT forge, repo, number, role, epoch, event FROM lease_history")
        grants: dict[tuple[Any, ...], int] = {}
        ends: dict[tuple[Any, ...], int] = {}
        for *key, epoch, event in rows:
            k = (*key, epoch)
            if event in ("granted", "takeover"):
                grants[k] = grants.get(k, 0) + 1
            elif event in ("released", "expired", "superseded"):
                ends[k] = ends.get(k, 0) + 1
        assert all(n == 1 for n in grants.values()), grants
        assert all(n == 1 for n in ends.values()), ends
        assert set(ends) <= set(grants)

    @invariant()
    def acts_follow_increasing_epochs_one_holder_each(self) -> None:
        with self.db.read() as tx:
            rows = tx.all("SELECT target, holder, epoch FROM acts ORDER BY id")
        last: dict[str, int] = {}
        holder_of: dict[tuple[str, int], str] = {}
        for target, holder, epoch in rows:
            assert epoch >= last.get(target, 0)
            last[target] = epoch
            assert holder_of.setdefault((target, epoch), holder) == holder


LeaseMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TestLeaseMachine = LeaseMachine.TestCase
