"""Delivery files read as a step: every way a file can be wrong is a clear error."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.models import Trigger
from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.delivery_file import read_delivery_file, trigger_from_delivery_file
from reviewbot.ingress.errors import DeliveryFileError, TriggerError

SHA = "e" * 40


def _write(tmp_path: Path, content: Any, name: str = "delivery.json") -> Path:
    path = tmp_path / name
    data = content if isinstance(content, bytes) else json.dumps(content).encode()
    path.write_bytes(data)
    return path


def _trigger(
    path: Path, env: dict[str, str] | None = None, forges: tuple[str, ...] = ("github",)
) -> Trigger:
    return trigger_from_delivery_file(path, configured_forges=forges, env=env or {})


def test_an_envelope_file_names_the_pr(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {"delivery_id": "run-7", "variables": {"repository": "acme/api", "pr": 3, "head_sha": SHA}},
    )
    trigger = _trigger(path)
    assert trigger.source == "file"
    assert trigger.delivery_id == "run-7"
    assert (trigger.forge, trigger.owner, trigger.name, trigger.number, trigger.head_sha) == (
        "github",
        "acme",
        "api",
        3,
        SHA,
    )


def test_without_a_delivery_id_the_identity_is_the_hash_of_the_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path, {"variables": {"repository": "acme/api", "number": 3}})
    expected = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert _trigger(path).delivery_id == expected


def test_var_environment_fills_what_the_file_leaves_out(tmp_path: Path) -> None:
    path = _write(tmp_path, {"variables": {"repository": "acme/api"}})
    assert _trigger(path, {"VAR_NUMBER": "8"}).number == 8


def test_a_forge_delivery_is_parsed_like_the_webhook(reference_dir: Path, tmp_path: Path) -> None:
    event = json.loads((reference_dir / "github/webhooks/pull_request/opened.json").read_bytes())
    path = _write(tmp_path, {"headers": {"X-GitHub-Event": "pull_request"}, "payload": event})
    trigger = _trigger(path, forges=("github", "gitea"))
    assert trigger.kind == "pull"
    assert trigger.event == "pull_request" and trigger.action == "opened"
    assert (trigger.owner, trigger.name, trigger.number) == ("codertocat", "hello-world", 2)
    assert trigger.repo_spelling == "Codertocat/Hello-World"
    assert trigger.head_sha == event["pull_request"]["head"]["sha"]
    assert trigger.source == "file"


def test_variables_come_before_the_forge_event(reference_dir: Path, tmp_path: Path) -> None:
    event = json.loads(
        (reference_dir / "gitea/webhooks/gitea/pull_request_sync/synchronized.json").read_bytes()
    )
    path = _write(
        tmp_path,
        {
            "headers": {"X-Gitea-Event-Type": "pull_request_sync"},
            "payload": event,
            "variables": {"head_sha": SHA},
        },
    )
    trigger = _trigger(path, forges=("github", "gitea"))
    assert trigger.forge == "gitea"
    assert trigger.head_sha == SHA
    assert trigger.extra["read_from"].endswith("head_sha=variables.head_sha")


def test_an_ignored_forge_event_stays_ignored(reference_dir: Path, tmp_path: Path) -> None:
    event = json.loads((reference_dir / "github/webhooks/ping/ping.json").read_bytes())
    path = _write(tmp_path, {"headers": {"X-GitHub-Event": "ping"}, "payload": event})
    trigger = _trigger(path)
    assert trigger.kind == "recorded"


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DeliveryFileError, match="does not exist") as caught:
        _trigger(tmp_path / "nope.json")
    assert caught.value.delivery_id is None
    assert caught.value.code == ReasonCode.DELIVERY_UNRESOLVED


def test_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DeliveryFileError, match="is a directory, not a file"):
        _trigger(tmp_path)


@pytest.mark.parametrize("content", [b"", b"  \n"])
def test_an_empty_file(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(DeliveryFileError, match="is empty"):
        _trigger(_write(tmp_path, content))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "is not JSON"),
        (b"\xff\xfe\x00garbage", "is not JSON"),
        (b"[1, 2]", "is a list, expected a JSON object"),
        (b'"text"', "is a string, expected a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "delivery file"),
    ],
)
def test_not_a_json_object(tmp_path: Path, content: bytes, message: str) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(DeliveryFileError, match=message) as caught:
        _trigger(path)
    # The bytes were read, so the error still names the delivery.
    assert caught.value.delivery_id == "sha256:" + hashlib.sha256(content).hexdigest()


def test_missing_number(tmp_path: Path) -> None:
    path = _write(tmp_path, {"delivery_id": "d-9", "variables": {"repository": "acme/api"}})
    with pytest.raises(DeliveryFileError, match="number: missing; looked in variables") as caught:
        _trigger(path)
    assert caught.value.delivery_id == "d-9"


def test_unread_top_level_keys_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {"number": 5, "repository": "acme/api"})
    with pytest.raises(DeliveryFileError, match="top-level keys that are not read: number"):
        _trigger(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"delivery_id": 5}, "delivery_id: 5 is not a non-empty string"),
        ({"delivery_id": " "}, "delivery_id"),
        ({"headers": []}, "headers: expected an object, got a list"),
        ({"headers": {"X-GitHub-Event": 1}}, "headers.X-GitHub-Event: 1 is not a string"),
        (
            {"headers": {"X-GitHub-Event": "pull_request"}, "payload": [1]},
            "payload: expected the github event as an object",
        ),
        ({"variables": "x"}, "variables: expected an object, got a string"),
    ],
)
def test_wrong_shapes(tmp_path: Path, content: dict[str, Any], message: str) -> None:
    with pytest.raises(DeliveryFileError, match=message):
        _trigger(_write(tmp_path, content))


def test_a_file_over_the_size_cap(tmp_path: Path) -> None:
    path = _write(tmp_path, b"{" + b" " * 2000 + b"}")
    with pytest.raises(DeliveryFileError, match="larger than 1000 bytes"):
        read_delivery_file(path, max_bytes=1000)


def test_delivery_file_errors_are_trigger_errors(tmp_path: Path) -> None:
    with pytest.raises(TriggerError):
        _trigger(tmp_path / "missing.json")
