"""Push, not poll: a lease holder or waiter is told when its PR changes, over the long-poll
REST route ``POST /api/v1/leases/watch`` and over MCP (``watch_pr``, each event also sent as
a notification on the call's stream, received by the Python and the TypeScript SDK
clients). The real server, the simulator sending real webhooks, a real SQLite store."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

from tests.integration import ts_mcp_support as ts
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import REPO, World, set_check

FORGE = "gitea"


async def opened(w: World) -> Any:
    pr = w.sim.open_pr(FORGE, REPO, author="alice")
    set_check(w, FORGE, pr.head_sha, "pending")
    await w.sim.deliver_pull_request(FORGE, REPO, pr.number, action="opened")
    await w.settle()
    return pr


async def worker(w: World, token: str, name: str) -> str:
    status, body = await w.call(
        "POST",
        "/api/v1/workers",
        token,
        {"name": name, "client": "test", "session_id": name, "role": "merger"},
    )
    assert status == 201, body
    return str(body["worker_identity"])


def heartbeat_at(w: World, worker: str) -> float:
    with w.db.read() as tx:
        row = tx.one("SELECT heartbeat_at FROM workers WHERE identity = ?", (worker,))
    assert row is not None
    return float(row[0])


def target(pr: Any) -> dict[str, Any]:
    return {"forge": FORGE, "repo": REPO, "number": pr.number, "role": "merger"}


async def watch(w: World, token: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = await w.call("POST", "/api/v1/leases/watch", token, body)
    assert status == 200, answer
    return answer


def kinds(answer: dict[str, Any]) -> list[str]:
    return [e["event"] for e in answer["events"]]


async def test_the_long_poll_tells_each_change_once(world: World) -> None:
    w = world
    pr = await opened(w)
    token = w.token("lease,read")
    me = await worker(w, token, "watcher")
    status, lease = await w.call(
        "POST", "/api/v1/leases/acquire", token,
        {**target(pr), "worker_identity": me, "head_sha": pr.head_sha},
    )  # fmt: skip
    assert status == 200, lease
    base = {**target(pr), "worker_identity": me}
    old_head = pr.head_sha  # the simulator's PR object follows the pushes

    # The first look tells what is already true: the lease is held, and (asked to be told an
    # hour ahead) it lapses within that.
    first = await watch(w, token, {**base, "head_sha": pr.head_sha, "warn_s": 3600, "wait_s": 0})
    assert kinds(first) == ["lease_granted", "lease_expiring"]
    assert first["events"][0]["epoch"] == lease["epoch"] and first["head_sha"] == pr.head_sha
    heard = heartbeat_at(w, me)
    again = await watch(w, token, {**base, "cursor": first["cursor"], "wait_s": 0, "warn_s": 3600})
    assert again["events"] == []
    assert heartbeat_at(w, me) > heard  # a watch is a sign of life of its worker

    # Waiting: the head moves while the watch is held open; it answers with the move.
    async def push() -> str:
        await asyncio.sleep(0)  # the watch is open before anything changes
        new = w.sim.push(FORGE, REPO, pr.number)
        await w.sim.deliver_pull_request(FORGE, REPO, pr.number, action="synchronize")
        return new

    moved, new_head = await asyncio.gather(
        watch(w, token, {**base, "cursor": again["cursor"], "wait_s": 30}), push()
    )
    await w.settle()
    assert "head_moved" in kinds(moved), moved
    (event,) = [e for e in moved["events"] if e["event"] == "head_moved"]
    assert (event["old_head"], event["new_head"]) == (old_head, new_head)
    cursor = moved["cursor"]
    if "lease_lost" not in kinds(moved):  # the old head's lease may go in the same look
        cursor = (await watch(w, token, {**base, "cursor": cursor, "wait_s": 30}))["cursor"]

    # A required check fails at the new head: checks_red, once.
    status_ = set_check(w, FORGE, new_head, "failure")
    await w.sim.deliver_status(FORGE, REPO, status_.id)
    await w.settle()
    red = await watch(w, token, {**base, "cursor": cursor, "wait_s": 30})
    assert kinds(red) == ["checks_red"] and red["events"][0]["failing"] == ["ci/test"]

    # The forge reports the PR cannot be merged any more: unmergeable.
    w.sim.set_mergeable(FORGE, REPO, pr.number, False)
    await w.sim.deliver_pull_request(FORGE, REPO, pr.number, action="edited")
    await w.settle()
    unmergeable = await watch(w, token, {**base, "cursor": red["cursor"], "wait_s": 30})
    assert kinds(unmergeable) == ["unmergeable"]
    quiet = await watch(w, token, {**base, "cursor": unmergeable["cursor"], "wait_s": 0})
    assert quiet["events"] == []


async def test_a_waiter_is_told_it_holds_the_lease_over_mcp_with_both_clients(
    world: World,
) -> None:
    w = world
    pr = await opened(w)
    holder_token, waiter_token = w.token("lease,read"), w.token("lease,read")
    holder = await worker(w, holder_token, "holder")
    status, lease = await w.call(
        "POST", "/api/v1/leases/acquire", holder_token,
        {**target(pr), "worker_identity": holder, "head_sha": pr.head_sha},
    )  # fmt: skip
    assert status == 200
    for client_kind in ("python", "typescript"):
        waiter = await worker(w, waiter_token, f"waiter-{client_kind[:2]}")
        acquire = {**target(pr), "worker_identity": waiter, "head_sha": pr.head_sha}
        ask = {"pr": f"{FORGE}:{REPO}#{pr.number}", "role": "merger",
               "worker_identity": waiter, "wait_s": 30}  # fmt: skip

        hand_over = _hand_over(w, pr, (holder, holder_token), (waiter, waiter_token))
        notes: list[dict[str, Any]] = []
        if client_kind == "python":
            async with mcp_http(w.base, waiter_token) as client:
                held = refused(await client.call_tool("acquire_lease", _pr_args(acquire)))
                assert held[0] == "lease_held"
                # First look: nothing for the waiter yet; its cursor says so.
                first = ok(await client.call_tool("watch_pr", {**ask, "wait_s": 0}))
                assert first["events"] == []

                progress = _collect(notes)
                result, _ = await asyncio.gather(
                    client.call_tool(
                        "watch_pr",
                        {**ask, "cursor": first["cursor"]},
                        progress_callback=progress,
                    ),
                    hand_over(lease["epoch"]),
                )
                answer = ok(result)
        else:
            async with ts.ts_http(w.base, waiter_token) as client:
                assert ts.refused(await client.call("acquire_lease", _pr_args(acquire)))[0] == (
                    "lease_held"
                )
                first = ts.ok(await client.call("watch_pr", {**ask, "wait_s": 0}))
                assert first["events"] == []
                answered, _ = await asyncio.gather(
                    client.call("watch_pr", {**ask, "cursor": first["cursor"]}, progress=True),
                    hand_over(lease["epoch"]),
                )
                answer = ts.ok(answered)
                notes = [
                    json.loads(n["params"]["message"])
                    for n in client.notifications
                    if n["method"] == "notifications/progress"
                ]
        assert [e["event"] for e in answer["events"]] == ["lease_granted"], answer
        # The same event came first as a notification on the call's stream.
        assert notes == answer["events"], (client_kind, notes)
        # The waiter now holds it: hand it back for the next client.
        lease = {"epoch": answer["events"][0]["epoch"]}
        holder, holder_token, waiter_token = waiter, waiter_token, holder_token


def _hand_over(
    w: World, pr: Any, holder: tuple[str, str], waiter: tuple[str, str]
) -> Callable[[int], Awaitable[None]]:
    async def hand_over(epoch: int) -> None:
        # The holder releases; the waiter's worker becomes the holder.
        await asyncio.sleep(0)
        status, _ = await w.call(
            "POST", "/api/v1/leases/release", holder[1],
            {**target(pr), "worker_identity": holder[0], "epoch": epoch},
        )  # fmt: skip
        assert status == 200
        status, got = await w.call(
            "POST", "/api/v1/leases/acquire", waiter[1],
            {**target(pr), "worker_identity": waiter[0], "head_sha": pr.head_sha},
        )  # fmt: skip
        assert status == 200, got

    return hand_over


def _collect(
    notes: list[dict[str, Any]],
) -> Callable[[float, float | None, str | None], Awaitable[None]]:
    async def progress(_done: float, _total: float | None, message: str | None) -> None:
        notes.append(json.loads(message or "{}"))

    return progress


def _pr_args(body: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in body.items() if k not in ("forge", "repo", "number")}
    return {"pr": f"{body['forge']}:{body['repo']}#{body['number']}", **rest}


async def test_a_watch_is_refused_what_a_lease_call_is_refused(world: World) -> None:
    w = world
    pr = await opened(w)
    mine, theirs = w.token("lease,read"), w.token("lease,read")
    their_worker = await worker(w, theirs, "theirs")
    body = {**target(pr), "worker_identity": their_worker, "wait_s": 0}
    # Another token's worker: refused before anything is read.
    status, answer = await w.call("POST", "/api/v1/leases/watch", mine, body)
    assert (status, answer["error"]) == (403, "not_worker_owner")
    # A worker nobody registered is unproven: there is nothing to watch for.
    ghost = {**body, "worker_identity": their_worker.replace("theirs", "ghost")}
    status, answer = await w.call("POST", "/api/v1/leases/watch", mine, ghost)
    assert (status, answer["error"]) == (404, "worker_unproven")
    # Without the lease scope, or bound elsewhere (in any casing).
    status, answer = await w.call("POST", "/api/v1/leases/watch", w.token("read"), body)
    assert (status, answer["error"]) == (403, "missing_scope")
    bound = w.token("lease", repo=f"{FORGE}:acme/other")
    status, answer = await w.call(
        "POST", "/api/v1/leases/watch", bound, {**body, "repo": "ACME/Api"}
    )
    assert (status, answer["error"]) == (403, "repo_not_allowed")
    # A wait over the cap, a forged or huge cursor, unknown fields.
    for bad in (
        {"wait_s": 3600},
        {"wait_s": -1},
        {"cursor": "not-a-cursor"},
        {"cursor": "x" * 5000},
        {"epoch": 3},
    ):
        status, answer = await w.call("POST", "/api/v1/leases/watch", theirs, {**body, **bad})
        assert (status, answer["error"]) == (400, "invalid_request"), bad
    # The cursor never carries another holder's epoch.
    me = await worker(w, mine, "mine")
    status, lease = await w.call(
        "POST", "/api/v1/leases/acquire", theirs,
        {**target(pr), "worker_identity": their_worker, "head_sha": pr.head_sha},
    )  # fmt: skip
    answer = await watch(w, mine, {**target(pr), "worker_identity": me, "wait_s": 0})
    assert str(lease["epoch"]) not in json.dumps(
        json.loads(base64.urlsafe_b64decode(answer["cursor"]))["mine"]
    )
    assert answer["events"] == []


async def test_a_cursor_with_numbers_past_any_range_is_refused_not_a_failure(
    world: World,
) -> None:
    w = world
    pr = await opened(w)
    token = w.token("lease")
    me = await worker(w, token, "mine")
    body = {**target(pr), "worker_identity": me, "wait_s": 0}
    good = json.loads(base64.urlsafe_b64decode((await watch(w, token, body))["cursor"]))
    for mine in ([["merger", 1e999, 0]], [["merger", -1e999, 0]], [["merger", "NaN", 0]]):
        forged = json.dumps({**good, "mine": mine}).encode()  # 1e999 is written Infinity
        cursor = base64.urlsafe_b64encode(forged).decode()
        status, answer = await w.call(
            "POST", "/api/v1/leases/watch", token, {**body, "cursor": cursor}
        )
        assert (status, answer["error"]) == (400, "invalid_request"), (mine, answer)
        assert "cursor" in answer["detail"]
