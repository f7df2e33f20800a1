"""Blockers and refusals speak one vocabulary: every blocker code is a documented reason code,
and a merge refuses with the same list of blockers a capability answer shows."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from reviewbot.core.blockers import BLOCKER_CODES, Blocker
from reviewbot.core.leases import Lease, LeaseTarget, Phase, Role
from reviewbot.core.merge import REFUSAL_CODES, MergeInputs, PrFacts, decide, merge_blockers
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
)
from reviewbot.core.reasons import ReasonCode
from tests.conftest import REPO_ROOT

HEAD, OLD = "a" * 40, "b" * 40
NOW = 1_800_000_000.0
PULL = PullRequestSnapshot(
    forge="gitea",
    owner="acme",
    name="api",
    number=12,
    state="open",
    merged=False,
    draft=False,
    head_sha=HEAD,
    base_ref="main",
    head_ref="feature",
    author="alice",
    mergeable=True,
)
FACTS = PrFacts(
    PULL,
    HEAD,
    (Review(1, "bob", ReviewState.APPROVED, HEAD),),
    RequiredChecks(("ci/test",)),
    (CheckResult("ci/test", CheckState.SUCCESS),),
    None,
)


def test_every_blocker_code_is_a_documented_reason_code() -> None:
    reasons = (REPO_ROOT / "docs" / "reason-codes.md").read_text("utf-8")
    capability = (REPO_ROOT / "docs" / "capability.md").read_text("utf-8")
    table = set(re.findall(r"^\| `([a-z_]+)` \|", capability, re.MULTILINE))
    for code in BLOCKER_CODES:
        assert ReasonCode(code.value) is code
        assert f"`{code.value}`" in reasons, code
    # The capability table lists exactly the blocker codes.
    assert table == {c.value for c in BLOCKER_CODES}


def test_a_blocker_carries_only_a_blocker_code() -> None:
    with pytest.raises(ValueError, match="not a blocker code"):
        Blocker(ReasonCode.CHECKS_PASSED, "every check passed", "nothing")


@pytest.mark.parametrize(
    ("facts", "blocker", "refusal"),
    [
        (replace(FACTS, pull=replace(PULL, draft=True)), "pr_draft", "not_mergeable"),
        (replace(FACTS, pull=replace(PULL, state="closed")), "pr_closed", "not_mergeable"),
        (
            replace(FACTS, reviews=(Review(1, "alice", ReviewState.APPROVED, HEAD),)),
            "self_approval",
            "not_approved",
        ),
        (
            replace(FACTS, reviews=(Review(1, "bob", ReviewState.APPROVED, OLD),)),
            "head_moved",
            "not_approved",
        ),
        (replace(FACTS, pull=replace(PULL, head_sha=OLD)), "head_moved", "head_moved"),
        (replace(FACTS, results=()), "checks_not_green", "checks_not_green"),
        (replace(FACTS, missing_permission="Contents (write)"), "permission_denied", None),
    ],
)
def test_a_merge_is_refused_with_the_blockers_coarser_code(
    facts: PrFacts, blocker: str, refusal: str | None
) -> None:
    (found,) = merge_blockers(facts, ())
    assert found.code.value == blocker
    assert found.refusal_code.value == (refusal or blocker)
    assert found.refusal_code in REFUSAL_CODES
    # decide refuses with that blocker's detail under its refusal code, and nothing else.
    target = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
    lease = Lease(target, "m1", 3, facts.head, Phase.CLAIMED, 15.0, NOW, NOW, NOW + 15)
    decision = decide(
        MergeInputs.of(facts, configured_checks=(), lease=lease, claim=lease.claim, now=NOW)
    )
    assert [(r.code, r.detail) for r in decision.refusals] == [(found.refusal_code, found.detail)]


def test_nothing_blocks_an_approved_green_pr_and_the_pull_alone_is_never_judged() -> None:
    assert merge_blockers(FACTS, ()) == ()
    with pytest.raises(ValueError, match="pull alone"):
        merge_blockers(PrFacts.of_pull(PULL), ())
