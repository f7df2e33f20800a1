"""What stands between a caller and a review or a merge: one :class:`Blocker` per reason.

A blocker's code is a :class:`~reviewbot.core.reasons.ReasonCode`, so a capability answer, a
merge refusal and a gate decision speak one vocabulary (``docs/reason-codes.md``). Only the
codes of :data:`BLOCKER_CODES` are blockers, listed in the order an answer reports them:
who asks, the pull request's state, the lease, then the merge rules.

The merge rules themselves are :func:`reviewbot.core.merge.merge_blockers`; this module only
holds the vocabulary, so :mod:`reviewbot.core.merge` and :mod:`reviewbot.core.capability`
both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reviewbot.core.clock import iso
from reviewbot.core.reasons import ReasonCode

BLOCKER_CODES: tuple[ReasonCode, ...] = (
    ReasonCode.MISSING_SCOPE,
    ReasonCode.REPO_NOT_ALLOWED,
    ReasonCode.WORKER_UNPROVEN,
    ReasonCode.NOT_WORKER_OWNER,
    ReasonCode.WORKER_STALE,
    ReasonCode.PR_CLOSED,
    ReasonCode.PR_DRAFT,
    ReasonCode.AUTHOR_IS_BOT,
    ReasonCode.NOT_MERGEABLE,
    ReasonCode.LEASE_HELD,
    ReasonCode.LEASE_NOT_HELD,
    ReasonCode.HEAD_MOVED,
    ReasonCode.NOT_APPROVED,
    ReasonCode.SELF_APPROVAL,
    ReasonCode.CHANGES_REQUESTED,
    ReasonCode.CHECKS_NOT_GREEN,
    ReasonCode.PROTECTION_UNREADABLE,
    ReasonCode.PERMISSION_DENIED,
)
_RANK = {code: i for i, code in enumerate(BLOCKER_CODES)}


@dataclass(frozen=True)
class Blocker:
    code: ReasonCode
    detail: str
    next_action: str
    holder: str | None = None
    expires_at: float | None = None
    # The code a merge refusal names when it is coarser than ``code``: a merge of a draft is
    # refused ``not_mergeable``, as docs/reason-codes.md's merge table says.
    refused_as: ReasonCode | None = None

    def __post_init__(self) -> None:
        if self.code not in _RANK:
            raise ValueError(f"{self.code.value} is not a blocker code")

    @property
    def refusal_code(self) -> ReasonCode:
        return self.refused_as or self.code

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": self.code.value,
            "detail": self.detail,
            "next_action": self.next_action,
        }
        if self.holder is not None:
            body["holder"] = self.holder
        if self.expires_at is not None:
            body["expires_at"] = iso(self.expires_at)
        return body


def in_order(blockers: list[Blocker]) -> tuple[Blocker, ...]:
    """``blockers`` in the reported order (stable within one code)."""
    return tuple(sorted(blockers, key=lambda b: _RANK[b.code]))
