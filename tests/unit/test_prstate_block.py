"""The machine-readable block of the PR state comment: it parses back to what was rendered
(property test over arbitrary text), and each state renders as its golden file.

Regenerate the golden files after an intended change with
``UPDATE_GOLDEN=1 ./dev test -n 0 tests/unit/test_prstate_block.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reviewbot.core.blockers import Blocker
from reviewbot.core.merge import Readiness
from reviewbot.core.prstate import (
    STATE_MARKER,
    Change,
    CheckLine,
    DeliveryLine,
    LeaseLine,
    Live,
    PostedReview,
    PRStateRecords,
    PullState,
    ReviewProof,
    parse_pr_state,
    render_pr_state,
    state_view,
)
from reviewbot.core.reasons import ReasonCode

GOLDEN = Path(__file__).parent.parent / "golden" / "prstate"
HEAD = "9d1c0e7f4b2a8c6d5e3f1a0b9c8d7e6f5a4b3c2d"
OLD = "1111111111111111111111111111111111111111"
T0 = 1_772_359_200.0  # 2026-03-01T10:00:00Z
REVIEWER = LeaseLine(
    "reviewer", "reviewbot.reviewer-20260301T095900Z-0a1b2c3d4e5f", "claimed", HEAD,
    "2026-03-01T10:00:15.000Z",
)  # fmt: skip
MERGER = LeaseLine(
    "merger", "agent7-20260301T100000Z-3f9c0a1b2d4e", "claimed", HEAD, "2026-03-01T10:15:00.000Z"
)
DELIVERY = DeliveryLine("d-42", "gitea", "pull_request", "synchronized", "2026-03-01T09:59:58Z")
EVALUATED = Change(T0, "reviewbot", f"evaluated head {HEAD[:12]}: approve", "checks_passed")


def records(**kw: object) -> PRStateRecords:
    base: dict[str, object] = {
        "pr": "gitea:acme/api#12",
        "pr_state": "open",
        "head_sha": HEAD,
        "author": "alice",
        "decision": "approve",
        "last_delivery": DELIVERY,
        "changes": (EVALUATED,),
    }
    base.update(kw)
    return PRStateRecords(**base)  # type: ignore[arg-type]


POSTED = PostedReview("approve", HEAD, "posted", 77)
GREEN = (CheckLine("ci/test", "success", True), CheckLine("docs", "pending", False))
READY = Live(
    Readiness(HEAD, ()),
    GREEN,
    ReviewProof(77, "approved", "https://gitea.example/acme/api/pulls/12#issuecomment-77"),
    (5, 9),
)
RED = Live(
    Readiness(
        HEAD,
        (
            Blocker(ReasonCode.NOT_APPROVED, "no approval", f"get a review at {HEAD[:12]}"),
            Blocker(ReasonCode.CHECKS_NOT_GREEN, "ci/test failure", "wait for CI, or fix them"),
        ),
    ),
    (CheckLine("ci/test", "failure", True), CheckLine("lint", "missing", True)),
)
STATES: dict[PullState, PRStateRecords] = {
    PullState.NOT_EVALUATED: records(decision=None, changes=()),
    PullState.WAITING_FOR_CHECKS: records(
        decision="waiting",
        blockers=("ci/test pending", "lint not reported"),
        leases=(REVIEWER,),
        changes=(
            Change(T0, "reviewbot", "evaluated head 9d1c0e7f4b2a: waiting", "checks_pending"),
        ),
    ),
    PullState.CHANGES_REQUESTED: records(
        decision="request_changes",
        blockers=("ci/test failure: https://ci.example/9d1c",),
        review=PostedReview("request_changes", HEAD, "posted", 78),
        live=RED,
    ),
    PullState.APPROVING: records(review=PostedReview("approve", HEAD, "pending")),
    PullState.READY_TO_MERGE: records(
        review=POSTED,
        live=READY,
        changes=(EVALUATED, Change(T0 + 2, "reviewbot", "posted the approve review", "review 77")),
    ),
    PullState.MERGING: records(
        review=POSTED,
        live=READY,
        leases=(MERGER,),
        changes=(
            EVALUATED,
            Change(
                T0 + 60,
                "token 'agent-ci' (id 3)",
                "merger lease granted: agent7-20260301T100000Z-3f9c0a1b2d4e",
            ),
        ),
    ),
    PullState.REVIEWING_NEW_HEAD: records(decision="head_moved", head_sha=HEAD),
    PullState.NEEDS_ATTENTION: records(
        decision="no_required_checks",
        decision_detail="no required checks are configured for main",
    ),
    PullState.DRAFT: records(draft=True),
    PullState.CLOSED: records(pr_state="closed", review=POSTED),
    PullState.MERGED: records(
        pr_state="merged",
        review=POSTED,
        changes=(
            EVALUATED,
            Change(
                T0 + 90,
                "reviewbot",
                "merger lease released: agent7-20260301T100000Z-3f9c0a1b2d4e",
                "merged",
            ),
        ),
    ),
}


@pytest.mark.parametrize("state", list(PullState), ids=lambda s: s.value)
def test_each_state_renders_as_its_golden_file(state: PullState) -> None:
    rec = STATES[state]
    body = render_pr_state(rec)
    assert parse_pr_state(body).state == state.value
    path = GOLDEN / f"{state.value}.md"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(body)
    assert body == path.read_text(), f"{path} differs; see the module docstring"


def test_the_block_reads_back_every_key() -> None:
    view = parse_pr_state(render_pr_state(STATES[PullState.MERGING]))
    assert view.issue == "#5 #9"
    assert view.validation == "ci/test=success, docs (optional)=pending"
    assert view.native_review_proof == (
        "id=77 state=approved url=https://gitea.example/acme/api/pulls/12#issuecomment-77"
    )
    assert view.next_prompt.startswith(f"acquire the merger lease at {HEAD}")
    assert (view.state, view.who_is_next, view.head_sha, view.merge_ready) == (
        "merging",
        MERGER.holder,
        HEAD,
        True,
    )
    (lease,) = view.leases
    assert (lease.role, lease.holder, lease.phase, lease.head_sha, lease.expires_at) == (
        "merger",
        MERGER.holder,
        "claimed",
        HEAD,
        "2026-03-01T10:15:00.000Z",
    )
    assert view.last_updated_by == "token 'agent-ci' (id 3)"
    assert view.last_updated_at == "2026-03-01T10:01:00.000Z"
    assert view.what_happened.startswith("merger lease granted")


def test_no_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="reviewbot-state"):
        parse_pr_state(STATE_MARKER + "\nhello\n")


text = st.text(
    st.characters(blacklist_categories=("Cs",)), max_size=40
)  # newlines, fences, comment delimiters, '=' and ':' included
leases = st.builds(LeaseLine, text, text, text, st.one_of(st.none(), text), text)
changes = st.builds(Change, st.floats(0, 4_000_000_000, allow_nan=False), text, text, text)


@given(
    pr=text,
    pr_state=st.sampled_from(["open", "closed", "merged", "weird"]),
    head=text,
    author=text,
    decision=st.sampled_from([None, "approve", "request_changes", "waiting", "error", "x"]),
    blockers=st.lists(text, max_size=4),
    lease_lines=st.lists(leases, max_size=3),
    happened=st.lists(changes, max_size=3),
    draft=st.booleans(),
    review=st.one_of(
        st.none(),
        st.builds(PostedReview, st.sampled_from(["approve", "comment"]), text, text),
    ),
)
def test_the_block_round_trips(
    pr: str,
    pr_state: str,
    head: str,
    author: str,
    decision: str | None,
    blockers: list[str],
    lease_lines: list[LeaseLine],
    happened: list[Change],
    draft: bool,
    review: PostedReview | None,
) -> None:
    rec = PRStateRecords(
        pr=pr,
        pr_state=pr_state,
        head_sha=head,
        author=author,
        decision=decision,
        blockers=tuple(blockers),
        leases=tuple(lease_lines),
        changes=tuple(happened),
        draft=draft,
        review=review,
    )
    body = render_pr_state(rec)
    assert body.startswith(STATE_MARKER) and body.count(STATE_MARKER) == 1
    assert parse_pr_state(body) == state_view(rec)


def test_a_bot_approval_the_forge_rules_block_is_not_merge_ready() -> None:
    """The bot approved and posted at the head, but the live facts block a merge: the
    comment must not say ready (it used to, from the records alone)."""
    rec = records(review=POSTED, live=RED)
    view = parse_pr_state(render_pr_state(rec))
    assert (view.state, view.merge_ready) == ("needs_attention", False)
    assert view.next_prompt == (
        f"not_approved: get a review at {HEAD[:12]}; checks_not_green: wait for CI, or fix them"
    )
    assert view.validation == "ci/test=failure, lint=missing"
    assert view.who_is_next == "alice" and view.next_action == f"get a review at {HEAD[:12]}"
    # without a live read nothing is ready: readiness is never guessed from the records
    assert parse_pr_state(render_pr_state(records(review=POSTED))).merge_ready is False


def test_a_queued_pr_shows_its_queue_spot_in_the_table_and_the_block() -> None:
    from dataclasses import replace as _replace

    from reviewbot.core.prstate import PRStateRecords, parse_pr_state, render_pr_state

    spot = "position 2 of 3 in train 1, car 4 (testing), about 12 min"
    rec = PRStateRecords(
        pr="gitea:acme/api#7",
        pr_state="open",
        head_sha="a" * 40,
        author="alice",
        decision="approve",
        queue=spot,
    )
    body = render_pr_state(rec)
    assert f"| Merge queue | {spot} |" in body
    assert parse_pr_state(body).queue == spot
    plain = render_pr_state(_replace(rec, queue=""))
    assert "QUEUE:" not in plain and "Merge queue" not in plain
    assert parse_pr_state(plain).queue == ""
