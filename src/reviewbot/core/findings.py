"""Findings of external reviewers, and how they change a verdict.

Pure. A finding is one remark on one line of one file, with a severity. Findings become
inline comments of the native review; an ``error`` finding stands between the PR and an
approval, so it turns the verdict into ``request_changes`` whatever the checks say.
A reviewer that failed to run (timeout, bad exit, malformed output) is reported, not
guessed: its failure never adds or removes findings.

Everything is bounded, and every cut keeps the most severe first, so that a cut never turns a
request for changes into an approval: a run keeps at most so many findings of so many bytes
(:func:`bound_findings`), and a review carries at most :data:`MAX_INLINE_COMMENTS` inline
comments of :data:`MAX_INLINE_CHARS` characters in all; the review body says how many were
left out and where the whole list is.
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


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}

# What one review carries inline: forges refuse or time out on reviews much larger than
# this, and nobody reads hundreds of comments.
MAX_INLINE_COMMENTS = 50
MAX_INLINE_CHARS = 60_000


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


def finding_bytes(finding: Finding) -> int:
    """What a finding weighs: its path and message, in UTF-8."""
    return len(finding.path.encode()) + len(finding.message.encode())


def _most_severe_first(findings: Sequence[Finding]) -> list[int]:
    return sorted(range(len(findings)), key=lambda i: _RANK[findings[i].severity])


def bound_findings(
    findings: Sequence[Finding], *, count: int, total_bytes: int
) -> tuple[tuple[Finding, ...], int]:
    """At most ``count`` findings weighing at most ``total_bytes`` together (see
    :func:`finding_bytes`), errors first, then warnings, then infos, each in the order given;
    the kept ones in their original order, and how many were dropped.

    The first error is kept whatever it weighs: dropping it could turn the verdict into an
    approval.
    """
    keep: set[int] = set()
    used = 0
    for i in _most_severe_first(findings):
        if len(keep) >= count:
            break
        size = finding_bytes(findings[i])
        first_error = not keep and findings[i].blocking
        if used + size > total_bytes and not first_error:
            continue  # a smaller one may still fit
        keep.add(i)
        used += size
    kept = tuple(f for i, f in enumerate(findings) if i in keep)
    return kept, len(findings) - len(kept)


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


def _all_comments(findings: Sequence[Finding]) -> list[tuple[int, InlineComment]]:
    """One inline comment per finding (with its severity's rank), in the order given,
    without exact repeats."""
    seen: set[tuple[str, int, str]] = set()
    out: list[tuple[int, InlineComment]] = []
    for f in findings:
        body = f"**{f.severity.value}**: {_flat(f.message)}"
        key = (f.path, f.line, body)
        if key not in seen:
            seen.add(key)
            out.append((_RANK[f.severity], InlineComment(path=f.path, line=f.line, body=body)))
    return out


def inline_comments(
    findings: Sequence[Finding],
    *,
    limit: int = MAX_INLINE_COMMENTS,
    chars: int = MAX_INLINE_CHARS,
) -> tuple[InlineComment, ...]:
    """The inline comments of a review: one per finding without exact repeats, at most
    ``limit`` of them and ``chars`` characters of bodies in all, errors first; in the order
    the findings were given."""
    comments = _all_comments(findings)
    keep: set[int] = set()
    used = 0
    for i in sorted(range(len(comments)), key=lambda i: comments[i][0]):
        if len(keep) >= limit:
            break
        size = len(comments[i][1].body)
        if used + size > chars:
            continue
        keep.add(i)
        used += size
    return tuple(c for i, (_, c) in enumerate(comments) if i in keep)


def summary_lines(
    findings: Sequence[Finding], errors: Sequence[str] = (), *, pull: str | None = None
) -> list[str]:
    """Lines for the review body: counts per severity, how many findings are not shown
    inline (and where they all are: ``reviewbot explain PULL``), then each reviewer that
    failed."""
    lines: list[str] = []
    if findings:
        counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
        parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
        lines.append(f"External reviewers reported {', '.join(parts)} (see inline comments).")
        left_out = len(_all_comments(findings)) - len(inline_comments(findings))
        if left_out:
            where = f": `reviewbot explain {_flat(pull)}` lists them all" if pull else ""
            lines.append(
                f"{left_out} finding{'s are' if left_out != 1 else ' is'} not shown inline, "
                f"to keep the review within the forge's limits{where}."
            )
    for error in errors:
        lines.append(f"- reviewer failed: {_flat(error)}")
    return lines


def _flat(text: str) -> str:
    """One line, no HTML: reviewer text must never be able to forge a hidden marker."""
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
