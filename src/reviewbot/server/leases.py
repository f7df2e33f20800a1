"""The worker, lease and merge API (``/api/v1/workers``, ``/leases``, ``/merges``).

Every call needs a bearer token with the scope the table in ``docs/leases.md`` names
(``lease``, ``read`` or ``merge``); a token bound to one repository may act only on that
repository. A refused lease also names ``holder`` and ``expires_at`` (the store's refusal
carries them; ``server/errors.py`` answers it), never the holder's epoch.

A worker identity belongs to the token that registered it: every call in a worker's name
(its heartbeat, lease acquire, heartbeat and release, and merges) from another token is
refused ``not_worker_owner`` before anything is read or written. The bot's own names
(``reviewbot``, ``reviewbot.*``) cannot be registered here.
"""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web

from reviewbot.core.clock import iso
from reviewbot.core.errors import Refused
from reviewbot.core.leases import Role, WorkerOwner, is_reserved_worker_name, lease_json
from reviewbot.runtime.merge.merger import MergeRequest
from reviewbot.server.app_keys import SERVICE, Handler
from reviewbot.server.auth import authenticate, bound_target, check_binding
from reviewbot.server.body import read_model
from reviewbot.server.errors import Conflict
from reviewbot.server.lease_bodies import (
    AcquireBody,
    ClaimBody,
    MergeBody,
    TargetBody,
    WorkerBody,
    WorkerHeartbeatBody,
)
from reviewbot.server.reads import query_number, query_repo
from reviewbot.service import MergeParts
from reviewbot.store import repositories
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.tokens import TokenInfo

B = TypeVar("B", bound=TargetBody | MergeBody)


def routes() -> list[tuple[str, str, Handler]]:
    """The lease and merge API: (method, path, handler)."""
    return [
        ("POST", "/api/v1/workers", api_register_worker),
        ("POST", "/api/v1/workers/heartbeat", api_worker_heartbeat),
        ("POST", "/api/v1/leases/acquire", api_acquire),
        ("POST", "/api/v1/leases/heartbeat", api_heartbeat),
        ("POST", "/api/v1/leases/release", api_release),
        ("GET", "/api/v1/leases", api_list_leases),
        ("POST", "/api/v1/merges", api_merge),
    ]


def _merge_parts(request: web.Request) -> MergeParts:
    parts = request.app[SERVICE].merge
    if parts is None:
        raise Refused("this server does not run the merge API", code="not_found")
    return parts


def _db(request: web.Request) -> SQLiteDatabase:
    db = request.app[SERVICE].db
    assert db is not None
    return db


async def _read_target(request: web.Request, model: type[B]) -> B:
    """A body naming a repository, under its current key: a renamed repository's old name
    is the same repository, so the same lease."""
    body = await read_model(request, model)
    db = _db(request)
    current = await db.run(repositories.resolve, db, body.forge, body.repo)
    body.repo = current
    return body


def _owner(info: TokenInfo) -> WorkerOwner:
    return WorkerOwner(info.id, None, info.name)


async def _check_owner(request: web.Request, info: TokenInfo, identity: str) -> None:
    """Refuse a call in the name of a worker that another caller registered."""
    api = _merge_parts(request)
    await _db(request).run(api.leases.check_owner, identity, _owner(info))


# --- workers -----------------------------------------------------------------------------


async def api_register_worker(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, WorkerBody)
    api = _merge_parts(request)
    if is_reserved_worker_name(body.name):
        raise Refused(
            f"worker name {body.name!r} is reserved for reviewbot's own workers",
            code="worker_name_reserved",
        )
    try:
        record = await _db(request).run(
            api.leases.register_worker,
            body.name,
            client=body.client,
            session_id=body.session_id,
            role=body.role,
            identity=body.worker_identity,
            owner=_owner(info),
        )
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return web.json_response(
        {
            "worker_identity": record.identity,
            "name": record.name,
            "role": record.role,
            "registered_at": iso(record.registered_at),
        },
        status=201,
    )


async def api_worker_heartbeat(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await read_model(request, WorkerHeartbeatBody)
    api = _merge_parts(request)
    await _check_owner(request, info, body.worker_identity)
    record = await _db(request).run(api.leases.worker_heartbeat, body.worker_identity)
    status = await _db(request).run(api.leases.worker_status, record.identity)
    return web.json_response(
        {
            "worker_identity": record.identity,
            "status": status.value,
            "heartbeat_at": iso(record.heartbeat_at),
        }
    )


# --- leases ------------------------------------------------------------------------------


async def api_acquire(request: web.Request) -> web.Response:
    info = await authenticate(request, "lease")
    body = await _read_target(request, AcquireBody)
    check_binding(info, body.forge, body.repo)
    api = _merge_parts(request)
    await _check_owner(request, info, body.worker_identity)
    try:
        lease = await _db(request).run(
            api.leases.acquire,
            body.target(),
            body.worker_identity,
            body.head_sha,
            ttl_s=body.ttl_s,
        )
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return web.json_response(lease_json(lease, api.leases.clock()))


async def _transition(request: web.Request, release: bool) -> web.Response:
    info = await authenticate(request, "lease")
    body = await _read_target(request, ClaimBody)
    check_binding(info, body.forge, body.repo)
    api = _merge_parts(request)
    await _check_owner(request, info, body.worker_identity)
    try:
        claim = body.claim()
        step = api.leases.release if release else api.leases.heartbeat
        lease = await _db(request).run(step, claim)
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return web.json_response(lease_json(lease, api.leases.clock()))


async def api_heartbeat(request: web.Request) -> web.Response:
    return await _transition(request, release=False)


async def api_release(request: web.Request) -> web.Response:
    return await _transition(request, release=True)


async def api_list_leases(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    q = request.query
    forge = q.get("forge") or None
    repo = query_repo(q.get("repo"))
    number = query_number(q.get("number") or None)
    role: Role | None = None
    if q.get("role"):
        try:
            role = Role(q["role"])
        except ValueError:
            raise Refused("role must be reviewer or merger", code="invalid_request") from None
    forge, repo = bound_target(info, forge, repo)
    live_only = q.get("live", "") in ("1", "true", "yes")
    api = _merge_parts(request)
    leases = await _db(request).run(
        lambda: api.leases.list_leases(
            forge=forge, repo=repo, number=number, role=role, live_only=live_only
        )
    )
    now = api.leases.clock()
    return web.json_response({"leases": [lease_json(lease, now) for lease in leases]})


# --- merges ------------------------------------------------------------------------------


async def api_merge(request: web.Request) -> web.Response:
    info = await authenticate(request, "merge")
    body = await _read_target(request, MergeBody)
    check_binding(info, body.forge, body.repo)
    api = _merge_parts(request)
    await _check_owner(request, info, body.worker_identity)
    try:
        merge_request = MergeRequest(
            body.forge,
            body.repo,
            body.number,
            body.head_sha,
            body.worker_identity,
            body.epoch,
            method=body.method,
        )
        merge_request.claim  # noqa: B018 - validates forge, repo and number
        outcome = await api.merger.merge(merge_request)
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    if not outcome.merged:
        extra = {k: v for k, v in outcome.to_json().items() if k not in ("error", "detail")}
        raise Conflict(outcome.detail, code=outcome.code or "refused", **extra)
    return web.json_response(outcome.to_json())
