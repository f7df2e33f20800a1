"""Webhook deliveries of the simulator: payload shapes, signatures and headers, redelivery ids."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from reviewbot.sim import Simulator
from reviewbot.sim.webhooks import (
    GiteaPayloads,
    gitea_signature_headers,
    github_signature_headers,
)
from tests.support.webhook_schemas import github_payload_problems

REPO = "acme/api"
SECRET = "It's a Secret to Everybody"


@dataclass
class Receiver:
    url: str = ""
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    answer: int = 202


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    box = Receiver()

    async def hook(request: web.Request) -> web.Response:
        box.received.append((dict(request.headers), await request.read()))
        return web.json_response({"status": "queued"}, status=box.answer)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    box.url = f"http://127.0.0.1:{port}/hook"
    yield box
    await runner.cleanup()


def _vectors(reference_dir: Path) -> list[dict[str, Any]]:
    data = json.loads((reference_dir / "signature-test-vectors.json").read_text())
    vectors: list[dict[str, Any]] = data["vectors"]
    return vectors


def test_signature_helpers_match_the_published_vectors(reference_dir: Path) -> None:
    for vector in _vectors(reference_dir):
        body, derived = vector["payload"].encode(), vector["derived"]
        github = github_signature_headers(vector["secret"], body)
        assert github["X-Hub-Signature-256"] == "sha256=" + derived["hmac_sha256_hex"]
        assert github["X-Hub-Signature"] == derived["X-Hub-Signature"]
        gitea = gitea_signature_headers(vector["secret"], body)
        assert gitea["X-Gitea-Signature"] == derived["X-Gitea-Signature"]
        assert gitea["X-Hub-Signature-256"] == "sha256=" + derived["hmac_sha256_hex"]
        if "published" in vector and "X-Hub-Signature-256" in vector["published"]:
            assert github["X-Hub-Signature-256"] == vector["published"]["X-Hub-Signature-256"]


def _verify_github(headers: dict[str, str], body: bytes, secret: str) -> None:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Hub-Signature-256"], expected)
    legacy = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    assert hmac.compare_digest(headers["X-Hub-Signature"], legacy)


def _verify_gitea(headers: dict[str, str], body: bytes, secret: str) -> None:
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Gitea-Signature"], expected)
    assert headers["X-Gogs-Signature"] == expected
    assert headers["X-Hub-Signature-256"] == "sha256=" + expected


async def test_github_deliveries_are_signed_and_match_the_official_schemas(
    sim: Simulator, receiver: Receiver, reference_dir: Path
) -> None:
    sim.create_repo("github", REPO)
    sim.set_webhook("github", receiver.url, secret=SECRET)
    pr = sim.open_pr("github", REPO, author="alice")
    before = pr.head_sha
    deliveries = [await sim.deliver_pull_request("github", REPO, pr.number, action="opened")]
    sim.push("github", REPO, pr.number)
    deliveries.append(await sim.deliver_pull_request("github", REPO, pr.number, "synchronize"))
    sim.submit_review("github", REPO, pr.number, reviewer="bob", state="APPROVED")
    deliveries.append(await sim.deliver_pull_request_review("github", REPO, pr.number))
    sim.set_status("github", REPO, pr.head_sha, "ci/test", "success", target_url="http://ci/1")
    deliveries.append(await sim.deliver_status("github", REPO))
    sim.set_check_run(REPO, pr.head_sha, "build", conclusion="failure")
    deliveries.append(await sim.deliver_check_run(REPO))
    deliveries.append(await sim.deliver_check_suite(REPO, pr.head_sha))
    sim.add_comment("github", REPO, pr.number, "alice", "please merge")
    deliveries.append(await sim.deliver_issue_comment("github", REPO, pr.number))

    assert [d.status for d in deliveries] == [202] * len(deliveries)
    assert len(receiver.received) == len(deliveries)
    for delivery, (headers, body) in zip(deliveries, receiver.received, strict=True):
        assert body == delivery.body
        _verify_github(headers, body, SECRET)
        assert headers["X-GitHub-Event"] == delivery.event
        assert headers["X-GitHub-Delivery"] == delivery.id
        assert headers["User-Agent"].startswith("GitHub-Hookshot/")
        assert headers["Content-Type"] == "application/json"
        payload = json.loads(body)
        assert github_payload_problems(reference_dir, delivery.event, payload) == []

    sync = json.loads(receiver.received[1][1])
    assert (sync["before"], sync["after"]) == (before, pr.head_sha)
    assert sync["pull_request"]["head"]["sha"] == pr.head_sha
    review = json.loads(receiver.received[2][1])["review"]
    assert (review["state"], review["commit_id"]) == ("approved", pr.head_sha)
    assert [d.event for d in deliveries] == [
        "pull_request",
        "pull_request",
        "pull_request_review",
        "status",
        "check_run",
        "check_suite",
        "issue_comment",
    ]


async def test_github_payload_carries_the_installation(
    sim: Simulator, receiver: Receiver, reference_dir: Path
) -> None:
    sim.create_repo("github", REPO)
    app_id, _ = sim.create_github_app()
    installation_id = sim.install_app(app_id, REPO)
    sim.set_webhook("github", receiver.url, secret=SECRET)
    pr = sim.open_pr("github", REPO, author="alice")
    delivery = await sim.deliver_pull_request("github", REPO, pr.number, "opened")
    payload = json.loads(delivery.body)
    assert payload["installation"]["id"] == installation_id
    assert github_payload_problems(reference_dir, "pull_request", payload) == []


def _key_problems(real: Any, ours: Any, where: str = "") -> list[str]:
    """Every key of the real payload is in ours, with the same JSON type (null fits anything)."""
    if real is None or ours is None:
        return []
    if isinstance(real, dict):
        if not isinstance(ours, dict):
            return [f"{where}: object expected"]
        problems = [f"{where}/{k}: missing" for k in real if k not in ours]
        for key in real:
            if key in ours:
                problems += _key_problems(real[key], ours[key], f"{where}/{key}")
        return problems
    if isinstance(real, list):
        if not isinstance(ours, list):
            return [f"{where}: array expected"]
        if real and ours:
            return _key_problems(real[0], ours[0], f"{where}/0")
        return []
    kinds = (bool, int, float, str)
    real_kind = next(k for k in kinds if isinstance(real, k))
    if not isinstance(ours, real_kind) or (real_kind is not bool and isinstance(ours, bool)):
        return [f"{where}: {type(ours).__name__} instead of {real_kind.__name__}"]
    return []


async def test_gitea_deliveries_headers_and_signature(sim: Simulator, receiver: Receiver) -> None:
    sim.create_repo("gitea", REPO)
    sim.set_webhook("gitea", receiver.url, secret=SECRET)
    pr = sim.open_pr("gitea", REPO, author="alice")
    deliveries = [await sim.deliver_pull_request("gitea", REPO, pr.number, action="opened")]
    sim.push("gitea", REPO, pr.number)
    deliveries.append(await sim.deliver_pull_request("gitea", REPO, pr.number, "synchronize"))
    for state in ("APPROVED", "REQUEST_CHANGES", "COMMENT"):
        sim.submit_review("gitea", REPO, pr.number, "bob", state, body="because")
        deliveries.append(await sim.deliver_pull_request_review("gitea", REPO, pr.number))
    sim.set_status("gitea", REPO, pr.head_sha, "ci/unit", "success")
    deliveries.append(await sim.deliver_status("gitea", REPO))
    sim.add_comment("gitea", REPO, pr.number, "alice", "hi")
    deliveries.append(await sim.deliver_issue_comment("gitea", REPO, pr.number))

    expected = [
        ("pull_request", "pull_request", "opened"),
        ("pull_request", "pull_request_sync", "synchronized"),
        ("pull_request_approved", "pull_request_review_approved", "reviewed"),
        ("pull_request_rejected", "pull_request_review_rejected", "reviewed"),
        ("pull_request_comment", "pull_request_review_comment", "reviewed"),
        ("status", "status", None),
        ("issue_comment", "pull_request_comment", "created"),
    ]
    seen = []
    for delivery, (headers, body) in zip(deliveries, receiver.received, strict=True):
        _verify_gitea(headers, body, SECRET)
        assert headers["X-Gitea-Delivery"] == headers["X-GitHub-Delivery"] == delivery.id
        assert headers["X-Gogs-Delivery"] == delivery.id
        assert headers["X-Gitea-Event"] == headers["X-GitHub-Event"] == headers["X-Gogs-Event"]
        assert headers["X-Gitea-Event-Type"] == headers["X-GitHub-Event-Type"]
        payload = json.loads(body)
        seen.append(
            (headers["X-Gitea-Event"], headers["X-Gitea-Event-Type"], payload.get("action"))
        )
    assert seen == expected
    review = json.loads(receiver.received[2][1])["review"]
    assert review == {"type": "pull_request_review_approved", "content": "because"}
    sync = json.loads(receiver.received[1][1])
    assert "before" not in sync and sync["pull_request"]["head"]["sha"] == pr.head_sha


async def test_gitea_without_secret_sends_empty_signatures(
    sim: Simulator, receiver: Receiver
) -> None:
    sim.create_repo("gitea", REPO)
    sim.set_webhook("gitea", receiver.url, secret=None)
    pr = sim.open_pr("gitea", REPO, author="alice")
    await sim.deliver_pull_request("gitea", REPO, pr.number)
    headers, _ = receiver.received[0]
    assert headers["X-Gitea-Signature"] == ""
    assert headers["X-Hub-Signature-256"] == "sha256="
    assert headers["X-Hub-Signature"] == "sha1="


def test_gitea_payloads_have_every_field_of_the_real_examples(reference_dir: Path) -> None:
    sim = Simulator()
    sim.create_repo("gitea", REPO)
    pr = sim.open_pr("gitea", REPO, author="alice", labels=["bug"])
    repo = sim.repo("gitea", REPO)
    payloads = GiteaPayloads(sim)
    index = json.loads((reference_dir / "gitea" / "webhooks" / "index.json").read_text())
    checked = 0
    for example in index["examples"]:
        event_type = example["x_gitea_event_type"]
        if not example["file"].startswith("gitea/") or event_type not in (
            "pull_request",
            "pull_request_sync",
            "pull_request_review_approved",
            "pull_request_review_rejected",
            "pull_request_review_comment",
        ):
            continue
        real = json.loads((reference_dir / "gitea" / "webhooks" / example["file"]).read_text())
        review = None
        if example["review_type"]:
            state = {
                "pull_request_review_approved": "APPROVED",
                "pull_request_review_rejected": "REQUEST_CHANGES",
                "pull_request_review_comment": "COMMENT",
            }[event_type]
            review = sim.submit_review("gitea", REPO, pr.number, "bob", state, body="x")
        ours = payloads.pull_request(repo, pr, real["action"], "alice", review)
        real.pop("changes", None)  # only sent for edits, which the simulator does not stage
        assert _key_problems(real, ours) == [], example["file"]
        checked += 1
    assert checked >= 8


async def test_redelivery_keeps_the_id_on_github_and_gets_a_new_one_on_gitea(
    sim: Simulator, receiver: Receiver
) -> None:
    for forge in ("github", "gitea"):
        sim.create_repo(forge, REPO)
        sim.set_webhook(forge, receiver.url, secret=SECRET)
        sim.open_pr(forge, REPO, author="alice")
    first = await sim.deliver_pull_request("github", REPO, 1)
    again = await sim.redeliver(first)
    assert again.id == first.id and again.body == first.body
    assert receiver.received[1][0]["X-GitHub-Delivery"] == first.id
    first = await sim.deliver_pull_request("gitea", REPO, 1)
    again = await sim.redeliver(first)
    assert again.id != first.id and again.body == first.body
    assert receiver.received[3][0]["X-Gitea-Delivery"] == again.id
    _verify_gitea(receiver.received[3][0], receiver.received[3][1], SECRET)


async def test_raw_delivery_with_header_override_and_receiver_errors(
    sim: Simulator, receiver: Receiver
) -> None:
    sim.set_webhook("github", receiver.url, secret=SECRET)
    receiver.answer = 401
    delivery = await sim.deliver_raw(
        "github", "ping", {"zen": "hi"}, headers_override={"X-Hub-Signature-256": "sha256=bad"}
    )
    assert delivery.status == 401
    headers, body = receiver.received[0]
    assert headers["X-Hub-Signature-256"] == "sha256=bad"
    assert json.loads(body) == {"zen": "hi"}


async def test_a_receiver_that_is_down_is_recorded_not_raised(sim: Simulator) -> None:
    sim.set_webhook("github", "http://127.0.0.1:9/hook", secret=SECRET)
    delivery = await sim.deliver_raw("github", "ping", {"zen": "hi"})
    assert delivery.status is None and delivery.error
