"""The capability, lease-history and runtime reads, written once for every entry path.

Like ``actions.py``: the HTTP routes (``capability.py``, ``history.py``, ``runtime.py``) and
the MCP tools (``resolve_capability``, ``lease_history``, ``runtime``) call these with the
caller's token and a validated query. Each checks scope ``read`` and the token's repository
binding itself, before the forge or the trail is read, so nothing about another repository
leaks and an entry path cannot forget either check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.capability import Action
from reviewbot.core.errors import Refused
from reviewbot.core.leases import Role, WorkerOwner
from reviewbot.core.models import PullRef
from reviewbot.core.quota import RouteClass
from reviewbot.runtime.capability import Caller, read_capability
from reviewbot.runtime.lease_history import read_lease_history
from reviewbot.runtime.parity import RuntimeReport, compare
from reviewbot.server.actions import database, merge_parts
from reviewbot.server.auth import current_bound, require_scope
from reviewbot.server.quota import admit, token_caller
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo

MAX_HISTORY = 5000
PR_EXAMPLE = "gitea:acme/api#12"

_ACTIONS = {
    "review": Action.REVIEW,
    "reviewer": Action.REVIEW,
    "merge": Action.MERGE,
    "merger": Action.MERGE,
}


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class CapabilityQuery(_Query):
    """``GET /api/v1/capability`` and the ``resolve_capability`` tool."""

    pr: str = Field(min_length=1, max_length=300, description="FORGE:OWNER/REPO#N, any casing")
    role: Literal["review", "reviewer", "merge", "merger"]
    worker: str | None = Field(
        None, min_length=1, max_length=200, description="the worker identity that would act"
    )

    @field_validator("worker")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("1-200 printable characters")
        return value


class HistoryQuery(_Query):
    """``GET /api/v1/leases/history`` and the ``lease_history`` tool."""

    pr: str = Field(min_length=1, max_length=300, description="FORGE:OWNER/REPO#N, any casing")
    role: Role | None = None
    limit: int = Field(500, ge=1, description=f"at most this many rows (capped at {MAX_HISTORY})")


class RuntimeQuery(_Query):
    """``GET /api/v1/runtime`` and the ``runtime`` tool: no arguments."""


def parse_pr(text: str) -> PullRef:
    if len(text) > 300:
        raise Refused("pr: too long", code="invalid_request")
    try:
        return PullRef.parse(text)
    except ValueError as exc:
        raise Refused(f"pr: {exc}", code="invalid_request") from None


async def bound_pull(service: Service, info: TokenInfo, text: str) -> PullRef:
    """The named PR under its repository's current name, once the token may read it: a
    token bound to another repository (in any casing) is refused before anything is read."""
    require_scope(info, "read")
    pr = parse_pr(text)
    current = await current_bound(database(service), info, pr.forge, pr.full_name)
    owner, _, name = current.partition("/")
    return PullRef(pr.forge, owner, name, pr.number)


async def capability(service: Service, info: TokenInfo, query: CapabilityQuery) -> dict[str, Any]:
    """May this caller (and ``worker``) review or merge the PR now; every reason if not."""
    pr = await bound_pull(service, info, query.pr)
    admit(service, token_caller(info), RouteClass.FORGE_READS)  # it reads the forge live
    parts = merge_parts(service)
    answer = await read_capability(
        action=_ACTIONS[query.role],
        pr=pr,
        worker=query.worker,
        caller=Caller(frozenset(info.scopes), info.repo, WorkerOwner(info.id, None, info.name)),
        forges=service.forges,
        leases=parts.leases,
        settings=service.settings,
    )
    return answer.to_json()


async def lease_history(service: Service, info: TokenInfo, query: HistoryQuery) -> dict[str, Any]:
    """Every grant, renewal, release, expiry and takeover of the PR's leases, oldest first."""
    pr = await bound_pull(service, info, query.pr)
    leases = merge_parts(service).leases
    history = await leases.run(
        lambda: read_lease_history(leases, pr, role=query.role, limit=min(query.limit, MAX_HISTORY))
    )
    return history.to_json()


async def runtime(service: Service, info: TokenInfo) -> dict[str, Any]:
    """What runs, and whether it is what is on disk; the configuration itself is left out
    for a token bound to one repository (it names every repository)."""
    require_scope(info, "read")
    db, boot = service.db, service.boot
    if db is None or boot is None:
        raise Refused("this server keeps no runtime record", code="not_found")
    sandbox = service.external.sandbox.state.describe()

    async def compared() -> RuntimeReport:
        return await compare(boot, db, sandbox)

    # Callers asking while a comparison runs share it: a flood costs one at a time.
    reports = service.runtime_reports
    report = await (reports.get("runtime", compared) if reports is not None else compared())
    body = replace(report, sandbox=sandbox).to_json()
    if info.repo is not None:
        del body["config"]
    return body
