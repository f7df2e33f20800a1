"""One merge-readiness authority: the state comment's MERGE_READY, resolve_capability, the
status page's merge verdict and a merge's refusal all come from
:func:`reviewbot.core.merge.merge_readiness` over the same facts, so over any PR state they
never disagree (a property test over generated reviews, checks, mergeability, branch rules
and callers)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.core.capability import Action, CallerFacts, CapabilityFacts, resolve_capability
from reviewbot.core.leases import Lease, LeaseClaim, LeaseTarget, Phase, Role, WorkerStatus
from reviewbot.core.merge import MergeAction, MergeInputs, PrFacts, decide, merge_readiness
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewState,
    RulesGap,
)
from reviewbot.core.prstate import (
    PostedReview,
    PRStateRecords,
    live_of,
    parse_pr_state,
    render_pr_state,
)
from reviewbot.server.ui.pr_page import readiness_section

H1, H2 = "a" * 40, "b" * 40
NOW = 1_000.0
ME = "agent-20260101T000000Z-000000000001"
CALLER_CODES = {"missing_scope", "repo_not_allowed", "worker_unproven", "not_worker_owner"}
CALLER_CODES |= {"worker_stale", "lease_held", "lease_not_held"}

reviews = st.lists(
    st.builds(
        Review,
        id=st.integers(1, 50),
        reviewer=st.sampled_from(["alice", "bob", "carol", "reviewbot"]),
        state=st.sampled_from(list(ReviewState)),
        commit_sha=st.sampled_from([H1, H2, None]),
    ),
    max_size=5,
)
results = st.lists(
    st.builds(
        CheckResult,
        name=st.sampled_from(["ci/test", "lint", "docs"]),
        state=st.sampled_from(list(CheckState)),
    ),
    max_size=4,
)
protections = st.builds(
    RequiredChecks,
    names=st.lists(st.sampled_from(["ci/test", "lint"]), unique=True).map(tuple),
    required_approvals=st.integers(0, 2),
    unreadable=st.sampled_from([(), (RulesGap("branch_protection", "administration: read"),)]),
)


@st.composite
def pr_facts(draw: st.DrawFn) -> PrFacts:
    merged = draw(st.booleans())
    pull = PullRequestSnapshot(
        forge="github",
        owner="acme",
        name="api",
        number=7,
        state="closed" if merged else draw(st.sampled_from(["open", "open", "closed"])),
        merged=merged,
        draft=draw(st.booleans()),
        head_sha=draw(st.sampled_from([H1, H1, H2])),
        base_ref="main",
        head_ref="feature",
        author="alice",
        mergeable=draw(st.sampled_from([True, False, None])),
    )
    return PrFacts(
        pull,
        pull.head_sha,
        tuple(draw(reviews)),
        draw(protections),
        tuple(draw(results)),
        draw(st.sampled_from([None, "contents: write"])),
    )


def merger_lease(holder: str, head: str) -> Lease:
    target = LeaseTarget("github", "acme/api", 7, Role.MERGER)
    return Lease(target, holder, 3, head, Phase.CLAIMED, 60.0, NOW - 1, NOW - 1, NOW + 59)


@settings(max_examples=400, deadline=None)
@given(
    facts=pr_facts(),
    configured=st.lists(st.sampled_from(["ci/test", "docs", "ci/*"]), max_size=2),
    scopes=st.sets(st.sampled_from(["lease", "merge", "read", "review"])),
    holder=st.sampled_from([ME, "someone-else", None]),
    worker_status=st.sampled_from(list(WorkerStatus)),
)
def test_the_four_surfaces_never_disagree(
    facts: PrFacts,
    configured: list[str],
    scopes: set[str],
    holder: str | None,
    worker_status: WorkerStatus,
) -> None:
    pull = facts.pull
    readiness = merge_readiness(facts, configured)
    lease = None if holder is None else merger_lease(holder, pull.head_sha)

    # 1. the state comment, as an agent reads it back (the bot approved at the head)
    records = PRStateRecords(
        pr="github:acme/api#7",
        pr_state="merged" if pull.merged else pull.state,
        head_sha=pull.head_sha,
        author=pull.author,
        decision="approve",
        review=PostedReview("approve", pull.head_sha, "posted", 9),
        draft=pull.draft,
        live=live_of(facts, configured, "reviewbot"),
    )
    comment = parse_pr_state(render_pr_state(records))

    # 2. resolve_capability, for this caller
    capability = resolve_capability(
        CapabilityFacts(
            action=Action.MERGE,
            forge="github",
            repo="acme/api",
            number=7,
            caller=CallerFacts(frozenset(scopes), None, ME, worker_status, True),
            pull=pull,
            reviews=facts.reviews,
            protection=facts.protection,
            configured_checks=configured,
            results=facts.results,
            lease=lease,
            now=NOW,
            missing_permission=facts.missing_permission,
        )
    )

    # 3. the status page's merge verdict
    page = readiness_section(readiness)

    # 4. a merge at the head by this caller's claim
    claim = LeaseClaim(LeaseTarget("github", "acme/api", 7, Role.MERGER), ME, 3)
    decision = decide(
        MergeInputs.of(facts, configured_checks=configured, lease=lease, claim=claim, now=NOW)
    )

    ready = readiness.ready
    assert comment.merge_ready is ready
    assert ('class="badge merge_ready"' in page) is ready
    assert all(f"<code>{code}</code>" in page for code in readiness.codes)
    # the capability's forge-side blockers are the readiness blockers, each and in order
    forge_side = tuple(b for b in capability.blockers if b.code.value not in CALLER_CODES)
    assert forge_side == tuple(b for b in readiness.blockers if b.code.value not in CALLER_CODES)
    assert not capability.allowed or ready  # a capability never allows what is not ready
    entitled = {"lease", "merge"} <= scopes and worker_status is WorkerStatus.LIVE
    if entitled and holder == ME:
        assert capability.allowed is ready
    if pull.merged:
        return  # a merge of a merged PR is "already merged" or a lease refusal: never sent
    lease_codes = {"lease_not_held", "superseded"}
    refused = tuple(c for c in decision.codes if c not in lease_codes)
    if holder == ME:
        assert (decision.action is MergeAction.MERGE) is ready
    assert set(refused) == set(readiness.refusal_codes) - lease_codes
