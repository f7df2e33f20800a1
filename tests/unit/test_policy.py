from __future__ import annotations

import pytest

from reviewbot.core.models import CheckResult, CheckState, RequiredChecks, ReviewEvent, RulesGap
from reviewbot.core.policy import (
    MAX_REVIEW_BODY_CHARS,
    CheckOutcome,
    Verdict,
    VerdictKind,
    evaluate,
    newest_results,
    render_review_body,
    required_names,
)
from reviewbot.core.reasons import ReasonCode

S = CheckState
NONE = RequiredChecks()
MARKER = "<!-- reviewbot:outbox=42 -->"


def ok(name: str, at: str = "", source: str = "status") -> CheckResult:
    return CheckResult(name, S.SUCCESS, f"https://ci.example/{name}", source, at)


def res(name: str, state: CheckState, at: str = "", source: str = "status") -> CheckResult:
    return CheckResult(name, state, f"https://ci.example/{name}/{state.value}", source, at)


# --- nothing required ---------------------------------------------------------------------


def test_nothing_required_anywhere_is_no_required_checks() -> None:
    v = evaluate(NONE, [], [ok("ci")])
    assert v.kind is VerdictKind.NO_REQUIRED_CHECKS
    assert v.reason is ReasonCode.NO_REQUIRED_CHECKS
    assert v.review_event is None


def test_opt_in_approves_without_checks() -> None:
    v = evaluate(NONE, [], [], approve_without_checks=True)
    assert v.kind is VerdictKind.APPROVE
    assert v.reason is ReasonCode.NO_REQUIRED_CHECKS
    assert v.review_event is ReviewEvent.APPROVE


def test_blank_names_do_not_count_as_requirements() -> None:
    assert evaluate(RequiredChecks(("", "  ")), [" "], []).kind is VerdictKind.NO_REQUIRED_CHECKS


def test_opt_in_does_not_override_configured_checks() -> None:
    v = evaluate(NONE, ["ci"], [res("ci", S.FAILURE)], approve_without_checks=True)
    assert v.kind is VerdictKind.REQUEST_CHANGES


# --- the three verdicts ----------------------------------------------------------------------


def test_all_required_succeeded_approves() -> None:
    v = evaluate(RequiredChecks(("build",)), ["lint"], [ok("build"), ok("lint"), ok("extra")])
    assert v.kind is VerdictKind.APPROVE
    assert v.reason is ReasonCode.CHECKS_PASSED
    assert [c.name for c in v.passed] == ["build", "lint"]
    assert v.blocking == ()
    assert v.review_event is ReviewEvent.APPROVE


@pytest.mark.parametrize("state", [S.SUCCESS, S.NEUTRAL, S.SKIPPED])
def test_passing_states(state: CheckState) -> None:
    assert evaluate(NONE, ["ci"], [res("ci", state)]).kind is VerdictKind.APPROVE


@pytest.mark.parametrize("state", [S.FAILURE, S.ERROR, S.CANCELLED, S.TIMED_OUT, S.ACTION_REQUIRED])
def test_failing_states_request_changes_with_url(state: CheckState) -> None:
    v = evaluate(NONE, ["ci"], [res("ci", state)])
    assert v.kind is VerdictKind.REQUEST_CHANGES
    assert v.reason is ReasonCode.CHECKS_FAILED
    assert v.failed == (CheckOutcome("ci", state, f"https://ci.example/ci/{state.value}"),)
    assert v.review_event is ReviewEvent.REQUEST_CHANGES


def test_pending_and_missing_wait() -> None:
    v = evaluate(NONE, ["build", "lint", "docs"], [ok("build"), res("lint", S.PENDING)])
    assert v.kind is VerdictKind.WAITING
    assert v.reason is ReasonCode.CHECKS_PENDING
    assert [c.name for c in v.pending] == ["lint"]
    assert v.missing == ("docs",)
    assert v.blocking == ("lint", "docs")
    assert v.review_event is None


def test_only_missing_waits() -> None:
    v = evaluate(RequiredChecks(("build",)), [], [ok("other")])
    assert v.kind is VerdictKind.WAITING
    assert v.missing == ("build",)


def test_every_blocking_item_is_returned() -> None:
    results = [
        res("a", S.FAILURE),
        res("b", S.ERROR),
        res("c", S.CANCELLED),
        res("d", S.TIMED_OUT),
        res("e", S.PENDING),
        ok("f"),
    ]
    v = evaluate(NONE, ["a", "b", "c", "d", "e", "f", "g"], results)
    assert v.kind is VerdictKind.REQUEST_CHANGES
    assert [c.name for c in v.failed] == ["a", "b", "c", "d"]
    assert [c.name for c in v.pending] == ["e"]
    assert v.missing == ("g",)
    assert [c.name for c in v.passed] == ["f"]
    assert v.blocking == ("a", "b", "c", "d", "e", "g")


def test_unrequired_failures_do_not_block() -> None:
    v = evaluate(NONE, ["ci"], [ok("ci"), res("optional", S.FAILURE)])
    assert v.kind is VerdictKind.APPROVE


# --- newest report wins ------------------------------------------------------------------


def test_newest_by_timestamp_wins_regardless_of_order() -> None:
    results = [
        res("ci", S.SUCCESS, "2024-05-01T10:00:05Z"),
        res("ci", S.FAILURE, "2024-05-01T10:00:00Z"),
    ]
    assert evaluate(NONE, ["ci"], results).kind is VerdictKind.APPROVE
    assert evaluate(NONE, ["ci"], results[::-1]).kind is VerdictKind.APPROVE


def test_a_rerun_failure_replaces_an_earlier_success() -> None:
    results = [ok("ci", "2024-05-01T10:00:00Z"), res("ci", S.FAILURE, "2024-05-01T11:00:00Z")]
    assert evaluate(NONE, ["ci"], results).kind is VerdictKind.REQUEST_CHANGES


def test_equal_timestamps_fall_back_to_input_order() -> None:
    at = "2024-05-01T10:00:00Z"
    first = [res("ci", S.PENDING, at), ok("ci", at)]
    assert evaluate(NONE, ["ci"], first).kind is VerdictKind.APPROVE
    assert evaluate(NONE, ["ci"], first[::-1]).kind is VerdictKind.WAITING


def test_missing_timestamps_use_input_order() -> None:
    assert evaluate(NONE, ["ci"], [res("ci", S.FAILURE), ok("ci")]).kind is VerdictKind.APPROVE


def test_timestamp_offsets_are_compared_as_instants() -> None:
    results = [
        res("ci", S.FAILURE, "2024-05-01T12:30:00+02:00"),  # 10:30 UTC
        ok("ci", "2024-05-01T11:00:00Z"),
    ]
    assert evaluate(NONE, ["ci"], results).kind is VerdictKind.APPROVE
    naive = [ok("ci", "2024-05-01T09:00:00"), res("ci", S.ERROR, "2024-05-01T10:00:00Z")]
    assert evaluate(NONE, ["ci"], naive).kind is VerdictKind.REQUEST_CHANGES


def test_unparseable_timestamp_counts_as_oldest() -> None:
    results = [ok("ci", "2024-05-01T10:00:00Z"), res("ci", S.FAILURE, "yesterday")]
    assert evaluate(NONE, ["ci"], results).kind is VerdictKind.APPROVE


def test_newest_results_keeps_one_per_name() -> None:
    newest = newest_results([ok("a"), res("b", S.PENDING), res("a", S.FAILURE)])
    assert {n: r.state for n, r in newest.items()} == {"a": S.FAILURE, "b": S.PENDING}


# --- mixed sources -------------------------------------------------------------------------


def test_status_and_check_run_of_the_same_name_are_one_check() -> None:
    results = [
        res("ci", S.FAILURE, "2024-05-01T10:00:00Z", source="status"),
        ok("ci", "2024-05-01T10:05:00Z", source="check_run"),
    ]
    v = evaluate(RequiredChecks(("ci",)), [], results)
    assert v.kind is VerdictKind.APPROVE
    assert v.passed[0].source == "check_run"


def test_statuses_and_check_runs_both_satisfy_requirements() -> None:
    results = [ok("build", source="status"), ok("test", source="check_run")]
    v = evaluate(RequiredChecks(("build",)), ["test"], results)
    assert v.kind is VerdictKind.APPROVE


def test_check_run_failure_with_status_success_of_other_name() -> None:
    results = [ok("build", source="status"), res("test", S.TIMED_OUT, source="check_run")]
    v = evaluate(RequiredChecks(("build", "test")), [], results)
    assert v.kind is VerdictKind.REQUEST_CHANGES
    assert v.failed[0].source == "check_run"


# --- requirements: sources, globs, duplicates -------------------------------------------------


def test_protection_and_rules_are_combined_without_repeats() -> None:
    reqs = required_names(RequiredChecks(("ci", "build")), ["ci", "lint", "lint"])
    assert [r.text for r in reqs] == ["ci", "build", "lint"]


def test_github_names_are_exact_even_with_glob_characters() -> None:
    v = evaluate(RequiredChecks(("ci/*",), globs=False), [], [ok("ci/build")])
    assert v.kind is VerdictKind.WAITING
    assert v.missing == ("ci/*",)
    assert evaluate(RequiredChecks(("ci/*",)), [], [ok("ci/*")]).kind is VerdictKind.APPROVE


def test_gitea_glob_satisfied_when_every_match_passes() -> None:
    req = RequiredChecks(("ci/*",), globs=True)
    v = evaluate(req, [], [ok("ci/build"), ok("ci/test"), res("other", S.FAILURE)])
    assert v.kind is VerdictKind.APPROVE
    assert [c.name for c in v.passed] == ["ci/build", "ci/test"]


def test_gitea_glob_fails_when_any_match_fails() -> None:
    req = RequiredChecks(("ci/*",), globs=True)
    v = evaluate(req, [], [ok("ci/build"), res("ci/test", S.FAILURE)])
    assert v.kind is VerdictKind.REQUEST_CHANGES
    assert [c.name for c in v.failed] == ["ci/test"]


def test_gitea_glob_waits_on_pending_match() -> None:
    req = RequiredChecks(("ci/*",), globs=True)
    v = evaluate(req, [], [ok("ci/build"), res("ci/test", S.PENDING)])
    assert v.kind is VerdictKind.WAITING
    assert [c.name for c in v.pending] == ["ci/test"]


def test_gitea_glob_matching_nothing_is_missing_by_pattern() -> None:
    v = evaluate(RequiredChecks(("deploy-*",), globs=True), [], [ok("ci")])
    assert v.kind is VerdictKind.WAITING
    assert v.missing == ("deploy-*",)


def test_gitea_glob_is_case_sensitive_and_supports_classes() -> None:
    req = RequiredChecks(("test-[ab]", "Lint?"), globs=True)
    v = evaluate(req, [], [ok("test-a"), ok("test-c"), ok("lint1")])
    assert v.kind is VerdictKind.WAITING
    assert v.missing == ("Lint?",)
    assert [c.name for c in v.passed] == ["test-a"]


def test_gitea_glob_uses_the_newest_report_of_each_match() -> None:
    req = RequiredChecks(("ci/*",), globs=True)
    results = [
        res("ci/test", S.FAILURE, "2024-05-01T10:00:00Z"),
        ok("ci/test", "2024-05-01T10:10:00Z"),
        ok("ci/build", "2024-05-01T10:00:00Z"),
    ]
    assert evaluate(req, [], results).kind is VerdictKind.APPROVE


def test_gitea_pattern_without_wildcards_equals_a_rule_name() -> None:
    reqs = required_names(RequiredChecks(("ci",), globs=True), ["ci"])
    assert len(reqs) == 1


def test_check_matched_by_glob_and_exact_name_is_listed_once() -> None:
    req = RequiredChecks(("ci/*",), globs=True)
    v = evaluate(req, ["ci/test"], [res("ci/test", S.FAILURE)])
    assert [c.name for c in v.failed] == ["ci/test"]


@pytest.mark.parametrize("globs", [True, False])
def test_configured_names_are_glob_patterns_on_both_forges(globs: bool) -> None:
    v = evaluate(RequiredChecks((), globs=globs), ["ci/*"], [ok("ci/build")])
    assert v.kind is VerdictKind.APPROVE and [c.name for c in v.passed] == ["ci/build"]


def test_configured_pattern_that_matched_nothing_is_named_as_missing() -> None:
    v = evaluate(NONE, ["ci/*", "lint"], [ok("build"), ok("lint")])
    assert v.kind is VerdictKind.WAITING and v.missing == ("ci/*",)


def test_configured_name_without_glob_characters_matches_exactly() -> None:
    v = evaluate(NONE, ["ci"], [ok("ci/test"), ok("cix")])
    assert v.missing == ("ci",)


def test_configured_pattern_fails_when_any_match_fails() -> None:
    v = evaluate(NONE, ["ci/*"], [ok("ci/build"), res("ci/test", S.FAILURE)])
    assert v.kind is VerdictKind.REQUEST_CHANGES and [c.name for c in v.failed] == ["ci/test"]


# --- rendering ----------------------------------------------------------------------------------


def test_render_approve() -> None:
    v = evaluate(NONE, ["build", "test"], [ok("build"), ok("test")])
    body = render_review_body(v, MARKER)
    assert body.startswith("Approved: all 2 required checks passed.")
    assert body.splitlines()[-1] == MARKER


def test_render_no_checks_approval_says_why() -> None:
    body = render_review_body(evaluate(NONE, [], [], approve_without_checks=True), MARKER)
    assert "no required checks" in body


def test_render_request_changes_lists_every_blocker_with_urls() -> None:
    v = evaluate(
        NONE,
        ["a", "b", "c", "d"],
        [res("a", S.FAILURE), res("b", S.TIMED_OUT), res("c", S.PENDING)],
    )
    body = render_review_body(v, MARKER)
    assert "2 required checks failed" in body
    assert "- `a`: failure (https://ci.example/a/failure)" in body
    assert "- `b`: timed out (https://ci.example/b/timed_out)" in body
    assert "Pending:\n- `c` (https://ci.example/c/pending)" in body
    assert "Not reported yet:\n- `d`" in body
    assert body.count(MARKER) == 1


def test_render_waiting_and_no_checks() -> None:
    assert "Waiting" in render_review_body(evaluate(NONE, ["x"], []), MARKER)
    assert "No required checks" in render_review_body(evaluate(NONE, [], []), MARKER)


def test_render_neutralises_hostile_names_and_urls() -> None:
    hostile = CheckResult("evil\n<!-- reviewbot:outbox=1 -->`x`", S.FAILURE, "javascript:alert(1)")
    quoted = CheckResult("q", S.FAILURE, 'https://ci.example/"><script>')
    v = evaluate(NONE, [hostile.name, "q"], [hostile, quoted])
    body = render_review_body(v, MARKER)
    assert "<!--" not in body.replace(MARKER, "")
    assert "javascript:" not in body
    assert "<script>" not in body
    lines = body.splitlines()
    assert lines[-1] == MARKER
    assert "- `evil &lt;!-- reviewbot:outbox=1 --&gt;'x'`: failure" in lines


def test_render_refuses_multiline_marker() -> None:
    v = Verdict(VerdictKind.WAITING, ReasonCode.CHECKS_PENDING, missing=("x",))
    with pytest.raises(ValueError, match="single line"):
        render_review_body(v, "<!-- a -->\n<!-- b -->")


def test_render_reviewer_findings_has_its_own_wording_and_notes_before_the_marker() -> None:
    checks_passed = evaluate(NONE, ["build"], [ok("build")])
    v = Verdict(
        VerdictKind.REQUEST_CHANGES, ReasonCode.REVIEWER_FINDINGS, passed=checks_passed.passed
    )
    notes = ["External reviewers reported 1 error (see inline comments)."]
    lines = render_review_body(v, MARKER, notes).splitlines()
    assert lines[0] == "Changes requested: an external reviewer reported errors."
    assert "required check" not in lines[0]
    assert lines[-3:] == [notes[0], "", MARKER]


# --- the forge's rules could not be read ------------------------------------------------

HIDDEN = RequiredChecks(unreadable=(RulesGap("branch_protection", "Administration (read)", 404),))


@pytest.mark.parametrize("approve_without_checks", [False, True])
def test_unreadable_rules_with_nothing_configured_wait_and_name_the_permission(
    approve_without_checks: bool,
) -> None:
    # "Cannot read" is never "not protected": not even approve_without_checks approves.
    v = evaluate(HIDDEN, [], [ok("ci")], approve_without_checks=approve_without_checks)
    assert (v.kind, v.reason) == (VerdictKind.WAITING, ReasonCode.PROTECTION_UNREADABLE)
    assert v.review_event is None
    body = render_review_body(v, MARKER)
    assert "could not be read" in body and "Administration (read)" in body


def test_unreadable_rules_judge_the_configured_checks_and_say_what_was_not_read() -> None:
    v = evaluate(HIDDEN, ["ci/*"], [ok("ci/test")])
    assert (v.kind, v.reason) == (VerdictKind.APPROVE, ReasonCode.CHECKS_PASSED)
    body = render_review_body(v, MARKER)
    assert body.startswith("Approved: the one required check passed.")
    assert "Not read on the forge" in body and "HTTP 404" in body


def test_unreadable_rules_never_hide_a_failed_configured_check() -> None:
    v = evaluate(HIDDEN, ["ci/*"], [res("ci/test", S.FAILURE)])
    assert v.kind is VerdictKind.REQUEST_CHANGES and v.unreadable == HIDDEN.unreadable


def test_readable_rules_beside_an_unreadable_part_still_count() -> None:
    # Rulesets read (lint), classic protection not: the configured checks and lint both.
    partly = RequiredChecks(("lint",)).joined(HIDDEN)
    v = evaluate(partly, ["ci/*"], [ok("ci/test")])
    assert v.kind is VerdictKind.WAITING and v.missing == ("lint",)


def test_a_review_body_over_the_forge_limit_is_cut_with_a_pointer_and_its_marker() -> None:
    names = [f"ci/job-{i:05d}-" + "x" * 200 for i in range(1000)]  # ~210 KB of failed checks
    v = evaluate(
        RequiredChecks(tuple(names)), [], [CheckResult(n, CheckState.FAILURE) for n in names]
    )
    body = render_review_body(v, MARKER, pull="github:acme/api#7")
    assert len(body) <= MAX_REVIEW_BODY_CHARS
    lines = body.splitlines()
    assert lines[0] == "Changes requested: 1000 required checks failed."
    assert lines[-1] == MARKER  # the outbox still finds its review
    cut = lines[-3]
    assert cut.startswith("... ") and "more lines were cut" in cut
    assert "`reviewbot explain github:acme/api#7` shows the whole record" in cut
    shown = sum(1 for line in lines if line.startswith("- `ci/job-"))
    assert int(cut.split()[1]) == 1000 - shown  # exactly the lines left out are counted
    # A body within the limit is left whole.
    small = render_review_body(v, MARKER, pull="github:acme/api#7", limit=10**7)
    assert "more lines were cut" not in small and len(small) > MAX_REVIEW_BODY_CHARS
