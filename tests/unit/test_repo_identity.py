"""Repository identity: any casing of a name is the same repository (pure properties)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reviewbot.config import RepoRules, Settings
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.core.models import PullRef, RepoRef, Trigger, repo_key
from reviewbot.store.tokens import TokenError, TokenInfo, parse_repo_binding

# The characters GitHub and Gitea allow in owner and repository names.
NAME = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.",
    min_size=1,
    max_size=30,
)


@st.composite
def names_and_casings(draw: st.DrawFn) -> tuple[str, str]:
    """``(canonical OWNER/NAME, the same name in a random casing)``."""
    owner, name = draw(NAME), draw(NAME)
    flips = draw(st.lists(st.booleans(), min_size=len(owner) + len(name) + 1))
    full = f"{owner}/{name}"
    spelled = "".join(c.swapcase() if flip else c for c, flip in zip(full, flips, strict=False))
    return full.lower(), spelled


@given(names_and_casings(), st.sampled_from(["github", "gitea"]))
def test_any_casing_reaches_the_same_rules_lease_target_and_keys(
    pair: tuple[str, str], forge: str
) -> None:
    canonical, spelled = pair
    ref = RepoRef.parse(spelled, forge=forge)
    assert ref == RepoRef.parse(canonical, forge=forge)
    assert hash(ref) == hash(RepoRef.parse(canonical, forge=forge))
    assert ref.key == canonical == repo_key(spelled)
    assert ref.full_name == spelled  # the spelling is kept for display
    # the same rules
    strict = RepoRules(required_checks=["ci/test"])
    settings = Settings(repos={f"{forge}:{spelled}": strict}, defaults=RepoRules())
    assert settings.rules_for(RepoRef.parse(canonical, forge=forge)) is strict
    assert settings.rules_for(ref) is strict
    # the same lease target
    target = LeaseTarget(forge, spelled, 7, Role.MERGER)
    assert target == LeaseTarget(forge, canonical, 7, Role.MERGER)
    assert target.repo == canonical
    # the same PR, and the same event (replay) key for a delivery naming it
    owner, _, name = spelled.partition("/")
    assert PullRef(forge, owner, name, 7) == PullRef.parse(f"{forge}:{canonical}#7")
    spelled_trigger = Trigger("api", "d", forge, "e", owner=owner, name=name, number=7)
    c_owner, _, c_name = canonical.partition("/")
    trigger = Trigger("api", "d", forge, "e", owner=c_owner, name=c_name, number=7)
    assert spelled_trigger.semantic_key() == trigger.semantic_key()
    assert spelled_trigger.repo_full_name == canonical
    assert spelled_trigger.repo_spelling == spelled


@pytest.mark.parametrize(
    "text",
    [
        "",
        "acme",
        "acme/",
        "/api",
        "acme/api/x",
        "ac me/api",
        "acme/a\tpi",
        "acme/\x00api",
        "acme/a#1",
        "a" * 101 + "/api",
        "acme/" + "b" * 101,
    ],
)
def test_what_no_forge_allows_is_not_a_repository(text: str) -> None:
    with pytest.raises(ValueError):
        RepoRef.parse(text, forge="github")
    with pytest.raises(ValueError):
        repo_key(text)


def test_parse_reads_both_forms_and_refuses_a_contradicting_forge() -> None:
    assert RepoRef.parse("gitea:Acme/API") == RepoRef("gitea", "acme", "api")
    assert str(RepoRef.parse("gitea:Acme/API")) == "gitea:Acme/API"
    assert RepoRef.parse("gitea:Acme/API").qualified_key == "gitea:acme/api"
    assert RepoRef.parse("Acme/API", forge="github") != RepoRef.parse("gitea:acme/api")
    with pytest.raises(ValueError, match="names forge"):
        RepoRef.parse("gitea:acme/api", forge="github")
    with pytest.raises(ValueError, match="names no forge"):
        RepoRef.parse("acme/api")
    with pytest.raises(ValueError, match="unknown forge"):
        RepoRef.parse("bitbucket:acme/api")


def test_a_token_binding_is_one_repository_in_any_casing() -> None:
    assert parse_repo_binding(" gitea:Acme/API ") == "gitea:acme/api"
    with pytest.raises(TokenError):
        parse_repo_binding("gitea:acme/a b")
    for bound in ("gitea:acme/api", "gitea:Acme/API"):  # also rows stored before keys
        info = TokenInfo(1, "t", "rb_", ("merge",), bound, 1_767_225_600.0, None)
        assert info.allows_repo("gitea", "ACME/api")
        assert info.allows_repo("gitea", "acme/api")
        assert not info.allows_repo("github", "acme/api")
        assert not info.allows_repo("gitea", "acme/other")
        assert not info.allows_repo("gitea", None)
