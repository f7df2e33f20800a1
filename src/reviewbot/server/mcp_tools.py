"""The MCP tools: each one registration over the action its HTTP route calls (``actions.py``).

The inputs are the HTTP bodies' (or queries') models, so a value the REST route refuses is
refused here with the same code. The workflow-DB tools and ``record_finding`` are session
tools, listed and resolved by ``mcp_registry.py``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reviewbot.core.models import MAX_NUMBER
from reviewbot.ingress.api import ReviewRequestBody
from reviewbot.server import (
    actions,
    pr_watch,
    pull_actions,
    queue_actions,
    queue_control,
    read_actions,
    whoami,
)
from reviewbot.server.actions import LeaseQuery
from reviewbot.server.lease_bodies import (
    AcquireBody,
    ClaimBody,
    LineBody,
    MergeBody,
    WorkerBody,
    WorkerHeartbeatBody,
)
from reviewbot.server.mcp_outputs import (
    CapabilityAnswer,
    Explained,
    History,
    Lease,
    Leases,
    LeftLine,
    Merged,
    PrState,
    Queued,
    Runtime,
    Worker,
)
from reviewbot.server.mcp_registry import Registry, ToolEnv
from reviewbot.server.pull_actions import PullBody
from reviewbot.server.read_actions import CapabilityQuery, HistoryQuery, RuntimeQuery
from reviewbot.service import Routes
from reviewbot.store.tokens import TokenInfo

TOOLS = Registry()

HEAD = "3f2c1a9e0b7d4c5a6e8f9012345678901234abcd"
PR = read_actions.PR_EXAMPLE  # every tool that names a PR documents this one spelling
WORKER = "merger-bot-20260101T000000Z-1a2b3c4d"


class ExplainArgs(BaseModel):
    """A delivery id, or a PR (pr: FORGE:OWNER/REPO#N)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    delivery_id: str | None = Field(None, min_length=1, max_length=200)
    forge: str | None = Field(None, max_length=20)
    repo: str | None = Field(None, min_length=3, max_length=200)
    number: int | None = Field(None, ge=1, le=MAX_NUMBER)

    @model_validator(mode="after")
    def _one_subject(self) -> ExplainArgs:
        pull = (self.forge, self.repo, self.number)
        if (self.delivery_id is None) == all(v is None for v in pull):
            raise ValueError("name a delivery_id, or a PR as pr: FORGE:OWNER/REPO#N")
        if self.delivery_id is None and any(v is None for v in pull):
            raise ValueError("a PR needs forge, repo and number (or pr: FORGE:OWNER/REPO#N)")
        return self


# --- tools -----------------------------------------------------------------------------------


@TOOLS.tool(
    scope="review",
    group=Routes.INGRESS,  # POST /api/v1/reviews
    input=ReviewRequestBody,
    output=Queued,
    example={"pr": PR},
)
async def review_pr(env: ToolEnv, info: TokenInfo, args: ReviewRequestBody) -> dict[str, Any]:
    """Ask for a review of a PR (optionally pinned to head_sha). The request is journaled
    and gated like any delivery; explain with the returned delivery_id says what the
    gate decided and why."""
    return await pull_actions.request_review(env.service, info, args, source="mcp")


@TOOLS.tool(
    scope="read",
    input=ExplainArgs,
    output=Explained,
    example={"pr": PR},
)
async def explain(env: ToolEnv, info: TokenInfo, args: ExplainArgs) -> dict[str, Any]:
    """Why the bot did or did not act, as reviewbot explain prints it. For a PR (pr): every
    gate decision with all its reasons, the review verdicts, the merge, the external
    reviewers' findings and the lease history. For a delivery (delivery_id, also one the bot
    refused): its decisions, the reviews and merge it led to, and any refusal with its code."""
    if args.delivery_id is not None:
        return await pull_actions.explain_delivery(env.service, info, args.delivery_id)
    pull = PullBody(forge=args.forge or "", repo=args.repo or "", number=args.number or 0)
    return await pull_actions.explain_pull(env.service, info, pull.forge, pull.repo, pull.number)


@TOOLS.tool(
    scope="read",
    input=PullBody,
    output=PrState,
    example={"pr": PR},
)
async def pr_state(env: ToolEnv, info: TokenInfo, args: PullBody) -> dict[str, Any]:
    """The PR now: open, closed or merged, its head, its live leases and the state comment
    the bot keeps on it."""
    return await pull_actions.pr_state(env.service, info, args)


@TOOLS.tool(
    group=Routes.WORK,
    scope="lease",
    input=WorkerBody,
    output=Worker,
    example={"name": "merger-bot", "client": "my-agent", "session_id": "s-1", "role": "merger"},
)
async def register_worker(env: ToolEnv, info: TokenInfo, args: WorkerBody) -> dict[str, Any]:
    """Register a worker identity owned by this token; every lease and merge call names it.
    Only this token may act in its name."""
    return await actions.register_worker(env.service, info, args)


@TOOLS.tool(
    group=Routes.WORK,
    scope="lease",
    input=WorkerHeartbeatBody,
    output=Worker,
    example={"worker_identity": WORKER},
)
async def worker_heartbeat(
    env: ToolEnv, info: TokenInfo, args: WorkerHeartbeatBody
) -> dict[str, Any]:
    """Prove the worker is alive; a worker whose heartbeat lapsed is no longer live."""
    return await actions.worker_heartbeat(env.service, info, args)


@TOOLS.tool(
    group=Routes.WORK,
    scope="lease",
    input=AcquireBody,
    output=Lease,
    example={"pr": PR, "role": "merger", "worker_identity": WORKER, "head_sha": HEAD},
)
async def acquire_lease(env: ToolEnv, info: TokenInfo, args: AcquireBody) -> dict[str, Any]:
    """Take the reviewer or merger lease of a PR, pinned to head_sha. The answer's
    epoch fences every later call; a lease held by another live worker is refused
    lease_held with its holder and expiry, or with wait_s the worker waits in the PR's line
    (first come, first served; wait_s 0: join it and learn its position)."""
    return await actions.acquire_lease(env.service, info, args)


_CLAIM = {"pr": PR, "role": "merger", "worker_identity": WORKER, "epoch": 3}
_LINE = {k: v for k, v in _CLAIM.items() if k != "epoch"}


@TOOLS.tool(scope="lease", input=LineBody, output=LeftLine, example=_LINE, group=Routes.WORK)
async def leave_lease_line(env: ToolEnv, info: TokenInfo, args: LineBody) -> dict[str, Any]:
    """Stop waiting for a lease: the worker leaves the PR's line (left: it was in it)."""
    return await actions.leave_line(env.service, info, args)


@TOOLS.tool(scope="lease", input=ClaimBody, output=Lease, example=_CLAIM, group=Routes.WORK)
async def heartbeat_lease(env: ToolEnv, info: TokenInfo, args: ClaimBody) -> dict[str, Any]:
    """Renew the lease held at epoch; a superseded epoch is refused and writes nothing."""
    return await actions.transition_lease(env.service, info, args, release=False)


@TOOLS.tool(scope="lease", input=ClaimBody, output=Lease, example=_CLAIM, group=Routes.WORK)
async def release_lease(env: ToolEnv, info: TokenInfo, args: ClaimBody) -> dict[str, Any]:
    """Give the lease held at epoch back, so another worker may take it at once."""
    return await actions.transition_lease(env.service, info, args, release=True)


@TOOLS.tool(
    group=Routes.WORK,
    scope="merge",
    input=MergeBody,
    output=Merged,
    example={**{k: v for k, v in _CLAIM.items() if k != "role"}, "head_sha": HEAD},
)
async def merge_pr(env: ToolEnv, info: TokenInfo, args: MergeBody) -> dict[str, Any]:
    """Merge at exactly head_sha under the merger lease held at epoch. Refused
    (head_moved, not_approved, checks_not_green, superseded...) with every
    reason when the PR may not be merged at that head."""
    return await actions.merge_pr(env.service, info, args)


@TOOLS.tool(
    group=Routes.WORK,
    scope="read",
    input=LeaseQuery,
    output=Leases,
    example={"repo": "acme/api", "live": True},
)
async def list_leases(env: ToolEnv, info: TokenInfo, args: LeaseQuery) -> dict[str, Any]:
    """Leases, filtered by forge, repository, PR number and role (live for live only)."""
    return await actions.list_leases(env.service, info, args)


@TOOLS.tool(
    scope="read",
    input=CapabilityQuery,
    output=CapabilityAnswer,
    example={"pr": read_actions.PR_EXAMPLE, "role": "merge", "worker": WORKER},
)
async def resolve_capability(
    env: ToolEnv, info: TokenInfo, args: CapabilityQuery
) -> dict[str, Any]:
    """May this caller (and worker) review or merge the PR now? allowed, or every
    reason at once in blockers (scope, binding, a lease held by whom until when, head
    moved since approval, checks not green, not approved at this head, the author's own PR,
    closed or draft), each with its next_action. Same answer as GET /api/v1/capability."""
    return await read_actions.capability(env.service, info, args)


@TOOLS.tool(
    scope="read",
    input=HistoryQuery,
    output=History,
    example={"pr": read_actions.PR_EXAMPLE, "role": "merger"},
)
async def lease_history(env: ToolEnv, info: TokenInfo, args: HistoryQuery) -> dict[str, Any]:
    """The PR's lease audit trail, oldest first: every grant, renewal, release (with its
    reason), expiry and takeover, with the holder, epoch, head and the token or session that
    did it (actor). Same answer as GET /api/v1/leases/history."""
    return await read_actions.lease_history(env.service, info, args)


@TOOLS.tool(scope="read", input=RuntimeQuery, output=Runtime, example={})
async def runtime(env: ToolEnv, info: TokenInfo, args: RuntimeQuery) -> dict[str, Any]:
    """What is running: version and commit, schema version and last migration, the
    configuration's hash, start time, the sandbox state, and whether the code or the
    configuration on disk differs or the store's schema is newer than the code
    (restart_needed and its reasons), and whether this process reviews and merges
    (mutations; refused with restart_required until it restarts). Same answer as
    GET /api/v1/runtime (the configuration itself only to a token bound to no repository)."""
    return await read_actions.runtime(env.service, info)


@TOOLS.tool(scope=None, name="whoami", input=whoami.NoArgs, output=whoami.Identity, example={})
async def whoami_tool(env: ToolEnv, info: TokenInfo, args: whoami.NoArgs) -> dict[str, Any]:
    """Who this call is made as: the token's name, id, scopes and repository binding (repo,
    null for every repository), read from the store now, so a rescoped token answers its
    new scopes and a revoked one is refused. Takes no arguments: only the calling token is
    ever shown. Same answer as GET /api/v1/whoami."""
    return whoami.whoami(info)


class Watched(BaseModel):
    model_config = ConfigDict(extra="allow")

    pr: str
    worker: str
    role: str
    head_sha: str | None
    events: list[dict[str, Any]]
    cursor: str


@TOOLS.tool(
    group=Routes.WORK,
    scope="lease",
    input=pr_watch.WatchBody,
    output=Watched,
    example={"pr": PR, "role": "merger", "worker_identity": WORKER, "wait_s": 30},
)
async def watch_pr(env: ToolEnv, info: TokenInfo, args: pr_watch.WatchBody) -> dict[str, Any]:
    """Wait (at most wait_s, capped at 60) until your PR changes in a way your worker must
    know: head_moved, checks_red, unmergeable, lease_granted (the lease you waited for),
    lease_expiring, lease_lost. Each event is also sent at once as a progress notification
    (its message is the event's JSON) when you ask for progress. Pass the answer's cursor to
    the next call to be told only what changed since. Same as POST /api/v1/leases/watch."""
    return await pr_watch.watch_pr(env.service, info, args, env.notify)


# --- the merge queue: server/queue_actions.py, server/queue_control.py ----------------------

for _tool in (*queue_actions.MCP_TOOLS, *queue_control.MCP_TOOLS):
    TOOLS.tool(group=Routes.WORK, **_tool.registration)(_tool.fn)
