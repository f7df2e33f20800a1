"""The built-in CI review policy: required checks x reported results -> a verdict.

Pure: plain data in, plain data out. The caller gathers the required checks (branch
protection of the base branch, plus the repository's ``required_checks``) and every result
reported for the head SHA (commit statuses and, on GitHub, check runs).

Rules:

- A check reported several times counts by its newest report: the latest ``updated_at``,
  and among equal (or missing) timestamps the one that comes later in the input. A status
  and a check run with the same name are two reports of the same check.
- ``success``, ``neutral`` and ``skipped`` pass (GitHub accepts all three for a required
  check); ``pending`` waits; every other state (failure, error, cancelled, timed out,
  action required) fails.
- Branch-protection names are glob patterns on Gitea (``RequiredChecks.globs``), and the
  repository rules' ``required_checks`` are glob patterns on every forge (users write
  ``ci/*`` and expect it to work). A name without glob characters matches exactly. A
  pattern is satisfied when at least one reported check matches it and every matching check
  passes; a pattern that matches nothing is missing, named by the pattern.
- Any failing required check -> ``request_changes``; otherwise any pending or missing one
  -> ``waiting``; otherwise ``approve``. The verdict always lists every blocking item, not
  only the first one, so a single review names everything that needs attention.
- Nothing required anywhere -> ``no_required_checks``, unless the repository opted into
  ``approve_without_checks``.
- Part of the forge's rules could not be read (``RequiredChecks.unreadable``): "cannot read"
  is never "nothing there". With checks configured in the repository's rules, the verdict is
  judged on what could be read plus those checks and says in its body what could not be
  read; with nothing configured it waits (``protection_unreadable``), naming the permission
  that is missing. ``approve_without_checks`` never approves past an unreadable rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from fnmatch import fnmatchcase

from reviewbot.core.models import CheckResult, CheckState, RequiredChecks, ReviewEvent, RulesGap
from reviewbot.core.reasons import ReasonCode

PASSING_STATES = frozenset({CheckState.SUCCESS, CheckState.NEUTRAL, CheckState.SKIPPED})
PENDING_STATES = frozenset({CheckState.PENDING})
_GLOB_CHARS = frozenset("*?[")


class VerdictKind(StrEnum):
    APPROVE = "approve"
    REQUEST_CHANGES = "request_changes"
    WAITING = "waiting"
    NO_REQUIRED_CHECKS = "no_required_checks"


@dataclass(frozen=True)
class CheckOutcome:
    """The newest report of one required check."""

    name: str
    state: CheckState
    url: str | None = None
    source: str = "status"


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    reason: ReasonCode
    failed: tuple[CheckOutcome, ...] = ()
    pending: tuple[CheckOutcome, ...] = ()
    missing: tuple[str, ...] = ()  # required names (or Gitea patterns) nobody reported
    passed: tuple[CheckOutcome, ...] = ()
    unreadable: tuple[RulesGap, ...] = ()  # parts of the forge's rules not read

    @property
    def review_event(self) -> ReviewEvent | None:
        """The native review this verdict asks for; ``None`` means post nothing yet."""
        if self.kind is VerdictKind.APPROVE:
            return ReviewEvent.APPROVE
        if self.kind is VerdictKind.REQUEST_CHANGES:
            return ReviewEvent.REQUEST_CHANGES
        return None

    @property
    def blocking(self) -> tuple[str, ...]:
        """Every name that keeps the PR from approval: failed, pending, then missing."""
        return (
            tuple(c.name for c in self.failed) + tuple(c.name for c in self.pending) + self.missing
        )


@dataclass(frozen=True)
class Requirement:
    text: str
    glob: bool

    def matches(self, name: str) -> bool:
        return fnmatchcase(name, self.text) if self.glob else name == self.text


def required_names(protection: RequiredChecks, configured: Iterable[str]) -> list[Requirement]:
    """Protection names (globs on Gitea) plus configured patterns, without repeats."""
    seen: set[tuple[str, bool]] = set()
    out: list[Requirement] = []
    candidates = [(n, protection.globs) for n in protection.names]
    candidates += [(n, True) for n in configured]
    for text, glob in candidates:
        text = text.strip()
        if not text:
            continue
        # A pattern without wildcards names exactly one check: treat it as a name, so that
        # "ci" from protection and "ci" from the rules are one requirement.
        glob = glob and any(ch in _GLOB_CHARS for ch in text)
        key = (text, glob)
        if key not in seen:
            seen.add(key)
            out.append(Requirement(text, glob))
    return out


def newest_results(results: Sequence[CheckResult]) -> dict[str, CheckResult]:
    """The newest report of each check name (``updated_at``, then input order)."""
    best: dict[str, tuple[tuple[datetime, int], CheckResult]] = {}
    for index, result in enumerate(results):
        key = (_timestamp(result.updated_at), index)
        current = best.get(result.name)
        if current is None or key > current[0]:
            best[result.name] = (key, result)
    return {name: item[1] for name, item in best.items()}


def evaluate(
    protection: RequiredChecks,
    configured: Iterable[str],
    results: Sequence[CheckResult],
    *,
    approve_without_checks: bool = False,
) -> Verdict:
    """The verdict for one head SHA. See the module docstring for the rules."""
    configured = [c for c in configured if c.strip()]
    gaps = protection.unreadable
    if gaps and not configured:
        return Verdict(VerdictKind.WAITING, ReasonCode.PROTECTION_UNREADABLE, unreadable=gaps)
    requirements = required_names(protection, configured)
    if not requirements:
        if approve_without_checks:
            return Verdict(VerdictKind.APPROVE, ReasonCode.NO_REQUIRED_CHECKS)
        return Verdict(VerdictKind.NO_REQUIRED_CHECKS, ReasonCode.NO_REQUIRED_CHECKS)

    newest = newest_results(results)
    outcomes: dict[str, CheckOutcome] = {}
    missing: list[str] = []
    for req in requirements:
        matched = sorted(name for name in newest if req.matches(name))
        if not matched:
            if req.text not in missing:
                missing.append(req.text)
            continue
        for name in matched:
            r = newest[name]
            outcomes[name] = CheckOutcome(name, r.state, r.url, r.source)

    ordered = [outcomes[name] for name in sorted(outcomes)]
    failed = tuple(c for c in ordered if _fails(c.state))
    pending = tuple(c for c in ordered if c.state in PENDING_STATES)
    passed = tuple(c for c in ordered if c.state in PASSING_STATES)
    missing_t = tuple(sorted(missing))
    if failed:
        kind, reason = VerdictKind.REQUEST_CHANGES, ReasonCode.CHECKS_FAILED
    elif pending or missing_t:
        kind, reason = VerdictKind.WAITING, ReasonCode.CHECKS_PENDING
    else:
        kind, reason = VerdictKind.APPROVE, ReasonCode.CHECKS_PASSED
    return Verdict(kind, reason, failed, pending, missing_t, passed, gaps)


# The longest review body a forge takes (GitHub's limit; used for Gitea too).
MAX_REVIEW_BODY_CHARS = 65536


def render_review_body(
    verdict: Verdict,
    marker: str,
    notes: Sequence[str] = (),
    *,
    pull: str | None = None,
    limit: int = MAX_REVIEW_BODY_CHARS,
) -> str:
    """The review text for ``verdict``, ending with the hidden ``marker`` line.

    Check names and URLs come from CI systems, so they are neutralised before they reach
    markdown: no line breaks, no HTML (a name must never be able to forge a marker).
    ``notes`` are extra lines put before the marker (the external reviewers' summary);
    the caller neutralises them. The whole text is at most ``limit`` characters: a longer
    one is cut at a line, and says how much was left out and that ``reviewbot explain PULL``
    shows the whole record, so that the review still posts.
    """
    if "\n" in marker or "\r" in marker:
        raise ValueError("the marker must be a single line")
    lines: list[str] = []
    if verdict.kind is VerdictKind.APPROVE:
        if verdict.reason is ReasonCode.NO_REQUIRED_CHECKS:
            lines.append(
                "Approved: no required checks are configured for this branch, and this "
                "repository approves without checks."
            )
        else:
            n = len(verdict.passed)
            lines.append(
                "Approved: the one required check passed."
                if n == 1
                else f"Approved: all {n} required checks passed."
            )
    elif verdict.reason is ReasonCode.REVIEWER_FINDINGS:
        lines.append("Changes requested: an external reviewer reported errors.")
    elif verdict.kind is VerdictKind.REQUEST_CHANGES:
        n = len(verdict.failed)
        lines.append(f"Changes requested: {n} required check{'s' if n != 1 else ''} failed.")
    elif verdict.reason is ReasonCode.PROTECTION_UNREADABLE:
        lines.append(
            "Waiting: this branch's rules on the forge could not be read, and this repository "
            "configures no required checks of its own, so there is nothing safe to judge."
        )
    elif verdict.kind is VerdictKind.WAITING:
        lines.append("Waiting: some required checks have not passed yet.")
    else:
        lines.append("No required checks are configured for this branch; no verdict is given.")

    def section(title: str, items: list[str]) -> None:
        if items:
            lines.extend(["", f"{title}:", *items])

    section(
        "Failed",
        [
            f"- {_code(c.name)}: {c.state.value.replace('_', ' ')}{_link(c.url)}"
            for c in verdict.failed
        ],
    )
    section("Pending", [f"- {_code(c.name)}{_link(c.url)}" for c in verdict.pending])
    section("Not reported yet", [f"- {_code(name)}" for name in verdict.missing])
    if verdict.unreadable:
        section(
            "Not read on the forge (this verdict covers only the checks listed above and the "
            "repository's configured required checks)",
            [f"- {_clean(gap.describe())}" for gap in verdict.unreadable],
        )
    if notes:
        lines.extend(["", *(line for note in notes for line in note.splitlines())])
    return _fit(lines, marker, pull, limit)


def _fit(lines: list[str], marker: str, pull: str | None, limit: int) -> str:
    whole = "\n".join([*lines, "", marker])
    if len(whole) <= limit:
        return whole
    where = f"`reviewbot explain {_clean(pull)}`" if pull else "`reviewbot explain`"
    kept: list[str] = []
    used = 0
    for n, line in enumerate(lines):
        cut = (
            f"... {len(lines) - n} more lines were cut to keep this review within the "
            f"forge's {limit}-character limit; {where} shows the whole record."
        )
        # What is left if this line goes in: the cut note, the marker and their breaks.
        if used + len(line) + 1 + len(cut) + len(marker) + 4 > limit:
            return "\n".join([*kept, "", cut, "", marker])
        kept.append(line)
        used += len(line) + 1
    return "\n".join([*kept, "", marker])  # unreachable: the whole text was too long


def _fails(state: CheckState) -> bool:
    return state not in PASSING_STATES and state not in PENDING_STATES


_EPOCH = datetime.min.replace(tzinfo=UTC)


def _timestamp(text: str) -> datetime:
    """ISO 8601 (``Z`` or an offset; naive means UTC); unknown or empty sorts oldest."""
    if not text:
        return _EPOCH
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        return _EPOCH
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _clean(text: str) -> str:
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(name: str) -> str:
    return "`" + _clean(name).replace("`", "'") + "`"


def _link(url: str | None) -> str:
    if not url:
        return ""
    url = url.strip()
    if not url.startswith(("https://", "http://")) or any(
        ch.isspace() or ch in "<>\"'`()" for ch in url
    ):
        return ""  # not a plain web link: leave it out rather than render something odd
    return f" ({url})"
