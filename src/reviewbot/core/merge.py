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

The forge-side rules (every code above but the lease's) are :func:`merge_blockers`, the one
list of what blocks a merge at a head, and :func:`merge_readiness` is the one answer built
on it: :func:`decide` refuses with it, :func:`reviewbot.core.capability.resolve_capability`
answers with it, the PR state comment's ``MERGE_READY`` and the status page's merge verdict
show it, so no two of them can disagree about the same facts. A blocker may be finer than the
refusal (``pr_draft``, ``pr_closed``, ``self_approval``, an approval at an older head); the
refusal names its coarser code (:attr:`~reviewbot.core.blockers.Blocker.refusal_code`).

A reviewer's *standing* is their latest review that is an approval, a change request or a
dismissal, in the order the forge lists them (review ids increase); comments do not change
it, and a dismissed review leaves the reviewer with no standing at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from reviewbot.core import policy
from reviewbot.core.blockers import Blocker, in_order
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
class PrFacts:
    """A pull request's live merge facts at one head, as the forge shows them now."""

    pull: PullRequestSnapshot
    head: str  # the head judged: the caller's pin, or the pull's own head
    reviews: tuple[Review, ...]
    protection: RequiredChecks
    results: tuple[CheckResult, ...]  # of ``head``
    missing_permission: str | None  # what the bot's credentials lack to merge, if known
    # False: only the pull was read (a caller that needs nothing else); never judged.
    merge_read: bool = True

    @classmethod
    def of_pull(cls, pull: PullRequestSnapshot) -> PrFacts:
        return cls(pull, pull.head_sha, (), RequiredChecks(), (), None, merge_read=False)


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

    @classmethod
    def of(
        cls,
        facts: PrFacts,
        *,
        configured_checks: Sequence[str],
        lease: Lease | None,
        claim: LeaseClaim,
        now: float,
    ) -> MergeInputs:
        return cls(
            pull=facts.pull,
            pin=facts.head,
            reviews=facts.reviews,
            protection=facts.protection,
            configured_checks=configured_checks,
            results=facts.results,
            lease=lease,
            claim=claim,
            now=now,
            missing_permission=facts.missing_permission,
        )

    @property
    def facts(self) -> PrFacts:
        return PrFacts(
            self.pull,
            self.pin,
            tuple(self.reviews),
            self.protection,
            tuple(self.results),
            self.missing_permission,
        )


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


def state_blockers(pull: PullRequestSnapshot) -> list[Blocker]:
    """Why the PR's own state stops any action: merged or closed, else a draft. One reason:
    the first thing to change."""
    if pull.merged:
        return [
            Blocker(
                ReasonCode.PR_CLOSED,
                "the pull request is already merged",
                "nothing to do",
                refused_as=ReasonCode.NOT_MERGEABLE,
            )
        ]
    if pull.state != "open":
        return [
            Blocker(
                ReasonCode.PR_CLOSED,
                f"the pull request is {pull.state}",
                "reopen it on the forge if it should still be acted on",
                refused_as=ReasonCode.NOT_MERGEABLE,
            )
        ]
    if pull.draft:
        return [
            Blocker(
                ReasonCode.PR_DRAFT,
                "the pull request is a draft",
                "mark it ready for review",
                refused_as=ReasonCode.NOT_MERGEABLE,
            )
        ]
    return []


def _approval_blockers(facts: PrFacts, approvers: Sequence[str]) -> list[Blocker]:
    """Why nobody's approval counts at the head, told apart: an approval at an older head,
    the author's own, or none at all (a merge refuses each as ``not_approved``)."""
    pull, head = facts.pull, facts.head
    if approvers:
        return []
    approved = [r for r in standings(facts.reviews).values() if r.state is ReviewState.APPROVED]
    others = [r for r in approved if r.reviewer.lower() != pull.author.lower()]
    older = [r for r in others if not same_sha(r.commit_sha, head)]
    if older:
        at = ", ".join(f"{r.reviewer} at {(r.commit_sha or '?')[:12]}" for r in older)
        return [
            Blocker(
                ReasonCode.HEAD_MOVED,
                f"approved at an older head ({at}); the head is now {head}",
                f"get a review at {head[:12]}; an approval never carries over",
                refused_as=ReasonCode.NOT_APPROVED,
            )
        ]
    if len(approved) > len(others):
        return [
            Blocker(
                ReasonCode.SELF_APPROVAL,
                f"the only approval is the author's ({pull.author}); an author cannot"
                " approve their own pull request",
                "get an approval from someone other than the author",
                refused_as=ReasonCode.NOT_APPROVED,
            )
        ]
    return [
        Blocker(
            ReasonCode.NOT_APPROVED,
            f"no approval by anyone other than the author {pull.author} at {head[:12]}",
            f"get a review at {head[:12]}",
        )
    ]


def merge_blockers(facts: PrFacts, configured_checks: Sequence[str]) -> tuple[Blocker, ...]:
    """Every reason the forge-side rules refuse a merge of ``facts.pull`` at ``facts.head``
    (see the module docstring), in the reported order; empty when they allow it.
    ``configured_checks`` are the repository's own ``required_checks``."""
    if not facts.merge_read:
        raise ValueError("a merge is never judged on the pull alone: read its merge facts")
    pull, head = facts.pull, facts.head
    out: list[Blocker] = []
    if not same_sha(pull.head_sha, head):
        out.append(
            Blocker(
                ReasonCode.HEAD_MOVED,
                f"the head is {pull.head_sha}, not the pinned {head}",
                f"get a review at {pull.head_sha[:12]} and merge at it",
            )
        )
    out += state_blockers(pull)
    # A draft's conflicts are a second reason (both must be cleared); a closed PR's are moot.
    if pull.state == "open" and not pull.merged and pull.mergeable is False:
        out.append(
            Blocker(
                ReasonCode.NOT_MERGEABLE,
                "the forge reports it cannot be merged (conflicts, branch rules)",
                "resolve it on the forge",
            )
        )
    approvers = approvers_at(facts.reviews, pull.author, head)
    out += _approval_blockers(facts, approvers)
    short = approvals_short(facts.protection, approvers, head)
    if short is not None:
        out.append(Blocker(ReasonCode.NOT_APPROVED, short, f"get more approvals at {head[:12]}"))
    blocking = requesting_changes(facts.reviews)
    if blocking:
        out.append(
            Blocker(
                ReasonCode.CHANGES_REQUESTED,
                "changes requested by " + ", ".join(blocking),
                "address them and have the reviewers approve or dismiss their reviews",
            )
        )
    checks = checks_refusal(facts.protection, configured_checks, facts.results)
    if checks is not None and checks.code is ReasonCode.PROTECTION_UNREADABLE:
        out.append(
            Blocker(
                ReasonCode.PROTECTION_UNREADABLE,
                checks.detail,
                "grant the bot the permission named, or set required_checks in its rules",
            )
        )
    elif checks is not None:
        out.append(
            Blocker(ReasonCode.CHECKS_NOT_GREEN, checks.detail, "wait for CI, or fix the failures")
        )
    if facts.missing_permission is not None:
        out.append(
            Blocker(
                ReasonCode.PERMISSION_DENIED,
                facts.missing_permission,
                "grant the bot that permission on the forge (docs/github-app.md, docs/gitea.md)",
            )
        )
    return in_order(out)


@dataclass(frozen=True)
class Readiness:
    """Whether the forge-side rules allow a merge at ``head`` now, and every reason if not:
    :func:`merge_readiness`, the one merge-readiness answer every surface shows."""

    head: str
    blockers: tuple[Blocker, ...]

    @property
    def ready(self) -> bool:
        return not self.blockers

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(b.code.value for b in self.blockers)

    @property
    def refusal_codes(self) -> tuple[str, ...]:
        """The codes a merge at ``head`` is refused with (coarser than :attr:`codes`)."""
        return tuple(dict.fromkeys(b.refusal_code.value for b in self.blockers))

    def next_prompt(self) -> str:
        """What an agent should do next: each blocker's next action (once each, in the
        reported order, named by its code), or the merge itself when nothing blocks it."""
        if self.ready:
            return (
                f"acquire the merger lease at {self.head}, then merge at it "
                "(POST /api/v1/merges, or the merge_pr tool)"
            )
        seen: dict[str, str] = {}
        for b in self.blockers:
            seen.setdefault(b.next_action, b.code.value)
        return "; ".join(f"{code}: {action}" for action, code in seen.items())


def merge_readiness(facts: PrFacts, configured_checks: Sequence[str]) -> Readiness:
    """May ``facts.pull`` be merged at ``facts.head`` as far as the forge's rules go: the
    one merge-readiness function (see the module docstring). A pull that is closed or merged
    needs no merge facts to be refused; an open one is never judged on the pull alone."""
    pull = facts.pull
    if not facts.merge_read and (pull.merged or pull.state != "open"):
        return Readiness(facts.head, tuple(state_blockers(pull)))
    return Readiness(facts.head, merge_blockers(facts, configured_checks))


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
    readiness = merge_readiness(inputs.facts, inputs.configured_checks)
    refusals += [Refusal(b.refusal_code, b.detail) for b in readiness.blockers]
    approvers = approvers_at(inputs.reviews, pull.author, pin)
    if refusals:
        order = {code: i for i, code in enumerate(REFUSAL_CODES)}
        refusals.sort(key=lambda r: order.get(r.code, len(order)))
        return MergeDecision(MergeAction.REFUSE, tuple(refusals), approvers)
    return MergeDecision(MergeAction.MERGE, (), approvers)
