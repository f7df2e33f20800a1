"""Gitea / Forgejo deliveries -> Trigger, over every real payload and the edge cases."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.gitea import gitea_event_type, gitea_trigger
from tests.unit.damage import damaged
from tests.unit.reference_files import example_files

WEBHOOKS = "gitea/webhooks"
SHA = "0123456789abcdef0123456789abcdef01234567"


def _index(reference_dir: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((reference_dir / WEBHOOKS / "index.json").read_text("utf-8"))
    return {entry["file"]: entry for entry in data["examples"]}


def _load(reference_dir: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((reference_dir / WEBHOOKS / rel).read_bytes())
    return data


def _headers_for(reference_dir: Path, rel: str) -> dict[str, str]:
    """The headers Gitea (or Forgejo) sends with the example: from index.json, or for a
    file not listed there, the fine event name from its folder."""
    entry = _index(reference_dir).get(rel)
    fine = entry["x_gitea_event_type"] if entry else rel.split("/")[1]
    headers = {"X-Gitea-Event-Type": fine, "X-Gitea-Delivery": "d-1"}
    if entry:
        headers["X-Gitea-Event"] = entry["x_gitea_event"]
    if rel.startswith("forgejo/"):
        headers.update({f"X-Forgejo-{k.removeprefix('X-Gitea-')}": v for k, v in headers.items()})
    return headers


def _expected(event_type: str, payload: dict[str, Any]) -> tuple[str, str | None]:
    action = payload.get("action")
    if event_type == "pull_request":
        if action in ("opened", "reopened", "closed"):
            return "pull", None
        if action == "edited" and (payload.get("changes") or {}).get("ref"):
            return "pull", None
        return "ignored", ReasonCode.ACTION_IGNORED
    if event_type in (
        "pull_request_sync",
        "pull_request_label",
        "pull_request_review_approved",
        "pull_request_review_rejected",
        "pull_request_review_comment",
    ):
        return "pull", None
    if event_type in ("pull_request_assign", "pull_request_milestone"):
        return "ignored", ReasonCode.ACTION_IGNORED
    if event_type == "pull_request_review_request":
        return "ignored", ReasonCode.ACTION_IGNORED
    if event_type == "pull_request_comment":
        return "ignored", ReasonCode.ACTION_IGNORED  # none of the examples has the command
    if event_type == "status":
        return "commit", None
    return "ignored", ReasonCode.NOT_PULL_REQUEST_EVENT


def test_the_example_folder_is_found(reference_dir: Path) -> None:
    files = set(example_files(WEBHOOKS, "*/*/*.json"))
    assert set(_index(reference_dir)) <= files
    assert len(files) >= 40


@pytest.mark.parametrize("rel", example_files(WEBHOOKS, "*/*/*.json"))
def test_every_real_payload_becomes_the_expected_trigger(reference_dir: Path, rel: str) -> None:
    payload = _load(reference_dir, rel)
    headers = _headers_for(reference_dir, rel)
    trigger = gitea_trigger(headers, payload, delivery_id="d-1")
    kind, code = _expected(headers["X-Gitea-Event-Type"], payload)
    assert trigger.kind == kind
    assert trigger.forge == "gitea"
    assert trigger.event == headers["X-Gitea-Event-Type"]
    if code is not None:
        assert trigger.reason is not None and trigger.reason.code == code
    if kind == "pull":
        full_name = payload["repository"]["full_name"]
        assert f"{trigger.owner}/{trigger.name}" == full_name.lower()
        assert trigger.repo_spelling == full_name
        assert trigger.repo_id == payload["repository"]["id"]
        assert trigger.number == payload["number"]
        assert trigger.head_sha == payload["pull_request"]["head"]["sha"]
    assert (trigger.extra.get("flavor") == "forgejo") == rel.startswith("forgejo/")


@pytest.mark.parametrize("rel", example_files(WEBHOOKS, "*/*/*.json"))
def test_only_the_coarse_header_gives_the_same_trigger(reference_dir: Path, rel: str) -> None:
    headers = _headers_for(reference_dir, rel)
    if "X-Gitea-Event" not in headers:
        pytest.skip("no coarse event name known for this example")
    payload = _load(reference_dir, rel)
    fine = gitea_trigger(headers, payload, delivery_id="d")
    coarse_only = {"X-Gitea-Event": headers["X-Gitea-Event"]}
    assert gitea_trigger(coarse_only, payload, delivery_id="d") == dataclasses.replace(
        fine, extra={k: v for k, v in fine.extra.items() if k != "flavor"}
    )


def test_forgejo_headers_alone_are_enough(reference_dir: Path) -> None:
    payload = _load(reference_dir, "forgejo/pull_request_sync/synchronized.json")
    trigger = gitea_trigger(
        {"X-Forgejo-Event-Type": "pull_request_sync", "X-Forgejo-Event": "pull_request"},
        payload,
        delivery_id="d",
    )
    assert trigger.kind == "pull" and trigger.event == "pull_request_sync"
    assert trigger.extra["flavor"] == "forgejo"


def test_review_comment_and_pr_comment_are_told_apart(reference_dir: Path) -> None:
    review = _load(reference_dir, "gitea/pull_request_review_comment/reviewed.json")
    assert gitea_event_type({"X-Gitea-Event": "pull_request_comment"}, review) == (
        "pull_request_review_comment"
    )
    comment = _load(reference_dir, "legacy-go-scm-2018/pull_request_comment/created.json")
    assert gitea_event_type({"X-Gitea-Event": "issue_comment"}, comment) == ("pull_request_comment")
    issue = _load(reference_dir, "legacy-go-scm-2018/issue_comment/created.json")
    assert gitea_event_type({"X-Gitea-Event": "issue_comment"}, issue) == "issue_comment"


def test_review_command_in_a_pr_comment_asks_for_write_access(reference_dir: Path) -> None:
    payload = _load(reference_dir, "legacy-go-scm-2018/pull_request_comment/created.json")
    payload["comment"]["body"] = "/reviewbot review"
    trigger = gitea_trigger(
        {"X-Gitea-Event-Type": "pull_request_comment"}, payload, delivery_id="d"
    )
    assert trigger.kind == "pull"
    assert trigger.number == payload["issue"]["number"]
    assert trigger.head_sha is None
    assert trigger.extra["requires_write_access"] == "unknwon"


def test_current_gitea_marks_pr_comments_with_is_pull(reference_dir: Path) -> None:
    payload = _load(reference_dir, "legacy-go-scm-2018/issue_comment/created.json")
    payload["comment"]["body"] = "/reviewbot review"
    headers = {"X-Gitea-Event-Type": "issue_comment"}
    assert gitea_trigger(headers, payload, delivery_id="d").kind == "ignored"
    payload["is_pull"] = True
    assert gitea_trigger(headers, payload, delivery_id="d").kind == "pull"


def test_edited_with_a_new_target_branch_counts(reference_dir: Path) -> None:
    payload = _load(reference_dir, "gitea/pull_request/edited.title.json")
    payload["changes"] = {"ref": {"from": "develop"}}
    trigger = gitea_trigger({"X-Gitea-Event-Type": "pull_request"}, payload, delivery_id="d")
    assert trigger.kind == "pull" and trigger.number == 7


def _status_payload(reference_dir: Path) -> dict[str, Any]:
    # Gitea's CommitStatusPayload shape (no real example is published).
    repo = _load(reference_dir, "gitea/pull_request_sync/synchronized.json")["repository"]
    return {
        "commit": {"id": SHA},
        "context": "ci/build",
        "created_at": "2026-01-01T00:00:00Z",
        "description": "passed",
        "id": 17,
        "repository": copy.deepcopy(repo),
        "sender": {"login": "ci", "username": "ci"},
        "sha": SHA,
        "state": "success",
        "target_url": "https://ci.example/17",
        "updated_at": "2026-01-01T00:00:00Z",
    }


def test_status_maps_to_a_commit(reference_dir: Path) -> None:
    trigger = gitea_trigger(
        {"X-Gitea-Event-Type": "status"}, _status_payload(reference_dir), delivery_id="d"
    )
    assert trigger.kind == "commit"
    assert trigger.commit_sha == SHA
    assert trigger.pull_numbers == ()
    assert trigger.extra["context"] == "ci/build"
    assert (trigger.owner, trigger.name) == ("test-ci", "multi-line-secrets")
    assert trigger.repo_spelling == "Test-CI/multi-line-secrets"


def test_status_without_sha_is_an_error(reference_dir: Path) -> None:
    payload = _status_payload(reference_dir)
    payload["sha"] = "not-a-sha"
    with pytest.raises(TriggerError, match='sha: "not-a-sha" is not a hex commit SHA'):
        gitea_trigger({"X-Gitea-Event-Type": "status"}, payload, delivery_id="d")


def test_push_is_not_a_pull_request_event(reference_dir: Path) -> None:
    payload = {"ref": "refs/heads/main", "repository": _status_payload(reference_dir)["repository"]}
    trigger = gitea_trigger({"X-Gitea-Event-Type": "push"}, payload, delivery_id="d")
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT


def test_missing_event_headers_are_an_error() -> None:
    with pytest.raises(TriggerError, match="X-Gitea-Event-Type header: missing"):
        gitea_trigger({"X-Gitea-Delivery": "d"}, {}, delivery_id="d")


def test_missing_number_is_an_error(reference_dir: Path) -> None:
    payload = _load(reference_dir, "gitea/pull_request/opened.json")
    del payload["number"]
    with pytest.raises(TriggerError, match=r"pull_request\.number / number: missing"):
        gitea_trigger({"X-Gitea-Event-Type": "pull_request"}, payload, delivery_id="d")


def test_manual_replay_has_the_same_semantic_key(reference_dir: Path) -> None:
    payload = _load(reference_dir, "gitea/pull_request_sync/synchronized.json")
    headers = {"X-Gitea-Event-Type": "pull_request_sync"}
    first = gitea_trigger(headers, payload, delivery_id="a")
    replay = gitea_trigger(headers, payload, delivery_id="b")
    assert first.semantic_key() == replay.semantic_key()
    payload["pull_request"]["head"]["sha"] = SHA
    pushed = gitea_trigger(headers, payload, delivery_id="c")
    assert pushed.semantic_key() != first.semantic_key()


@pytest.mark.parametrize(
    "rel",
    [
        "gitea/pull_request_sync/synchronized.json",
        "gitea/pull_request_review_approved/reviewed.json",
        "gitea/pull_request_label/label_updated.add.json",
        "legacy-go-scm-2018/pull_request_comment/created.json",
    ],
)
def test_damaged_payloads_give_a_trigger_or_a_trigger_error(reference_dir: Path, rel: str) -> None:
    payload = _load(reference_dir, rel)
    if "comment" in rel:
        payload["comment"]["body"] = "/reviewbot review"
    headers = {"X-Gitea-Event": _headers_for(reference_dir, rel).get("X-Gitea-Event", "")}
    for twin in damaged(payload, depth=3):
        for hdrs in (_headers_for(reference_dir, rel), headers):
            try:
                gitea_trigger(hdrs, twin, delivery_id="x")
            except TriggerError as exc:
                assert exc.detail


def test_damaged_status_gives_a_trigger_or_a_trigger_error(reference_dir: Path) -> None:
    for twin in damaged(_status_payload(reference_dir), depth=2):
        try:
            gitea_trigger({"X-Gitea-Event-Type": "status"}, twin, delivery_id="x")
        except TriggerError as exc:
            assert exc.detail


def test_a_push_names_its_commit_and_branch_and_is_never_gated(reference_dir: Path) -> None:
    # Gitea's PushPayload: ref, before, after, commits, repository, pusher, sender.
    payload = {
        "ref": "refs/heads/reviewbot/queue/main/3",
        "before": "0" * 40,
        "after": SHA.upper(),
        "commits": [],
        "repository": _status_payload(reference_dir)["repository"],
    }
    trigger = gitea_trigger({"X-Gitea-Event-Type": "push"}, payload, delivery_id="p")
    assert trigger.kind == "push"
    assert (trigger.commit_sha, trigger.branches) == (SHA, ("reviewbot/queue/main/3",))
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT
    deleted = gitea_trigger(
        {"X-Gitea-Event-Type": "push"}, {**payload, "after": "0" * 40}, delivery_id="d"
    )
    assert deleted.kind == "ignored"


def test_a_gitea_status_names_no_branch(reference_dir: Path) -> None:
    trigger = gitea_trigger(
        {"X-Gitea-Event-Type": "status"}, _status_payload(reference_dir), delivery_id="s"
    )
    assert (trigger.kind, trigger.commit_sha, trigger.branches) == ("commit", SHA, ())
