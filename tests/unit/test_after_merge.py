"""After-merge rules (pure): which issues a description closes, and when the head branch may
be deleted."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from reviewbot.core.after_merge import Kind, Rules, linked_issues, plan
from reviewbot.core.models import PullRequestSnapshot

HEAD = "a" * 40
PULL = PullRequestSnapshot(
    forge="github",
    owner="Acme",
    name="API",
    number=7,
    state="closed",
    merged=True,
    draft=False,
    head_sha=HEAD,
    base_ref="main",
    head_ref="feature",
    author="alice",
    body="Fixes #3",
    head_repo="acme/api",
    default_branch="main",
)
BOTH = Rules(delete_head_branch=True, close_linked_issues=True)


def test_githubs_closing_keywords_in_any_casing_with_an_optional_colon() -> None:
    body = (
        "close #1, Closes #2, CLOSED #3\nfix #4 fixes: #5 Fixed #6\n"
        "resolve #7 resolves acme/api#8 Resolved ACME/Api#9"
    )
    assert linked_issues(body, "acme", "api") == tuple(range(1, 10))


def test_only_keywords_and_only_this_repository() -> None:
    body = (
        "see #1; refs #2; prefix#3; unfixes #4; fixes other/api#5; fixes acme/api2#6; "
        "fixes #0; fixes #7 and fixes #7 again"
    )
    assert linked_issues(body, "acme", "api") == (7,)


@given(st.text(max_size=400))
def test_any_text_gives_positive_numbers_named_once(body: str) -> None:
    found = linked_issues(body, "acme", "api")
    assert all(n > 0 for n in found) and len(set(found)) == len(found)


def test_off_by_default() -> None:
    assert plan(PULL, HEAD, Rules(), HEAD) == ()


def test_the_head_branch_is_deleted_only_when_safe() -> None:
    def branch(pull: PullRequestSnapshot, sha: str | None = HEAD) -> tuple[bool, str]:
        (action,) = [a for a in plan(pull, HEAD, BOTH, sha) if a.kind is Kind.DELETE_HEAD_BRANCH]
        return action.go, action.why

    assert branch(PULL) == (True, "")
    assert branch(PULL, "b" * 40)[1].startswith("the head branch moved to bbbb")
    assert branch(PULL, None) == (False, "the head branch is gone already")
    fork = branch(replace(PULL, head_repo="mallory/api"))
    assert fork == (False, "the head branch is in the fork mallory/api, not the repository")
    assert branch(replace(PULL, head_repo=None))[0] is False
    assert branch(replace(PULL, head_ref="main"))[0] is False  # the base
    assert branch(replace(PULL, head_ref="develop", default_branch="develop"))[0] is False
    assert branch(replace(PULL, default_branch=None))[0] is False
    assert branch(replace(PULL, merged=False, state="open"))[0] is False


def test_each_linked_issue_is_an_action() -> None:
    actions = plan(replace(PULL, body="fixes #3, closes #4"), HEAD, BOTH, HEAD)
    assert [(a.kind, a.target, a.go) for a in actions] == [
        (Kind.DELETE_HEAD_BRANCH, "feature", True),
        (Kind.CLOSE_ISSUE, "#3", True),
        (Kind.CLOSE_ISSUE, "#4", True),
    ]
