"""``POST /api/v1/leases/watch`` and the ``watch_pr`` MCP tool: push, not poll.

A lease holder or waiter names its PR, its worker and the lease role, and is answered as soon
as something it must know changed: the head moved, a required check failed, the PR became
unmergeable, its lease is about to lapse (or was lost), or it was granted the lease it waited
for (see :mod:`reviewbot.core.pr_watch`). The call waits at most ``wait_s`` (capped at
:data:`~reviewbot.runtime.pr_watch.MAX_WAIT_S` by the server) and answers ``events`` (maybe
none) and a ``cursor``: passing it back in the next call tells only what changed since, so a
client that calls again at once misses nothing. Over MCP each event is also sent, the moment
it is found, as a progress notification on the call's own stream (``notifications/progress``
whose ``message`` is the event's JSON) to a client that asked for progress.

The scope is ``lease``, the worker must be the caller's own (``not_worker_owner``) and the
repository within the token's binding, as for every lease call. A watch is a sign of life of
its worker (it heartbeats the worker while it waits), so a waiter that watches keeps its
place in the lease's line. The cursor holds only the
caller's own lease (never another holder's epoch); a cursor that does not read is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import Field

from reviewbot.core.errors import Refused
from reviewbot.core.pr_watch import HeldLease, PrSnapshot, Subscriber
from reviewbot.runtime import pr_watch
from reviewbot.server.actions import _as_worker, database
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate
from reviewbot.server.body import read_model
from reviewbot.server.lease_bodies import TargetBody
from reviewbot.server.quota import held_open
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo

ROUTE = "/api/v1/leases/watch"
MAX_CURSOR_CHARS = 4096

Notify = Callable[[dict[str, Any]], Awaitable[None]]


class WatchBody(TargetBody):
    """The PR and role watched, by which worker, for how long, since which cursor."""

    worker_identity: str = Field(min_length=1, max_length=200)
    wait_s: float = Field(30.0, ge=0, le=pr_watch.MAX_WAIT_S)
    # How long before the lease lapses the worker is told (default: the renewal margin).
    warn_s: float | None = Field(None, ge=0, le=3600)
    # The head the worker works at: a different head is told at once as head_moved.
    head_sha: str | None = Field(None, min_length=4, max_length=64)
    cursor: str | None = Field(None, max_length=MAX_CURSOR_CHARS)


def encode_cursor(snapshot: PrSnapshot, worker: str) -> str:
    """The snapshot as the caller may hold it: only its own leases."""
    data = {
        "v": 1,
        "at": snapshot.at,
        "head": snapshot.head_sha,
        "failing": list(snapshot.failing),
        "mergeable": snapshot.mergeable,
        "mine": [[x.role, x.epoch, x.expires_at] for x in snapshot.leases if x.holder == worker],
    }
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def decode_cursor(text: str, worker: str) -> PrSnapshot:
    try:
        data = json.loads(base64.urlsafe_b64decode(text.encode()))
        mine = tuple(
            HeldLease(str(role), worker, int(epoch), float(expires))
            for role, epoch, expires in data["mine"][:4]
        )
        head = data["head"]
        mergeable = data["mergeable"]
        return PrSnapshot(
            at=float(data["at"]),
            head_sha=None if head is None else str(head)[:64],
            failing=tuple(str(name)[:200] for name in data["failing"][:50]),
            mergeable=mergeable if isinstance(mergeable, bool) else None,
            leases=mine,
        )
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError, OverflowError):
        # OverflowError: an epoch written Infinity (1e999) has no integer
        raise Refused(
            "cursor: not a cursor this server gave (pass the last answer's cursor, or none)",
            code="invalid_request",
        ) from None


async def watch_pr(
    service: Service, info: TokenInfo, body: WatchBody, notify: Notify | None = None
) -> dict[str, Any]:
    """Wait (bounded) until the caller's PR changes in a way its worker must know."""
    body, api = await _as_worker(service, info, body, "lease")
    if await database(service).run(api.leases.workers.get, body.worker_identity) is None:
        raise Refused(
            f"worker {body.worker_identity!r} is not registered: register_worker first",
            code="worker_unproven",
        )
    leases = service.settings.leases
    warn_s = body.warn_s if body.warn_s is not None else leases.lease_s - leases.renew_s
    sub = Subscriber(body.worker_identity, body.role.value, warn_s)
    before = (
        decode_cursor(body.cursor, sub.worker)
        if body.cursor is not None
        else PrSnapshot.unknown(body.head_sha)
    )

    async def on_event(event: Any) -> None:
        if notify is not None:
            await notify(event.to_json())

    with held_open(service, info):
        events, after = await pr_watch.watch(
            database(service),
            api.leases,
            api.leases.clock,
            (body.forge, body.repo, body.number),
            sub,
            before,
            wait_s=body.wait_s,
            on_event=on_event,
            # The watch is a sign of life of its worker, as a worker heartbeat is.
            keep_alive=lambda: database(service).run(api.leases.worker_heartbeat, sub.worker),
            keep_alive_s=min(leases.retry_s, leases.renew_s / 2),
        )
    return {
        "pr": f"{body.forge}:{body.repo}#{body.number}",
        "worker": sub.worker,
        "role": sub.role,
        "head_sha": after.head_sha,
        "events": [event.to_json() for event in events],
        "cursor": encode_cursor(after, sub.worker),
    }


async def api_watch(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, WatchBody)
    return web.json_response(await watch_pr(request.app[SERVICE], info, body))
