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
from reviewbot.core.lease_history import EndReason, LeaseEvent
from reviewbot.core.leases import LeaseClaim, LeaseTarget, Role
from reviewbot.store.leases import LeaseRefused, LeaseStore
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.server_support import Running, make_settings, running_server

HEAD = "a" * 40
NEW_HEAD = "b" * 40
MERGER = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
REVIEWER = LeaseTarget("gitea", "acme/api", 12, Role.REVIEWER)


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(workflow_paths: WorkflowPaths, clock: FakeClock) -> Iterator[LeaseStore]:
    db = open_store(workflow_paths)  # on both stores
    s = LeaseStore(db, LeaseSettings(), clock=clock)
    yield s
    s.close()
    db.close()


def worker(store: LeaseStore, name: str) -> str:
    return store.register_worker(name, client="t", session_id="s", role="merger").identity


def events(store: LeaseStore) -> list[tuple[str, str, int, str]]:
    return [
        (e.event.value, e.holder, e.epoch, e.reason) for e in store.history("gitea", "acme/api", 12)
    ]


def test_grant_renewal_release_with_reason_are_rows(store: LeaseStore, clock: FakeClock) -> None:
    a = worker(store, "a")
    lease = store.acquire(MERGER, a, HEAD, actor="token 'ci' (id 3)")
    clock.now += 5
    store.heartbeat(lease.claim, actor="token 'ci' (id 3)")
    store.release(lease.claim, reason=EndReason.MERGED, actor="reviewbot")
    assert events(store) == [
        ("granted", a, 1, ""),
        ("renewed", a, 1, ""),
        ("released", a, 1, "merged"),
    ]
    rows = store.history("gitea", "ACME/Api", 12)  # any casing: the same repository
    assert [r.actor for r in rows] == ["token 'ci' (id 3)", "token 'ci' (id 3)", "reviewbot"]
    assert [r.at for r in rows] == [clock.now - 5, clock.now, clock.now]
    assert rows[0].head_sha == HEAD and rows[0].expires_at == clock.now - 5 + 15


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
