"""The gate: may the bot act on this PR for this delivery? Pure, and it names every reason.

``gate`` compares a trigger with the live PR (read once by the caller) and the repository's
rules. A ``skip`` lists **all** blocking reasons, so one explanation tells a user everything
that stands between the PR and a review. The helpers below turn what never reaches the gate
(an ignored event, an unreadable delivery, a forge error, a replay) into a decision of the
same shape, so every delivery ends in a recorded decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Protocol

from reviewbot.core.models import Decision, PullRequestSnapshot, Reason, Trigger
from reviewbot.core.reasons import Outcome, ReasonCode

# Permission levels that may ask for a review with a comment command.
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write", "owner"})


class GateRules(Protocol):
    """What the gate reads of a repository's rules (``config.RepoRules`` fits)."""

    @property
    def base_branches(self) -> Sequence[str]: ...

    @property
    def skip_labels(self) -> Sequence[str]: ...


def gate(
    trigger: Trigger,
    pr: PullRequestSnapshot,
    rules: GateRules | None,
    *,
    bot_login: str,
    commenter_permission: str | None = None,
) -> Decision:
    """Decide ``eligible`` or ``skip`` (with every blocking reason) for ``pr``.

    ``rules`` is ``None`` when the repository is not configured. ``bot_login`` is the bot's
    own login (empty when unknown). ``commenter_permission`` is the forge permission
    (``admin``/``write``/``read``/``none``) of the user whose comment asked for the review;
    a trigger that needs it and does not get it is refused, never waved through.
    An ``ignored`` or ``recorded`` trigger gets :func:`decision_without_gate`.
    """
    if trigger.kind in ("ignored", "recorded"):
        return decision_without_gate(trigger)
    _check_same_pull(trigger, pr)
    wanted_sha = (trigger.head_sha or trigger.commit_sha or "").lower() or None
    reasons: list[Reason] = []
    if pr.merged:
        reasons.append(Reason(ReasonCode.PR_CLOSED, "the PR is merged"))
    elif pr.state != "open":
        reasons.append(Reason(ReasonCode.PR_CLOSED, f"the PR is {pr.state}"))
    if pr.draft:
        reasons.append(Reason(ReasonCode.PR_DRAFT, "the PR is a draft"))
    if wanted_sha is not None and wanted_sha != pr.head_sha.lower():
        reasons.append(
            Reason(
                ReasonCode.HEAD_MOVED,
                f"the delivery is for {wanted_sha[:12]} but the PR head is now {pr.head_sha[:12]}",
            )
        )
    if bot_login and same_login(pr.author, bot_login):
        reasons.append(
            Reason(ReasonCode.AUTHOR_IS_BOT, f"the PR is by the bot itself ({pr.author})")
        )
    if rules is None:
        reasons.append(
            Reason(
                ReasonCode.REPO_NOT_CONFIGURED,
                f'no [repos."{pr.forge}:{pr.owner}/{pr.name}"] table and no [defaults] '
                "in the configuration",
            )
        )
    else:
        reasons.extend(_rule_reasons(pr, rules))
    denied = _permission_reason(trigger, commenter_permission)
    if denied is not None:
        reasons.append(denied)
    head_sha = wanted_sha or pr.head_sha
    if reasons:
        return _decision(Outcome.SKIP, reasons, pr=pr, head_sha=head_sha)
    eligible = Reason(
        ReasonCode.ELIGIBLE, f"open PR at head {pr.head_sha[:12]}; nothing blocks a review"
    )
    return _decision(Outcome.ELIGIBLE, [eligible], pr=pr, head_sha=head_sha)


def same_login(a: str, b: str) -> bool:
    """Logins are case-insensitive; a GitHub App acts as ``NAME[bot]``."""

    def norm(login: str) -> str:
        return login.strip().casefold().removesuffix("[bot]")

    return norm(a) == norm(b)


def _check_same_pull(trigger: Trigger, pr: PullRequestSnapshot) -> None:
    """A ``pull`` trigger must be gated against the PR it names (a caller bug otherwise)."""
    if trigger.kind != "pull":
        return
    named = (trigger.forge, (trigger.owner or "").casefold(), (trigger.name or "").casefold())
    live = (pr.forge, pr.owner.casefold(), pr.name.casefold())
    if named != live or trigger.number != pr.number:
        raise ValueError(
            f"trigger names {trigger.forge}:{trigger.owner}/{trigger.name}#{trigger.number} "
            f"but the snapshot is {pr.ref}"
        )


def _rule_reasons(pr: PullRequestSnapshot, rules: GateRules) -> list[Reason]:
    reasons: list[Reason] = []
    bases = list(rules.base_branches)
    if bases and not any(fnmatchcase(pr.base_ref, pattern) for pattern in bases):
        reasons.append(
            Reason(
                ReasonCode.BASE_BRANCH_EXCLUDED,
                f"base branch {pr.base_ref} is not among base_branches ({', '.join(bases)})",
            )
        )
    skip = {label.casefold() for label in rules.skip_labels}
    hits = [label for label in pr.labels if label.casefold() in skip]
    if hits:
        reasons.append(
            Reason(
                ReasonCode.SKIP_LABEL,
                f"the PR carries the skip label{'s' if len(hits) > 1 else ''} {', '.join(hits)}",
            )
        )
    return reasons


def _permission_reason(trigger: Trigger, permission: str | None) -> Reason | None:
    login = trigger.extra.get("requires_write_access")
    if not login:
        return None
    command = trigger.extra.get("command", "the command")
    if permission is None:
        return Reason(
            ReasonCode.PERMISSION_DENIED,
            f"{command} by {login}: their write access was not checked",
        )
    if permission.lower() not in WRITE_PERMISSIONS:
        return Reason(
            ReasonCode.PERMISSION_DENIED,
            f"{command} by {login}, who has {permission} access; it needs write access",
        )
    return None


def _decision(
    outcome: Outcome,
    reasons: Sequence[Reason],
    *,
    pr: PullRequestSnapshot | None = None,
    trigger: Trigger | None = None,
    head_sha: str | None = None,
    number: int | None = None,
) -> Decision:
    if pr is not None:
        return Decision(outcome, tuple(reasons), pr.forge, pr.owner, pr.name, pr.number, head_sha)
    if trigger is not None:
        return Decision(
            outcome,
            tuple(reasons),
            trigger.forge,
            trigger.owner,
            trigger.name,
            number if number is not None else trigger.number,
            head_sha or trigger.head_sha or trigger.commit_sha,
        )
    return Decision(outcome, tuple(reasons), number=number, head_sha=head_sha)


def decision_without_gate(trigger: Trigger) -> Decision:
    """The ``skip`` of an ``ignored`` or ``recorded`` trigger, or of a ``push`` no listener
    registered for, with the trigger's reason."""
    if trigger.kind not in ("ignored", "recorded", "push"):
        raise ValueError(f"a {trigger.kind} trigger goes through the gate")
    code = ReasonCode.RECORDED if trigger.kind == "recorded" else ReasonCode.ACTION_IGNORED
    reason = trigger.reason or Reason(code, f"{trigger.event} needs no action")
    return _decision(Outcome.SKIP, [reason], trigger=trigger)


def unresolved_decision(detail: str, *, trigger: Trigger | None = None) -> Decision:
    """An ``error`` for a delivery that cannot be read (``delivery_unresolved``)."""
    return _decision(
        Outcome.ERROR, [Reason(ReasonCode.DELIVERY_UNRESOLVED, detail)], trigger=trigger
    )


def error_decision(
    code: ReasonCode,
    detail: str,
    *,
    trigger: Trigger | None = None,
    pr: PullRequestSnapshot | None = None,
    number: int | None = None,
) -> Decision:
    """An ``error`` met while deciding: ``forge_error`` (status and message),
    ``pr_not_found``, ``forge_not_configured``, ``permission_denied``..."""
    head = pr.head_sha if pr is not None else None
    return _decision(
        Outcome.ERROR, [Reason(code, detail)], pr=pr, trigger=trigger, head_sha=head, number=number
    )


def duplicate_decision(trigger: Trigger, first_delivery_id: str) -> Decision:
    """A ``skip`` for a replay: same event as an earlier delivery, so no second action."""
    reason = Reason(
        ReasonCode.DUPLICATE_DELIVERY,
        f"the same event as delivery {first_delivery_id} (same forge, repository, PR, head "
        "and action); it was acted on once",
    )
    return _decision(Outcome.SKIP, [reason], trigger=trigger)


def no_open_pulls_decision(trigger: Trigger) -> Decision:
    """A ``skip`` for a commit event whose SHA is the head of no open PR."""
    sha = (trigger.commit_sha or trigger.head_sha or "")[:12]
    reason = Reason(ReasonCode.NO_OPEN_PULL_REQUESTS, f"no open PR has head {sha}")
    return _decision(Outcome.SKIP, [reason], trigger=trigger)


def routed_decision(trigger: Trigger, listeners: Sequence[str]) -> Decision:
    """A ``skip`` for a commit event handed to registered listeners instead of the gate."""
    sha = (trigger.commit_sha or trigger.head_sha or "")[:12]
    names = ", ".join(listeners)
    reason = Reason(
        ReasonCode.ROUTED_TO_LISTENER,
        f"{trigger.event} on {sha} routed to listener{'s' if len(listeners) > 1 else ''} {names}",
    )
    return _decision(Outcome.SKIP, [reason], trigger=trigger)
