"""The results of the MCP tools: the JSON their shared functions (``actions.py``,
``read_actions.py``, ``pull_actions.py``) answer, declared as each tool's output schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Merged(_Out):
    merged: bool
    head_sha: str | None = None
    merge_commit_sha: str | None = None
    already_merged: bool = False
    approvers: list[str] = Field(default_factory=list)


class LeftLine(_Out):
    """Whether a worker was in the line it left (``leave_lease_line``)."""

    worker_identity: str
    left: bool


class StateLease(_Out):
    role: str
    holder: str
    phase: str
    head_sha: str
    expires_at: str


class CanonicalState(_Out):
    """The fields of the state comment's ``reviewbot-state`` block, in its key order."""

    pr: str
    state: str
    who_is_next: str
    next_action: str
    head_sha: str
    review_status: str
    merge_ready: bool
    next_prompt: str
    issue: str
    validation: str
    native_review_proof: str
    blockers: list[str]
    leases: list[StateLease]
    last_updated_by: str
    last_updated_at: str
    what_happened: str
    why: str
    queue: str = ""  # the merge-queue spot, while queued


class CapabilityBlocker(_Out):
    code: str
    detail: str
    next_action: str
    holder: str | None = None
    expires_at: str | None = None


class CapabilityAnswer(_Out):
    action: str
    pr: str
    worker: str | None
    head_sha: str
    allowed: bool
    codes: list[str]
    blockers: list[CapabilityBlocker]
    next_action: str


class HistoryEntry(_Out):
    forge: str
    repo: str
    number: int
    role: str
    event: str
    holder: str
    epoch: int
    head_sha: str | None
    at: str
    expires_at: str | None
    reason: str | None
    actor: str | None
    previous_holder: str | None
    renewed_at: str | None = None


class History(_Out):
    pr: str
    history: list[HistoryEntry]


class Runtime(_Out):
    version: str
    commit: str | None
    started_at: str
    schema_version: int | None
    last_migration: dict[str, Any] | None
    config_hash: str
    sandbox: dict[str, Any]
    code_changed: bool
    config_changed: bool | None
    restart_needed: bool
    reasons: list[str]
    schema_known: int
    mutations: str  # "refused" while a restart is needed: no review or merge by this process
    refusal_code: str | None


# --- the results of the lease, merge and review tools ---------------------------------------


class Queued(_Out):
    delivery_id: str
    status: str


class Worker(_Out):
    worker_identity: str
    name: str | None = None
    role: str | None = None
    registered_at: str | None = None
    status: str | None = None
    heartbeat_at: str | None = None


class Target(_Out):
    forge: str
    repo: str
    number: int
    role: str


class Lease(_Out):
    target: Target
    holder: str
    epoch: int
    head_sha: str | None
    phase: str
    expires_at: str
    expires_in_s: float


class Leases(_Out):
    leases: list[Lease]


class Explained(_Out):
    """A delivery (delivery_id, status, decisions, the reviews and merges it led to, its
    refusals) or a PR (decisions, reviews, merge, findings, lease_history, queue: its
    merge-queue events with their reason codes): what reviewbot explain prints, as
    GET /api/v1/deliveries/{id} and /decisions answer it."""

    decisions: list[dict[str, Any]] = Field(default_factory=list)


class PrState(_Out):
    pr: str
    state: str
    draft: bool
    head_sha: str
    leases: list[Lease]
    state_comment: str | None = None
    canonical: CanonicalState


class QueueEntryOut(_Out):
    """An entry of a merge queue."""

    number: int
    base: str
    head_sha: str
    state: str
    train: str


class QueueView(_Out):
    """A repository's merge queue: its entries and its cars in flight."""

    forge: str
    repo: str
    entries: list[dict[str, Any]]
    cars: list[dict[str, Any]]
    controls: dict[str, dict[str, Any]] = {}  # by base: paused, draining, set_by, set_at


class QueueControlOut(_Out):
    """A base branch's queue after a pause, resume or drain."""

    forge: str
    repo: str
    base: str
    paused: bool
    draining: bool
    set_by: str | None
    set_at: str | None


class QueueOverlap(_Out):
    number: int
    train: str
    shared: list[str]


class QueuePrediction(_Out):
    """What a planned change would meet in a base branch's merge queue."""

    forge: str
    repo: str
    base: str
    keys: list[str]
    serial: bool
    independent: bool
    overlaps: list[QueueOverlap]
    trains: list[str]
