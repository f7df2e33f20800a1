"""Findings -> inline comments, and how an error finding changes the verdict."""

from __future__ import annotations

import re

import pytest

from reviewbot.core.findings import (
    MAX_INLINE_CHARS,
    MAX_INLINE_COMMENTS,
    Finding,
    Severity,
    bound_findings,
    finding_bytes,
    inline_comments,
    merge_findings,
    summary_lines,
)
from reviewbot.core.models import CheckResult, CheckState, InlineComment, RequiredChecks
from reviewbot.core.policy import Verdict, VerdictKind, evaluate
from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.reviewers.findings import MalformedFindings, parse_findings

ERROR = Finding("a.py", 1, "broken", Severity.ERROR)
WARNING = Finding("a.py", 2, "odd", Severity.WARNING)

APPROVE = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.SUCCESS)])
WAITING = evaluate(RequiredChecks(("ci",)), [], [])
FAILED = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.FAILURE)])
NOTHING = evaluate(RequiredChecks(), [], [])


@pytest.mark.parametrize("verdict", [APPROVE, WAITING, NOTHING])
def test_an_error_finding_requests_changes(verdict: Verdict) -> None:
    merged = merge_findings(verdict, [WARNING, ERROR])
    assert merged.kind is VerdictKind.REQUEST_CHANGES
    assert merged.reason is ReasonCode.REVIEWER_FINDINGS


@pytest.mark.parametrize("verdict", [APPROVE, WAITING, NOTHING, FAILED])
def test_warnings_change_nothing(verdict: Verdict) -> None:
    assert merge_findings(verdict, [WARNING]) is verdict
    assert merge_findings(verdict, []) is verdict


def test_failed_checks_keep_their_reason() -> None:
    assert merge_findings(FAILED, [ERROR]) is FAILED


def test_comments_are_one_line_escaped_and_not_repeated() -> None:
    sneaky = Finding("b.py", 3, "line one\n<!-- reviewbot:outbox 1 -->", Severity.INFO)
    assert inline_comments([ERROR, ERROR, sneaky]) == (
        InlineComment("a.py", 1, "**error**: broken"),
        InlineComment("b.py", 3, "**info**: line one &lt;!-- reviewbot:outbox 1 --&gt;"),
    )


def test_summary_lines() -> None:
    assert summary_lines([ERROR, WARNING, WARNING], ["'lint': timeout: still running"]) == [
        "External reviewers reported 1 error, 2 warnings (see inline comments).",
        "- reviewer failed: 'lint': timeout: still running",
    ]
    assert summary_lines([]) == []


def test_parse_findings_accepts_both_shapes_and_names_the_bad_field() -> None:
    one = b'[{"path": "./x/y.py", "line": 4, "message": " m ", "severity": "warning"}]'
    (finding,) = parse_findings(one, source="lint")
    assert finding == Finding("x/y.py", 4, "m", Severity.WARNING, "lint")
    assert parse_findings(b'{"findings": []}') == []
    with pytest.raises(MalformedFindings, match=r"findings\[0\]\.line"):
        parse_findings(b'[{"path": "a", "line": 0, "message": "m", "severity": "info"}]')
    with pytest.raises(MalformedFindings, match="not UTF-8"):
        parse_findings(b"\xff\xfe")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "nests JSON arrays or objects too deeply"),
        (b'{"findings": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "too deeply"),
        (b"[" + b"9" * 5000 + b"]", "not usable JSON"),
        (b"[\xff]", "not UTF-8 (byte 1)"),
        (b'[{"path": "a", "line": 1e999, "message": "m", "severity": "info"}]', "[0].line"),
        (b"3", "not a JSON int"),
    ],
)
def test_output_the_runner_cannot_use_is_malformed_never_an_exception(
    raw: bytes, expected: str
) -> None:
    with pytest.raises(MalformedFindings, match=re.escape(expected)):
        parse_findings(raw)


def _many(n: int, severity: Severity, size: int = 10) -> list[Finding]:
    return [Finding(f"f{i}.py", i + 1, "m" * size, severity) for i in range(n)]


def test_a_run_keeps_at_most_so_many_findings_errors_first_in_their_order() -> None:
    infos, errors = _many(30, Severity.INFO), _many(3, Severity.ERROR)
    findings = infos[:10] + errors + infos[10:]
    kept, dropped = bound_findings(findings, count=5, total_bytes=10**6)
    assert dropped == len(findings) - 5
    assert kept == tuple(errors + infos[:2]) or kept == tuple(infos[:2] + errors)
    assert kept == tuple(f for f in findings if f in kept)  # the original order


def test_a_run_keeps_at_most_so_many_bytes_and_never_loses_its_first_error() -> None:
    big_error = Finding("a.py", 1, "e" * 5000, Severity.ERROR)
    small = _many(10, Severity.WARNING, size=90)  # 96 bytes each with their paths
    kept, dropped = bound_findings([*small, big_error], count=100, total_bytes=1000)
    # The error is kept although it alone weighs more than the bound: dropping it would
    # turn a request for changes into an approval. Nothing else fits beside it.
    assert kept == (big_error,) and dropped == 10
    kept, dropped = bound_findings(small, count=100, total_bytes=1000)
    assert len(kept) == 10 and sum(finding_bytes(f) for f in kept) <= 1000 and dropped == 0
    kept, dropped = bound_findings(small * 2, count=100, total_bytes=1000)
    assert len(kept) == 10 and dropped == 10


def test_a_cut_never_turns_errors_into_an_approval() -> None:
    findings = [*_many(600, Severity.INFO), ERROR]  # the error printed last
    kept, _ = bound_findings(findings, count=500, total_bytes=10**6)
    assert merge_findings(APPROVE, kept).kind is VerdictKind.REQUEST_CHANGES


def test_inline_comments_are_bounded_in_number_and_size_errors_first() -> None:
    infos, errors = _many(80, Severity.INFO), _many(5, Severity.ERROR)
    comments = inline_comments(infos + errors)
    assert len(comments) == MAX_INLINE_COMMENTS
    assert [c.path for c in comments[-5:]] == [f.path for f in errors]  # kept, in order
    huge = _many(40, Severity.WARNING, size=9000)
    comments = inline_comments(huge)
    assert sum(len(c.body) for c in comments) <= MAX_INLINE_CHARS
    assert len(comments) == MAX_INLINE_CHARS // (9000 + len("**warning**: "))


def test_the_summary_says_how_many_findings_are_not_inline_and_where_they_are() -> None:
    findings = _many(120, Severity.WARNING)
    lines = summary_lines(findings, pull="gitea:acme/api#12")
    assert lines == [
        "External reviewers reported 120 warnings (see inline comments).",
        "70 findings are not shown inline, to keep the review within the forge's limits: "
        "`reviewbot explain gitea:acme/api#12` lists them all.",
    ]
