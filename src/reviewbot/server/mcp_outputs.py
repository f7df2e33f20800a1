"""The results of the MCP read tools over the canonical PR state, capability resolution,
lease history and runtime parity: the JSON their shared functions (``read_actions.py``,
``pull_actions.pr_state``) answer, declared as each tool's output schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


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
