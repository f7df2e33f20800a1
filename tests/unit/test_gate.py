"""The gate: eligible, or skip with every blocking reason; and the decisions around it."""

from __future__ import annotations

import dataclasses

import pytest

from reviewbot.config import RepoRules
from reviewbot.core.gate import (
    decision_without_gate,
    duplicate_decision,
    error_decision,
    gate,
    no_open_pulls_decision,
    same_login,
    unresolved_decision,
)
from reviewbot.core.models import PullRequestSnapshot, Reason, Trigger
from reviewbot.core.reasons import Outcome, ReasonCode

HEAD = "1" * 40
OLD = "2" * 40
BOT = "reviewbot"


def _pr(**changes: object) -> PullRequestSnapshot:
    pr = PullRequestSnapshot(
        forge="gitea",
        owner="acme",
        name="api",
        number=7,
        state="open",
        merged=False,
        draft=False,
        head_sha=HEAD,
        base_ref="main",
        head_ref="feature",
        author="alice",
        labels=("enhancement",),
    )
    return dataclasses.replace(pr, **changes)  # type: ignore[arg-type]


def _trigger(**changes: object) -> Trigger:
    trigger = Trigger(
        source="gitea",
        delivery_id="d-1",
        forge="gitea",
        event="pull_request_sync",
        action="synchronized",
        owner="acme",
        name="api",
        number=7,
        head_sha=HEAD,
    )
    return dataclasses.replace(trigger, **changes)  # type: ignore[arg-type]


RULES = RepoRules(base_branches=["main", "release/*"], skip_labels=["no-bot", "WIP"])


def test_an_open_pr_at_its_head_is_eligible() -> None:
    decision = gate(_trigger(), _pr(), RULES, bot_login=BOT)
    assert decision.outcome == Outcome.ELIGIBLE
    assert decision.codes == (ReasonCode.ELIGIBLE,)
    assert (decision.forge, decision.repo, decision.number, decision.head_sha) == (
        "gitea",
        "acme/api",
        7,
        HEAD,
    )


@pytest.mark.parametrize(
    ("pr_changes", "trigger_changes", "rules", "code"),
    [
        ({"state": "closed"}, {}, RULES, ReasonCode.PR_CLOSED),
        ({"state": "closed", "merged": True}, {}, RULES, ReasonCode.PR_CLOSED),
        ({"draft": True}, {}, RULES, ReasonCode.PR_DRAFT),
        ({}, {"head_sha": OLD}, RULES, ReasonCode.HEAD_MOVED),
        ({"author": "ReviewBot[bot]"}, {}, RULES, ReasonCode.AUTHOR_IS_BOT),
        ({"base_ref": "develop"}, {}, RULES, ReasonCode.BASE_BRANCH_EXCLUDED),
        ({"labels": ("wip",)}, {}, RULES, ReasonCode.SKIP_LABEL),
        ({}, {}, None, ReasonCode.REPO_NOT_CONFIGURED),
    ],
)
def test_each_blocking_reason(
    pr_changes: dict[str, object],
    trigger_changes: dict[str, object],
    rules: RepoRules | None,
    code: ReasonCode,
) -> None:
    decision = gate(_trigger(**trigger_changes), _pr(**pr_changes), rules, bot_login=BOT)
    assert decision.outcome == Outcome.SKIP
    assert decision.codes == (code,)
    assert decision.reason.detail


def test_every_reason_at_once() -> None:
    pr = _pr(
        state="closed",
        draft=True,
        author=BOT,
        base_ref="develop",
        labels=("no-bot", "WIP"),
    )
    decision = gate(_trigger(head_sha=OLD), pr, RULES, bot_login=BOT)
    assert decision.outcome == Outcome.SKIP
    assert decision.codes == (
        ReasonCode.PR_CLOSED,
        ReasonCode.PR_DRAFT,
        ReasonCode.HEAD_MOVED,
        ReasonCode.AUTHOR_IS_BOT,
        ReasonCode.BASE_BRANCH_EXCLUDED,
        ReasonCode.SKIP_LABEL,
    )
    assert "no-bot, WIP" in decision.reasons[-1].detail
    # The decision is about the head the delivery named.
    assert decision.head_sha == OLD


def test_not_configured_still_reports_the_other_reasons() -> None:
    decision = gate(_trigger(), _pr(draft=True), None, bot_login=BOT)
    assert decision.codes == (ReasonCode.PR_DRAFT, ReasonCode.REPO_NOT_CONFIGURED)
    assert 'repos."gitea:acme/api"' in decision.reasons[-1].detail


def test_head_moved_names_both_heads() -> None:
    decision = gate(_trigger(head_sha=OLD), _pr(), RULES, bot_login=BOT)
    assert OLD[:12] in decision.reason.detail and HEAD[:12] in decision.reason.detail


def test_a_trigger_without_a_sha_is_gated_at_the_live_head() -> None:
    decision = gate(_trigger(head_sha=None), _pr(), RULES, bot_login=BOT)
    assert decision.outcome == Outcome.ELIGIBLE and decision.head_sha == HEAD


def test_a_commit_trigger_is_compared_by_its_sha() -> None:
    commit = _trigger(kind="commit", number=None, head_sha=None, commit_sha=OLD, event="status")
    assert gate(commit, _pr(), RULES, bot_login=BOT).codes == (ReasonCode.HEAD_MOVED,)
    same = dataclasses.replace(commit, commit_sha=HEAD.upper())
    assert gate(same, _pr(), RULES, bot_login=BOT).outcome == Outcome.ELIGIBLE


def test_empty_rule_lists_allow_every_branch_and_label() -> None:
    pr = _pr(base_ref="anything", labels=("no-bot",))
    assert gate(_trigger(), pr, RepoRules(), bot_login=BOT).outcome == Outcome.ELIGIBLE


def test_base_branch_globs() -> None:
    pr = _pr(base_ref="release/1.2")
    assert gate(_trigger(), pr, RULES, bot_login=BOT).outcome == Outcome.ELIGIBLE


def test_unknown_bot_login_skips_only_that_check() -> None:
    assert gate(_trigger(), _pr(author=BOT), RULES, bot_login="").outcome == Outcome.ELIGIBLE


def test_review_command_needs_write_access() -> None:
    command = _trigger(
        head_sha=None, extra={"requires_write_access": "bob", "command": "/reviewbot review"}
    )
    for allowed in ("write", "admin", "Maintain"):
        decision = gate(command, _pr(), RULES, bot_login=BOT, commenter_permission=allowed)
        assert decision.outcome == Outcome.ELIGIBLE
    for refused in ("read", "none", None):
        decision = gate(command, _pr(), RULES, bot_login=BOT, commenter_permission=refused)
        assert decision.codes == (ReasonCode.PERMISSION_DENIED,)
        assert "bob" in decision.reason.detail


def test_the_snapshot_must_be_the_triggers_pr() -> None:
    with pytest.raises(ValueError, match="but the snapshot is gitea:acme/api#7"):
        gate(_trigger(number=8), _pr(), RULES, bot_login=BOT)
    # Owner and name compare without regard to case, as the forges do.
    assert gate(_trigger(owner="ACME"), _pr(), RULES, bot_login=BOT).outcome == "eligible"


def test_ignored_and_recorded_triggers_skip_with_their_reason() -> None:
    ignored = _trigger(
        kind="ignored",
        head_sha=None,
        reason=Reason(ReasonCode.NOT_PULL_REQUEST_EVENT, "push is not a PR event"),
    )
    decision = decision_without_gate(ignored)
    assert decision.outcome == Outcome.SKIP
    assert decision.codes == (ReasonCode.NOT_PULL_REQUEST_EVENT,)
    assert gate(ignored, _pr(), RULES, bot_login=BOT) == decision
    recorded = _trigger(kind="recorded", owner=None, name=None, number=None, head_sha=None)
    assert decision_without_gate(recorded).codes == (ReasonCode.RECORDED,)
    with pytest.raises(ValueError):
        decision_without_gate(_trigger())


def test_error_and_other_decisions() -> None:
    unresolved = unresolved_decision('number: "x" is not an integer (from variables.number)')
    assert unresolved.outcome == Outcome.ERROR
    assert unresolved.codes == (ReasonCode.DELIVERY_UNRESOLVED,)
    assert unresolved.repo is None
    forge = error_decision(ReasonCode.FORGE_ERROR, "503 Service Unavailable", trigger=_trigger())
    assert (forge.outcome, forge.repo, forge.number, forge.head_sha) == (
        Outcome.ERROR,
        "acme/api",
        7,
        HEAD,
    )
    commit = _trigger(kind="commit", number=None, head_sha=None, commit_sha=OLD)
    missing = error_decision(ReasonCode.PR_NOT_FOUND, "404", trigger=commit, number=12)
    assert missing.number == 12 and missing.head_sha == OLD
    duplicate = duplicate_decision(_trigger(delivery_id="d-2"), "d-1")
    assert duplicate.codes == (ReasonCode.DUPLICATE_DELIVERY,) and "d-1" in duplicate.reason.detail
    none_open = no_open_pulls_decision(commit)
    assert none_open.codes == (ReasonCode.NO_OPEN_PULL_REQUESTS,)
    assert OLD[:12] in none_open.reason.detail


def test_decision_to_dict_is_the_route_file_shape() -> None:
    decision = gate(_trigger(head_sha=OLD), _pr(draft=True), RULES, bot_login=BOT)
    assert decision.to_dict() == {
        "decision": "skip",
        "reasons": [
            {"code": "pr_draft", "detail": "the PR is a draft"},
            {"code": "head_moved", "detail": decision.reasons[1].detail},
        ],
        "forge": "gitea",
        "repo": "acme/api",
        "number": 7,
        "head_sha": OLD,
    }


def test_same_login() -> None:
    assert same_login("ReviewBot", "reviewbot[bot]")
    assert not same_login("reviewbot2", "reviewbot")


def test_every_reason_code_is_documented() -> None:
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "reason-codes.md").read_text("utf-8")
    missing = [code.value for code in ReasonCode if f"`{code.value}`" not in text]
    assert missing == []
