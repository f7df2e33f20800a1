from __future__ import annotations

from reviewbot.core.prstate import (
    STATE_MARKER,
    DeliveryLine,
    LeaseLine,
    PostedReview,
    PRStateRecords,
    next_step,
    render_pr_state,
    review_status,
)

HEAD = "a" * 40


def records(**kw: object) -> PRStateRecords:
    base: dict[str, object] = {
        "pr": "github:acme/api#7",
        "pr_state": "open",
        "head_sha": HEAD,
        "author": "alice",
        "decision": None,
    }
    base.update(kw)
    return PRStateRecords(**base)  # type: ignore[arg-type]


def test_marker_first_and_rendering_is_deterministic() -> None:
    rec = records(decision="waiting", blockers=("ci/test pending", "lint missing"))
    body = render_pr_state(rec)
    assert body.startswith(STATE_MARKER + "\n")
    assert body == render_pr_state(rec)
    assert body.count(STATE_MARKER) == 1


def test_all_sections_are_shown() -> None:
    rec = records(
        decision="approve",
        review=PostedReview("approve", HEAD, "posted", 42),
        leases=(
            LeaseLine(
                "reviewer", "bot-20260101T000000Z-abc", "claimed", HEAD, "2026-01-01T00:00:15Z"
            ),
        ),
        last_delivery=DeliveryLine("d-1", "github", "status", None, "2026-01-01T00:00:00Z"),
        blockers=(),
    )
    body = render_pr_state(rec)
    assert f"| Head | `{HEAD}` |" in body
    assert "approved at `aaaaaaaaaaaa` (review 42)" in body
    assert "| Next | maintainers |" in body
    assert "reviewer: `bot-20260101T000000Z-abc`, claimed" in body
    assert "epoch" not in body  # the comment is public: never the fencing token
    assert "`d-1` (github status, received 2026-01-01T00:00:00Z)" in body
    assert "**Blockers**\n\n- none" in body


def test_every_blocker_is_listed() -> None:
    blockers = ("ci/test failed: http://ci/1", "lint failed", "deploy missing")
    body = render_pr_state(records(decision="request_changes", blockers=blockers))
    for b in blockers:
        assert f"- {b}" in body


def test_user_text_cannot_forge_a_marker_or_break_the_table() -> None:
    body = render_pr_state(records(author="x", blockers=("evil --> <!-- reviewbot:pr-state -->",)))
    assert body.count("<!--") == 1
    assert body.count("-->") == 1
    body = render_pr_state(records(decision="error", decision_detail="a | b"))
    assert "a \\| b" in body


def test_next_step_per_decision() -> None:
    assert next_step(records(decision="waiting")).who == "CI"
    posted_rc = PostedReview("request_changes", HEAD, "posted", 1)
    assert next_step(records(decision="request_changes", review=posted_rc)).who == "alice"
    assert next_step(records(decision="approve")).action == "post the approving review"
    posted = PostedReview("approve", HEAD, "posted", 1)
    assert next_step(records(decision="approve", review=posted, automerge=True)).who == "merger"
    assert next_step(records(pr_state="merged", decision="approve")).who == "nobody"
    assert next_step(records(decision="head_moved")).action == "review the new head"
    assert "approve_without_checks" in next_step(records(decision="no_required_checks")).action


def test_review_of_an_older_head_does_not_count() -> None:
    old = PostedReview("approve", "b" * 40, "posted", 9)
    rec = records(decision="waiting", review=old)
    assert review_status(rec) == "waiting for required checks"
    assert next_step(rec).who == "CI"


def test_dropped_review_says_the_head_moved() -> None:
    rec = records(decision="approve", review=PostedReview("approve", HEAD, "dropped"))
    assert "head moved" in review_status(rec)


def test_a_request_repeats_an_approval_for_good_and_other_judgements_for_a_while() -> None:
    from reviewbot.core.prstate import request_repeats

    assert request_repeats("approve", 0.0, 1e9, 60.0)
    for judged in ("waiting", "request_changes", "no_required_checks", "author_is_bot"):
        assert request_repeats(judged, 100.0, 159.9, 60.0), judged
        assert not request_repeats(judged, 100.0, 160.0, 60.0), judged
        assert not request_repeats(judged, 100.0, 99.0, 60.0), judged  # a clock gone back
        assert not request_repeats(judged, 100.0, 100.0, 0.0), judged  # no window
    for not_judged in ("error", "lease_held", "superseded", "head_moved", "reopened"):
        assert not request_repeats(not_judged, 100.0, 100.0, 60.0), not_judged


def test_rules_that_could_not_be_read_ask_the_operators_not_ci() -> None:
    rec = records(
        decision="waiting",
        reason_code="protection_unreadable",
        blockers=("the branch could not be read (HTTP 403): grant Contents (read)",),
    )
    assert next_step(rec).who == "operators"
    assert "could not be read" in review_status(rec)
    text = render_pr_state(rec)
    assert "needs_attention" in text and "grant Contents (read)" in text
    assert next_step(records(decision="waiting", reason_code="checks_pending")).who == "CI"
