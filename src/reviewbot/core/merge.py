"""May this pull request be merged at this head, by this lease holder, now? The pure rules.

The caller reads the live state (the PR, its reviews, the required checks of its base branch
and the check results of its head) and the merger lease row, and asks :func:`decide`. The
answer is either "merge", "already merged" (an earlier attempt went through: never merge
twice) or a refusal listing **every** reason, each with a documented code:

- ``lease_not_held`` / ``superseded``: the caller's (worker, epoch) is not the live merger
  claim on the PR, or its lease is pinned to another head;
- ``head_moved``: the PR's head is not the pinned SHA;
- ``not_mergeable``: the PR is closed, merged at another head, a draft, or the forge says it
  cannot be merged (conflicts);
- ``not_approved``: nobody other than the author approved at exactly the pinned head (an
  approval at an older head never counts, nor does the author's own);
- ``changes_requested``: some reviewer's standing review requests changes;
- ``checks_not_green``: a required check failed, is pending or was not reported;
- ``protection_unreadable``: the forge's rules for the base branch could not be read and the
  repository configures no required checks (nothing safe to merge on);
- ``permission_denied``: the bot's credentials lack what the forge needs for a merge (named).

``not_approved`` also covers fewer distinct approvals at the pin than the forge's rules
require (``required_approvals``).

A reviewer's *standing* is their latest review that is an approval, a change request or a
dismissal, in the order the forge lists them (review ids increase); comments do not change
it, and a dismissed review leaves the reviewer with no standing at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from reviewbot.core import policy
from reviewbot.core.leases import Lease, LeaseClaim, Role, check_fence
from reviewbot.core.models import (
    CheckResult,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
)
from reviewbot.core.policy import VerdictKind
from reviewbot.core.reasons import ReasonCode

# Codes a merge refusal can carry, in the order they are reported.
REFUSAL_CODES: tuple[ReasonCode, ...] = (
    ReasonCode.LEASE_NOT_HELD,
    ReasonCode.SUPERSEDED,
    ReasonCode.HEAD_MOVED,
    ReasonCode.NOT_MERGEABLE,
    ReasonCode.NOT_APPROVED,
    ReasonCode.CHANGES_REQUESTED,
    ReasonCode.CHECKS_NOT_GREEN,
    ReasonCode.PROTECTION_UNREADABLE,
    ReasonCode.PERMISSION_DENIED,
)
_STANDING_STATES = frozenset(
    {ReviewState.APPROVED, ReviewState.CHANGES_REQUESTED, ReviewState.DISMISSED}
)


class MergeAction(StrEnum):
    MERGE = "merge"
    ALREADY_MERGED = "already_merged"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Refusal:
    code: ReasonCode
    detail: str


@dataclass(frozen=True)
class MergeInputs:
    """Everything :func:`decide` looks at; all of it read live just before."""

    pull: PullRequestSnapshot
    pin: str  # the head SHA the caller wants to merge
    reviews: Sequence[Review]
    protection: RequiredChecks
    configured_checks: Sequence[str]
    results: Sequence[CheckResult]
    lease: Lease | None  # the merger lease row of the PR as stored now
    claim: LeaseClaim  # what the caller presents
    now: float
    missing_permission: str | None = None  # what the bot's credentials lack to merge, if known


@dataclass(frozen=True)
class MergeDecision:
    action: MergeAction
    refusals: tuple[Refusal, ...] = ()
    approvers: tuple[str, ...] = ()  # reviewers whose approval at the pin counts

    @property
    def ok(self) -> bool:
        return self.action is MergeAction.MERGE

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code.value for r in self.refusals)

    def summary(self) -> str:
        return "; ".join(f"{r.code.value}: {r.detail}" for r in self.refusals)


def same_sha(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and str(a).lower() == str(b).lower()


def standings(reviews: Sequence[Review]) -> dict[str, Review]:
    """Each reviewer's standing review (see the module docstring); logins compared lowercased."""
    out: dict[str, Review] = {}
    for review in sorted(reviews, key=lambda r: r.id):
        if review.state in _STANDING_STATES:
            out[review.reviewer.lower()] = review
    return {login: r for login, r in out.items() if r.state is not ReviewState.DISMISSED}


def approvers_at(reviews: Sequence[Review], author: str, head: str) -> tuple[str, ...]:
    """Reviewers other than ``author`` whose standing is an approval submitted at ``head``."""
    return tuple(
        sorted(
            r.reviewer
            for login, r in standings(reviews).items()
            if r.state is ReviewState.APPROVED
            and login != author.lower()
            and same_sha(r.commit_sha, head)
        )
    )


def requesting_changes(reviews: Sequence[Review]) -> tuple[str, ...]:
    return tuple(
        sorted(
            r.reviewer
            for r in standings(reviews).values()
            if r.state is ReviewState.CHANGES_REQUESTED
        )
    )


def checks_refusal(
    protection: RequiredChecks, configured: Sequence[str], results: Sequence[CheckResult]
) -> Refusal | None:
    """``None`` when the required checks allow a merge, else why not: each check that does
    not (``checks_not_green``), or the rules that could not be read (``protection_unreadable``)."""
    verdict = policy.evaluate(protection, configured, results)
    if verdict.reason is ReasonCode.PROTECTION_UNREADABLE:
        detail = "; ".join(gap.describe() for gap in verdict.unreadable)
        return Refusal(ReasonCode.PROTECTION_UNREADABLE, detail + "; or configure required_checks")
    # Nothing required means nothing to wait for; the approval rule still applies.
    if verdict.kind in (VerdictKind.APPROVE, VerdictKind.NO_REQUIRED_CHECKS):
        return None
    items = [f"{c.name} {c.state.value.replace('_', ' ')}" for c in verdict.failed]
    items += [f"{c.name} pending" for c in verdict.pending]
    items += [f"{name} not reported" for name in verdict.missing]
    return Refusal(ReasonCode.CHECKS_NOT_GREEN, ", ".join(items))


def approvals_short(protection: RequiredChecks, approvers: Sequence[str], pin: str) -> str | None:
    """Why the approvals at ``pin`` are fewer than the forge's rules require, or ``None``."""
    needed = protection.required_approvals
    if not approvers or len(approvers) >= needed:
        return None
    return f"{len(approvers)} of the {needed} approvals the branch's rules require at {pin[:12]}"


def lease_refusal(lease: Lease | None, claim: LeaseClaim, pin: str, now: float) -> Refusal | None:
    """Why ``claim`` may not merge at ``pin``; ``None`` when it is the live merger claim there."""
    if claim.target.role is not Role.MERGER:
        return Refusal(
            ReasonCode.LEASE_NOT_HELD,
            f"a merge needs the merger lease, not the {claim.target.role.value} lease",
        )
    refused = check_fence(lease, claim, now)
    if refused is not None:
        return Refusal(refused.code, refused.detail)
    assert lease is not None
    if not same_sha(lease.head_sha, pin):
        return Refusal(
            ReasonCode.LEASE_NOT_HELD,
            f"epoch {claim.epoch} is pinned to {lease.head_sha}, not {pin}; acquire the merger "
            "lease at the head to merge",
        )
    return None


def merged_claim_refusal(
    lease: Lease | None, claim: LeaseClaim, pin: str, now: float
) -> Refusal | None:
    """For a PR already merged at ``pin``: ``None`` when ``claim`` is the live merger claim,
    or the claim that merged it (the merge released it), else the lease refusal."""
    refused = lease_refusal(lease, claim, pin, now)
    if refused is None:
        return None
    if (
        lease is not None
        and claim.target.role is Role.MERGER
        and (lease.holder, lease.epoch) == (claim.worker, claim.epoch)
        and same_sha(lease.head_sha, pin)
    ):
        return None
    return refused


def decide(inputs: MergeInputs) -> MergeDecision:
    """Merge, already merged, or refuse with every reason. See the module docstring."""
    pull, pin = inputs.pull, inputs.pin
    if pull.merged and same_sha(pull.head_sha, pin):
        # An earlier attempt (maybe answered with an error) went through: never merge twice.
        # Only a caller with a claim on it is told so (and gets the record written).
        refused = merged_claim_refusal(inputs.lease, inputs.claim, pin, inputs.now)
        if refused is not None:
            return MergeDecision(MergeAction.REFUSE, (refused,))
        return MergeDecision(MergeAction.ALREADY_MERGED)
    refusals: list[Refusal] = []
    lease = lease_refusal(inputs.lease, inputs.claim, pin, inputs.now)
    if lease is not None:
        refusals.append(lease)
    if not same_sha(pull.head_sha, pin):
        refusals.append(
            Refusal(ReasonCode.HEAD_MOVED, f"the head is {pull.head_sha}, not the pinned {pin}")
        )
    if pull.merged:
        refusals.append(Refusal(ReasonCode.NOT_MERGEABLE, "the pull request is already merged"))
    elif pull.state != "open":
        refusals.append(Refusal(ReasonCode.NOT_MERGEABLE, f"the pull request is {pull.state}"))
    elif pull.draft:
        refusals.append(Refusal(ReasonCode.NOT_MERGEABLE, "the pull request is a draft"))
    elif pull.mergeable is False:
        refusals.append(
            Refusal(ReasonCode.NOT_MERGEABLE, "the forge reports it cannot be merged (conflicts?)")
        )
    approvers = approvers_at(inputs.reviews, pull.author, pin)
    if not approvers:
        refusals.append(
            Refusal(
                ReasonCode.NOT_APPROVED,
                f"no approval by anyone other than the author {pull.author} at {pin[:12]}",
            )
        )
    short = approvals_short(inputs.protection, approvers, pin)
    if short is not None:
        refusals.append(Refusal(ReasonCode.NOT_APPROVED, short))
    blocking = requesting_changes(inputs.reviews)
    if blocking:
        refusals.append(
            Refusal(ReasonCode.CHANGES_REQUESTED, "changes requested by " + ", ".join(blocking))
        )
    checks = checks_refusal(inputs.protection, inputs.configured_checks, inputs.results)
    if checks is not None:
        refusals.append(checks)
    if inputs.missing_permission is not None:
        refusals.append(Refusal(ReasonCode.PERMISSION_DENIED, inputs.missing_permission))
    if refusals:
        order = {code: i for i, code in enumerate(REFUSAL_CODES)}
        refusals.sort(key=lambda r: order.get(r.code, len(order)))
        return MergeDecision(MergeAction.REFUSE, tuple(refusals), approvers)
    return MergeDecision(MergeAction.MERGE, (), approvers)
