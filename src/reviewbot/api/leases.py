"""HTTP API of worker identities, leases and merges (``/api/v1/workers``, ``/leases``, ``/merges``).

Registered on the server by :func:`register_lease_api`. Every call needs a bearer token with
the scope the table in ``docs/leases.md`` names (``lease``, ``read`` or ``merge``); a token
bound to one repository may act only on that repository. Errors are
``{"error": CODE, "detail": TEXT}``; a refused lease also names ``holder``, ``epoch`` and
``expires_at``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from reviewbot.app import STATE, ApiError, authenticate, check_binding, query_repo
from reviewbot.config import Settings
from reviewbot.core.leases import (
    LeaseClaim,
    LeaseTarget,
    Role,
    iso,
    lease_json,
    refusal_view,
)
from reviewbot.core.models import repo_key
from reviewbot.runtime.automerge import AutoMerger
from reviewbot.runtime.merge import MergeError, Merger, MergeRequest
from reviewbot.store import repositories
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.leases import LeaseRefused, LeaseStore, UnknownWorker, WorkerExists
from reviewbot.store.merges import MergeStore

MAX_BODY = 16 * 1024
MERGER_NAME = "reviewbot.merger"


# --- bodies ------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class WorkerBody(_Body):
    name: str = Field(min_length=1, max_length=40)
    client: str = Field(min_length=1, max_length=200)
    session_id: str = Field(min_length=1, max_length=200)
    role: str = Field(min_length=1, max_length=200)
    # A client may mint its own identity (NAME-YYYYMMDDTHHMMSSZ-SHA); an existing one is 409.
    worker_identity: str | None = Field(None, max_length=200)


class WorkerHeartbeatBody(_Body):
    worker_identity: str = Field(min_length=1, max_length=200)


def _canonical_repo_key(value: str) -> str:
    # Any casing names the same repository: rules, leases and records use the key.
    return repo_key(value)


class TargetBody(_Body):
    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200)

    _canonical_repo = field_validator("repo")(_canonical_repo_key)
    number: int = Field(ge=1)
    role: Role

    def target(self) -> LeaseTarget:
        return LeaseTarget(self.forge, self.repo, self.number, self.role)


class AcquireBody(TargetBody):
    worker_identity: str = Field(min_length=1, max_length=200)
    head_sha: str = Field(min_length=4, max_length=64)
    ttl_s: float | None = None


class ClaimBody(TargetBody):
    worker_identity: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1)

    def claim(self) -> LeaseClaim:
        return LeaseClaim(self.target(), self.worker_identity, self.epoch)


class MergeBody(_Body):
    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200)

    _canonical_repo = field_validator("repo")(_canonical_repo_key)
    number: int = Field(ge=1)
    head_sha: str = Field(min_length=4, max_length=64)
    worker_identity: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1)
    method: str | None = None


M = TypeVar("M", bound=BaseModel)


async def _parse(request: web.Request, model: type[M]) -> M:
    length = request.content_length
    if length is not None and length > MAX_BODY:
        raise ApiError(413, "body_too_large", f"the body is larger than {MAX_BODY} bytes")
    body = await request.content.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise ApiError(413, "body_too_large", f"the body is larger than {MAX_BODY} bytes")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_request", f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "the body must be a JSON object")
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise ApiError(400, "invalid_request", f"{where}: {err['msg']}") from None
    forge, repo = getattr(parsed, "forge", None), getattr(parsed, "repo", None)
    if isinstance(forge, str) and isinstance(repo, str):
        # A renamed repository's old name is the same repository: the same lease.
        db = request.app[STATE].db
        if db is not None:
            current = await asyncio.to_thread(repositories.resolve, db, forge, repo)
            if current != repo:
                parsed = parsed.model_copy(update={"repo": current})
    return parsed


# --- JSON shapes -------------------------------------------------------------------------


def refusal_error(exc: LeaseRefused) -> ApiError:
    body = refusal_view(exc.refusal)
    extra = {k: v for k, v in body.items() if k not in ("error", "detail")}
    return ApiError(409, exc.code, str(exc), **extra)


# --- the server's parts -----------------------------------------------------------------


@dataclass
class LeaseApi:
    leases: LeaseStore
    merges: MergeStore
    merger: Merger
    automerge: AutoMerger
    worker: str  # this process's merger identity (automerge)


LEASE_API = web.AppKey("reviewbot_leases", LeaseApi)


def build_lease_api(
    settings: Settings,
    db: SQLiteDatabase,
    forges: Any,
    *,
    clock: Any = time.time,
    client: str = "reviewbot-serve",
) -> LeaseApi:
    """The lease store, the merge path and this process's automerger over one database."""
    import os

    from reviewbot.runtime.merge import standalone_pipeline

    leases = LeaseStore(db, settings.leases, clock=clock)
    merges = MergeStore(db, leases, clock)
    record = leases.register_worker(
        MERGER_NAME, client=client, session_id=f"pid-{os.getpid()}", role="merger"
    )
    pipeline = standalone_pipeline(settings, db, forges, leases, record.identity, clock)
    merger = Merger(
        settings, forges, leases, merges, clock=clock, state_comment=pipeline.sync_state_comment
    )
    automerge = AutoMerger(settings, forges, merger, leases, record.identity)
    return LeaseApi(leases, merges, merger, automerge, record.identity)


def register_lease_api(app: web.Application) -> None:
    """Add the routes, and build the parts once the server opened its store and forges."""
    app.router.add_post("/api/v1/workers", api_register_worker)
    app.router.add_post("/api/v1/workers/heartbeat", api_worker_heartbeat)
    app.router.add_post("/api/v1/leases/acquire", api_acquire)
    app.router.add_post("/api/v1/leases/heartbeat", api_heartbeat)
    app.router.add_post("/api/v1/leases/release", api_release)
    app.router.add_get("/api/v1/leases", api_list_leases)
    app.router.add_post("/api/v1/merges", api_merge)
    app.on_startup.append(_startup)
    app.on_cleanup.insert(0, _cleanup)


async def _startup(app: web.Application) -> None:
    st = app[STATE]
    assert st.db is not None
    parts = await asyncio.to_thread(build_lease_api, st.settings, st.db, st.forges)
    journal = st.journal

    async def re_review(forge: str, repo: str, number: int, head: str) -> object:
        """Queue the new head through the gate, like a sweep that found it."""
        from reviewbot.runtime.reconcile import sweep_delivery

        if journal is None:
            return False
        now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        return await journal.append(sweep_delivery(forge, repo, number, head, now))

    parts.merger.re_review = re_review
    app[LEASE_API] = parts


async def _cleanup(app: web.Application) -> None:
    parts = app.get(LEASE_API)
    if parts is not None:
        await parts.automerge.idle()
        parts.leases.close()


def join_review(app: web.Application, parts: Any) -> AutoMerger | None:
    """Called by the review service at its start: merges update the state comment through the
    review pipeline, and a posted approval wakes the automerger."""
    api = app.get(LEASE_API)
    if api is None:
        return None
    api.merger.state_comment = parts.pipeline.sync_state_comment
    if parts.drainer.on_finished is None:
        parts.drainer.on_finished = api.automerge.on_outbox_finished
    return api.automerge


def _api(request: web.Request) -> LeaseApi:
    return request.app[LEASE_API]


# --- workers -----------------------------------------------------------------------------


async def api_register_worker(request: web.Request) -> web.Response:
    authenticate(request, "lease")
    body = await _parse(request, WorkerBody)
    api = _api(request)
    try:
        record = await asyncio.to_thread(
            api.leases.register_worker,
            body.name,
            client=body.client,
            session_id=body.session_id,
            role=body.role,
            identity=body.worker_identity,
        )
    except WorkerExists as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
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
    authenticate(request, "lease")
    body = await _parse(request, WorkerHeartbeatBody)
    api = _api(request)
    try:
        record = await asyncio.to_thread(api.leases.worker_heartbeat, body.worker_identity)
    except UnknownWorker as exc:
        raise ApiError(404, exc.code, str(exc)) from None
    return web.json_response(
        {
            "worker_identity": record.identity,
            "status": api.leases.worker_status(record.identity).value,
            "heartbeat_at": iso(record.heartbeat_at),
        }
    )


# --- leases ------------------------------------------------------------------------------


async def api_acquire(request: web.Request) -> web.Response:
    info = authenticate(request, "lease")
    body = await _parse(request, AcquireBody)
    check_binding(info, body.forge, body.repo)
    api = _api(request)
    try:
        lease = await asyncio.to_thread(
            api.leases.acquire,
            body.target(),
            body.worker_identity,
            body.head_sha,
            ttl_s=body.ttl_s,
        )
    except LeaseRefused as exc:
        raise refusal_error(exc) from None
    except UnknownWorker as exc:
        raise ApiError(403, exc.code, str(exc)) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    return web.json_response(lease_json(lease, api.leases.clock()))


async def _transition(request: web.Request, release: bool) -> web.Response:
    info = authenticate(request, "lease")
    body = await _parse(request, ClaimBody)
    check_binding(info, body.forge, body.repo)
    api = _api(request)
    try:
        claim = body.claim()
        step = api.leases.release if release else api.leases.heartbeat
        lease = await asyncio.to_thread(step, claim)
    except LeaseRefused as exc:
        raise refusal_error(exc) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    return web.json_response(lease_json(lease, api.leases.clock()))


async def api_heartbeat(request: web.Request) -> web.Response:
    return await _transition(request, release=False)


async def api_release(request: web.Request) -> web.Response:
    return await _transition(request, release=True)


async def api_list_leases(request: web.Request) -> web.Response:
    info = authenticate(request, "read")
    q = request.query
    forge = q.get("forge") or None
    repo = query_repo(q.get("repo"))
    number: int | None = None
    if q.get("number"):
        if not q["number"].isdigit():
            raise ApiError(400, "invalid_request", f"number: {q['number']!r} is not a number")
        number = int(q["number"])
    role: Role | None = None
    if q.get("role"):
        try:
            role = Role(q["role"])
        except ValueError:
            raise ApiError(400, "invalid_request", "role must be reviewer or merger") from None
    if info.repo is not None:
        bound_forge, _, bound_repo = info.repo.partition(":")
        forge = forge or bound_forge
        repo = repo or query_repo(bound_repo)
        check_binding(info, forge, repo)
    live_only = q.get("live", "") in ("1", "true", "yes")
    api = _api(request)
    leases = await asyncio.to_thread(
        lambda: api.leases.list_leases(
            forge=forge, repo=repo, number=number, role=role, live_only=live_only
        )
    )
    now = api.leases.clock()
    return web.json_response({"leases": [lease_json(lease, now) for lease in leases]})


# --- merges ------------------------------------------------------------------------------


async def api_merge(request: web.Request) -> web.Response:
    info = authenticate(request, "merge")
    body = await _parse(request, MergeBody)
    check_binding(info, body.forge, body.repo)
    api = _api(request)
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
    except MergeError as exc:
        raise ApiError(exc.status, exc.code, exc.detail) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    if not outcome.merged:
        extra = {k: v for k, v in outcome.to_json().items() if k not in ("error", "detail")}
        raise ApiError(409, outcome.code or "refused", outcome.detail, **extra)
    return web.json_response(outcome.to_json())
