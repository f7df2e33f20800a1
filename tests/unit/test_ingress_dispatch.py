"""From a stored delivery (source, headers, raw body) to its trigger, and its identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import quote_plus

import pytest

from reviewbot.ingress.dispatch import parse_delivery
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_kinds import forge_of_headers
from reviewbot.ingress.headers import kept_headers
from reviewbot.ingress.identity import delivery_identity

FORGES = ("github", "gitea")


def _hash(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(
    ("source", "headers", "expected"),
    [
        ("github", {"X-GitHub-Delivery": "72d3162e"}, "72d3162e"),
        ("github", {"x-github-delivery": " 72d3162e "}, "72d3162e"),
        ("gitea", {"X-Gitea-Delivery": "uuid-1"}, "uuid-1"),
        ("gitea", {"X-Forgejo-Delivery": "uuid-2"}, "uuid-2"),
        ("gitea", {"X-Gogs-Delivery": "uuid-3"}, "uuid-3"),
    ],
)
def test_forge_delivery_ids_come_from_headers(
    source: str, headers: dict[str, str], expected: str
) -> None:
    # The body is not JSON: the header is read without parsing anything.
    assert delivery_identity(source, headers, b"\x00 not json") == expected


def test_missing_or_unusable_ids_fall_back_to_the_body_hash() -> None:
    body = b'{"a": 1}'
    assert delivery_identity("github", {}, body) == _hash(body)
    assert delivery_identity("gitea", {"X-Gitea-Delivery": ""}, body) == _hash(body)
    assert delivery_identity("github", {"X-GitHub-Delivery": "x" * 500}, body) == _hash(body)
    assert delivery_identity("github", {"X-GitHub-Delivery": "a\nb"}, body) == _hash(body)


def test_crew_and_file_ids_come_from_the_json() -> None:
    crew = json.dumps({"payload": {"call_id": "call-9"}}).encode()
    assert delivery_identity("crew", {}, crew) == "call-9"
    assert delivery_identity("crew", {}, b"{broken") == _hash(b"{broken")
    assert delivery_identity("file", {}, b'{"delivery_id": "f-1"}') == "f-1"
    assert delivery_identity("file", {}, b"{}") == _hash(b"{}")


def test_api_ids_are_minted_by_the_caller() -> None:
    assert delivery_identity("api", {}, b"{}") is None
    with pytest.raises(ValueError, match="unknown delivery source"):
        delivery_identity("smtp", {}, b"")


def test_github_delivery(reference_dir: Path) -> None:
    body = (reference_dir / "github/webhooks/pull_request/opened.json").read_bytes()
    headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "g-1"}
    trigger = parse_delivery("github", headers, body, configured_forges=FORGES)
    assert trigger.delivery_id == "g-1" and trigger.kind == "pull" and trigger.number == 2


def test_gitea_form_delivery(reference_dir: Path) -> None:
    document = (reference_dir / "gitea/webhooks/gitea/pull_request/opened.json").read_bytes()
    body = b"payload=" + quote_plus(document).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Gitea-Event-Type": "pull_request",
        "X-Gitea-Delivery": "t-1",
    }
    trigger = parse_delivery("gitea", headers, body, configured_forges=FORGES)
    assert trigger.kind == "pull" and trigger.delivery_id == "t-1"


@pytest.mark.parametrize(
    ("source", "body", "message"),
    [
        ("github", b"", "body is empty"),
        ("github", b'{"action": "opened"', "body is not JSON"),
        ("gitea", b"[]", "body is a list, expected a JSON object"),
        ("crew", b"nope", "body is not JSON"),
        ("crew", b'{"payload": {"args": {}}}', "forge: missing; both"),
        ("api", b'{"repo": "a/b"}', "number: Field required"),
        ("file", b"", "delivery file: is empty"),
    ],
)
def test_unreadable_deliveries_are_trigger_errors(source: str, body: bytes, message: str) -> None:
    headers = {"X-GitHub-Event": "pull_request", "X-Gitea-Event-Type": "pull_request"}
    with pytest.raises(TriggerError, match=message):
        parse_delivery(source, headers, body, configured_forges=FORGES, delivery_id="d")


def test_crew_and_api_and_file_deliveries() -> None:
    crew = {"variables": {"forge": "github", "repository": "o/r", "number": 2}}
    crew["payload"] = {"call_id": "c-1", "function": "review"}
    trigger = parse_delivery("crew", {}, json.dumps(crew).encode(), configured_forges=FORGES)
    assert trigger.delivery_id == "c-1" and trigger.number == 2
    api = b'{"forge": "gitea", "repo": "o/r", "number": 3}'
    trigger = parse_delivery(
        "api", {}, api, configured_forges=FORGES, delivery_id="api-1", sender="tok"
    )
    assert trigger.source == "api" and trigger.sender == "tok" and trigger.number == 3
    with pytest.raises(ValueError, match="needs the delivery id"):
        parse_delivery("api", {}, api, configured_forges=FORGES)
    file_body = b'{"delivery_id": "f", "variables": {"repository": "o/r", "number": 4}}'
    trigger = parse_delivery(
        "file", {}, file_body, configured_forges=("gitea",), env={"VAR_HEAD_SHA": "f" * 40}
    )
    assert trigger.delivery_id == "f" and trigger.head_sha == "f" * 40


def test_form_body_without_payload_field() -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded", "X-Gitea-Event-Type": "x"}
    with pytest.raises(TriggerError, match="form body without a single payload field"):
        parse_delivery("gitea", headers, b"a=1", configured_forges=FORGES, delivery_id="d")


def test_headers_helpers() -> None:
    headers = {
        "x-github-event": "pull_request",
        "X-Hub-Signature-256": "sha256=secretish",
        "Authorization": "Bearer t",
    }
    assert kept_headers(headers) == {"X-GitHub-Event": "pull_request"}
    assert forge_of_headers(headers) == "github"
    # Gitea also sends X-GitHub-Event; its own names win.
    assert forge_of_headers({**headers, "X-Gitea-Event": "pull_request"}) == "gitea"
    assert forge_of_headers({}) is None
