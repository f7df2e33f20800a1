"""Pause and drain of a merge queue, written once for the HTTP route, the MCP tool.

``POST /api/v1/queue/control`` (scope ``merge``) and the MCP tool ``queue_control``: pause or
resume, drain or stop draining one base branch's queue (:meth:`QueueDriver.set_control`).
The scope and the token's repository binding are checked before anything is read, under the
repository's current name.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.errors import Refused
from reviewbot.core.models import repo_key
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate
from reviewbot.server.body import read_model
from reviewbot.server.mcp_outputs import QueueControlOut
from reviewbot.server.mcp_registry import ToolEnv
from reviewbot.server.queue_actions import McpTool, bound_body, queue_driver
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo


class ControlBody(BaseModel):
    """Pause or resume, drain or stop draining one base branch's queue; a field left out
    keeps its value."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200, description="OWNER/NAME, any casing")
    base: str = Field(min_length=1, max_length=255, description="the base branch, e.g. main")
    paused: bool | None = Field(None, description="true: nothing is admitted, starts or lands")
    draining: bool | None = Field(None, description="true: no new admissions; the queued run on")

    @field_validator("repo")
    @classmethod
    def _canonical(cls, value: str) -> str:
        return repo_key(value)

    @field_validator("base")
    @classmethod
    def _branch(cls, value: str) -> str:
        if any(c.isspace() or ord(c) < 32 or c in "~^:?*[\\" for c in value) or ".." in value:
            raise ValueError("not a branch name")
        return value


async def control(service: Service, info: TokenInfo, body: ControlBody) -> dict[str, Any]:
    body = await bound_body(service, info, "merge", body)
    if body.paused is None and body.draining is None:
        raise Refused("give paused, draining or both", code="invalid_request")
    done = await queue_driver(service).set_control(
        body.forge,
        body.repo,
        body.base,
        paused=body.paused,
        draining=body.draining,
        actor=f"token {info.name}",
    )
    return {"forge": body.forge, "repo": body.repo, "base": body.base, **done.to_json()}


async def queue_control(env: ToolEnv, info: TokenInfo, args: ControlBody) -> dict[str, Any]:
    """Pause (nothing is admitted, no car starts, nothing lands) or resume one base
    branch's merge queue, or drain it (no new admissions; what is queued runs to the end).
    A field left out keeps its value; each change is in the queue's event log. Same as
    POST /api/v1/queue/control."""
    return await control(env.service, info, args)


MCP_TOOLS = (
    McpTool(
        queue_control,
        {
            "scope": "merge",
            "input": ControlBody,
            "output": QueueControlOut,
            "example": {"forge": "gitea", "repo": "acme/api", "base": "main", "paused": True},
        },
    ),
)


def routes() -> list[tuple[str, str, Any]]:
    return [("POST", "/api/v1/queue/control", api_control)]


async def api_control(request: web.Request) -> web.Response:
    info = await authenticate(request, "merge")
    body = await read_model(request, ControlBody)
    return web.json_response(await control(request.app[SERVICE], info, body))
