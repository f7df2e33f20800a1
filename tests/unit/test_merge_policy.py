"""The merge rules (reviewbot.core.merge): pure, every refusal reason at once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reviewbot.core.leases import Lease, LeaseClaim, LeaseTarget, Phase, Role
from reviewbot.core.merge import (
    REFUSAL_CODES,
    MergeAction,
    MergeInputs,
    approvers_at,
    decide,
    requesting_changes,
    standings,
)
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
    RulesGap,
)

HEAD = "a" * 40
OLD = "b" * 40
NOW = 1_700_000_000.0
TARGET = LeaseTarget("github", "acme/api", 7, Role.MERGER)
PULL = PullRequestSnapshot(
    forge="github",
    owner="acme",
    name="api",
    number=7,
    state="open",
    merged=False,
    draft=False,
    head_sha=HEAD,
    base_ref="main",
    head_ref="feature",
    author="alice",
    mergeable=True,
)
LEASE = Lease(TARGET, "m1", 3, HEAD, Phase.CLAIMED, 15.0, NOW - 1, NOW - 1, NOW + 14)
GREEN = (CheckResult("ci/test", CheckState.SUCCESS),)
REQUIRED = RequiredChecks(("ci/test",))


def approve(reviewer: str, sha: str | None = HEAD, id: int = 1) -> Review:
    return Review(id, reviewer, ReviewState.APPROVED, sha)


def inputs(**kw: Any) -> MergeInputs:
    values: dict[str, Any] = {
        "pull": PULL,
        "pin": HEAD,
        "reviews": (approve("bob"),),
        "protection": REQUIRED,
        "configured_checks": (),
        "results": GREEN,
        "lease": LEASE,
        "claim": LeaseClaim(TARGET, "m1", 3),
        "now": NOW,
    }
    values.update(kw)
    return MergeInputs(**values)


def test_everything_in_order_merges_and_names_the_approver() -> None:
    decision = decide(inputs())
    assert decision.action is MergeAction.MERGE
    assert decision.ok and decision.refusals == ()
    assert decision.approvers == ("bob",)


def test_an_approval_at_an_old_head_never_permits_a_merge_at_the_new_head() -> None:
    decision = decide(inputs(reviews=(approve("bob", OLD),)))
    assert decision.codes == ("not_approved",)
    # nor one whose commit is unknown
    assert decide(inputs(reviews=(approve("bob", None),))).codes == ("not_approved",)


def test_the_authors_own_approval_never_counts_whatever_the_case() -> None:
    assert decide(inputs(reviews=(approve("alice"),))).codes == ("not_approved",)
    assert decide(inputs(reviews=(approve("ALICE"),))).codes == ("not_approved",)
    both = decide(inputs(reviews=(approve("alice", id=1), approve("carol", id=2))))
    assert both.ok and both.approvers == ("carol",)


def test_request_changes_as_a_reviewers_latest_review_blocks() -> None:
    reviews = (
        approve("bob", id=1),
        Review(2, "carol", ReviewState.CHANGES_REQUESTED, OLD),  # at an old head: still blocks
    )
    decision = decide(inputs(reviews=reviews))
    assert decision.codes == ("changes_requested",)
    assert "carol" in decision.summary()


def test_a_later_approval_lifts_the_reviewers_own_change_request() -> None:
    reviews = (
        Review(1, "bob", ReviewState.CHANGES_REQUESTED, OLD),
        Review(2, "bob", ReviewState.COMMENTED, OLD),  # a comment changes nothing
        approve("bob", id=3),
    )
    assert decide(inputs(reviews=reviews)).ok


def test_a_change_request_after_an_approval_blocks_and_removes_the_approval() -> None:
    reviews = (approve("bob", id=1), Review(2, "bob", ReviewState.CHANGES_REQUESTED, HEAD))
    assert decide(inputs(reviews=reviews)).codes == ("not_approved", "changes_requested")


def test_order_is_by_review_id_not_by_list_position() -> None:
    reviews = (Review(5, "bob", ReviewState.CHANGES_REQUESTED, HEAD), approve("bob", id=2))
    assert requesting_changes(reviews) == ("bob",)
    assert approvers_at(reviews, "alice", HEAD) == ()


def test_a_dismissed_review_leaves_no_standing() -> None:
    reviews = (
        Review(1, "carol", ReviewState.CHANGES_REQUESTED, HEAD),
        Review(2, "carol", ReviewState.DISMISSED, HEAD),
        approve("bob", id=3),
        Review(4, "dave", ReviewState.DISMISSED, HEAD),
    )
    assert set(standings(reviews)) == {"bob"}
    assert decide(inputs(reviews=reviews)).ok
    dismissed_approval = (Review(1, "bob", ReviewState.DISMISSED, HEAD),)
    assert decide(inputs(reviews=dismissed_approval)).codes == ("not_approved",)


@pytest.mark.parametrize(
    ("state", "word"),
    [(CheckState.FAILURE, "failure"), (CheckState.PENDING, "pending")],
)
def test_required_checks_must_be_green(state: CheckState, word: str) -> None:
    decision = decide(inputs(results=(CheckResult("ci/test", state),)))
    assert decision.codes == ("checks_not_green",)
    assert word in decision.summary()
    missing = decide(inputs(results=()))
    assert missing.codes == ("checks_not_green",)
    assert "ci/test not reported" in missing.summary()


def test_configured_checks_count_too_and_nothing_required_is_green() -> None:
    decision = decide(inputs(configured_checks=("lint",)))
    assert decision.codes == ("checks_not_green",)
    assert decide(inputs(protection=RequiredChecks(), results=())).ok


def test_head_moved_is_refused_with_every_other_reason() -> None:
    pull = replace(PULL, head_sha=OLD)
    decision = decide(inputs(pull=pull, reviews=(), results=()))
    assert decision.codes == ("head_moved", "not_approved", "checks_not_green")


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"state": "closed"}, "closed"),
        ({"draft": True}, "draft"),
        ({"mergeable": False}, "cannot be merged"),
    ],
)
def test_not_mergeable(change: dict[str, Any], text: str) -> None:
    decision = decide(inputs(pull=replace(PULL, **change)))
    assert decision.codes == ("not_mergeable",)
    assert text in decision.summary()


def test_mergeable_unknown_is_left_to_the_forge() -> None:
    assert decide(inputs(pull=replace(PULL, mergeable=None))).ok


def test_merged_at_the_pin_is_already_merged_never_a_second_merge() -> None:
    merged = replace(PULL, merged=True, state="closed", merge_commit_sha="c" * 40)
    assert decide(inputs(pull=merged)).action is MergeAction.ALREADY_MERGED
    # the claim that merged it was released by the merge: its holder is still told
    released = replace(LEASE, phase=Phase.RELEASED, expires_at=NOW - 1)
    assert decide(inputs(pull=merged, lease=released)).action is MergeAction.ALREADY_MERGED
    elsewhere = replace(merged, head_sha=OLD)
    assert decide(inputs(pull=elsewhere)).codes == ("head_moved", "not_mergeable")


def test_stale_epoch_is_superseded() -> None:
    newer = replace(LEASE, holder="m2", epoch=4)
    decision = decide(inputs(lease=newer))
    assert decision.codes == ("superseded",)
    assert "m2" in decision.summary()


def test_lease_must_be_live_held_by_the_caller_and_pinned_to_the_head() -> None:
    assert decide(inputs(lease=None)).codes == ("lease_not_held",)
    expired = decide(inputs(now=LEASE.expires_at + 1))
    assert expired.codes == ("lease_not_held",)
    other = decide(inputs(claim=LeaseClaim(TARGET, "m9", 3)))
    assert other.codes == ("lease_not_held",)
    released = decide(inputs(lease=replace(LEASE, phase=Phase.RELEASED)))
    assert released.codes == ("lease_not_held",)
    pinned_old = decide(inputs(lease=replace(LEASE, head_sha=OLD)))
    assert pinned_old.codes == ("lease_not_held",)
    assert "pinned to" in pinned_old.summary()
    superseded = decide(inputs(lease=replace(LEASE, phase=Phase.SUPERSEDED)))
    assert superseded.codes == ("superseded",)


def test_a_reviewer_lease_does_not_permit_a_merge() -> None:
    reviewer = LeaseTarget("github", "acme/api", 7, Role.REVIEWER)
    decision = decide(inputs(claim=LeaseClaim(reviewer, "m1", 3)))
    assert decision.codes[0] == "lease_not_held"


def test_every_code_is_reported_and_in_the_documented_order() -> None:
    pull = replace(PULL, head_sha=OLD, mergeable=False)
    reviews = (Review(1, "carol", ReviewState.CHANGES_REQUESTED, OLD),)
    decision = decide(inputs(pull=pull, reviews=reviews, results=(), lease=replace(LEASE, epoch=9)))
    assert decision.codes == (
        "superseded",
        "head_moved",
        "not_mergeable",
        "not_approved",
        "changes_requested",
        "checks_not_green",
    )
    assert set(decision.codes) <= {c.value for c in REFUSAL_CODES}


def test_every_refusal_code_is_documented() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "leases.md").read_text()
    for code in (*REFUSAL_CODES, "lease_held", "forge_unavailable", "worker_unproven"):
        assert f"| `{code}` |" in text, code


@pytest.mark.parametrize(
    ("lease", "claim"),
    [
        (None, LeaseClaim(TARGET, "m1", 3)),  # no lease at all
        (LEASE, LeaseClaim(TARGET, "m2", 3)),  # another worker's claim
        (LEASE, LeaseClaim(TARGET, "m1", 2)),  # an older epoch
        (LEASE, LeaseClaim(replace(TARGET, role=Role.REVIEWER), "m1", 3)),  # the wrong role
    ],
)
def test_merged_at_the_pin_without_the_claim_is_refused(
    lease: Lease | None, claim: LeaseClaim
) -> None:
    merged = replace(PULL, merged=True, state="closed", merge_commit_sha="c" * 40)
    decision = decide(inputs(pull=merged, lease=lease, claim=claim))
    assert decision.action is MergeAction.REFUSE
    assert decision.codes[0] in ("lease_not_held", "superseded")


def test_unreadable_rules_refuse_a_merge_unless_checks_are_configured() -> None:
    hidden = RequiredChecks(unreadable=(RulesGap("branch", "Contents (read)", 403),))
    decision = decide(inputs(protection=hidden))
    assert decision.codes == ("protection_unreadable",)
    assert "Contents (read)" in decision.summary()
    assert decide(inputs(protection=hidden, configured_checks=("ci/*",))).ok


def test_fewer_approvals_than_the_rules_require_refuse() -> None:
    two = RequiredChecks(("ci/test",), required_approvals=2)
    decision = decide(inputs(protection=two))
    assert decision.codes == ("not_approved",)
    assert "1 of the 2 approvals" in decision.summary()
    assert decide(inputs(protection=two, reviews=(approve("bob"), approve("carol", id=2)))).ok


def test_a_missing_merge_permission_is_named_before_any_call() -> None:
    decision = decide(inputs(missing_permission="Contents (write)"))
    assert decision.codes == ("permission_denied",)
    assert "Contents (write)" in decision.summary()
