"""resolve_capability over generated facts: every reason at once, each with a next action,
and a merge it allows is one the merge rules accept.

Both take the forge-side blockers from core.merge.merge_blockers; the agreement tests below
still matter for what each adds on its own: capability's lease and worker rules against
decide's fencing of the claim."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from reviewbot.core.capability import (
    Action,
    CallerFacts,
    CapabilityFacts,
    resolve_capability,
)
from reviewbot.core.leases import Lease, LeaseClaim, LeaseTarget, Phase, Role, WorkerStatus
from reviewbot.core.merge import MergeAction, MergeInputs, decide
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
    RulesGap,
)
from reviewbot.core.reasons import ReasonCode

NOW = 1_800_000_000.0
HEADS = ["a" * 40, "b" * 40]
USERS = ["alice", "bob", "carol"]
ME = "me-20270115T080000Z-0123456789ab"
OTHER = "other-20270115T080000Z-0123456789ab"

pulls = st.builds(
    PullRequestSnapshot,
    forge=st.just("gitea"),
    owner=st.just("acme"),
    name=st.just("api"),
    number=st.just(12),
    state=st.sampled_from(["open", "open", "closed"]),
    merged=st.booleans(),
    draft=st.booleans(),
    head_sha=st.sampled_from(HEADS),
    base_ref=st.just("main"),
    head_ref=st.just("feature"),
    author=st.sampled_from(USERS),
    mergeable=st.sampled_from([None, True, False]),
)
reviews = st.lists(
    st.builds(
        Review,
        id=st.integers(1, 50),
        reviewer=st.sampled_from(USERS),
        state=st.sampled_from(
            [ReviewState.APPROVED, ReviewState.CHANGES_REQUESTED, ReviewState.COMMENTED]
        ),
        commit_sha=st.sampled_from(HEADS),
    ),
    max_size=4,
    unique_by=lambda r: r.id,
)
results = st.lists(
    st.builds(
        CheckResult,
        name=st.just("ci/test"),
        state=st.sampled_from([CheckState.SUCCESS, CheckState.FAILURE, CheckState.PENDING]),
    ),
    max_size=1,
)
leases = st.one_of(
    st.none(),
    st.builds(
        lambda holder, head, phase, left: Lease(
            LeaseTarget("gitea", "acme/api", 12, Role.MERGER),
            holder,
            3,
            head,
            phase,
            15.0,
            NOW - 5,
            NOW - 5,
            NOW + left,
        ),
        st.sampled_from([ME, OTHER]),
        st.sampled_from(HEADS),
        st.sampled_from([Phase.CLAIMED, Phase.RELEASED]),
        st.sampled_from([-1.0, 10.0]),
    ),
)
callers = st.builds(
    CallerFacts,
    scopes=st.frozensets(st.sampled_from(["read", "review", "lease", "merge"])),
    binding=st.sampled_from([None, "gitea:acme/api", "gitea:ACME/Api", "github:acme/api"]),
    worker=st.sampled_from([None, ME]),
    worker_status=st.sampled_from([WorkerStatus.LIVE, WorkerStatus.STALE, WorkerStatus.UNPROVEN]),
    worker_owned=st.booleans(),
)
facts_st = st.builds(
    CapabilityFacts,
    action=st.sampled_from(list(Action)),
    forge=st.just("gitea"),
    repo=st.sampled_from(["acme/api", "Acme/API"]),
    number=st.just(12),
    caller=callers,
    pull=pulls,
    reviews=reviews,
    protection=st.sampled_from(
        [
            RequiredChecks(("ci/test",)),
            RequiredChecks(),
            RequiredChecks(("ci/test",), required_approvals=2),
            RequiredChecks(unreadable=(RulesGap("branch_protection", "Administration (read)"),)),
        ]
    ),
    configured_checks=st.sampled_from([(), ("ci/*",)]),
    missing_permission=st.sampled_from([None, "Contents (write)"]),
    results=results,
    lease=leases,
    bot_login=st.sampled_from([None, "alice", "reviewbot"]),
    now=st.just(NOW),
)


@given(facts_st)
def test_allowed_exactly_when_nothing_blocks_and_each_reason_says_what_next(
    facts: CapabilityFacts,
) -> None:
    answer = resolve_capability(facts)
    assert answer.allowed == (answer.blockers == ())
    assert all(b.next_action and b.detail for b in answer.blockers)
    if answer.blockers:
        assert answer.next_action == answer.blockers[0].next_action
    others = [c for c in answer.codes if c != "missing_scope"]
    assert len(set(others)) == len(others)
    for b in answer.blockers:
        assert "epoch" not in b.detail  # a refusal never hands out the fencing token
    body = answer.to_json()
    assert body["allowed"] is answer.allowed and body["codes"] == list(answer.codes)


@given(facts_st)
def test_scopes_binding_and_pr_state_are_always_reported(facts: CapabilityFacts) -> None:
    answer = resolve_capability(facts)
    needed = {"review"} if facts.action is Action.REVIEW else {"lease", "merge"}
    missing = needed - facts.caller.scopes
    assert answer.codes.count(ReasonCode.MISSING_SCOPE.value) == len(missing)
    bound_elsewhere = facts.caller.binding == "github:acme/api"
    assert (ReasonCode.REPO_NOT_ALLOWED.value in answer.codes) == bound_elsewhere
    open_pr = facts.pull.state == "open" and not facts.pull.merged
    assert (ReasonCode.PR_CLOSED.value in answer.codes) == (not open_pr)
    assert (ReasonCode.PR_DRAFT.value in answer.codes) == (open_pr and facts.pull.draft)


@given(facts_st)
def test_more_scopes_never_add_a_reason(facts: CapabilityFacts) -> None:
    wider = replace(
        facts, caller=replace(facts.caller, scopes=frozenset({"read", "review", "lease", "merge"}))
    )
    assert set(resolve_capability(wider).codes) <= set(resolve_capability(facts).codes)


@given(facts_st)
def test_a_live_lease_of_another_worker_is_named_with_its_expiry(facts: CapabilityFacts) -> None:
    answer = resolve_capability(facts)
    lease = facts.lease
    other_live = lease is not None and lease.live(NOW) and lease.holder != facts.caller.worker
    held = [b for b in answer.blockers if b.code is ReasonCode.LEASE_HELD]
    assert bool(held) == other_live
    if held:
        assert lease is not None
        assert (held[0].holder, held[0].expires_at) == (lease.holder, lease.expires_at)


@given(facts_st)
def test_an_allowed_merge_is_one_the_merge_rules_accept(facts: CapabilityFacts) -> None:
    facts = replace(facts, action=Action.MERGE)
    answer = resolve_capability(facts)
    if not answer.allowed:
        return
    # The caller would acquire the (free) lease at the head, or holds it there already.
    target = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
    worker = facts.caller.worker or ME
    held = facts.lease
    if held is None or not held.live(NOW):
        held = Lease(target, worker, 9, facts.pull.head_sha, Phase.CLAIMED, 15, NOW, NOW, NOW + 15)
    decision = decide(
        MergeInputs(
            pull=facts.pull,
            pin=facts.pull.head_sha,
            reviews=facts.reviews,
            protection=facts.protection,
            configured_checks=facts.configured_checks,
            results=facts.results,
            lease=held,
            claim=LeaseClaim(target, held.holder, held.epoch),
            now=NOW,
            missing_permission=facts.missing_permission,
        )
    )
    assert decision.action is MergeAction.MERGE, decision.summary()


@given(facts_st)
def test_a_merge_the_rules_refuse_is_never_allowed(facts: CapabilityFacts) -> None:
    facts = replace(facts, action=Action.MERGE)
    target = LeaseTarget("gitea", "acme/api", 12, Role.MERGER)
    mine = Lease(target, ME, 9, facts.pull.head_sha, Phase.CLAIMED, 15, NOW, NOW, NOW + 15)
    decision = decide(
        MergeInputs(
            pull=facts.pull,
            pin=facts.pull.head_sha,
            reviews=facts.reviews,
            protection=facts.protection,
            configured_checks=facts.configured_checks,
            results=facts.results,
            lease=mine,
            claim=mine.claim,
            now=NOW,
            missing_permission=facts.missing_permission,
        )
    )
    if decision.action is MergeAction.REFUSE:
        assert not resolve_capability(replace(facts, lease=mine)).allowed
