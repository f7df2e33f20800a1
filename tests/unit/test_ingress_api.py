"""``POST /api/v1/reviews`` bodies -> Trigger."""

from __future__ import annotations

import json

import pytest

from reviewbot.ingress.api import api_trigger, parse_review_request
from reviewbot.ingress.errors import TriggerError

SHA = "d" * 64


def test_a_valid_body_becomes_a_pull_trigger() -> None:
    body = parse_review_request(
        json.dumps({"forge": "github", "repo": "acme/api", "number": 4, "head_sha": SHA}).encode()
    )
    trigger = api_trigger(
        body, delivery_id="api-1", configured_forges=("github", "gitea"), sender="ci-token"
    )
    assert trigger.kind == "pull"
    assert trigger.source == "api"
    assert (trigger.forge, trigger.owner, trigger.name, trigger.number) == (
        "github",
        "acme",
        "api",
        4,
    )
    assert trigger.head_sha == SHA
    assert trigger.sender == "ci-token"


def test_forge_defaults_to_the_only_configured_one() -> None:
    body = parse_review_request({"repo": "acme/api", "number": 4})
    assert api_trigger(body, delivery_id="x", configured_forges=("gitea",)).forge == "gitea"
    with pytest.raises(TriggerError, match="both github and gitea"):
        api_trigger(body, delivery_id="x", configured_forges=("github", "gitea"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "request body is empty"),
        (b"{", "request body is not JSON"),
        (b"[1]", "request body is a list, expected a JSON object"),
        (b'{"repo": "acme/api"}', "number: Field required"),
        (b'{"repo": "acme/api", "number": "4"}', "number: Input should be a valid integer"),
        (b'{"repo": "acme/api", "number": 0}', "number: Input should be greater than 0"),
        (b'{"repo": "acme/api", "number": true}', "number: Input should be a valid integer"),
        (b'{"repo": "acme", "number": 1}', "repo: 'acme' is not OWNER/NAME"),
        (
            b'{"repo": "a/b", "number": 1, "forge": "gitlab"}',
            "forge: unknown forge 'gitlab'; expected one of github, gitea",
        ),
        (b'{"repo": "a/b", "number": 1, "head_sha": "abc"}', "head_sha: is not a full commit"),
        (b'{"repo": "a/b", "number": 1, "extra": 1}', "extra: Extra inputs are not permitted"),
    ],
)
def test_bad_bodies_name_the_problem(body: bytes, message: str) -> None:
    with pytest.raises(TriggerError) as caught:
        parse_review_request(body)
    assert message in caught.value.detail


def test_every_problem_is_listed() -> None:
    with pytest.raises(TriggerError) as caught:
        parse_review_request({"repo": "x", "number": -1})
    assert "repo:" in caught.value.detail and "number:" in caught.value.detail


def test_two_requests_are_never_the_same_event() -> None:
    body = parse_review_request({"repo": "acme/api", "number": 4, "head_sha": SHA})
    first = api_trigger(body, delivery_id="a", configured_forges=("github",))
    second = api_trigger(body, delivery_id="b", configured_forges=("github",))
    assert first.semantic_key() != second.semantic_key()
