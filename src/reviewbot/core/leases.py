"""Leases with fencing epochs: the pure state machine.

A lease gives one worker the right to act on one target, a (forge, repo, PR number, role)
with role ``reviewer`` or ``merger``, for a head SHA, until it expires. Every operation is
a function of the current row (or ``None``), the target's epoch high-water mark, the
request, the time and the lease timing, and returns either the new row or a refusal. The
store runs each one inside a single write transaction and persists what it returns.

Rules:

- **Acquire**: a target that is free, released, expired or superseded is granted with
  ``epoch = max(row epoch, high-water mark) + 1``, so an epoch is never handed out twice,
  even after rows were deleted or the database was restored from an older backup (the
  store keeps the high-water mark where a restore cannot lower it). A live lease of another
  worker is refused with ``lease_held``, naming the holder and its expiry. The same worker
  asking again at the same head renews its lease (same epoch); at another head it gets a
  fresh epoch, because a pin to an old head must not carry forward.
- **Liveness is heartbeat freshness**: a claim is live while ``now < expires_at``; each
  heartbeat pushes the expiry one lease term ahead. A claim that lapsed can be taken over
  by anyone with a higher epoch, after which the old holder is ``superseded``. The holder's
  own heartbeat counts too: a worker silent for one lease term (``lease_s``) loses every
  claim at once, whatever term the claims asked for (:func:`with_worker_liveness`).
- **Terms are bounded**: a claim asks for at most ``max_lease_s`` (a setting, well under an
  hour), so a crashed holder strands a target for a bounded time.
- **Fencing**: heartbeat, release and every guarded write carry (holder, epoch) and are
  allowed only while exactly that claim is the live one. A lapsed claim is not revived: its
  holder acquires again and gets a new epoch.
- **A new head** supersedes a claim pinned to the old head (phase ``superseded``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from reviewbot.core.clock import iso
from reviewbot.core.models import FORGES, number_problem, repo_key
from reviewbot.core.reasons import ReasonCode

# The ceiling of the ``max_lease_s`` setting itself.
MAX_TTL_S = 3600.0
# The ceiling of the ``max_wait_s`` setting: one HTTP call never waits in line longer.
MAX_WAIT_S = 300.0
# Hyphens are allowed in names (``claude-opus-4``): an identity is parsed from the right.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
_IDENTITY = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,39})-(?P<ts>\d{8}T\d{6}Z)-[0-9a-f]{12}$"
)
# A full commit SHA (SHA-1 or SHA-256): a prefix could name another commit later.
_FULL_SHA = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
# The bot's own workers are ``reviewbot`` and ``reviewbot.*``; no caller may take such a name.
RESERVED_PREFIX = "reviewbot"
# The longest free text a lease records about its work (branch, session, issue, blocker).
MAX_DETAIL = 200


class Role(StrEnum):
    REVIEWER = "reviewer"
    MERGER = "merger"


class Phase(StrEnum):
    CLAIMED = "claimed"
    RELEASED = "released"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


class GrantKind(StrEnum):
    GRANTED = "granted"  # a new epoch on a free, released, expired or superseded target
    TAKEOVER = "takeover"  # a new epoch over another worker's lapsed claim
    RENEWED = "renewed"  # the same claim, its expiry pushed ahead
    RELEASED = "released"


class LeaseTiming(Protocol):
    """Lease term, renew deadline and retry period, in seconds.

    ``config.LeaseSettings`` is one, and refuses timings outside lease > renew > 1.2 x retry.
    """

    @property
    def lease_s(self) -> float: ...

    @property
    def renew_s(self) -> float: ...

    @property
    def retry_s(self) -> float: ...

    @property
    def max_lease_s(self) -> float: ...

    @property
    def line_ttl_s(self) -> float: ...

    @property
    def max_wait_s(self) -> float: ...


@dataclass(frozen=True)
class Timing:
    """A plain :class:`LeaseTiming`; ``DEFAULT_TIMING`` holds the defaults the settings use."""

    lease_s: float = 15.0
    renew_s: float = 10.0
    retry_s: float = 2.0
    max_lease_s: float = 900.0
    # A waiter silent this long has left the line; the longest wait one acquire may ask for.
    line_ttl_s: float = 10.0
    max_wait_s: float = 30.0


DEFAULT_TIMING = Timing()


@dataclass(frozen=True)
class LeaseTarget:
    forge: str
    repo: str  # OWNER/NAME
    number: int
    role: Role

    def __post_init__(self) -> None:
        if self.forge not in FORGES:
            raise ValueError(f"unknown forge {self.forge!r}")
        if self.repo != self.repo.strip():
            raise ValueError(f"repo must look like OWNER/NAME, not {self.repo!r}")
        try:
            # Any casing of a name is the same repository, so the same lease.
            object.__setattr__(self, "repo", repo_key(self.repo))
        except ValueError as exc:
            raise ValueError(f"repo must look like OWNER/NAME, not {self.repo!r} ({exc})") from None
        problem = number_problem(self.number)
        if problem is not None:
            raise ValueError(f"PR number: {problem}")
        object.__setattr__(self, "role", Role(self.role))

    def __str__(self) -> str:
        return f"{self.forge}:{self.repo}#{self.number}/{self.role.value}"


@dataclass(frozen=True)
class LeaseDetails:
    """What a claim is for, as its holder declares it (all optional): the branch its work
    targets and that branch's commit it starts from, the holder's session, the issue it
    works on and what blocks it. Shown in the lease, its history and ``explain``."""

    target_branch: str | None = None
    target_sha: str | None = None
    session_id: str | None = None
    issue: str | None = None
    blocker: str | None = None

    def __post_init__(self) -> None:
        for name in DETAIL_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if not value or len(value) > MAX_DETAIL or any(ord(c) < 32 for c in value):
                raise ValueError(f"{name} must be 1-{MAX_DETAIL} printable characters")
        if self.target_sha is not None:
            check_full_sha(self.target_sha, field="target_sha")

    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in DETAIL_FIELDS)

    def to_json(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in DETAIL_FIELDS}

    def words(self) -> str:
        """``branch=main@abc123def456 session=s-1 issue=#7 blocker=...`` (only what is set)."""
        parts: list[str] = []
        if self.target_branch is not None or self.target_sha is not None:
            at = "" if self.target_sha is None else f"@{self.target_sha[:12]}"
            parts.append(f"branch={self.target_branch or '?'}{at}")
        for name, label in (("session_id", "session"), ("issue", "issue"), ("blocker", "blocker")):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{label}={value}")
        return " ".join(parts)


DETAIL_FIELDS = ("target_branch", "target_sha", "session_id", "issue", "blocker")
NO_DETAILS = LeaseDetails()


@dataclass(frozen=True)
class Lease:
    target: LeaseTarget
    holder: str
    epoch: int
    head_sha: str
    phase: Phase
    ttl_s: float
    acquired_at: float
    heartbeat_at: float
    expires_at: float
    details: LeaseDetails = NO_DETAILS

    def live(self, now: float) -> bool:
        return self.phase is Phase.CLAIMED and now < self.expires_at

    def phase_at(self, now: float) -> Phase:
        """The phase as a reader should see it: a claim past its expiry is ``expired``."""
        if self.phase is Phase.CLAIMED and now >= self.expires_at:
            return Phase.EXPIRED
        return self.phase

    @property
    def claim(self) -> LeaseClaim:
        return LeaseClaim(self.target, self.holder, self.epoch)


@dataclass(frozen=True)
class AcquireRequest:
    target: LeaseTarget
    worker: str
    head_sha: str
    ttl_s: float | None = None  # None: the configured lease term
    details: LeaseDetails = NO_DETAILS


@dataclass(frozen=True)
class LeaseClaim:
    """What a holder presents for a heartbeat, a release or a guarded write."""

    target: LeaseTarget
    worker: str
    epoch: int


@dataclass(frozen=True)
class Granted:
    lease: Lease
    kind: GrantKind


@dataclass(frozen=True)
class Refused:
    """Why a lease call was refused. It names the holder and its expiry but never the
    holder's epoch: a refusal must not hand a caller what it would need to act as another."""

    code: ReasonCode  # LEASE_HELD, SUPERSEDED or LEASE_NOT_HELD
    detail: str
    holder: str | None = None
    expires_at: float | None = None
    position: int | None = None  # the caller's place in the target's line (1: next)


LeaseResult = Granted | Refused


def lease_term(timing: LeaseTiming, ttl_s: float | None) -> float:
    """The term of a new claim: the request's ``ttl_s`` or the configured lease term."""
    if ttl_s is None:
        return timing.lease_s
    # A term shorter than the retry period would lapse before a holder could renew it; a
    # longer one than max_lease_s is refused, never clamped, so the caller knows its term.
    if not (1.2 * timing.retry_s < ttl_s <= timing.max_lease_s):
        raise ValueError(
            f"ttl_s must be greater than {1.2 * timing.retry_s:g} and at most"
            f" {timing.max_lease_s:g} (max_lease_s), not {ttl_s:g}"
        )
    return ttl_s


def wait_term(timing: LeaseTiming, wait_s: float) -> float:
    """How long one acquire may wait in line: ``wait_s`` when it is 0 (join the line and
    answer the position) up to ``max_wait_s``; a longer or malformed wait is refused, never
    shortened, so a caller knows what it asked for."""
    if not (0 <= wait_s <= timing.max_wait_s):
        raise ValueError(
            f"wait_s must be between 0 and {timing.max_wait_s:g} (max_wait_s), not {wait_s:g}"
        )
    return wait_s


def worker_lapse_at(worker_heartbeat_at: float, timing: LeaseTiming) -> float:
    """When a worker last heard from at ``worker_heartbeat_at`` stops being live."""
    return worker_heartbeat_at + timing.lease_s


def with_worker_liveness(
    lease: Lease, worker_heartbeat_at: float | None, timing: LeaseTiming
) -> Lease:
    """``lease`` with its expiry brought forward to its holder's own lapse, if earlier.

    A claim is only as live as the worker holding it: a worker that stopped heartbeating
    (crashed, partitioned) loses all its claims one lease term after its last sign of life,
    not after the longest term it asked for. ``None``: no worker record to go by (the row
    was deleted), so the claim's own expiry stands.
    """
    if lease.phase is not Phase.CLAIMED or worker_heartbeat_at is None:
        return lease
    lapse = worker_lapse_at(worker_heartbeat_at, timing)
    return replace(lease, expires_at=lapse) if lapse < lease.expires_at else lease


def acquire(
    current: Lease | None,
    high_water: int,
    request: AcquireRequest,
    now: float,
    timing: LeaseTiming,
) -> LeaseResult:
    """Grant, renew or refuse a claim on ``request.target``."""
    if current is not None and current.target != request.target:
        raise ValueError("the current row belongs to another target")
    check_full_sha(request.head_sha)
    term = lease_term(timing, request.ttl_s)
    if current is not None and current.live(now):
        if current.holder != request.worker:
            return Refused(
                ReasonCode.LEASE_HELD,
                f"{request.target} is held by {current.holder} until {iso(current.expires_at)}",
                holder=current.holder,
                expires_at=current.expires_at,
            )
        if current.head_sha == request.head_sha:
            details = request.details if request.details.any() else current.details
            renewed = replace(
                current, ttl_s=term, heartbeat_at=now, expires_at=now + term, details=details
            )
            return Granted(renewed, GrantKind.RENEWED)
    epoch = max(current.epoch if current else 0, high_water) + 1
    kind = GrantKind.GRANTED
    if current is not None and current.phase is Phase.CLAIMED and current.holder != request.worker:
        kind = GrantKind.TAKEOVER
    lease = Lease(
        target=request.target,
        holder=request.worker,
        epoch=epoch,
        head_sha=request.head_sha,
        phase=Phase.CLAIMED,
        ttl_s=term,
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + term,
        details=request.details,
    )
    return Granted(lease, kind)


def check_fence(current: Lease | None, claim: LeaseClaim, now: float) -> Refused | None:
    """``None`` when ``claim`` is the live claim on its target, else why it is not."""
    target = claim.target
    if current is None:
        return Refused(ReasonCode.LEASE_NOT_HELD, f"{target} has no lease")
    if current.target != target:
        raise ValueError("the current row belongs to another target")
    if claim.epoch < current.epoch:
        return _refuse(
            ReasonCode.SUPERSEDED,
            f"epoch {claim.epoch} of {target} was superseded by a later claim ({current.holder})",
            current,
        )
    if claim.epoch > current.epoch or current.holder != claim.worker:
        return _refuse(
            ReasonCode.LEASE_NOT_HELD,
            f"{claim.worker} does not hold epoch {claim.epoch} of {target}",
            current,
        )
    if current.phase is Phase.SUPERSEDED:
        return _refuse(
            ReasonCode.SUPERSEDED,
            f"epoch {claim.epoch} of {target} was superseded: the head moved from "
            f"{current.head_sha}",
            current,
        )
    if current.phase is not Phase.CLAIMED:
        return _refuse(
            ReasonCode.LEASE_NOT_HELD,
            f"epoch {claim.epoch} of {target} is {current.phase.value}",
            current,
        )
    if now >= current.expires_at:
        return _refuse(
            ReasonCode.LEASE_NOT_HELD,
            f"epoch {claim.epoch} of {target} expired at {iso(current.expires_at)}",
            current,
        )
    return None


def _refuse(code: ReasonCode, detail: str, current: Lease) -> Refused:
    return Refused(code, detail, current.holder, current.expires_at)


def heartbeat(current: Lease | None, claim: LeaseClaim, now: float) -> LeaseResult:
    """Push the live claim's expiry one term ahead."""
    refused = check_fence(current, claim, now)
    if refused is not None:
        return refused
    assert current is not None
    renewed = replace(current, heartbeat_at=now, expires_at=now + current.ttl_s)
    return Granted(renewed, GrantKind.RENEWED)


def release(current: Lease | None, claim: LeaseClaim, now: float) -> LeaseResult:
    """End the live claim now; the next acquire gets a higher epoch."""
    refused = check_fence(current, claim, now)
    if refused is not None:
        return refused
    assert current is not None
    return Granted(replace(current, phase=Phase.RELEASED, expires_at=now), GrantKind.RELEASED)


def supersede_head(current: Lease | None, new_head: str, now: float) -> Lease | None:
    """The row to store when the PR's head becomes ``new_head``; ``None``: nothing changes.

    A claim pinned to another head is superseded even if it already lapsed, so that the
    record says why it ended. Released and expired rows stay as they are.
    """
    if current is None or current.phase is not Phase.CLAIMED:
        return None
    if current.head_sha.lower() == new_head.lower():
        return None
    return replace(current, phase=Phase.SUPERSEDED, expires_at=min(current.expires_at, now))


# --- worker identities ------------------------------------------------------------------------


class WorkerStatus(StrEnum):
    LIVE = "live"
    STALE = "stale"  # registered, but its heartbeat is older than one lease term
    UNPROVEN = "unproven"  # no record: never assumed to be anyone


@dataclass(frozen=True)
class WorkerRecord:
    identity: str
    name: str
    client: str
    session_id: str
    role: str
    registered_at: float
    heartbeat_at: float


@dataclass(frozen=True)
class WorkerOwner:
    """Who registered a worker: an API token (by id) and, for sessions, the session.

    ``token_id`` ``None`` is the bot itself or its command line on the bot's machine.
    """

    token_id: int | None = None
    session: str | None = None
    name: str = ""  # the token's name, for messages and logs only

    def same_as(self, other: WorkerOwner) -> bool:
        return (self.token_id, self.session) == (other.token_id, other.session)

    def __str__(self) -> str:
        who = "reviewbot (local)"
        if self.token_id is not None:
            who = f"token {self.name!r} (id {self.token_id})"
        return who if self.session is None else f"{who}, session {self.session}"


def check_full_sha(sha: str, *, field: str = "head_sha") -> str:
    """``sha`` when it is a full hex commit SHA (40 or 64 digits); ``ValueError`` otherwise."""
    if not _FULL_SHA.match(sha):
        raise ValueError(
            f"{field} must be a full commit SHA (40 or 64 hex digits), not {sha[:80]!r}"
        )
    return sha


def check_worker_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"worker name {name!r}: 1-40 letters, digits, '.', '_' or '-', starting with a"
            " letter or digit"
        )
    return name


def is_reserved_worker_name(name: str) -> bool:
    """``reviewbot`` and ``reviewbot.*`` (any casing) belong to the bot's own workers."""
    low = name.lower()
    return low == RESERVED_PREFIX or low.startswith(RESERVED_PREFIX + ".")


def mint_worker_identity(
    name: str, *, client: str, session_id: str, now_ns: int, nonce: bytes
) -> str:
    """``<name>-<UTC timestamp>-<short sha>``; the sha covers client, session, time, nonce.

    Each part is length-prefixed before hashing, so no two different inputs hash the same
    byte string.
    """
    check_worker_name(name)
    if len(nonce) < 8:
        raise ValueError("the nonce must have at least 8 random bytes")
    digest = hashlib.sha256()
    for part in (client.encode(), session_id.encode(), str(now_ns).encode(), nonce):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    stamp = datetime.fromtimestamp(now_ns // 1_000_000_000, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{digest.hexdigest()[:12]}"


def parse_worker_identity(identity: str) -> str:
    """The name part of a well-formed identity; ``ValueError`` otherwise.

    The timestamp and the short sha are fixed-width, so the name is everything left of
    them, hyphens included."""
    m = _IDENTITY.match(identity)
    if m is None:
        raise ValueError(
            f"not a worker identity: {identity!r} (expected NAME-YYYYMMDDTHHMMSSZ-SHA)"
        )
    return m["name"]


def worker_status(record: WorkerRecord | None, now: float, timing: LeaseTiming) -> WorkerStatus:
    """Live while its last heartbeat is within one lease term."""
    if record is None:
        return WorkerStatus.UNPROVEN
    return WorkerStatus.LIVE if now - record.heartbeat_at < timing.lease_s else WorkerStatus.STALE


def lease_view(lease: Lease, now: float) -> dict[str, object]:
    """The lease at ``now``: its target, holder, epoch, head, phase and expiry."""
    t = lease.target
    return {
        "target": {"forge": t.forge, "repo": t.repo, "number": t.number, "role": t.role.value},
        "holder": lease.holder,
        "epoch": lease.epoch,
        "head_sha": lease.head_sha,
        "phase": lease.phase_at(now).value,
        "expires_at": iso(lease.expires_at),
        "expires_in_s": round(max(0.0, lease.expires_at - now), 3),
    }


def lease_json(lease: Lease, now: float) -> dict[str, Any]:
    """The lease as the API and ``reviewbot lease ... --json`` show it: :func:`lease_view`,
    with when it was acquired and last renewed, and its term."""
    return {
        **lease_view(lease, now),
        "acquired_at": iso(lease.acquired_at),
        "heartbeat_at": iso(lease.heartbeat_at),
        "ttl_s": lease.ttl_s,
        **lease.details.to_json(),
    }


def refusal_view(refused: Refused) -> dict[str, object]:
    """A refusal as an API error body: ``error`` and ``detail``, plus the holder if any."""
    body: dict[str, object] = {"error": refused.code.value, "detail": refused.detail}
    if refused.holder is not None:
        body["holder"] = refused.holder
    if refused.expires_at is not None:
        body["expires_at"] = iso(refused.expires_at)
    if refused.position is not None:
        body["position"] = refused.position
    return body
