"""The merge queue's calls, written once for the HTTP routes and the MCP tools.

``POST /api/v1/queue/enqueue`` (scope ``merge``): admit a PR into the queue of its base branch,
at ``expect_head_sha`` when given (a moved head is refused ``head_moved``, 409); ``POST
/api/v1/queue/dequeue`` (scope ``merge``): take it out (``not_queued``, 404, when it is in
none); ``GET /api/v1/queue?forge=&repo=&base=`` (scope ``read``): the queue's entries and cars
in flight; ``POST /api/v1/queue/predict`` (scope ``read``): which queued PRs and trains of a
base branch a planned change to some files would overlap (pause and drain:
:mod:`reviewbot.server.queue_control`). Each call checks its scope and the token's
repository binding before anything is read, under the repository's current name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.errors import Refused
from reviewbot.core.leases import check_full_sha
from reviewbot.core.models import FORGES, repo_key
from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.queue.driver import QueueDriver
from reviewbot.runtime.queue.predict import MAX_FILES, MAX_PATH, prediction_json
from reviewbot.runtime.queue.predict import predict as predict_in_store
from reviewbot.server.actions import B, database, merge_parts
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import (
    authenticate,
    current_bound,
    require_scope,
)
from reviewbot.server.body import as_model, read_model
from reviewbot.server.mcp_outputs import QueueEntryOut, QueuePrediction, QueueView
from reviewbot.server.mcp_registry import ToolEnv
from reviewbot.server.pull_actions import PullBody
from reviewbot.server.read_actions import PR_EXAMPLE
from reviewbot.server.reads import query_repo
from reviewbot.service import Service
from reviewbot.store.tokens import TokenInfo


class EnqueueBody(PullBody):
    """A PR to admit, pinned to the head the caller expects (recommended)."""

    expect_head_sha: str | None = Field(None, max_length=64)
    priority: bool = False

    @field_validator("expect_head_sha")
    @classmethod
    def _full_sha(cls, value: str | None) -> str | None:
        return None if value is None else check_full_sha(value).lower()


class PredictBody(BaseModel):
    """A planned change: the repository, its base branch and the files it would touch."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200, description="OWNER/NAME, any casing")
    base: str = Field(min_length=1, max_length=255, description="the base branch, e.g. main")
    files: list[Annotated[str, Field(min_length=1, max_length=MAX_PATH)]] = Field(
        min_length=1, max_length=MAX_FILES, description="paths the change would touch"
    )

    @field_validator("repo")
    @classmethod
    def _canonical(cls, value: str) -> str:
        return repo_key(value)


MAX_PREDICT_BODY = 1024 * 1024  # 5000 paths of about 200 bytes


class QueueQuery(BaseModel):
    """A repository's queues (one base branch's when ``base`` is given)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200, description="OWNER/NAME, any casing")
    base: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("repo")
    @classmethod
    def _canonical(cls, value: str) -> str:
        return repo_key(value)


def queue_driver(service: Service) -> QueueDriver:
    queue = merge_parts(service).queue
    if queue is None:
        raise Refused("this server does not run the merge queue", code="not_found")
    return queue


async def bound_body(service: Service, info: TokenInfo, scope: str, body: B) -> B:
    require_scope(info, scope)
    body.repo = await current_bound(database(service), info, body.forge, body.repo)
    if body.forge not in service.forges:
        raise Refused(f"no {body.forge[:20]} connection is configured", code="unknown_forge")
    return body


async def enqueue(service: Service, info: TokenInfo, body: EnqueueBody) -> dict[str, Any]:
    body = await bound_body(service, info, "merge", body)
    done = await queue_driver(service).enqueue(
        body.forge,
        body.repo,
        body.number,
        expect_head_sha=body.expect_head_sha,
        priority=body.priority,
        actor=f"token {info.name}",
    )
    return {**done.entry.to_json(), "queued": True, "already": done.already}


async def dequeue(service: Service, info: TokenInfo, body: PullBody) -> dict[str, Any]:
    body = await bound_body(service, info, "merge", body)
    entry = await queue_driver(service).dequeue(
        body.forge,
        body.repo,
        body.number,
        ReasonCode.DEQUEUED,
        f"#{body.number} taken out of the queue by token {info.name}",
    )
    # The entry as it was, and what it is now.
    return {**entry.to_json(), "queued": False, "state": "left", "reason": ReasonCode.DEQUEUED}


async def status(service: Service, info: TokenInfo, query: QueueQuery) -> dict[str, Any]:
    require_scope(info, "read")
    db = database(service)
    forge = query.forge
    # Checked under the current name: a binding to a name the repository left reads nothing.
    query.repo = await current_bound(db, info, forge, query.repo)
    store = queue_driver(service).store
    entries = await db.run(store.entries, forge, query.repo, query.base)
    bases = sorted({e.base for e in entries} | ({query.base} if query.base else set()))
    cars = [c for base in bases for c in await db.run(store.cars, forge, query.repo, base)]
    controls = await db.run(store.controls, forge, query.repo)
    return {
        "forge": forge,
        "repo": query.repo,
        "entries": [e.to_json() for e in entries],
        "cars": [c.to_json() for c in cars],
        "controls": {
            base: c.to_json()
            for base, c in controls.items()
            if not query.base or base == query.base
        },
    }


async def predict(service: Service, info: TokenInfo, body: PredictBody) -> dict[str, Any]:
    require_scope(info, "read")
    if body.forge not in FORGES:
        raise Refused(f"forge: unknown forge {body.forge[:20]!r}", code="invalid_request")
    db = database(service)
    body.repo = await current_bound(db, info, body.forge, body.repo)
    store = queue_driver(service).store
    found = await db.run(
        predict_in_store, store, service.settings, body.forge, body.repo, body.base, body.files
    )
    return prediction_json(found, body.forge, body.repo, body.base)


# --- MCP: registered in mcp_tools.py ---------------------------------------------------------


async def queue_enqueue(env: ToolEnv, info: TokenInfo, args: EnqueueBody) -> dict[str, Any]:
    """Put the PR in the merge queue of its base branch, pinned to expect_head_sha: it
    lands (with the entries ahead, tested together) only at a commit its CI passed.
    Refused with every merge blocker, or head_moved when the head is not the one given."""
    return await enqueue(env.service, info, args)


async def queue_status(env: ToolEnv, info: TokenInfo, args: QueueQuery) -> dict[str, Any]:
    """A repository's merge queue: its entries (train, pinned head, strikes) and the cars
    in flight (composition, queue branch, tested commit, status)."""
    return await status(env.service, info, args)


async def queue_dequeue(env: ToolEnv, info: TokenInfo, args: PullBody) -> dict[str, Any]:
    """Take the PR out of its merge queue (reason dequeued); not_queued when it is in none."""
    return await dequeue(env.service, info, args)


async def queue_predict(env: ToolEnv, info: TokenInfo, args: PredictBody) -> dict[str, Any]:
    """Before writing code: which PRs queued for base (and which trains) a change to these
    files would overlap, by the repository's path groups and serial paths. keys: the areas
    the change touches; overlaps: each queued PR sharing one (number, train, shared keys);
    independent: it overlaps none and would ride a train of its own. Same answer as
    POST /api/v1/queue/predict."""
    return await predict(env.service, info, args)


@dataclass(frozen=True)
class McpTool:
    fn: Callable[[ToolEnv, TokenInfo, Any], Awaitable[dict[str, Any]]]
    registration: dict[str, Any]


_HEAD = "3f2c1a9e0b7d4c5a6e8f9012345678901234abcd"
MCP_TOOLS = (
    McpTool(
        queue_enqueue,
        {
            "scope": "merge",
            "input": EnqueueBody,
            "output": QueueEntryOut,
            "example": {"pr": PR_EXAMPLE, "expect_head_sha": _HEAD},
        },
    ),
    McpTool(
        queue_status,
        {
            "scope": "read",
            "input": QueueQuery,
            "output": QueueView,
            "example": {"forge": "gitea", "repo": "acme/api", "base": "main"},
        },
    ),
    McpTool(
        queue_dequeue,
        {
            "scope": "merge",
            "input": PullBody,
            "output": QueueEntryOut,
            "example": {"pr": PR_EXAMPLE},
        },
    ),
    McpTool(
        queue_predict,
        {
            "scope": "read",
            "input": PredictBody,
            "output": QueuePrediction,
            "example": {
                "forge": "gitea",
                "repo": "acme/api",
                "base": "main",
                "files": ["src/api/views.py"],
            },
        },
    ),
)


# --- HTTP ---------------------------------------------------------------------------------


def routes() -> list[tuple[str, str, Any]]:
    return [
        ("POST", "/api/v1/queue/enqueue", api_enqueue),
        ("POST", "/api/v1/queue/dequeue", api_dequeue),
        ("GET", "/api/v1/queue", api_status),
        ("POST", "/api/v1/queue/predict", api_predict),
    ]


async def api_enqueue(request: web.Request) -> web.Response:
    info = await authenticate(request, "merge")
    body = await read_model(request, EnqueueBody)
    return web.json_response(await enqueue(request.app[SERVICE], info, body))


async def api_dequeue(request: web.Request) -> web.Response:
    info = await authenticate(request, "merge")
    body = await read_model(request, PullBody)
    return web.json_response(await dequeue(request.app[SERVICE], info, body))


async def api_status(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    q = request.query
    query = as_model(
        QueueQuery,
        {
            "forge": q.get("forge", ""),
            "repo": query_repo(q.get("repo")) or "",
            "base": q.get("base") or None,
        },
        whole="query",
    )
    return web.json_response(await status(request.app[SERVICE], info, query))


async def api_predict(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    body = await read_model(request, PredictBody, MAX_PREDICT_BODY)
    return web.json_response(await predict(request.app[SERVICE], info, body))
