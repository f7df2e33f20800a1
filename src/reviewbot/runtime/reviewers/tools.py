"""Session-scoped tools: the standard set and the dispatcher (the route is ``server/tools.py``).

A run registers its tools in its own session (:func:`run_tools`): ``query_workflow_db``,
``mutate_workflow_db`` and ``apply_workflow_db_migration`` bound to the run's DB access, and
``record_finding`` appending to the run's findings. A step of the run (an external
reviewer) calls them with its session token; the call resolves in the step's registry, then
in its run's, and nowhere else.

Every call is checked with the caller's own authority: the DB access used is the lower of
the caller's and the owner's, so a step granted ``read`` cannot write through its run's
``read-write`` tools, and an unrelated session never reaches another session's tools.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from reviewbot.config import Settings
from reviewbot.core.clock import Clock
from reviewbot.core.errors import Refused
from reviewbot.core.findings import Finding, Severity
from reviewbot.runtime.reviewers.findings import FindingModel
from reviewbot.runtime.reviewers.sessions import (
    Session,
    SessionError,
    SessionManager,
    SessionTokenInvalid,
    Tool,
    ToolCall,
)
from reviewbot.store.database import Database
from reviewbot.store.sessions import record_tool_call
from reviewbot.store.tokens import TokenInfo, lookup_token
from reviewbot.workflowdb.access import AccessDenied, DBAccess, api_token_access, parse_access
from reviewbot.workflowdb.migrations import (
    MAX_NAME_CHARS,
    MigrationError,
    apply_workflow_db_migration,
)
from reviewbot.workflowdb.paths import WorkflowPaths
from reviewbot.workflowdb.protected import ProtectedTable
from reviewbot.workflowdb.query import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_ROWS,
    MAX_SQL_CHARS,
    QueryFailed,
    QueryLimits,
    QueryRefused,
    mutate_workflow_db,
    query_workflow_db,
    run_bounded,
)

log = logging.getLogger(__name__)

DB_TOOLS = frozenset({"query_workflow_db", "mutate_workflow_db"})

JsonScalar = str | int | float | bool | None
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ToolRefused(Refused):
    """A call that did not run (or failed); ``code`` names why."""


@dataclass(frozen=True)
class ToolOutcome:
    tool: str
    session_id: str  # the caller
    owner_session_id: str  # whose registry held the tool
    result: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "session": self.session_id,
            "owner": self.owner_session_id,
            "result": self.result,
        }


# -- arguments (the HTTP boundary) ---------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _in_64_bits(params: list[JsonScalar]) -> list[JsonScalar]:
    # Both stores keep integers in 64 bits: a larger one is the caller's mistake, not a 500.
    for value in params:
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not (INT64_MIN <= value <= INT64_MAX)
        ):
            raise ValueError(f"integer parameter {value} is outside the 64-bit range")
    return params


class QueryArgs(_Args):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS)
    params: list[JsonScalar] = Field(default_factory=list, max_length=1000)
    max_rows: int = Field(DEFAULT_MAX_ROWS, ge=1, le=DEFAULT_MAX_ROWS)

    _params = field_validator("params")(_in_64_bits)


class MutateArgs(_Args):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS)
    params: list[JsonScalar] = Field(default_factory=list, max_length=1000)

    _params = field_validator("params")(_in_64_bits)


class MigrationArgs(_Args):
    file: str = Field(min_length=1, max_length=MAX_NAME_CHARS)  # a bare name in db/migrations/


class ToolRequest(BaseModel):
    """The body of ``POST /api/v1/tools/{name}``."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any] = Field(default_factory=dict)


def _parse(model: type[_Args] | type[FindingModel], arguments: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        raise ToolRefused(f"{where}: {err['msg']}", code="invalid_arguments") from None


# -- the standard tools --------------------------------------------------------------------


def _require_access(call: ToolCall, need: DBAccess, tool: str) -> None:
    """Refuse, naming the missing capability and whose it is (the route checks again)."""
    have = call.db_access
    if have >= need:
        return
    detail = (
        f"{tool} requires {need.label} DB access; "
        f"session {call.caller.id!r} has {have.label} DB access"
    )
    if call.owner.db_access < call.caller.db_access:
        detail += f" (bounded by its run {call.owner.id!r})"
    raise AccessDenied(detail)


def run_tools(
    paths: WorkflowPaths, sessions: SessionManager, limits: QueryLimits = DEFAULT_LIMITS
) -> list[Tool]:
    """The tools a run registers for itself (and its steps).

    Statements and migrations run on the bounded workflow-DB executor, never on the
    default thread pool the rest of the server shares.
    """

    async def query(call: ToolCall) -> Any:
        _require_access(call, DBAccess.READ, "query_workflow_db")
        args: QueryArgs = _parse(QueryArgs, call.arguments)
        result = await run_bounded(
            query_workflow_db,
            args.sql,
            args.params,
            paths=paths,
            access=call.db_access,
            max_rows=args.max_rows,
            limits=limits,
        )
        return result.as_dict()

    async def mutate(call: ToolCall) -> Any:
        _require_access(call, DBAccess.READ_WRITE, "mutate_workflow_db")
        args: MutateArgs = _parse(MutateArgs, call.arguments)
        result = await run_bounded(
            mutate_workflow_db,
            args.sql,
            args.params,
            paths=paths,
            access=call.db_access,
            limits=limits,
        )
        return result.as_dict()

    async def migrate(call: ToolCall) -> Any:
        _require_access(call, DBAccess.READ_WRITE, "apply_workflow_db_migration")
        args: MigrationArgs = _parse(MigrationArgs, call.arguments)
        result = await run_bounded(
            apply_workflow_db_migration,
            args.file,
            paths=paths,
            access=call.db_access,
            applied_by=f"session:{call.caller.id}",
        )
        return result.as_dict()

    async def record(call: ToolCall) -> Any:
        model: FindingModel = _parse(FindingModel, call.arguments)
        finding = Finding(
            model.path, model.line, model.message, Severity(model.severity), call.caller.id
        )
        count = sessions.record_finding(call.owner.run_id, finding)
        return {"recorded": True, "run": call.owner.run_id, "findings": count}

    return [
        Tool("query_workflow_db", query, "one SELECT / WITH / EXPLAIN or describe TABLE"),
        Tool("mutate_workflow_db", mutate, "one INSERT / UPDATE / DELETE"),
        Tool("apply_workflow_db_migration", migrate, "apply {file} from db/migrations/"),
        Tool("record_finding", record, "add {path, line, message, severity} to the run"),
    ]


# -- dispatching ---------------------------------------------------------------------------


class ToolDispatcher:
    """Resolves and runs a session's tool calls, and records each one when given a store."""

    def __init__(
        self,
        sessions: SessionManager,
        *,
        audit: Callable[[], Database | None] | None = None,
        now: Clock = time.time,
    ) -> None:
        """``audit`` returns the store calls are recorded in (``None``: not recorded); a
        callable, because a server opens its store only when it starts."""
        self.sessions = sessions
        self._audit = audit
        self._now = now

    def authenticate(self, token: str) -> Session:
        try:
            return self.sessions.authenticate(token)
        except SessionTokenInvalid as exc:
            raise ToolRefused(str(exc), code=exc.code) from None

    async def call(self, caller: Session, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Run tool ``name`` for ``caller``; every refusal is a :class:`ToolRefused`."""
        owner: Session | None = None
        try:
            try:
                tool, owner = self.sessions.resolve(caller, name)
                result = await tool.handler(ToolCall(caller, owner, arguments))
            except SessionError as exc:
                raise ToolRefused(str(exc), code=exc.code) from None
            except ProtectedTable as exc:  # names the bot table it reached for
                raise ToolRefused(str(exc), code="protected_table") from None
            except AccessDenied as exc:
                # Terminal and named: the detail says which access is missing.
                raise ToolRefused(str(exc), code="permission_denied") from None
            except QueryRefused as exc:
                raise ToolRefused(str(exc), code="statement_refused") from None
            except QueryFailed as exc:  # statement_failed, query_timeout, query_too_large
                raise ToolRefused(str(exc), code=exc.code) from None
            except MigrationError as exc:
                raise ToolRefused(str(exc), code="migration_refused") from None
        except ToolRefused as refusal:
            # A call no registry answered is charged to the run it was looked up in: the
            # caller's run (itself, or its parent), the owner it would have needed.
            owner_id = owner.id if owner is not None else caller.run_id
            log.warning(
                "tool call refused: tool=%s caller=%s owner=%s parent=%s code=%s detail=%s",
                name,
                caller.id,
                owner_id,
                caller.parent_id or "-",
                refusal.code,
                refusal.detail,
            )
            await self._record(caller, owner_id, name, refusal.code, refusal.detail)
            raise
        await self._record(caller, owner.id, name, "ok", "")
        return ToolOutcome(name, caller.id, owner.id, result)

    async def _record(
        self, caller: Session, owner_id: str, name: str, outcome: str, detail: str
    ) -> None:
        db = None if self._audit is None else self._audit()
        if db is None:
            return
        try:
            await db.run(
                record_tool_call,
                db,
                session_id=caller.id,
                owner_session_id=owner_id,
                run_id=caller.run_id,
                tool=name,
                outcome=outcome,
                detail=detail,
                called_at=self._now(),
            )
        except Exception:  # the call's own result stands; a lost audit row is logged
            log.exception("could not record the call of tool %r by %r", name, caller.id)


# -- API tokens as callers -------------------------------------------------------------


@dataclass(frozen=True)
class ApiTokenCallers:
    """Bearer API tokens as callers of the workflow-DB tools.

    A call made with an API token is a session of its own, opened for that one call with
    ``query_workflow_db`` and ``mutate_workflow_db`` registered for it and ended right after:
    it never reaches a run's registry. Its DB access comes from the token's scopes
    (``db:read`` -> read, ``db:write`` -> read-write), bounded by the server's own access;
    a repository-bound token is refused (:func:`~reviewbot.workflowdb.access.api_token_access`).
    """

    lookup: Callable[[str], Awaitable[TokenInfo | None]]
    paths: WorkflowPaths
    process_access: DBAccess
    limits: QueryLimits = field(default_factory=QueryLimits)

    def access_of(self, info: TokenInfo) -> DBAccess:
        return api_token_access(info.name, info.scopes, info.repo, self.process_access)


def api_token_callers(settings: Settings, db: Callable[[], Database | None]) -> ApiTokenCallers:
    """API-token callers for a server with these settings and this (lazily opened) store."""

    async def lookup(token: str) -> TokenInfo | None:
        store = db()
        return None if store is None else await store.run(lookup_token, store, token)

    return ApiTokenCallers(
        lookup,
        WorkflowPaths.from_settings(settings),
        parse_access(settings.db_access),
        QueryLimits(timeout_s=settings.query_timeout_s),
    )
