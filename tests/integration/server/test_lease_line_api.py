"""The line of workers waiting for a lease, over the HTTP API of a real server (real SQLite,
loopback, the server's clock a FakeClock the test moves by hand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import LeaseSettings
from tests.integration.server.test_lease_api import TARGET, call, register
from tests.integration.server_support import WAIT_S, Running, make_settings, running_server
from tests.support.clock import FakeClock

HEAD = "a" * 40
BRANCH_SHA = "c" * 40


@pytest.fixture
async def clocked(tmp_path: Path) -> AsyncIterator[tuple[Running, FakeClock]]:
    clock = FakeClock()
    settings = make_settings(tmp_path / "data")  # lease_s 15, line_ttl_s = renew_s 10
    async with running_server(settings, forges={}, clock=clock) as running:
        yield running, clock


async def acquire(
    srv: Running, token: str, worker: str, **extra: Any
) -> tuple[int, dict[str, Any]]:
    body = {**TARGET, "worker_identity": worker, "head_sha": HEAD, **extra}
    return await call(srv, "POST", "/api/v1/leases/acquire", token, body)


async def release(srv: Running, token: str, worker: str, epoch: int) -> dict[str, Any]:
    claim = {**TARGET, "worker_identity": worker, "epoch": epoch}
    status, body = await call(srv, "POST", "/api/v1/leases/release", token, claim)
    assert status == 200, body
    return body


async def history(srv: Running, token: str) -> list[dict[str, Any]]:
    status, body = await srv.get("/api/v1/leases/history?pr=gitea:acme/api%2312", token)
    assert status == 200, body
    rows: list[dict[str, Any]] = body["history"]
    return rows


async def test_waiters_are_granted_in_arrival_order_when_the_holder_releases(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, _ = clocked
    token = srv.token("lease,read")
    a, b, c = [await register(srv, token, name) for name in ("a", "b", "c")]
    status, first = await acquire(srv, token, a)
    assert status == 200 and first["epoch"] == 1

    status, refused = await acquire(srv, token, b, wait_s=0)
    assert status == 409 and refused["error"] == "lease_held"
    assert (refused["holder"], refused["position"]) == (a, 1) and "1st in line" in refused["detail"]
    status, refused = await acquire(srv, token, c, wait_s=0)
    assert (status, refused["position"]) == (409, 2)
    # asking again keeps one's place and never moves one forward
    for _ in range(3):
        status, refused = await acquire(srv, token, c, wait_s=0)
        assert (status, refused["position"]) == (409, 2)
        status, refused = await acquire(srv, token, b, wait_s=0)
        assert (status, refused["position"]) == (409, 1)

    await release(srv, token, a, 1)  # the first waiter is granted in the same call
    status, plain = await acquire(srv, token, c)  # C cannot take it, with or without a wait
    assert (status, plain["error"], plain["holder"]) == (409, "lease_held", b)
    status, mine = await acquire(srv, token, b, wait_s=0)
    assert status == 200 and (mine["holder"], mine["epoch"]) == (b, 2)

    # C waits on the open call; B's release grants it while the call waits
    waiting = asyncio.create_task(acquire(srv, token, c, wait_s=20))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await release(srv, token, b, 2)
    status, granted = await asyncio.wait_for(waiting, WAIT_S)
    assert status == 200 and (granted["holder"], granted["epoch"]) == (c, 3)

    trail = [(r["event"], r["holder"], r["actor"]) for r in await history(srv, token)]
    assert [(e, h) for e, h, _ in trail] == [
        ("granted", a), ("released", a), ("granted", b), ("released", b), ("granted", c)
    ]  # fmt: skip
    assert trail[2][2] == "line"  # granted from the line, by the release


async def test_a_waiter_is_granted_when_the_holder_lapses_and_nobody_jumps_the_line(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, clock = clocked
    token = srv.token("lease,read")
    a, b, c = [await register(srv, token, name) for name in ("a", "b", "c")]
    assert (await acquire(srv, token, a))[0] == 200
    status, refused = await acquire(srv, token, b, wait_s=0)
    assert (status, refused["position"]) == (409, 1)

    clock.advance(8)  # B keeps its place by its worker's heartbeat alone
    status, _ = await call(srv, "POST", "/api/v1/workers/heartbeat", token, {"worker_identity": b})
    assert status == 200
    clock.advance(8)  # A, silent for 16 s, lapsed at 15 s

    status, plain = await acquire(srv, token, c)  # finds A lapsed: B is granted, not C
    assert (status, plain["error"], plain["holder"]) == (409, "lease_held", b)
    status, mine = await acquire(srv, token, b)
    assert status == 200 and (mine["holder"], mine["epoch"]) == (b, 2)
    events = [(r["event"], r["holder"]) for r in await history(srv, token)]
    assert events == [("granted", a), ("expired", a), ("takeover", b)]


async def test_a_silent_waiter_leaves_the_line_and_so_does_one_that_says_so(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, clock = clocked
    token = srv.token("lease,read")
    a, b, c, d = [await register(srv, token, name) for name in ("a", "b", "c", "d")]
    status, held = await acquire(srv, token, a, ttl_s=60)
    assert status == 200
    assert (await acquire(srv, token, b, wait_s=0))[1]["position"] == 1
    assert (await acquire(srv, token, c, wait_s=0))[1]["position"] == 2
    assert (await acquire(srv, token, d, wait_s=0))[1]["position"] == 3

    leave = {**TARGET, "worker_identity": d}
    status, left = await call(srv, "POST", "/api/v1/leases/leave", token, leave)
    assert status == 200 and left == {"worker_identity": d, "left": True}
    status, left = await call(srv, "POST", "/api/v1/leases/leave", token, leave)
    assert status == 200 and left["left"] is False

    clock.advance(6)
    claim = {**TARGET, "worker_identity": a, "epoch": held["epoch"]}
    assert (await call(srv, "POST", "/api/v1/leases/heartbeat", token, claim))[0] == 200
    assert (await acquire(srv, token, c, wait_s=0))[1]["position"] == 2
    clock.advance(5)  # B silent for 11 s (line_ttl_s 10): it has left; C is now first
    assert (await call(srv, "POST", "/api/v1/leases/heartbeat", token, claim))[0] == 200
    assert (await acquire(srv, token, c, wait_s=0))[1]["position"] == 1

    await release(srv, token, a, held["epoch"])
    status, mine = await acquire(srv, token, c)
    assert status == 200 and mine["holder"] == c
    status, refused = await acquire(srv, token, b, wait_s=0)  # B comes back: at the back
    assert (status, refused["holder"], refused["position"]) == (409, c, 1)


async def test_another_tokens_waiter_cannot_be_seen_or_moved(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, _ = clocked
    owner, other = srv.token("lease,read"), srv.token("lease,read")
    bound = srv.token("lease,read", repo="gitea:acme/other")
    a = await register(srv, owner, "a")
    b = await register(srv, owner, "b")
    mallory = await register(srv, other, "mallory")
    assert (await acquire(srv, owner, a))[0] == 200
    assert (await acquire(srv, owner, b, wait_s=0))[1]["position"] == 1

    # another token can neither poll, refresh nor withdraw B's place
    status, refused = await acquire(srv, other, b, wait_s=0)
    assert (status, refused["error"]) == (403, "not_worker_owner")
    status, refused = await call(
        srv, "POST", "/api/v1/leases/leave", other, {**TARGET, "worker_identity": b}
    )
    assert (status, refused["error"]) == (403, "not_worker_owner")
    status, refused = await call(
        srv, "POST", "/api/v1/leases/leave", bound, {**TARGET, "worker_identity": b}
    )
    assert (status, refused["error"]) == (403, "repo_not_allowed")
    # other casing is the same line
    status, refused = await acquire(srv, other, mallory, wait_s=0, repo="ACME/Api")
    assert (status, refused["position"]) == (409, 2)
    assert b not in refused["detail"] and "position" in refused
    # B is still first
    assert (await acquire(srv, owner, b, wait_s=0))[1]["position"] == 1


async def test_one_token_holds_at_most_four_waiting_calls_open(
    clocked: tuple[Running, FakeClock],
) -> None:
    """A waiting acquire looks at the store every few tenths of a second: one token may not
    hold hundreds of them (its lease bucket alone would allow a burst of 60, then 5 a
    second, each held up to max_wait_s). Watches and waits share the count."""
    srv, _ = clocked
    token, holder = srv.token("lease"), srv.token("lease")
    h = await register(srv, holder, "h")
    status, held = await acquire(srv, holder, h)
    assert status == 200
    waiters = [await register(srv, token, f"w{i}") for i in range(5)]
    calls = [asyncio.create_task(acquire(srv, token, w, wait_s=20)) for w in waiters[:4]]

    def in_line() -> int:
        with srv.db.read() as tx:
            row = tx.one("SELECT COUNT(*) FROM lease_waiters", ())
        assert row is not None
        return int(row[0])

    deadline = asyncio.get_running_loop().time() + WAIT_S  # a bound, never a speed check
    while in_line() < 4:  # each call counts itself open before it joins the line
        assert asyncio.get_running_loop().time() < deadline, "the waits did not start"
        await asyncio.sleep(0.02)
    # The fifth open call, a wait or a watch, is refused at once; a wait of 0 is not held.
    status, refused = await acquire(srv, token, waiters[4], wait_s=1)
    assert (status, refused["error"]) == (429, "rate_limited"), refused
    assert "4 waiting calls" in refused["detail"]
    watch = {**TARGET, "worker_identity": waiters[4], "wait_s": 1}
    status, refused = await call(srv, "POST", "/api/v1/leases/watch", token, watch)
    assert (status, refused["error"]) == (429, "rate_limited"), refused
    status, answer = await acquire(srv, token, waiters[4], wait_s=0)
    assert (status, answer["error"], answer["position"]) == (409, "lease_held", 5)
    # Another token is not held back by this one's open calls.
    other = srv.token("lease")
    theirs = await register(srv, other, "theirs")
    status, answer = await acquire(srv, other, theirs, wait_s=0.1)
    assert (status, answer["error"], answer["position"]) == (409, "lease_held", 6)
    # Each release grants the next waiter, whose open call answers; then its own release.
    await release(srv, holder, h, held["epoch"])
    while calls:
        done, _ = await asyncio.wait(calls, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
        assert done, "no waiting call answered"
        for task in done:
            calls.remove(task)
            status, lease = task.result()
            assert status == 200, lease
            await release(srv, token, lease["holder"], lease["epoch"])
    # With none open, the token waits again.
    status, answer = await acquire(srv, token, waiters[0], wait_s=0.1)
    assert (status, answer["error"]) == (409, "lease_held"), answer


async def test_malformed_leave_bodies_are_refused_not_a_server_failure(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, _ = clocked
    token = srv.token("lease")
    a = await register(srv, token, "a")
    leave = {**TARGET, "worker_identity": a}
    for extra, needle in (
        ({"forge": "NaN"}, "forge"),
        ({"forge": "gitlab"}, "forge"),
        ({"number": 2**64}, "number"),
        ({"number": -1}, "number"),
        ({"worker_identity": "w" * 1_000_000}, "body"),
        ({"role": ["merger"]}, "role"),
    ):
        status, refused = await call(srv, "POST", "/api/v1/leases/leave", token, {**leave, **extra})
        assert status in (400, 413) and needle in refused["detail"], (extra, refused)
    status, answer = await call(srv, "POST", "/api/v1/leases/leave", token, leave)
    assert (status, answer["left"]) == (200, False)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (31, "max_wait_s"),
        (-1, "wait_s"),
        (1e308, "max_wait_s"),
        ("soon", "wait_s"),
        ([1], "wait_s"),
    ],
)
async def test_huge_or_malformed_waits_are_refused(
    clocked: tuple[Running, FakeClock], value: Any, needle: str
) -> None:
    srv, _ = clocked
    token = srv.token("lease")
    a = await register(srv, token, "a")
    assert (await acquire(srv, token, a, wait_s=30))[0] == 200  # the largest wait is fine
    status, refused = await acquire(srv, token, a, wait_s=value)
    assert (status, refused["error"]) == (400, "invalid_request")
    assert needle in refused["detail"]


async def test_non_finite_waits_are_refused(clocked: tuple[Running, FakeClock]) -> None:
    srv, _ = clocked
    token = srv.token("lease")
    a = await register(srv, token, "a")
    assert (await acquire(srv, token, a, wait_s=0.5))[0] == 200  # a finite wait is fine
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        body = (
            b'{"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger",'
            b' "worker_identity": "' + a.encode() + b'", "head_sha": "' + HEAD.encode()
            + b'", "wait_s": ' + literal + b"}"
        )  # fmt: skip
        status, refused = await srv.post(
            "/api/v1/leases/acquire",
            body,
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert (status, refused["error"]) == (400, "invalid_request"), literal


async def test_a_lease_records_what_it_is_for_in_history_and_explain(
    clocked: tuple[Running, FakeClock],
) -> None:
    srv, _ = clocked
    token = srv.token("lease,read")
    a = await register(srv, token, "a")
    b = await register(srv, token, "b")
    details = {
        "target_branch": "main",
        "target_sha": BRANCH_SHA,
        "session_id": "run-981",
        "issue": "#7",
        "blocker": "waiting for ci/test",
    }
    status, lease = await acquire(srv, token, a, **details)
    assert status == 200 and {k: lease[k] for k in details} == details
    # a waiter's own details go with the grant it waited for
    assert (await acquire(srv, token, b, wait_s=0, issue="#8"))[0] == 409
    await release(srv, token, a, lease["epoch"])

    rows = await history(srv, token)
    assert {k: rows[0][k] for k in details} == details
    assert (rows[2]["holder"], rows[2]["issue"], rows[2]["target_branch"]) == (b, "#8", None)
    status, explained = await srv.get(
        "/api/v1/decisions?forge=gitea&repo=acme/api&number=12", token
    )
    assert status == 200
    assert {k: explained["lease_history"][0][k] for k in details} == details

    for bad, needle in (
        ({"target_sha": "abc"}, "target_sha"),
        ({"blocker": "x" * 201}, "blocker"),
        ({"issue": "a\nb"}, "issue"),
    ):
        status, refused = await acquire(srv, token, a, **bad)
        assert (status, refused["error"]) == (400, "invalid_request") and needle in refused[
            "detail"
        ]


def test_the_line_settings_are_checked() -> None:
    assert LeaseSettings().line_ttl_s == LeaseSettings().renew_s
    with pytest.raises(ValueError, match="line_ttl_s"):
        LeaseSettings(line_ttl_s=20)
    with pytest.raises(ValueError, match="max_wait_s"):
        LeaseSettings(max_wait_s=301)
