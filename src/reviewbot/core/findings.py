"""Findings of external reviewers, and how they change a verdict.

Pure. A finding is one remark on one line of one file, with a severity. Findings become
inline comments of the native review; an ``error`` finding stands between the PR and an
approval, so it turns the verdict into ``request_changes`` whatever the checks say.
A reviewer that failed to run (timeout, bad exit, malformed output) is reported, not
guessed: its failure never adds or removes findings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from reviewbot.core.models import InlineComment
from reviewbot.core.policy import Verdict, VerdictKind
from reviewbot.core.reasons import ReasonCode


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    message: str
    severity: Severity
    source: str = ""  # the reviewer (command or session) that reported it

    @property
    def blocking(self) -> bool:
        return self.severity is Severity.ERROR


def has_blocking(findings: Iterable[Finding]) -> bool:
    return any(f.blocking for f in findings)


def merge_findings(verdict: Verdict, findings: Sequence[Finding]) -> Verdict:
    """``verdict`` with the reviewers' findings taken into account.

    Any ``error`` finding -> ``request_changes``: an approval, a wait for checks or "no
    required checks" all become a request for changes with reason ``reviewer_findings``; a
    verdict that already requests changes keeps its own reason (failed checks come first).
    Warnings and infos never change the verdict; they are comments only.
    """
    if not has_blocking(findings) or verdict.kind is VerdictKind.REQUEST_CHANGES:
        return verdict
    return dataclasses.replace(
        verdict, kind=VerdictKind.REQUEST_CHANGES, reason=ReasonCode.REVIEWER_FINDINGS
    )


def inline_comments(findings: Iterable[Finding]) -> tuple[InlineComment, ...]:
    """One inline comment per finding, in the order given, without exact repeats."""
    seen: set[tuple[str, int, str]] = set()
    out: list[InlineComment] = []
    for f in findings:
        body = f"**{f.severity.value}**: {_flat(f.message)}"
        key = (f.path, f.line, body)
        if key not in seen:
            seen.add(key)
            out.append(InlineComment(path=f.path, line=f.line, body=body))
    return tuple(out)


def summary_lines(findings: Sequence[Finding], errors: Sequence[str] = ()) -> list[str]:
    """Lines for the review body: counts per severity, then each reviewer that failed."""
    lines: list[str] = []
    if findings:
        counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
        parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
        lines.append(f"External reviewers reported {', '.join(parts)} (see inline comments).")
    for error in errors:
        lines.append(f"- reviewer failed: {_flat(error)}")
    return lines


def _flat(text: str) -> str:
    """One line, no HTML: reviewer text must never be able to forge a hidden marker."""
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
