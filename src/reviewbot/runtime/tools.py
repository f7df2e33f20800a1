"""Session-scoped tools: the standard set, the dispatcher, and ``POST /api/v1/tools/{name}``.

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

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reviewbot.config import Settings
from reviewbot.core.findings import Finding, Severity
from reviewbot.runtime.reviewers import FindingModel
from reviewbot.runtime.sessions import (
    SESSION_TOKEN_PREFIX,
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

TOOLS_ROUTE = "/api/v1/tools/{name}"
DB_TOOLS = frozenset({"query_workflow_db", "mutate_workflow_db"})
MAX_TOOL_BODY_BYTES = 1024 * 1024
MAX_TOOL_NAME_CHARS = 100

JsonScalar = str | int | float | bool | None


class ToolRefused(Exception):
    """A call that did not run (or failed); ``code`` and ``status`` are its API error."""

    def __init__(self, code: str, status: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.status = status
        self.detail = detail


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


class QueryArgs(_Args):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS)
    params: list[JsonScalar] = Field(default_factory=list, max_length=1000)
    max_rows: int = Field(DEFAULT_MAX_ROWS, ge=1, le=DEFAULT_MAX_ROWS)


class MutateArgs(_Args):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS)
    params: list[JsonScalar] = Field(default_factory=list, max_length=1000)


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
        raise ToolRefused("invalid_arguments", 400, f"{where}: {err['msg']}") from None


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


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class ToolDispatcher:
    """Resolves and runs a session's tool calls, and records each one when given a store."""

    def __init__(
        self,
        sessions: SessionManager,
        *,
        audit: Callable[[], Database | None] | None = None,
        now: Callable[[], str] = _utc_now,
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
            raise ToolRefused(exc.code, exc.status, str(exc)) from None

    async def call(self, caller: Session, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Run tool ``name`` for ``caller``; every refusal is a :class:`ToolRefused`."""
        owner: Session | None = None
        try:
            try:
                tool, owner = self.sessions.resolve(caller, name)
                result = await tool.handler(ToolCall(caller, owner, arguments))
            except SessionError as exc:
                raise ToolRefused(exc.code, exc.status, str(exc)) from None
            except ProtectedTable as exc:  # names the bot table it reached for
                raise ToolRefused("protected_table", 403, str(exc)) from None
            except AccessDenied as exc:
                # Terminal and named: the detail says which access is missing.
                raise ToolRefused("permission_denied", 403, str(exc)) from None
            except QueryRefused as exc:
                raise ToolRefused("statement_refused", 400, str(exc)) from None
            except QueryFailed as exc:  # statement_failed, query_timeout, query_too_large
                raise ToolRefused(exc.code, 422, str(exc)) from None
            except MigrationError as exc:
                raise ToolRefused("migration_refused", 400, str(exc)) from None
        except ToolRefused as refusal:
            await self._record(caller, owner, name, refusal.code, refusal.detail)
            raise
        await self._record(caller, owner, name, "ok", "")
        return ToolOutcome(name, caller.id, owner.id, result)

    async def _record(
        self, caller: Session, owner: Session | None, name: str, outcome: str, detail: str
    ) -> None:
        db = None if self._audit is None else self._audit()
        if db is None:
            return
        try:
            await asyncio.to_thread(
                record_tool_call,
                db,
                session_id=caller.id,
                owner_session_id=None if owner is None else owner.id,
                run_id=caller.run_id,
                tool=name,
                outcome=outcome,
                detail=detail,
                called_at=self._now(),
            )
        except Exception:  # the call's own result stands; a lost audit row is logged
            log.exception("could not record the call of tool %r by %r", name, caller.id)


# -- HTTP ----------------------------------------------------------------------------------


def _error(status: int, code: str, detail: str) -> web.Response:
    return web.json_response({"error": code, "detail": detail}, status=status)


@dataclass(frozen=True)
class ApiTokenCallers:
    """Bearer API tokens as callers of the workflow-DB tools.

    A call made with an API token is a session of its own, opened for that one call with
    ``query_workflow_db`` and ``mutate_workflow_db`` registered for it and ended right after:
    it never reaches a run's registry. Its DB access comes from the token's scopes
    (``db:read`` -> read, ``db:write`` -> read-write), bounded by the server's own access;
    a repository-bound token is refused (:func:`~reviewbot.workflowdb.access.api_token_access`).
    """

    lookup: Callable[[str], TokenInfo | None]
    paths: WorkflowPaths
    process_access: DBAccess
    limits: QueryLimits = field(default_factory=QueryLimits)

    def access_of(self, info: TokenInfo) -> DBAccess:
        return api_token_access(info.name, info.scopes, info.repo, self.process_access)


def api_token_callers(settings: Settings, db: Callable[[], Database | None]) -> ApiTokenCallers:
    """API-token callers for a server with these settings and this (lazily opened) store."""

    def lookup(token: str) -> TokenInfo | None:
        store = db()
        return None if store is None else lookup_token(store, token)

    return ApiTokenCallers(
        lookup,
        WorkflowPaths.from_settings(settings),
        parse_access(settings.db_access),
        QueryLimits(timeout_s=settings.query_timeout_s),
    )


def _bearer(request: web.Request) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    token = value.strip()
    return token if scheme.lower() == "bearer" and token else None


def tool_handler(
    dispatcher: ToolDispatcher,
    *,
    api_tokens: ApiTokenCallers | None = None,
    max_body_bytes: int = MAX_TOOL_BODY_BYTES,
) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        token = _bearer(request)
        api_token: TokenInfo | None = None
        token_access = DBAccess.NONE
        caller: Session | None = None
        if token is not None and token.startswith(SESSION_TOKEN_PREFIX):
            try:
                caller = dispatcher.authenticate(token)
            except ToolRefused as refusal:
                return _error(refusal.status, refusal.code, refusal.detail)
        elif token is not None and api_tokens is not None:
            api_token = api_tokens.lookup(token)
            if api_token is None:
                return _error(401, "unauthorized", "unknown token")
            if not api_token.active:
                return _error(401, "unauthorized", f"token {api_token.name!r} was revoked")
            try:
                token_access = api_tokens.access_of(api_token)
            except AccessDenied as exc:  # bound to a repository: the tools cannot keep that
                return _error(403, "repo_not_allowed", str(exc))
        else:
            return _error(
                401,
                "unauthorized",
                "send Authorization: Bearer <session token> (REVIEWBOT_SESSION_TOKEN)"
                + (" or an API token with db:read / db:write" if api_tokens else ""),
            )
        # Any name: one that no registry holds is refused as not owned, like every other.
        name = request.match_info["name"][:MAX_TOOL_NAME_CHARS]
        if request.content_length is not None and request.content_length > max_body_bytes:
            return _error(413, "too_large", f"the body is larger than {max_body_bytes} bytes")
        raw = bytearray()
        try:
            # read() returns what has arrived so far, not the whole body: read to the end.
            while chunk := await request.content.read(64 * 1024):
                raw.extend(chunk)
                if len(raw) > max_body_bytes:
                    return _error(
                        413, "too_large", f"the body is larger than {max_body_bytes} bytes"
                    )
        except (ValueError, ConnectionError) as exc:
            return _error(400, "bad_body", f"cannot read the body: {exc}")
        try:
            body = ToolRequest.model_validate(json.loads(bytes(raw) or b"{}"))
        except (ValueError, ValidationError) as exc:
            text = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            return _error(400, "invalid_body", f'expected {{"arguments": {{...}}}}: {text}')
        if api_token is not None:
            assert api_tokens is not None
            sessions = dispatcher.sessions
            caller = sessions.open_run(
                f"token:{api_token.name}:{uuid.uuid4().hex[:12]}",
                db_access=token_access,
                tools=[
                    t
                    for t in run_tools(api_tokens.paths, sessions, api_tokens.limits)
                    if t.name in DB_TOOLS
                ],
            )
        assert caller is not None
        try:
            outcome = await dispatcher.call(caller, name, body.arguments)
        except ToolRefused as refusal:
            return _error(refusal.status, refusal.code, refusal.detail)
        finally:
            if api_token is not None:
                dispatcher.sessions.end(caller.id)
        return web.json_response(outcome.to_json())

    return handle


SESSIONS = web.AppKey("reviewbot.sessions", SessionManager)


def register_tool_routes(
    app: web.Application,
    *,
    sessions: SessionManager | None = None,
    audit: Callable[[], Database | None] | None = None,
    api_tokens: ApiTokenCallers | None = None,
    max_body_bytes: int = MAX_TOOL_BODY_BYTES,
) -> SessionManager:
    """Add ``POST /api/v1/tools/{name}`` to ``app``, answering for ``sessions``.

    The manager (a new one when not given) is also stored as ``app[SESSIONS]``: the code
    that starts runs in this server must open them in that same manager, or their tokens
    would be unknown here. With ``api_tokens``, bearer API tokens may call the workflow-DB
    tools too (see :class:`ApiTokenCallers`).
    """
    manager = sessions if sessions is not None else SessionManager()
    app[SESSIONS] = manager
    dispatcher = ToolDispatcher(manager, audit=audit)
    handler = tool_handler(dispatcher, api_tokens=api_tokens, max_body_bytes=max_body_bytes)
    app.router.add_post(TOOLS_ROUTE, handler)
    return manager
