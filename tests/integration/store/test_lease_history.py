"""The lease audit trail, lease-term bounds and worker liveness: over both stores with a
fake clock, and over the HTTP API of a real server (``GET /api/v1/leases/history``)."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reviewbot.config import LeaseSettings
from reviewbot.core.lease_history import EndReason, HistoryEntry, LeaseEvent
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.store import lease_history
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.bootstrap import install_migration, open_store
from reviewbot.workflowdb.migrations import apply_workflow_db_migration, migration_log
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import packaged_migrations
from tests.integration.server_support import Running, make_settings, running_server
from tests.integration.tools_support import hold_a_lease
from tests.support.clock import FakeClock

HEAD = "a" * 40
NEW_HEAD = "b" * 40
MERGER = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
REVIEWER = LeaseTarget("gitea", "acme/api", 12, Role.REVIEWER)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(workflow_paths: WorkflowPaths, clock: FakeClock) -> Iterator[LeaseStore]:
    db = open_store(workflow_paths)  # on both stores
    s = LeaseStore.open(db, LeaseSettings(), clock=clock)
    yield s
    s.close()
    db.close()


def worker(store: LeaseStore, name: str) -> str:
    return store.workers.register(name, client="t", session_id="s", role="merger").identity


def events(store: LeaseStore) -> list[tuple[str, str, int, str]]:
    return [
        (e.event.value, e.holder, e.epoch, e.reason) for e in store.history("gitea", "acme/api", 12)
    ]


def test_grant_and_release_are_rows_a_renewal_is_the_grants_renewed_at(
    store: LeaseStore, clock: FakeClock
) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD, actor="token 'ci' (id 3)")
    clock.now += 5
    store.heartbeat(lease.claim, actor="token 'ci' (id 3)")
    clock.now += 5
    store.acquire(MERGER, a, HEAD, actor="token 'ci' (id 3)")  # the holder again: a renewal
    (granted,) = store.history("gitea", "ACME/Api", 12)  # any casing: the same repository
    assert (granted.at, granted.renewed_at) == (clock.now - 10, clock.now)
    assert granted.expires_at == clock.now + 15  # the term the last renewal gave
    store.release(lease.claim, reason=EndReason.MERGED, actor="reviewbot")
    assert events(store) == [("granted", a, 1, ""), ("released", a, 1, "merged")]
    rows = store.history("gitea", "acme/api", 12)
    assert [r.actor for r in rows] == ["token 'ci' (id 3)", "reviewbot"]
    assert rows[0].head_sha == HEAD and rows[1].renewed_at is None


def history_rows(store: LeaseStore) -> int:
    with store.db.read() as tx:
        return int(tx.one("SELECT count(*) FROM lease_history")[0])  # type: ignore[index]


def test_heartbeats_add_no_rows(store: LeaseStore, clock: FakeClock) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD)
    before = history_rows(store)
    for _ in range(200):
        clock.now += 1
        store.heartbeat(lease.claim)
    assert history_rows(store) == before == 1
    (granted,) = store.history("gitea", "acme/api", 12)
    assert granted.renewed_at == clock.now and granted.event is LeaseEvent.GRANTED


def grant_rows(store: LeaseStore, number: int = 12) -> list[tuple[int, float | None, float]]:
    """The stored grant rows of a PR's merger leases, as written (no live renewal joined)."""
    with store.db.read() as tx:
        rows = tx.all(
            "SELECT epoch, renewed_at, expires_at FROM lease_history WHERE number = ?"
            " AND event IN ('granted', 'takeover') ORDER BY id",
            (number,),
        )
    return [(int(r["epoch"]), r["renewed_at"], float(r["expires_at"])) for r in rows]


@pytest.mark.parametrize("end", ["released", "lapsed"])
def test_a_claims_last_heartbeat_reaches_its_grant_row_before_the_next_grant(
    store: LeaseStore, clock: FakeClock, end: str
) -> None:
    a, b = worker(store, "a"), worker(store, "b")
    lease = store.acquire(MERGER, a, HEAD)
    for _ in range(3):
        clock.now += 4
        store.heartbeat(lease.claim)
    last = clock.now
    # While the claim lives, the lease row holds the renewal: every reading shows it.
    assert grant_rows(store) == [(1, None, lease.expires_at)]
    with store.db.read() as tx:
        (recent,) = lease_history.recent(tx, "number = ?", [12], 10)
    assert (recent.renewed_at, recent.expires_at) == (last, last + 15)
    if end == "released":
        clock.now += 1
        store.release(lease.claim)
    else:
        clock.now += 16  # the term the last heartbeat gave ran out
    store.acquire(MERGER, b, HEAD)  # epoch 2 replaces the lease row
    assert grant_rows(store)[0] == (1, last, last + 15)
    first = store.history("gitea", "acme/api", 12)[0]
    assert (first.epoch, first.renewed_at, first.expires_at) == (1, last, last + 15)


def test_the_grant_of_a_claim_renewed_within_the_retention_is_never_pruned(
    pruning: LeaseStore, clock: FakeClock
) -> None:
    store = pruning
    a = worker(store, "a")
    kept = store.acquire(REVIEWER, a, HEAD)
    for n in range(1, 61):  # 600 s of other grants, each of which prunes
        clock.now += 10
        store.heartbeat(kept.claim)
        target = LeaseTarget("gitea", "acme/api", 100 + n, Role.MERGER)
        store.release(store.acquire(target, a, HEAD).claim)
    (granted,) = [e for e in store.history("gitea", "acme/api", 12) if e.target == REVIEWER]
    assert (granted.event, granted.at, granted.renewed_at) == (
        LeaseEvent.GRANTED,
        kept.acquired_at,
        clock.now,
    )


def test_a_renewed_claim_whose_grant_row_is_gone_records_its_last_renewal_once(
    store: LeaseStore, clock: FakeClock
) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD)
    with store.db.write() as tx:  # a trail from before renewals were recorded
        tx.execute("DELETE FROM lease_history")
    for _ in range(3):
        clock.now += 1
        store.heartbeat(lease.claim)
    last = clock.now
    clock.now += 1
    store.release(lease.claim)
    assert [(e.event, e.renewed_at) for e in store.history("gitea", "acme/api", 12)] == [
        (LeaseEvent.RENEWED, last),
        (LeaseEvent.RELEASED, None),
    ]


RETAINED_S = 300.0  # the retention of these tests: five minutes, so a claim stays live


@pytest.fixture
def pruning(workflow_paths: WorkflowPaths, clock: FakeClock) -> Iterator[LeaseStore]:
    db = open_store(workflow_paths)  # on both stores
    s = LeaseStore.open(db, LeaseSettings(), clock=clock, history_days=RETAINED_S / 86400)
    yield s
    s.close()
    db.close()


def test_rows_older_than_the_retention_are_pruned_at_grants(
    pruning: LeaseStore, clock: FakeClock
) -> None:
    store = pruning
    a = worker(store, "a")
    kept = store.acquire(REVIEWER, a, HEAD)  # held throughout, heartbeated every 10 s
    for n in range(1, 101):  # a claim granted and released every 10 s for 1000 s
        target = LeaseTarget("gitea", "acme/api", 100 + n, Role.MERGER)
        store.release(store.acquire(target, a, HEAD).claim)
        clock.now += 10
        store.heartbeat(kept.claim)
    # The grant at 10 * (n - 1) s pruned the rows older than 300 s then: those of the last
    # 31 claims are left (two rows each), and the live claim's grant, 1000 s old but renewed
    # a moment ago.
    assert history_rows(store) == 2 * 31 + 1
    with store.db.read() as tx:
        oldest = tx.one("SELECT min(at) FROM lease_history WHERE number > 100")
    assert oldest is not None and oldest[0] == clock.now - 10 - RETAINED_S
    assert [(e.event, e.renewed_at) for e in store.history("gitea", "acme/api", 12)] == [
        (LeaseEvent.GRANTED, clock.now)
    ]


def test_a_grant_prunes_a_bounded_number_of_rows(pruning: LeaseStore, clock: FakeClock) -> None:
    store = pruning
    a = worker(store, "a")
    for n in range(150):
        target = LeaseTarget("gitea", "acme/api", 100 + n, Role.MERGER)
        store.release(store.acquire(target, a, HEAD).claim)
    clock.now += RETAINED_S + 1
    assert history_rows(store) == 300
    batch = lease_history.PRUNE_BATCH
    store.acquire(MERGER, a, HEAD)  # the first grant since: one batch of the 300
    assert history_rows(store) == 300 - batch + 1
    store.acquire(REVIEWER, a, HEAD)
    assert history_rows(store) == 300 - 2 * batch + 2
    store.acquire(LeaseTarget("gitea", "acme/api", 13, Role.MERGER), a, HEAD)
    assert history_rows(store) == 3  # the rest of the old rows, and the three new grants


def test_a_lapsed_claim_shows_expiry_then_takeover(store: LeaseStore, clock: FakeClock) -> None:
    a, b = worker(store, "a"), worker(store, "b")
    store.acquire(MERGER, a, HEAD)
    clock.now += 15  # the term ran out: seen by the clock before any call
    pending = store.history("gitea", "acme/api", 12)
    assert [(e.event, e.recorded) for e in pending] == [
        (LeaseEvent.GRANTED, True),
        (LeaseEvent.EXPIRED, False),
    ]
    store.acquire(MERGER, b, HEAD)
    rows = store.history("gitea", "acme/api", 12)
    assert [(e.event.value, e.holder, e.epoch, e.reason) for e in rows] == [
        ("granted", a, 1, ""),
        ("expired", a, 1, "heartbeat-lapsed"),
        ("takeover", b, 2, ""),
    ]
    assert rows[1].at == clock.now  # when it lapsed, recorded once, not when it was noticed
    assert rows[2].previous_holder == a and all(e.recorded for e in rows)


def test_a_new_head_supersedes_with_a_row(store: LeaseStore) -> None:
    a = worker(store, "a")
    store.acquire(REVIEWER, a, HEAD)
    store.supersede_head("gitea", "acme/api", 12, NEW_HEAD, actor="reviewbot")
    (last,) = store.history("gitea", "acme/api", 12)[-1:]
    assert (last.event, last.reason) == (LeaseEvent.SUPERSEDED, f"head-moved: {NEW_HEAD}")


def test_a_silent_worker_loses_every_claim_at_once(store: LeaseStore, clock: FakeClock) -> None:
    a, b = worker(store, "a"), worker(store, "b")
    merger = store.acquire(MERGER, a, HEAD, ttl_s=600)  # asks for ten minutes
    store.acquire(REVIEWER, a, HEAD, ttl_s=600)
    clock.now += 14.9
    assert store.get(MERGER).live(clock.now)  # type: ignore[union-attr]
    clock.now += 0.1  # one lease term (15 s) since the worker was last heard from
    assert not store.get(MERGER).live(clock.now)  # type: ignore[union-attr]
    assert store.list_leases(live_only=True) == []

    taken = store.acquire(MERGER, b, HEAD)  # taken over long before the 600 s term
    assert taken.epoch == merger.epoch + 1
    with pytest.raises(LeaseRefused) as refused:
        store.heartbeat(merger.claim)
    assert refused.value.code == "superseded"

    # A late sign of life does not revive the reviewer claim it lost while silent.
    store.worker_heartbeat(a)
    assert not store.get(REVIEWER).live(clock.now)  # type: ignore[union-attr]
    with pytest.raises(LeaseRefused):
        store.heartbeat(LeaseClaim(REVIEWER, a, 1))
    expired = {
        (e.target.role.value, e.reason)
        for e in store.history("gitea", "acme/api", 12)
        if e.event is LeaseEvent.EXPIRED
    }
    assert expired == {
        ("merger", "worker-heartbeat-lapsed"),
        ("reviewer", "worker-heartbeat-lapsed"),
    }


def test_a_heartbeating_worker_keeps_a_long_claim(store: LeaseStore, clock: FakeClock) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD, ttl_s=600)
    for _ in range(10):
        clock.now += 10
        store.worker_heartbeat(a)  # the worker is alive; the claim is not heartbeaten
    assert store.get(MERGER).live(clock.now)  # type: ignore[union-attr]
    with store.under(lease.claim):  # the fence passes: still the live claim
        pass


def test_fenced_writes_stop_when_the_worker_lapses(store: LeaseStore, clock: FakeClock) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD, ttl_s=600)
    clock.now += 15
    with pytest.raises(LeaseRefused) as refused, store.under(lease.claim):
        pass
    assert refused.value.code == "lease_not_held"


def test_lease_terms_are_bounded(store: LeaseStore) -> None:
    a = worker(store, "a")
    with pytest.raises(ValueError, match="max_lease_s"):
        store.acquire(MERGER, a, HEAD, ttl_s=901)
    assert store.acquire(MERGER, a, HEAD, ttl_s=900).ttl_s == 900
    with pytest.raises(ValidationError, match="max_lease_s"):
        LeaseSettings(max_lease_s=7200)
    with pytest.raises(ValidationError, match="max_lease_s"):
        LeaseSettings(max_lease_s=10)


# --- over HTTP ------------------------------------------------------------------------------

TARGET = {"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger"}


@pytest.fixture
async def server(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Running]:
    settings = make_settings(tmp_path / "data")
    async with running_server(settings, forges={}, clock=clock) as running:
        yield running


async def call(
    srv: Running, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with srv.http.request(method, srv.base + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


def history_path(pr: str, **extra: str) -> str:
    return "/api/v1/leases/history?" + urllib.parse.urlencode({"pr": pr, **extra})


async def test_history_over_http_names_the_token_and_reason(
    server: Running, clock: FakeClock
) -> None:
    token = server.token("lease,read", name="agent-ci")
    status, reg = await call(
        server, "POST", "/api/v1/workers", token,
        {"name": "agent", "client": "c", "session_id": "s", "role": "merger"},
    )  # fmt: skip
    assert status == 201
    me = reg["worker_identity"]
    status, lease = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": me, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 200
    claim = {**TARGET, "worker_identity": me, "epoch": lease["epoch"]}
    # The bot's own words are not a caller's to use.
    status, body = await call(
        server, "POST", "/api/v1/leases/release", token, {**claim, "reason": "merged"}
    )
    assert (status, body["error"]) == (400, "invalid_request")
    status, _ = await call(
        server, "POST", "/api/v1/leases/release", token, {**claim, "reason": "abandoned"}
    )
    assert status == 200

    status, body = await server.get(history_path("gitea:Acme/API#12"), token)
    assert status == 200, body
    assert body["pr"] == "gitea:acme/api#12"
    got = [(h["event"], h["reason"], h["actor"]) for h in body["history"]]
    assert got[0][0] == "granted" and got[-1][:2] == ("released", "abandoned")
    assert all("'agent-ci'" in actor for _, _, actor in got)
    assert body["history"][0]["at"] == "2027-01-15T08:00:00.000Z"  # the fake clock, in ISO

    # forge, repo and number work as well as pr=
    q = "/api/v1/leases/history?forge=gitea&repo=acme/api&number=12&role=merger"
    status, same = await server.get(q, token)
    assert status == 200 and same["history"] == body["history"]


async def test_history_refusals(server: Running) -> None:
    bound = server.token("read", repo="gitea:acme/api")
    status, _ = await server.get(history_path("gitea:ACME/api#12"), bound)
    assert status == 200  # another casing of the bound repository is the same repository
    status, body = await server.get(history_path("gitea:acme/other#12"), bound)
    assert (status, body["error"]) == (403, "repo_not_allowed")
    status, body = await server.get(history_path("github:acme/api#12"), bound)
    assert (status, body["error"]) == (403, "repo_not_allowed")
    status, body = await server.get(history_path("gitea:acme/api#12"), server.token("lease"))
    assert (status, body["error"]) == (403, "missing_scope")
    status, body = await server.get(history_path("gitea:acme/api#12"), None)
    assert status == 401
    reader = server.token("read")
    for bad in ("acme/api#12", "gitea:acme/api#x", "gitea:acme/api#12" + "9" * 400, ""):
        status, body = await server.get(history_path(bad), reader)
        assert (status, body["error"]) == (400, "invalid_request"), bad
    status, body = await server.get(history_path("gitea:acme/api#12", role="boss"), reader)
    assert (status, body["error"]) == (400, "invalid_request")


async def test_heartbeats_over_http_add_no_history_rows(server: Running, clock: FakeClock) -> None:
    token, lease = await hold_a_lease(server)
    claim = {**TARGET, "worker_identity": lease["holder"], "epoch": lease["epoch"]}
    with server.db.read() as tx:
        before = tx.one("SELECT count(*), sum(length(actor)) FROM lease_history")
    for _ in range(300):
        clock.now += 1
        status, body = await call(server, "POST", "/api/v1/leases/heartbeat", token, claim)
        assert status == 200, body
    with server.db.read() as tx:
        after = tx.one("SELECT count(*), sum(length(actor)) FROM lease_history")
    assert before is not None and after is not None and tuple(after) == tuple(before)
    status, body = await server.get(history_path("gitea:acme/api#12"), token)
    assert status == 200, body
    (granted,) = body["history"]
    assert granted["event"] == "granted"
    assert granted["renewed_at"] == "2027-01-15T08:05:00.000Z"  # the 300th heartbeat


def test_migration_0018_keeps_an_old_trail_and_renews_its_live_grant(tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data").ensure()
    db = SQLiteDatabase(paths.db_file)
    try:
        for name, data in packaged_migrations():
            if name >= "0018":
                break
            install_migration(paths, name, data)
            apply_workflow_db_migration(
                name, paths=paths, access=DBAccess.READ_WRITE, applied_by="an earlier release",
                db=db, skip_if_applied=True, packaged=True,
            )  # fmt: skip
        with db.write() as tx:
            for event, at in [("granted", 10.0), ("renewed", 20.0), ("renewed", 30.0)]:
                tx.execute(
                    "INSERT INTO lease_history (forge, repo, number, role, event, holder, epoch,"
                    " head_sha, at) VALUES ('gitea', 'acme/api', 12, 'merger', ?, 'a', 1, ?, ?)",
                    (event, HEAD, at),
                )
    finally:
        db.close()
    db = open_store(paths)  # as the bot opens it at start: 0018 applies, without a snapshot
    try:
        applied = {e["file_name"][:4]: e for e in migration_log(db)}
        assert not applied["0018"]["destructive"] and applied["0018"]["backup_path"] is None
        with db.write() as tx:
            renewal = HistoryEntry(MERGER, LeaseEvent.RENEWED, "a", 1, HEAD, 40.0, expires_at=55.0)
            lease_history.renew(tx, renewal)  # the next heartbeat of the claim
            rows = tx.all("SELECT event, at, renewed_at, expires_at FROM lease_history ORDER BY id")
        assert [tuple(r) for r in rows] == [
            ("granted", 10.0, 40.0, 55.0),
            ("renewed", 20.0, None, None),
            ("renewed", 30.0, None, None),
        ]
    finally:
        db.close()


def test_an_acquire_and_a_release_write_few_pages(tmp_path: Path, clock: FakeClock) -> None:
    """Every page a lease change writes goes to the write-ahead log and is copied back at the
    next checkpoint, which the slowest acquires wait on: the history's row costs its table
    and two indexes (a PR's rows and their age), not five B-trees."""
    db = open_store(WorkflowPaths(tmp_path / "data"))
    assert isinstance(db, SQLiteDatabase)
    db.checkpointer.every = 10**9  # nothing copies the log back while it is measured
    store = LeaseStore.open(db, LeaseSettings(), clock=clock)
    try:
        conn = db._conn()
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        with db.read() as tx:
            indexes = {r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'index'"
                                              " AND tbl_name = 'lease_history'")}  # fmt: skip
        assert indexes == {"lease_history_by_claim", "lease_history_by_age"}
        me = worker(store, "solo")
        for _ in range(3):  # every page the cycle touches exists
            store.release(store.acquire(MERGER, me, HEAD).claim)
        wal = Path(f"{db.path}-wal")
        frame = 24 + int(conn.execute("PRAGMA page_size").fetchone()[0])
        acquired = released = 0
        for _ in range(20):
            before = wal.stat().st_size
            lease = store.acquire(MERGER, me, HEAD)
            middle = wal.stat().st_size
            store.release(lease.claim)
            acquired += middle - before
            released += wal.stat().st_size - middle
        # 9.6 and 8.5 pages with the history's five B-trees
        assert acquired / frame / 20 <= 7.5
        assert released / frame / 20 <= 6.5
    finally:
        store.close()
        db.close()
