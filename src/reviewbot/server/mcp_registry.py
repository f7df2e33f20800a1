"""The MCP entry path's machinery: who calls, which tools exist, and how a call runs.

A tool is one registration (``mcp_tools.py``)::

    @TOOLS.tool(scope="read", input=LeaseQuery, output=LeaseList, example={"repo": "acme/api"})
    async def list_leases(env: ToolEnv, info: TokenInfo, args: LeaseQuery) -> dict[str, Any]:
        \"\"\"What the tool does (its MCP description).\"\"\"
        return await actions.list_leases(env.service, info, args)

It needs a token holding ``scope``, validates its arguments with ``input`` (the same pydantic
model the HTTP route validates its body with), calls the shared action, and declares its
result as ``output``. The session tools (the workflow-DB tools, ``record_finding``) are not
registered here: they are resolved through the caller's session registry by the same
:class:`~reviewbot.runtime.reviewers.tools.ToolDispatcher` as ``POST /api/v1/tools/{name}``.

Every refusal is an MCP tool error (``isError``) whose text is ``CODE: detail`` and then the
HTTP error body ``{"error": CODE, "detail": TEXT, ...}`` as JSON, the same code the REST
route answers; it carries no structured content (``mcp_server.error_result``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
from pydantic import BaseModel

from reviewbot.core.errors import Refused
from reviewbot.core.quota import RouteClass
from reviewbot.runtime.reviewers.findings import FindingModel
from reviewbot.runtime.reviewers.sessions import Session, SessionError
from reviewbot.runtime.reviewers.tools import MigrationArgs, MutateArgs, QueryArgs
from reviewbot.server.auth import require_scope
from reviewbot.server.body import as_model
from reviewbot.server.mcp_schema import plain_text, pr_spellings, tool_schema
from reviewbot.server.quota import WRITE_SCOPES, admit, session_caller, token_caller
from reviewbot.server.tools import call_as_token, token_access_of
from reviewbot.service import Routes, Service
from reviewbot.store.tokens import TokenInfo
from reviewbot.workflowdb.access import DBAccess

M = TypeVar("M", bound=BaseModel)

# The session tools an MCP session may reach, with the models their arguments are checked
# by (the dispatcher checks them again): listed only for callers whose registry holds them.
SESSION_TOOLS: dict[str, tuple[type[BaseModel], str]] = {
    "query_workflow_db": (QueryArgs, "One SELECT / WITH / EXPLAIN (or `describe TABLE`)."),
    "mutate_workflow_db": (MutateArgs, "One INSERT / UPDATE / DELETE on a workflow table."),
    "apply_workflow_db_migration": (MigrationArgs, "Apply a file from db/migrations/."),
    "record_finding": (FindingModel, "Add a finding {path, line, message, severity}."),
}
SESSION_EXAMPLES: dict[str, dict[str, Any]] = {
    "query_workflow_db": {"sql": "SELECT body FROM notes LIMIT 5"},
    "mutate_workflow_db": {"sql": "INSERT INTO notes (body) VALUES (?)", "params": ["hi"]},
    "apply_workflow_db_migration": {"file": "site_0001_notes.sql"},
    "record_finding": {"path": "src/a.py", "line": 3, "message": "unused", "severity": "info"},
}
# The DB access each session tool needs (the tool checks it again when called).
SESSION_NEEDS = {
    "query_workflow_db": DBAccess.READ,
    "mutate_workflow_db": DBAccess.READ_WRITE,
    "apply_workflow_db_migration": DBAccess.READ_WRITE,
    "record_finding": DBAccess.NONE,
}
# What an API token's own call session holds (server/tools.py): never migrations.
TOKEN_DB_TOOLS = {"query_workflow_db": DBAccess.READ, "mutate_workflow_db": DBAccess.READ_WRITE}


@dataclass(frozen=True)
class Caller:
    """Who makes an MCP call: an API token, or an external reviewer's session."""

    entry: str  # "mcp-http" or "mcp-stdio"
    token: TokenInfo | None = None
    session: Session | None = None

    @property
    def name(self) -> str:
        if self.token is not None:
            return f"token:{self.token.name}"
        return f"session:{self.session.id}" if self.session is not None else "nobody"

    def token_with(self, scope: str) -> TokenInfo:
        """The caller's token; a session (which carries no scopes) is refused."""
        if self.token is None:
            raise Refused(
                f"this tool needs an API token with scope {scope!r}; a session token "
                "reaches only its session's tools",
                code="missing_scope",
                scope=scope,
            )
        return self.token


# Sends one JSON object to the client on the call's own stream (a progress notification).
Notify = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class ToolEnv:
    """What a tool runs with: ``notify`` tells the client something before the result, on
    the call's stream (``None`` when the client asked for no progress)."""

    service: Service
    caller: Caller
    notify: Notify | None = None


ToolFn = Callable[[ToolEnv, TokenInfo, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class McpTool:
    name: str
    scope: str | None  # the token scope the tool needs (None: any active token)
    input: type[BaseModel]
    output: type[BaseModel]
    run: ToolFn
    description: str
    example: dict[str, Any]
    # The route group of the tool's HTTP twin: a process of another role refuses the tool
    # as it refuses the route (NONE: every role serves it).
    group: Routes = Routes.NONE

    @property
    def needs(self) -> str:
        return f"Needs scope {self.scope!r}" if self.scope else "Needs any active API token"

    def definition(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            description=f"{plain_text(self.description)}\n\n{self.needs}. "
            f"Example arguments: {json.dumps(self.example)}",
            input_schema=tool_schema(self.input, self.example),
            output_schema=self.output.model_json_schema(),
        )


class Registry:
    """The MCP tools, by name. Adding a tool is one decorated function."""

    def __init__(self) -> None:
        self._tools: dict[str, McpTool] = {}

    def tool(
        self,
        *,
        scope: str | None,
        input: type[M],
        output: type[BaseModel],
        example: dict[str, Any],
        name: str | None = None,
        group: Routes = Routes.NONE,
    ) -> Callable[[Callable[[ToolEnv, TokenInfo, M], Awaitable[dict[str, Any]]]], ToolFn]:
        # A documented example that does not validate fails.
        input.model_validate(pr_spellings(input, example))

        def register(fn: Callable[[ToolEnv, TokenInfo, M], Awaitable[dict[str, Any]]]) -> ToolFn:
            tool_name = name or fn.__name__
            if tool_name in self._tools or tool_name in SESSION_TOOLS:
                raise ValueError(f"MCP tool {tool_name!r} is registered twice")
            doc = inspect.getdoc(fn) or ""
            self._tools[tool_name] = McpTool(
                tool_name, scope, input, output, fn, doc, example, group
            )
            return fn

        return register

    def get(self, name: str) -> McpTool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self._tools.values())


def _session_definition(name: str) -> types.Tool:
    model, text = SESSION_TOOLS[name]
    example = SESSION_EXAMPLES[name]
    return types.Tool(
        name=name,
        description=f"{plain_text(text)}\n\nA session tool: resolved in the caller's session, "
        f"then its run's, never elsewhere. Example arguments: {json.dumps(example)}",
        input_schema=tool_schema(model, example),
    )


# --- what a caller sees and may call -------------------------------------------------------


def served(service: Service, group: Routes) -> bool:
    return group in service.routes


def check_served(service: Service, group: Routes, name: str) -> None:
    """Refuse a tool whose HTTP twin this process's role answers ``wrong_role``."""
    if not served(service, group):
        raise Refused(
            f"this reviewbot process serves the {service.role_name} role; call {name} on a "
            f"process with --role {'ingest' if group is Routes.INGRESS else 'work'} or all",
            code="wrong_role",
        )


def visible_tools(registry: Registry, service: Service, caller: Caller) -> list[types.Tool]:
    """The tools this caller may call: its token's scopes, or its session's registry."""
    if caller.token is not None:
        info = caller.token
        shown = [
            t.definition()
            for t in registry
            if (t.scope is None or t.scope in info.scopes) and served(service, t.group)
        ]
        if not served(service, Routes.WORK):
            return shown
        if info.repo is None and service.api_tokens is not None:
            access = service.api_tokens.access_of(info)
            shown += [
                _session_definition(n) for n, need in TOKEN_DB_TOOLS.items() if access >= need
            ]
        return shown
    if caller.session is not None and served(service, Routes.WORK):
        names = []
        for name in SESSION_TOOLS:
            try:
                _, owner = service.sessions.resolve(caller.session, name)
            except SessionError:
                continue
            if min(caller.session.db_access, owner.db_access) >= SESSION_NEEDS[name]:
                names.append(name)
        return [_session_definition(n) for n in names]
    return []


def parse_args(model: type[M], arguments: dict[str, Any] | None) -> M:
    """Arguments validated by the body model of the HTTP route, the PR in either spelling;
    the first problem is named."""
    return as_model(model, pr_spellings(model, dict(arguments or {})), whole="arguments")


async def call_tool(
    registry: Registry, env: ToolEnv, name: str, arguments: dict[str, Any] | None
) -> dict[str, Any]:
    """Run one tool for the caller; every refusal is a :class:`ReviewbotError`."""
    tool = registry.get(name)
    if tool is not None:
        check_served(env.service, tool.group, name)
        info = env.caller.token_with(tool.scope or "read")
        if tool.scope is not None:
            require_scope(info, tool.scope)  # before the arguments, as a route before its body
            route = WRITE_SCOPES.get(tool.scope)
            if route is not None:  # a write: within the token's rate limit, as over REST
                admit(env.service, token_caller(info), route)
        args = parse_args(tool.input, arguments)
        result = await tool.run(env, info, args)
        return tool.output.model_validate(result).model_dump(mode="json", exclude_unset=True)
    # Any other name is a session tool, resolved like POST /api/v1/tools/{name}: a name that
    # no registry holds is refused as not owned.
    check_served(env.service, Routes.WORK, name[:100])
    dispatcher, caller = env.service.tools, env.caller
    assert dispatcher is not None
    if caller.session is not None:
        admit(env.service, session_caller(caller.session.id), RouteClass.TOOLS)
        outcome = await dispatcher.call(caller.session, name[:100], arguments or {})
    else:
        info = caller.token_with("db:read")
        api_tokens = env.service.api_tokens
        assert api_tokens is not None
        access = token_access_of(api_tokens, info)
        admit(env.service, token_caller(info), RouteClass.TOOLS)
        outcome = await call_as_token(
            dispatcher, api_tokens, info, access, name[:100], arguments or {}
        )
    return outcome.to_json()
