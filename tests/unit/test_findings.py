"""Findings -> inline comments, and how an error finding changes the verdict."""

from __future__ import annotations

import re

import pytest

from reviewbot.core.findings import (
    Finding,
    Severity,
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
