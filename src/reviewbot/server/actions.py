"""What each agent-facing call does, written once.

The HTTP routes (``leases.py``, ``entry.py``, ``reads.py``) and the MCP tools
(``mcp_tools.py``) both call these with the caller's token and a validated body, and answer
with the JSON returned. Each function checks the scope it needs and the token's repository
binding itself, so an entry path cannot forget either; a refusal is a
:class:`~reviewbot.core.errors.Refused` whose code every entry path reports unchanged.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.clock import iso
from reviewbot.core.errors import Refused
from reviewbot.core.leases import (
    Role,
    WorkerOwner,
    is_reserved_worker_name,
    lease_json,
)
from reviewbot.core.models import MAX_NUMBER, RepoRef, repo_key
from reviewbot.runtime.lease_line import acquire_lease as acquire_lease_in_line
from reviewbot.runtime.merge.merger import MergeRequest
from reviewbot.server.auth import bound_target, check_binding, require_scope
from reviewbot.server.errors import Conflict
from reviewbot.server.lease_bodies import (
    AcquireBody,
    ClaimBody,
    LineBody,
    MergeBody,
    WorkerBody,
    WorkerHeartbeatBody,
)
from reviewbot.server.quota import held_open
from reviewbot.service import MergeParts, Service
from reviewbot.store import repositories
from reviewbot.store.database import Database
from reviewbot.store.tokens import TokenInfo


class PullTarget(Protocol):
    """A body naming a repository (a lease target, a merge, a PR)."""

    forge: str
    repo: str


class WorkerCall(PullTarget, Protocol):
    """A body a worker sends about a pull (a lease, a merge)."""

    worker_identity: str


B = TypeVar("B", bound=PullTarget)
W = TypeVar("W", bound=WorkerCall)


class LeaseQuery(BaseModel):
    """Which leases to list (``GET /api/v1/leases`` query, the ``list_leases`` tool)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    forge: str | None = Field(None, max_length=20)
    repo: str | None = Field(None, max_length=200, description="OWNER/NAME, any casing")
    number: int | None = Field(None, ge=1, le=MAX_NUMBER)
    role: Role | None = None
    live: bool = False

    @field_validator("repo")
    @classmethod
    def _canonical(cls, value: str | None) -> str | None:
        return repo_key(value) if value else None


def merge_parts(service: Service) -> MergeParts:
    if service.merge is None:
        raise Refused("this server does not run the merge API", code="not_found")
    return service.merge


def database(service: Service) -> Database:
    assert service.db is not None
    return service.db


async def current_name(service: Service, body: B) -> B:
    """The body under the repository's current key: a renamed repository's old name is the
    same repository, so the same lease."""
    db = database(service)
    body.repo = await db.run(repositories.resolve, db, body.forge, body.repo)
    return body


def _owner(info: TokenInfo) -> WorkerOwner:
    return WorkerOwner(info.id, None, info.name)


async def _check_owner(service: Service, info: TokenInfo, identity: str) -> None:
    """Refuse a call in the name of a worker that another caller registered."""
    await database(service).run(
        merge_parts(service).leases.workers.check_owner, identity, _owner(info)
    )


async def _as_worker(
    service: Service, info: TokenInfo, body: W, scope: str
) -> tuple[W, MergeParts]:
    """What a worker's call about a pull must pass: the token's scope, the repository under
    its current name and within the token's binding, and a worker of the caller's own."""
    require_scope(info, scope)
    body = await current_name(service, body)
    check_binding(info, body.forge, body.repo)
    api = merge_parts(service)
    await _check_owner(service, info, body.worker_identity)
    return body, api


# --- workers -----------------------------------------------------------------------------


async def register_worker(service: Service, info: TokenInfo, body: WorkerBody) -> dict[str, Any]:
    require_scope(info, "lease")
    api = merge_parts(service)
    if is_reserved_worker_name(body.name):
        raise Refused(
            f"worker name {body.name!r} is reserved for reviewbot's own workers",
            code="worker_name_reserved",
        )
    try:
        record = await database(service).run(
            api.leases.workers.register,
            body.name,
            client=body.client,
            session_id=body.session_id,
            role=body.role,
            identity=body.worker_identity,
            owner=_owner(info),
        )
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return {
        "worker_identity": record.identity,
        "name": record.name,
        "role": record.role,
        "registered_at": iso(record.registered_at),
    }


async def worker_heartbeat(
    service: Service, info: TokenInfo, body: WorkerHeartbeatBody
) -> dict[str, Any]:
    require_scope(info, "lease")
    api = merge_parts(service)
    await _check_owner(service, info, body.worker_identity)
    db = database(service)
    record = await db.run(api.leases.worker_heartbeat, body.worker_identity)
    status = await db.run(api.leases.workers.status, record.identity)
    return {
        "worker_identity": record.identity,
        "status": status.value,
        "heartbeat_at": iso(record.heartbeat_at),
    }


# --- leases ------------------------------------------------------------------------------


async def acquire_lease(service: Service, info: TokenInfo, body: AcquireBody) -> dict[str, Any]:
    body, api = await _as_worker(service, info, body, "lease")
    try:
        repo = RepoRef.parse(body.repo, forge=body.forge)
    except ValueError:
        repo = None  # malformed: the store refuses it below, naming the field
    if repo is not None and service.settings.rules_for(repo) is None:
        # Every target ever granted keeps its epoch row for good (epochs are never reused):
        # only the bot's own repositories may have them.
        raise Refused(
            f"{body.forge}:{body.repo} has no [repos] table and there are no [defaults]: "
            "the bot holds no leases there",
            code="repo_not_configured",
        )
    leases = api.leases
    # A wait holds the call open: it counts among the calls the token holds open at once.
    held = held_open(service, info) if body.wait_s else contextlib.nullcontext()
    try:
        with held:
            lease = await acquire_lease_in_line(
                leases,
                body.target(),
                body.worker_identity,
                body.head_sha,
                wait_s=body.wait_s,
                ttl_s=body.ttl_s,
                actor=str(_owner(info)),
                details=body.details(),
            )
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return lease_json(lease, leases.clock())


async def leave_line(service: Service, info: TokenInfo, body: LineBody) -> dict[str, Any]:
    """The caller's worker stops waiting for the target: it leaves the line."""
    body, api = await _as_worker(service, info, body, "lease")
    try:
        target = body.target()
    except ValueError as exc:  # a forge no one has
        raise Refused(str(exc), code="invalid_request") from None
    left = await database(service).run(api.leases.leave_line, target, body.worker_identity)
    return {"worker_identity": body.worker_identity, "left": left}


async def transition_lease(
    service: Service, info: TokenInfo, body: ClaimBody, *, release: bool
) -> dict[str, Any]:
    """Renew (``release=False``) or release the caller's lease, fenced by its epoch."""
    body, api = await _as_worker(service, info, body, "lease")
    try:
        claim = body.claim()
        actor = str(_owner(info))  # the lease history names who did it
        if release:
            reason = body.release_reason()
            lease = await database(service).run(
                lambda: api.leases.release(claim, reason=reason, actor=actor)
            )
        else:
            lease = await database(service).run(lambda: api.leases.heartbeat(claim, actor=actor))
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    return lease_json(lease, api.leases.clock())


async def list_leases(service: Service, info: TokenInfo, query: LeaseQuery) -> dict[str, Any]:
    require_scope(info, "read")
    forge, repo = bound_target(info, query.forge, query.repo)
    api = merge_parts(service)
    leases = await database(service).run(
        lambda: api.leases.list_leases(
            forge=forge, repo=repo, number=query.number, role=query.role, live_only=query.live
        )
    )
    now = api.leases.clock()
    return {"leases": [lease_json(lease, now) for lease in leases]}


# --- merges ------------------------------------------------------------------------------


async def merge_pr(service: Service, info: TokenInfo, body: MergeBody) -> dict[str, Any]:
    body, api = await _as_worker(service, info, body, "merge")
    try:
        request = MergeRequest(
            body.forge,
            body.repo,
            body.number,
            body.head_sha,
            body.worker_identity,
            body.epoch,
            method=body.method,
        )
        request.claim  # noqa: B018 - validates forge, repo and number
        outcome = await api.merger.merge(request)
    except ValueError as exc:
        raise Refused(str(exc), code="invalid_request") from None
    if not outcome.merged:
        extra = {k: v for k, v in outcome.to_json().items() if k not in ("error", "detail")}
        raise Conflict(outcome.detail, code=outcome.code or "refused", **extra)
    return outcome.to_json()
