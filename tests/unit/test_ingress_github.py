"""GitHub deliveries -> Trigger, over every real payload and the edge cases around them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.github import github_trigger
from tests.unit.damage import damaged
from tests.unit.reference_files import example_files

WEBHOOKS = "github/webhooks"


def _example_files() -> list[str]:
    # Collected from the folder itself, so a new example file is tested without an edit
    # here; the folder name is the X-GitHub-Event value.
    return example_files(WEBHOOKS, "*/*.json")


def _load(reference_dir: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((reference_dir / WEBHOOKS / rel).read_bytes())
    return data


def _headers(event: str) -> dict[str, str]:
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": "d-1"}


def _expected_kind(event: str, action: str | None) -> tuple[str, str | None]:
    if event == "pull_request":
        acted = {"opened", "reopened", "synchronize", "ready_for_review", "labeled"}
        acted |= {"unlabeled", "closed"}
        return ("pull", None) if action in acted else ("ignored", ReasonCode.ACTION_IGNORED)
    if event == "pull_request_review":
        ok = action in ("submitted", "dismissed")
        return ("pull", None) if ok else ("ignored", ReasonCode.ACTION_IGNORED)
    if event in ("check_suite", "check_run"):
        ok = action == "completed"
        return ("commit", None) if ok else ("ignored", ReasonCode.ACTION_IGNORED)
    if event == "status":
        return ("commit", None)
    if event in ("ping", "installation"):
        return ("recorded", ReasonCode.RECORDED)
    return ("ignored", None)


def test_the_example_folder_is_found(reference_dir: Path) -> None:
    assert (reference_dir / WEBHOOKS).is_dir()
    index = json.loads((reference_dir / WEBHOOKS / "index.json").read_text("utf-8"))
    listed = {e["file"].removeprefix("webhooks/") for e in index["examples"]}
    assert listed <= set(_example_files())
    assert len(_example_files()) >= 60


@pytest.mark.parametrize("rel", _example_files())
def test_every_real_payload_becomes_the_expected_trigger(reference_dir: Path, rel: str) -> None:
    event = rel.split("/")[0]
    payload = _load(reference_dir, rel)
    trigger = github_trigger(_headers(event), payload, delivery_id="d-1")
    kind, code = _expected_kind(event, payload.get("action"))
    assert trigger.kind == kind
    assert trigger.forge == "github"
    assert trigger.source == "github"
    assert trigger.delivery_id == "d-1"
    assert trigger.event == event
    if code is not None:
        assert trigger.reason is not None and trigger.reason.code == code
    if kind in ("pull", "commit"):
        full_name = payload["repository"]["full_name"]
        # the canonical key for lookups, the forge's spelling and id for display
        assert f"{trigger.owner}/{trigger.name}" == full_name.lower()
        assert trigger.repo_spelling == full_name
        assert trigger.repo_id == payload["repository"]["id"]
    if kind == "pull":
        assert trigger.number == payload["pull_request"]["number"]
        assert trigger.head_sha == payload["pull_request"]["head"]["sha"]
    if kind == "commit":
        sha = payload["sha"] if event == "status" else payload[event]["head_sha"]
        assert trigger.commit_sha == sha
        if event != "status":
            listed = [pr["number"] for pr in payload[event]["pull_requests"]]
            assert list(trigger.pull_numbers) == listed


def test_check_run_lists_its_pull_requests(reference_dir: Path) -> None:
    trigger = github_trigger(
        _headers("check_run"), _load(reference_dir, "check_run/completed.json"), delivery_id="x"
    )
    assert trigger.kind == "commit"
    assert trigger.pull_numbers == (2,)
    assert trigger.extra["check"] == "Octocoders-linter"
    assert trigger.extra["conclusion"] == "success"


def test_check_suite_without_pull_requests_maps_by_sha_only(reference_dir: Path) -> None:
    payload = _load(reference_dir, "check_suite/completed.1.json")
    trigger = github_trigger(_headers("check_suite"), payload, delivery_id="x")
    assert trigger.kind == "commit" and trigger.pull_numbers == ()
    assert trigger.commit_sha == payload["check_suite"]["head_sha"]


def test_pull_requests_of_another_base_repository_are_left_out(reference_dir: Path) -> None:
    payload = _load(reference_dir, "check_run/completed.json")
    other = copy.deepcopy(payload["check_run"]["pull_requests"][0])
    other["number"] = 99
    other["base"]["repo"]["id"] = -1
    payload["check_run"]["pull_requests"].append(other)
    trigger = github_trigger(_headers("check_run"), payload, delivery_id="x")
    assert trigger.pull_numbers == (2,)


def test_edited_counts_only_with_a_base_change(reference_dir: Path) -> None:
    payload = _load(reference_dir, "pull_request/opened.json")
    payload["action"] = "edited"
    payload["changes"] = {"title": {"from": "old"}}
    trigger = github_trigger(_headers("pull_request"), payload, delivery_id="x")
    assert trigger.kind == "ignored"
    assert trigger.reason is not None and trigger.reason.code == ReasonCode.ACTION_IGNORED
    assert "base branch" in trigger.reason.detail
    payload["changes"] = {"base": {"ref": {"from": "develop"}, "sha": {"from": "a" * 40}}}
    trigger = github_trigger(_headers("pull_request"), payload, delivery_id="x")
    assert trigger.kind == "pull" and trigger.number == 2


def _pr_comment(reference_dir: Path, body: str) -> dict[str, Any]:
    payload = _load(reference_dir, "issue_comment/created.json")
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    payload["comment"]["body"] = body
    return payload


def test_review_command_on_a_pr_asks_for_the_commenters_write_access(
    reference_dir: Path,
) -> None:
    payload = _pr_comment(reference_dir, "Looks done.\n/reviewbot review\nthanks")
    trigger = github_trigger(_headers("issue_comment"), payload, delivery_id="x")
    assert trigger.kind == "pull"
    assert trigger.number == payload["issue"]["number"]
    assert trigger.head_sha is None
    assert trigger.extra["requires_write_access"] == payload["comment"]["user"]["login"]


@pytest.mark.parametrize(
    "body", ["please /reviewbot review", "/reviewbot reviewed", "", "/reviewbot  merge"]
)
def test_pr_comment_without_the_command_is_ignored(reference_dir: Path, body: str) -> None:
    payload = _pr_comment(reference_dir, body)
    trigger = github_trigger(_headers("issue_comment"), payload, delivery_id="x")
    assert trigger.kind == "ignored"
    assert trigger.reason is not None and trigger.reason.code == ReasonCode.ACTION_IGNORED


def test_edited_comment_with_the_command_is_ignored(reference_dir: Path) -> None:
    payload = _pr_comment(reference_dir, "/reviewbot review")
    payload["action"] = "edited"
    trigger = github_trigger(_headers("issue_comment"), payload, delivery_id="x")
    assert trigger.kind == "ignored"
    assert trigger.reason is not None and trigger.reason.code == ReasonCode.ACTION_IGNORED


def test_comment_on_an_issue_is_not_a_pull_request_event(reference_dir: Path) -> None:
    payload = _load(reference_dir, "issue_comment/created.json")
    payload["comment"]["body"] = "/reviewbot review"
    trigger = github_trigger(_headers("issue_comment"), payload, delivery_id="x")
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT


def test_unknown_event_is_ignored_with_its_repository(reference_dir: Path) -> None:
    payload = _load(reference_dir, "pull_request/opened.json")
    trigger = github_trigger(_headers("push"), payload, delivery_id="x")
    assert trigger.kind == "ignored"
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT
    assert "push" in trigger.reason.detail
    assert (trigger.owner, trigger.name) == ("codertocat", "hello-world")
    assert trigger.repo_spelling == "Codertocat/Hello-World"


def test_missing_event_header_is_an_error() -> None:
    with pytest.raises(TriggerError, match="X-GitHub-Event header: missing"):
        github_trigger({"X-GitHub-Delivery": "d"}, {}, delivery_id="d")


def test_headers_are_matched_without_regard_to_case(reference_dir: Path) -> None:
    payload = _load(reference_dir, "pull_request/opened.json")
    trigger = github_trigger({"x-github-event": "pull_request"}, payload, delivery_id="d")
    assert trigger.kind == "pull"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("pull_request", "head", "sha"), None, "pull_request.head.sha: missing"),
        (("pull_request", "head", "sha"), "xyz", 'pull_request.head.sha: "xyz" is not a hex'),
        (("pull_request", "number"), "two", 'pull_request.number: "two" is not a positive'),
        (("repository",), None, "repository: missing"),
        (("repository",), [], "repository: is a list, expected an object"),
        (("action",), None, "action: missing"),
        (("action",), 5, "action: 5 is not a string"),
    ],
)
def test_unreadable_fields_name_their_path(
    reference_dir: Path, path: tuple[str, ...], value: object, message: str
) -> None:
    payload = _load(reference_dir, "pull_request/synchronize.json")
    node = payload
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(TriggerError) as caught:
        github_trigger(_headers("pull_request"), payload, delivery_id="x")
    assert message in caught.value.detail
    assert caught.value.code == ReasonCode.DELIVERY_UNRESOLVED


def test_status_without_sha_is_an_error(reference_dir: Path) -> None:
    payload = _load(reference_dir, "status/status.json")
    del payload["sha"]
    with pytest.raises(TriggerError, match="sha: missing"):
        github_trigger(_headers("status"), payload, delivery_id="x")


def test_redelivery_and_replay_share_the_semantic_key(reference_dir: Path) -> None:
    payload = _load(reference_dir, "pull_request/synchronize.json")
    first = github_trigger(_headers("pull_request"), payload, delivery_id="a")
    again = github_trigger(_headers("pull_request"), payload, delivery_id="b")
    assert first.semantic_key() == again.semantic_key()


def test_different_check_runs_at_one_sha_are_different_events(reference_dir: Path) -> None:
    payload = _load(reference_dir, "check_run/completed.json")
    first = github_trigger(_headers("check_run"), payload, delivery_id="a")
    payload["check_run"]["id"] += 1
    second = github_trigger(_headers("check_run"), payload, delivery_id="b")
    assert first.semantic_key() != second.semantic_key()


def test_each_label_change_is_its_own_event(reference_dir: Path) -> None:
    payload = _load(reference_dir, "pull_request/labeled.json")
    first = github_trigger(_headers("pull_request"), payload, delivery_id="a")
    payload["label"]["name"] = "other"
    second = github_trigger(_headers("pull_request"), payload, delivery_id="b")
    assert first.semantic_key() != second.semantic_key()


def test_review_sender_and_ping_are_recorded(reference_dir: Path) -> None:
    review = github_trigger(
        _headers("pull_request_review"),
        _load(reference_dir, "pull_request_review/submitted.json"),
        delivery_id="r",
    )
    assert review.kind == "pull" and review.sender
    ping = github_trigger(_headers("ping"), _load(reference_dir, "ping/ping.json"), delivery_id="p")
    assert ping.kind == "recorded"
    assert ping.reason is not None and "webhook" in ping.reason.detail


@pytest.mark.parametrize(
    ("event", "rel"),
    [
        ("pull_request", "pull_request/synchronize.json"),
        ("pull_request_review", "pull_request_review/submitted.json"),
        ("check_run", "check_run/completed.json"),
        ("check_suite", "check_suite/completed.json"),
        ("status", "status/status.json"),
        ("issue_comment", "issue_comment/created.json"),
    ],
)
def test_damaged_payloads_give_a_trigger_or_a_trigger_error(
    reference_dir: Path, event: str, rel: str
) -> None:
    payload = _load(reference_dir, rel)
    if event == "issue_comment":
        payload = _pr_comment(reference_dir, "/reviewbot review")
    for twin in damaged(payload, depth=3):
        try:
            github_trigger(_headers(event), twin, delivery_id="x")
        except TriggerError as exc:
            assert exc.detail


@pytest.mark.parametrize("full_name", ["Codertocat/Hello World", "Codertocat/Hello\x07", "/x"])
def test_a_repository_name_no_forge_allows_is_unreadable(
    reference_dir: Path, full_name: str
) -> None:
    payload = _load(reference_dir, "pull_request/opened.json")
    payload["repository"]["full_name"] = full_name
    payload["repository"]["name"] = ""
    with pytest.raises(TriggerError, match="repository"):
        github_trigger(_headers("pull_request"), payload, delivery_id="x")


AFTER = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"


def _push(reference_dir: Path, **fields: Any) -> dict[str, Any]:
    # GitHub's push payload: ref, before, after, repository, pusher, sender.
    base = _load(reference_dir, "status/status.json")
    payload: dict[str, Any] = {
        "ref": "refs/heads/reviewbot/queue/main/3",
        "before": "0" * 40,
        "after": AFTER,
        "created": True,
        "deleted": False,
        "forced": False,
        "repository": base["repository"],
        "sender": base["sender"],
    }
    payload.update(fields)
    return payload


def test_a_push_names_its_commit_and_branch_and_is_never_gated(reference_dir: Path) -> None:
    trigger = github_trigger(_headers("push"), _push(reference_dir), delivery_id="p")
    assert trigger.kind == "push"
    assert trigger.commit_sha == AFTER
    assert trigger.branches == ("reviewbot/queue/main/3",)
    assert trigger.number is None and trigger.pull_numbers == ()
    assert (trigger.owner, trigger.name) == ("codertocat", "hello-world")
    # The skip it ends as when no listener registered for it: what a push always was.
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT
    again = github_trigger(_headers("push"), _push(reference_dir), delivery_id="q")
    assert again.semantic_key() == trigger.semantic_key()
    moved = github_trigger(_headers("push"), _push(reference_dir, before=AFTER), delivery_id="r")
    assert moved.semantic_key() != trigger.semantic_key()


@pytest.mark.parametrize(
    "fields",
    [
        {"deleted": True, "after": "0" * 40},
        {"ref": "refs/tags/v1.0"},
        {"after": "not-a-sha"},
        {"ref": None},
        {"repository": None},
    ],
)
def test_a_push_deleting_a_branch_a_tag_or_unreadable_is_not_a_pull_request_event(
    reference_dir: Path, fields: dict[str, Any]
) -> None:
    trigger = github_trigger(_headers("push"), _push(reference_dir, **fields), delivery_id="p")
    assert trigger.kind == "ignored"
    assert trigger.reason is not None
    assert trigger.reason.code == ReasonCode.NOT_PULL_REQUEST_EVENT


def test_a_status_names_the_branches_at_its_commit_only(reference_dir: Path) -> None:
    payload = _load(reference_dir, "status/status.json")
    assert github_trigger(_headers("status"), payload, delivery_id="s").branches == ()
    payload["branches"][1]["commit"]["sha"] = payload["sha"].upper()
    payload["target_url"] = "https://ci.example/1"
    trigger = github_trigger(_headers("status"), payload, delivery_id="s")
    assert trigger.branches == ("changes",)
    assert trigger.extra["target_url"] == "https://ci.example/1"


def test_a_check_names_its_suite_branch(reference_dir: Path) -> None:
    run = github_trigger(
        _headers("check_run"), _load(reference_dir, "check_run/completed.json"), delivery_id="c"
    )
    assert run.branches == ("changes",)
    assert run.extra["target_url"] == "https://octocoders.io"
    suite = _load(reference_dir, "check_suite/completed.json")
    trigger = github_trigger(_headers("check_suite"), suite, delivery_id="s")
    assert trigger.branches == (suite["check_suite"]["head_branch"],)
