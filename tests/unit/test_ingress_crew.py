"""Crew function-call envelopes -> Trigger."""

from __future__ import annotations

from typing import Any

import pytest

from reviewbot.ingress.crew import crew_call_id, crew_trigger
from reviewbot.ingress.errors import TriggerError

SHA = "c" * 40


def _envelope(**args: Any) -> dict[str, Any]:
    return {
        "variables": {"forge": "gitea"},
        "payload": {
            "function": "review_pull_request",
            "args": args,
            "from": "planner-agent",
            "call_id": "call-42",
        },
    }


def test_a_call_names_the_pr_and_who_asked() -> None:
    envelope = _envelope(repository="acme/api", pr_number=12, head_sha=SHA)
    trigger = crew_trigger(envelope, delivery_id="call-42", configured_forges=("gitea",))
    assert trigger.kind == "pull"
    assert trigger.source == "crew"
    assert (trigger.forge, trigger.owner, trigger.name, trigger.number) == (
        "gitea",
        "acme",
        "api",
        12,
    )
    assert trigger.head_sha == SHA
    assert trigger.action == "review_pull_request"
    assert trigger.sender == "planner-agent"
    assert "number=payload.args.pr_number" in trigger.extra["read_from"]
    assert crew_call_id(envelope) == "call-42"


def test_an_envelope_without_a_pr_number_is_an_exact_error() -> None:
    with pytest.raises(TriggerError) as caught:
        crew_trigger(
            _envelope(repository="acme/api"), delivery_id="x", configured_forges=("gitea",)
        )
    assert caught.value.detail.startswith("number: missing; looked in variables")
    assert caught.value.code == "delivery_unresolved"


def test_var_environment_is_the_last_fallback() -> None:
    trigger = crew_trigger(
        _envelope(repository="acme/api"),
        delivery_id="x",
        configured_forges=("gitea",),
        env={"VAR_NUMBER": "3"},
    )
    assert trigger.number == 3


def test_two_calls_are_never_the_same_event() -> None:
    envelope = _envelope(repository="acme/api", number=1, head_sha=SHA)
    first = crew_trigger(envelope, delivery_id="a", configured_forges=("gitea",))
    second = crew_trigger(envelope, delivery_id="b", configured_forges=("gitea",))
    assert first.semantic_key() != second.semantic_key()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("function", 5, "payload.function: 5 is not a string"),
        ("from", ["x"], 'payload.from: ["x"] is not a string'),
    ],
)
def test_call_fields_of_the_wrong_type(field: str, value: object, message: str) -> None:
    envelope = _envelope(repository="acme/api", number=1)
    envelope["payload"][field] = value
    with pytest.raises(TriggerError, match=message.replace("[", r"\[").replace("]", r"\]")):
        crew_trigger(envelope, delivery_id="x", configured_forges=("gitea",))


@pytest.mark.parametrize(
    ("envelope", "expected"),
    [
        ({"payload": {"call_id": " c1 "}}, "c1"),
        ({"payload": {"call_id": 7}}, "7"),
        ({"payload": {"call_id": ""}}, None),
        ({"payload": {"call_id": True}}, None),
        ({"payload": []}, None),
        ({}, None),
    ],
)
def test_call_id(envelope: dict[str, Any], expected: str | None) -> None:
    assert crew_call_id(envelope) == expected
