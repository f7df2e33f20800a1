"""Which registered listeners a commit event reaches: the pure decision."""

from __future__ import annotations

import pytest

from reviewbot.core.commit_routes import (
    CommitEvent,
    CommitResult,
    Registration,
    branch_name,
    listener_names,
    matching,
    polled_commits,
    result_key,
)

SHA, OTHER = "a" * 40, "b" * 40


def _sha(rid: int, sha: str = SHA, listener: str = "queue", **kw: str) -> Registration:
    return Registration(rid, listener, kw.get("forge", "github"), kw.get("repo", "acme/api"), sha)


def _branch(rid: int, pattern: str, listener: str = "queue") -> Registration:
    return Registration(rid, listener, "github", "acme/api", branch=pattern)


def test_a_sha_registration_matches_that_commit_in_that_repository_only() -> None:
    reg = _sha(1)
    assert matching([reg], CommitEvent("github", "acme/api", SHA)) == (reg,)
    assert matching([reg], CommitEvent("github", "acme/api", SHA.upper())) == (reg,)
    assert matching([reg], CommitEvent("github", "acme/api", OTHER)) == ()
    assert matching([reg], CommitEvent("gitea", "acme/api", SHA)) == ()
    assert matching([reg], CommitEvent("github", "acme/web", SHA)) == ()
    assert matching([reg], CommitEvent("github", "acme/api", None)) == ()


def test_repositories_compare_case_insensitively() -> None:
    reg = _sha(1, repo="Acme/API")
    assert reg.repo == "acme/api"
    assert matching([reg], CommitEvent("github", "ACME/api", SHA)) == (reg,)


@pytest.mark.parametrize(
    ("pattern", "branch", "hit"),
    [
        ("reviewbot/queue/*", "reviewbot/queue/main/3", True),
        ("reviewbot/queue/*", "refs/heads/reviewbot/queue/main", True),
        ("refs/heads/reviewbot/queue/*", "reviewbot/queue/main/3", True),
        ("reviewbot/queue/*", "reviewbot/other/main", False),
        ("reviewbot/queue/*", "Reviewbot/queue/main", False),  # git names are case-sensitive
        ("release-?", "release-1", True),
        ("main", "main", True),
        ("main", "maintenance", False),
    ],
)
def test_a_branch_pattern_matches_fnmatch_style(pattern: str, branch: str, hit: bool) -> None:
    reg = _branch(1, pattern)
    event = CommitEvent("github", "acme/api", OTHER, (branch,))
    assert matching([reg], event) == ((reg,) if hit else ())


def test_a_branch_pattern_needs_the_event_to_name_a_branch() -> None:
    assert matching([_branch(1, "*")], CommitEvent("github", "acme/api", SHA)) == ()


def test_matches_come_oldest_first_and_each_listener_is_named_once() -> None:
    later = _branch(5, "reviewbot/queue/*")
    first = _sha(2)
    other = _sha(3, listener="audit")
    event = CommitEvent("github", "acme/api", SHA, ("reviewbot/queue/main/1",))
    found = matching([later, other, first], event)
    assert found == (first, other, later)
    assert listener_names(found) == ("queue", "audit")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"sha": SHA, "branch": "x"}, "exactly one"),
        ({}, "exactly one"),
        ({"sha": "abc123"}, "full commit SHA"),
        ({"branch": "refs/heads/ "}, "must not be empty"),
    ],
)
def test_a_registration_names_exactly_one_valid_target(kw: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Registration(1, "queue", "github", "acme/api", **kw)  # type: ignore[arg-type]


def test_a_registration_names_a_known_forge_a_repository_and_a_listener() -> None:
    with pytest.raises(ValueError, match="unknown forge"):
        Registration(1, "queue", "gitlab", "acme/api", SHA)
    with pytest.raises(ValueError, match="OWNER/NAME"):
        Registration(1, "queue", "github", "acme", SHA)
    with pytest.raises(ValueError, match="names its listener"):
        Registration(1, " ", "github", "acme/api", SHA)


def test_only_sha_registrations_are_polled_each_commit_once() -> None:
    regs = [_sha(1), _sha(2, listener="audit"), _sha(3, OTHER), _branch(4, "reviewbot/*")]
    assert polled_commits(regs) == (("github", "acme/api", SHA), ("github", "acme/api", OTHER))


def test_a_result_is_the_same_by_commit_context_and_state() -> None:
    event = CommitEvent("github", "acme/api", SHA)
    same = result_key(CommitEvent("github", "acme/api", SHA.upper()), CommitResult("ci", "success"))
    assert result_key(event, CommitResult("ci", "success")) == same
    assert result_key(event, CommitResult("ci", "pending")) != same
    assert result_key(event, CommitResult("lint", "success")) != same


def test_branch_name_strips_the_heads_prefix_only() -> None:
    assert branch_name("refs/heads/main") == "main"
    assert branch_name("main") == "main"
    assert branch_name("refs/tags/v1") == "refs/tags/v1"
