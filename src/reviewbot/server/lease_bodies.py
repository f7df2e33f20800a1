"""The JSON bodies of the worker, lease and merge API (validated at the boundary)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewbot.core.lease_history import CALLER_RELEASE_REASONS, EndReason
from reviewbot.core.leases import (
    DETAIL_FIELDS,
    MAX_DETAIL,
    LeaseClaim,
    LeaseDetails,
    LeaseTarget,
    Role,
)
from reviewbot.core.models import MAX_NUMBER, repo_key


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class WorkerBody(_Body):
    name: str = Field(min_length=1, max_length=40)
    client: str = Field(min_length=1, max_length=200)
    session_id: str = Field(min_length=1, max_length=200)
    role: str = Field(min_length=1, max_length=200)
    # A client may mint its own identity (NAME-YYYYMMDDTHHMMSSZ-SHA); an existing one is 409.
    worker_identity: str | None = Field(None, max_length=200)


class WorkerHeartbeatBody(_Body):
    worker_identity: str = Field(min_length=1, max_length=200)


def _canonical_repo_key(value: str) -> str:
    # Any casing names the same repository: rules, leases and records use the key.
    return repo_key(value)


class TargetBody(_Body):
    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200)
    number: int = Field(ge=1, le=MAX_NUMBER)

    _canonical_repo = field_validator("repo")(_canonical_repo_key)
    role: Role

    def target(self) -> LeaseTarget:
        return LeaseTarget(self.forge, self.repo, self.number, self.role)


class AcquireBody(TargetBody):
    worker_identity: str = Field(min_length=1, max_length=200)
    head_sha: str = Field(min_length=4, max_length=64)
    ttl_s: float | None = None
    # Wait in the target's line up to this long (0: join it and answer the position at once);
    # at most leases.max_wait_s. None: no line, a held target is refused at once.
    wait_s: float | None = Field(None, allow_inf_nan=False)
    # What the claim is for (all optional), kept on the lease and its history.
    target_branch: str | None = Field(None, min_length=1, max_length=MAX_DETAIL)
    target_sha: str | None = Field(None, min_length=40, max_length=64)
    session_id: str | None = Field(None, min_length=1, max_length=MAX_DETAIL)
    issue: str | None = Field(None, min_length=1, max_length=MAX_DETAIL)
    blocker: str | None = Field(None, min_length=1, max_length=MAX_DETAIL)

    def details(self) -> LeaseDetails:
        """The declared details; ``ValueError`` names a malformed one."""
        return LeaseDetails(*(getattr(self, name) for name in DETAIL_FIELDS))


class LineBody(TargetBody):
    """A worker leaving a target's line (it stopped waiting)."""

    worker_identity: str = Field(min_length=1, max_length=200)


class ClaimBody(TargetBody):
    worker_identity: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1, le=MAX_NUMBER)
    # Why a release happens (kept in the lease history); only for /release.
    reason: str | None = Field(None, max_length=40)

    def claim(self) -> LeaseClaim:
        return LeaseClaim(self.target(), self.worker_identity, self.epoch)

    def release_reason(self) -> EndReason:
        """The declared reason; the bot's own words (``merged``...) are not a caller's."""
        if self.reason is None:
            return EndReason.MANUAL_RELEASE
        allowed = sorted(r.value for r in CALLER_RELEASE_REASONS)
        if self.reason not in allowed:
            raise ValueError(f"reason must be one of {', '.join(allowed)}, not {self.reason!r}")
        return EndReason(self.reason)


class MergeBody(_Body):
    forge: str = Field(min_length=1, max_length=20)
    repo: str = Field(min_length=3, max_length=200)
    number: int = Field(ge=1, le=MAX_NUMBER)

    _canonical_repo = field_validator("repo")(_canonical_repo_key)
    head_sha: str = Field(min_length=4, max_length=64)
    worker_identity: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1, le=MAX_NUMBER)
    method: str | None = None
