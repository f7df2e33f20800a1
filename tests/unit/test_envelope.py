"""The envelope read order, aliases, VAR_* fallbacks, and the exact errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.ingress.envelope import PullTarget, read_envelope
from reviewbot.ingress.errors import TriggerError

SHA = "a" * 40
BOTH = ("github", "gitea")


def _read(
    envelope: dict[str, Any],
    env: dict[str, str] | None = None,
    forges: tuple[str, ...] = BOTH,
) -> PullTarget:
    return read_envelope(envelope, configured_forges=forges, env=env or {})


def test_variables_alone_name_the_pr() -> None:
    target = _read({"variables": {"forge": "gitea", "owner": "acme", "repo": "api", "number": 12}})
    assert (target.forge, target.owner, target.name, target.number) == ("gitea", "acme", "api", 12)
    assert target.head_sha is None
    assert target.origins["number"] == "variables.number"


def test_the_read_order_is_variables_args_flat_event_env() -> None:
    envelope: dict[str, Any] = {
        "variables": {"number": 1},
        "payload": {
            "args": {"number": 2, "repository": "a/args"},
            "number": 3,
            "repo": "a/flat",
            "head_sha": SHA,
            "pull_request": {"number": 4, "head": {"sha": "b" * 40}},
            "repository": {"full_name": "a/event"},
        },
    }
    env = {"VAR_NUMBER": "5", "VAR_FORGE": "github", "VAR_REPO": "a/env"}
    target = _read(envelope, env)
    assert target.number == 1
    assert target.repo == "a/args"
    assert target.head_sha == SHA
    assert target.forge == "github"
    assert target.origins == {
        "forge": "VAR_FORGE",
        "owner": "payload.args.repository",
        "repo": "payload.args.repository",
        "number": "variables.number",
        "head_sha": "payload.head_sha",
    }
    # Without variables and args, the flat keys come next, then the event, then VAR_*.
    del envelope["variables"], envelope["payload"]["args"]
    assert _read(envelope, env).number == 3
    del envelope["payload"]["number"]
    assert _read(envelope, env).number == 4
    del envelope["payload"]["pull_request"]
    assert _read(envelope, env).number == 5


def test_forge_event_inside_the_payload_names_the_pr() -> None:
    event = {
        "number": 9,
        "pull_request": {"number": 9, "head": {"sha": SHA}},
        "repository": {"full_name": "acme/web", "owner": {"login": "acme"}, "name": "web"},
    }
    for envelope in ({"payload": event}, {"payload": {"function": "review", "event": event}}):
        target = _read(envelope, forges=("github",))
        assert (target.forge, target.repo, target.number, target.head_sha) == (
            "github",
            "acme/web",
            9,
            SHA,
        )


def test_var_environment_alone_is_enough() -> None:
    env = {
        "VAR_FORGE": "github",
        "VAR_OWNER": "acme",
        "VAR_REPO": "api",
        "VAR_NUMBER": "7",
        "VAR_HEAD_SHA": SHA.upper(),
    }
    target = _read({}, env)
    assert (target.forge, target.repo, target.number, target.head_sha) == (
        "github",
        "acme/api",
        7,
        SHA,
    )
    assert target.origins["number"] == "VAR_NUMBER"


@pytest.mark.parametrize("alias", ["number", "pr", "pr_number", "pull_number", "index"])
def test_every_number_alias_is_read(alias: str) -> None:
    assert _read({"variables": {"forge": "github", "repository": "o/r", alias: "8"}}).number == 8


@pytest.mark.parametrize("alias", ["PR", "PR_NUMBER", "PULL_NUMBER", "INDEX"])
def test_number_aliases_in_the_environment(alias: str) -> None:
    env = {"VAR_FORGE": "gitea", "VAR_REPOSITORY": "o/r", f"VAR_{alias}": "3"}
    assert _read({}, env).number == 3


def test_repo_as_owner_slash_name_or_with_owner() -> None:
    base = {"forge": "github", "number": 1}
    assert _read({"variables": {**base, "repository": "o/r"}}).repo == "o/r"
    assert _read({"variables": {**base, "repo": "o/r"}}).repo == "o/r"
    assert _read({"variables": {**base, "owner": "o", "repo": "r"}}).repo == "o/r"
    # Owner and name may come from different places.
    assert _read({"variables": {**base, "repo": "r"}}, {"VAR_OWNER": "o"}).repo == "o/r"


def test_forge_may_be_left_out_when_only_one_is_configured() -> None:
    envelope = {"variables": {"repository": "o/r", "number": 1}}
    assert _read(envelope, forges=("gitea",)).forge == "gitea"
    with pytest.raises(TriggerError, match="both github and gitea are configured"):
        _read(envelope, forges=BOTH)
    with pytest.raises(TriggerError, match="no forge is configured"):
        _read(envelope, forges=())


def test_forgejo_means_gitea() -> None:
    envelope = {"variables": {"forge": "Forgejo", "repository": "o/r", "number": 1}}
    assert _read(envelope).forge == "gitea"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"number": "abc"},
            'number: "abc" is not an integer (from variables.number)',
        ),
        ({"pr": True}, "number: true is not an integer (from variables.pr)"),
        ({"number": 0}, "number: 0 is not a positive PR number (from variables.number)"),
        ({"number": 1.5}, "number: 1.5 is not an integer (from variables.number)"),
        ({"number": [1]}, "number: [1] is not an integer (from variables.number)"),
        ({"forge": "gitlab"}, 'forge: "gitlab" is not github or gitea (from variables.forge)'),
        ({"repository": "noslash"}, 'repository: "noslash" is not OWNER/NAME'),
        ({"repo": "a/b/c"}, 'repo: "a/b/c" is not OWNER/NAME (from variables.repo)'),
        ({"repo": "has space"}, 'repo: "has space" is not OWNER/NAME'),
        ({"head_sha": "abc123"}, 'head_sha: "abc123" is not a full commit SHA'),
        ({"number": 1, "pr": 2}, "number: variables.number (1) and variables.pr (2) disagree"),
        ({"repository": "a/b", "owner": "c"}, "owner: variables.owner"),
        ({"repository": "a/b", "repo": "a/c"}, "name different repositories"),
    ],
)
def test_unreadable_values_are_exact_errors(variables: dict[str, Any], message: str) -> None:
    envelope = {
        "variables": variables,
        "payload": {"args": {"forge": "github", "repository": "o/r", "number": 5}},
    }
    with pytest.raises(TriggerError) as caught:
        _read(envelope)
    assert message in caught.value.detail


def test_a_broken_value_never_falls_through_to_a_later_place() -> None:
    env = {"VAR_NUMBER": "5", "VAR_FORGE": "github", "VAR_REPO": "o/r"}
    with pytest.raises(TriggerError, match=r"from variables\.number"):
        _read({"variables": {"number": "five"}}, env)


def test_a_broken_value_in_a_later_place_is_not_read() -> None:
    envelope = {"variables": {"forge": "github", "repository": "o/r", "number": 5}}
    assert _read(envelope, {"VAR_NUMBER": "junk"}).number == 5


def test_agreeing_aliases_are_fine() -> None:
    envelope = {"variables": {"forge": "github", "repository": "o/r", "number": 5, "pr": "5"}}
    assert _read(envelope).number == 5


def test_blank_values_count_as_absent() -> None:
    envelope = {"variables": {"forge": "", "repository": "o/r", "number": " ", "pr": None}}
    assert _read(envelope, {"VAR_NUMBER": "4"}, forges=("github",)).number == 4


def test_missing_fields_say_where_they_were_looked_for() -> None:
    with pytest.raises(TriggerError) as caught:
        _read({"variables": {"forge": "github", "repository": "o/r"}})
    detail = caught.value.detail
    assert detail.startswith("number: missing; looked in variables, payload.args, payload")
    assert "VAR_* environment variables" in detail
    assert "pr_number" in detail
    with pytest.raises(TriggerError, match="repo: missing"):
        _read({"variables": {"forge": "github", "number": 1}})
    with pytest.raises(TriggerError, match=r'owner: missing for repo "r" \(from variables.repo\)'):
        _read({"variables": {"forge": "github", "number": 1, "repo": "r"}})


def test_owner_of_another_repository_is_not_borrowed() -> None:
    envelope = {
        "variables": {"forge": "github", "number": 1, "repo": "api"},
        "payload": {"args": {"repository": "other/thing"}},
    }
    with pytest.raises(TriggerError, match="names another repository"):
        _read(envelope)


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        ({"variables": [1]}, "variables: expected an object, got a list"),
        ({"payload": "x"}, "payload: expected an object, got a string"),
        ({"payload": {"args": 3}}, "payload.args: expected an object, got a number"),
    ],
)
def test_wrong_shapes_are_errors(envelope: dict[str, Any], message: str) -> None:
    with pytest.raises(TriggerError, match=message):
        _read(envelope)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
_field = st.sampled_from(
    ["forge", "owner", "repo", "repository", "number", "pr", "index", "head_sha", "args", "event"]
)


@settings(max_examples=100, deadline=None)
@given(
    variables=st.dictionaries(_field, _json, max_size=4) | _json,
    payload=st.dictionaries(_field, _json, max_size=4) | _json,
    env=st.dictionaries(
        st.sampled_from(["VAR_NUMBER", "VAR_REPO", "VAR_FORGE"]), st.text(max_size=8)
    ),
)
def test_any_envelope_gives_a_target_or_a_trigger_error(
    variables: object, payload: object, env: dict[str, str]
) -> None:
    try:
        target = _read({"variables": variables, "payload": payload}, env)
    except TriggerError as exc:
        assert exc.detail
    else:
        assert target.number > 0 and target.forge in BOTH
