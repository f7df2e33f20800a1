"""The acknowledgement path: signatures, limits, bad bodies, redelivery, concurrency."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from reviewbot.config import GiteaSettings, GitHubSettings
from reviewbot.ingress.signatures import sign_gitea, sign_github
from reviewbot.server.app_keys import STATE
from reviewbot.store import journal
from tests.integration.server_support import (
    GITEA_SECRET,
    GITHUB_SECRET,
    Running,
    make_settings,
    running_server,
)

PING = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()


@pytest.fixture
async def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with running_server(make_settings(tmp_path / "data")) as running:
        yield running


def refused_count(server: Running) -> float:
    return sum(
        sample.value
        for metric in server.app[STATE].metrics.refused.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


@pytest.mark.parametrize(
    ("signature", "why"),
    [
        (None, "missing"),
        ("", "empty"),
        ("sha256=", "empty after the prefix"),
        ("sha256=" + "0" * 64, "wrong"),
        (sign_github(b"another secret", PING), "signed with another secret"),
        ("sha1=" + "0" * 40, "legacy SHA-1 only"),
    ],
)
async def test_bad_github_signature_is_401_and_stores_nothing(
    server: Running, signature: str | None, why: str
) -> None:
    status, body = await server.github(
        "ping", PING, secret=None, signature=signature if signature is not None else None
    )
    assert status == 401, why
    assert body["error"] == "signature_invalid"
    assert server.stored_ids() == []
    assert refused_count(server) == 1


@pytest.mark.parametrize("value", [None, "", "0" * 64, sign_gitea(b"wrong", PING)])
async def test_bad_gitea_signature_is_401_and_stores_nothing(
    server: Running, value: str | None
) -> None:
    headers = {
        "Content-Type": "application/json",
        "X-Gitea-Event": "pull_request",
        "X-Gitea-Event-Type": "pull_request",
        "X-Gitea-Delivery": str(uuid.uuid4()),
    }
    if value is not None:
        headers["X-Gitea-Signature"] = value
    status, body = await server.post("/webhooks/gitea", PING, headers)
    assert status == 401
    assert body == {"error": "signature_invalid", "detail": body["detail"]}
    assert server.stored_ids() == []


async def test_forge_without_secret_refuses_everything(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, github=GitHubSettings(), gitea=GiteaSettings())
    async with running_server(settings) as server:
        status, body = await server.github("ping", PING, secret="anything")
        assert status == 401
        assert "REVIEWBOT_GITHUB__WEBHOOK_SECRET" in body["detail"]
        status, _ = await server.gitea("pull_request", PING, secret="anything")
        assert status == 401
        assert server.stored_ids() == []


async def test_published_vector_signature_is_accepted(reference_dir: Path, tmp_path: Path) -> None:
    vectors = json.loads((reference_dir / "signature-test-vectors.json").read_text())["vectors"]
    for n, vector in enumerate(vectors):
        settings = make_settings(
            tmp_path / str(n),
            github=GitHubSettings(webhook_secret=vector["secret"]),
            gitea=GiteaSettings(webhook_secret=vector["secret"]),
        )
        body = vector["payload"].encode()
        published = vector["published"]["X-Hub-Signature-256"]
        async with running_server(settings) as server:
            status, _ = await server.github("ping", body, signature=published)
            assert status != 401  # accepted; the vector bodies are not all JSON objects
            gitea_sig = vector["derived"]["X-Gitea-Signature"]
            status, _ = await server.post(
                "/webhooks/gitea",
                body,
                {
                    "X-Gitea-Event-Type": "pull_request",
                    "X-Gitea-Delivery": str(uuid.uuid4()),
                    "X-Gitea-Signature": gitea_sig,
                },
            )
            assert status != 401
            assert len(server.stored_ids()) == 2


async def test_valid_ping_is_recorded(server: Running) -> None:
    status, body = await server.github("ping", PING, delivery_id="ping-1")
    assert status == 200
    assert body == {"delivery_id": "ping-1", "status": "queued"}
    rows = await server.decisions_of("ping-1")
    assert [r.reason_code for r in rows] == ["recorded"]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"Hello, World!", "not JSON"),
        (b'{"action": "opened", "pull_request": {"number": 1', "truncated"),
        (b"", "empty"),
        (b"[1, 2, 3]", "a JSON list"),
    ],
)
async def test_unparseable_body_with_valid_signature_is_400_and_recorded(
    server: Running, body: bytes, what: str
) -> None:
    delivery_id = str(uuid.uuid4())
    status, answer = await server.github("pull_request", body, delivery_id=delivery_id)
    assert status == 400, what
    assert answer["error"] == "unparseable"
    assert answer["delivery_id"] == delivery_id
    rows = await server.decisions_of(delivery_id)
    assert [(r.decision, r.reason_code) for r in rows] == [("error", "delivery_unresolved")]
    assert rows[0].detail  # the parse error, never a silent skip


async def test_json_that_parses_but_is_broken_is_recorded_as_unresolved(server: Running) -> None:
    # Passes the cheap shape check on the acknowledgement path; the worker's parse finds it.
    delivery_id = str(uuid.uuid4())
    body = b'{"action": "opened",}'
    status, _ = await server.github("pull_request", body, delivery_id=delivery_id)
    assert status == 202
    rows = await server.decisions_of(delivery_id)
    assert rows[0].reason_code == "delivery_unresolved"
    assert "not JSON" in rows[0].detail


async def test_json_of_the_wrong_shape_names_the_missing_field(server: Running) -> None:
    delivery_id = str(uuid.uuid4())
    body = json.dumps({"action": "opened", "number": 3}).encode()
    status, _ = await server.github("pull_request", body, delivery_id=delivery_id)
    assert status == 202
    rows = await server.decisions_of(delivery_id)
    assert rows[0].decision == "error"
    assert rows[0].reason_code == "delivery_unresolved"
    assert "repository" in rows[0].detail or "pull_request" in rows[0].detail


async def test_unknown_event_is_recorded_as_not_a_pull_request_event(server: Running) -> None:
    delivery_id = str(uuid.uuid4())
    body = json.dumps({"action": "created", "repository": {"full_name": "a/b"}}).encode()
    status, _ = await server.github("star", body, delivery_id=delivery_id)
    assert status == 202
    rows = await server.decisions_of(delivery_id)
    assert [(r.decision, r.reason_code) for r in rows] == [("skip", "not_pull_request_event")]


async def test_body_over_the_limit_is_413_and_stores_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)  # the default limit: 25 MB
    async with running_server(settings) as server:
        body = b"{" + b" " * (26 * 1024 * 1024) + b"}"
        status, answer = await server.github("pull_request", body)
        assert status == 413
        assert answer["error"] == "body_too_large"
        assert server.stored_ids() == []


async def test_body_over_the_limit_without_content_length_is_413(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_body_bytes=1000)

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b" " * 500

    async with running_server(settings) as server:
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "big", "X-Hub-Signature-256": "x"}
        async with server.http.post(
            server.base + "/webhooks/github", data=chunks(), headers=headers
        ) as resp:
            assert resp.status == 413
            assert (await resp.json())["error"] == "body_too_large"
        assert server.stored_ids() == []


async def test_redelivery_answers_duplicate_and_acts_once(server: Running) -> None:
    first = await server.github("ping", PING, delivery_id="same-id")
    again = await server.github("ping", PING, delivery_id="same-id")
    assert first[0] == 200 and first[1]["status"] == "queued"
    assert again == (200, {"delivery_id": "same-id", "status": "duplicate"})
    rows = await server.decisions_of("same-id")
    assert len(rows) == 1


async def test_twenty_concurrent_identical_deliveries_store_one(server: Running) -> None:
    answers = await asyncio.gather(
        *(server.github("ping", PING, delivery_id="burst") for _ in range(20))
    )
    statuses = sorted(body["status"] for _, body in answers)
    assert statuses == ["duplicate"] * 19 + ["queued"]
    assert server.stored_ids() == ["burst"]
    await server.wait_done("burst")
    rows = await server.decisions_of("burst")
    assert len(rows) == 1


async def test_gitea_form_delivery_signature_covers_the_json(server: Running) -> None:
    payload = json.dumps({"action": "opened", "number": 1}).encode()
    body = b"payload=" + quote(payload, safe="").encode()
    delivery_id = str(uuid.uuid4())
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Gitea-Event": "pull_request",
        "X-Gitea-Event-Type": "pull_request",
        "X-Gitea-Delivery": delivery_id,
        "X-Gitea-Signature": sign_gitea(GITEA_SECRET.encode(), payload),
    }
    status, answer = await server.post("/webhooks/gitea", body, headers)
    assert status == 202, answer
    stored = journal.get_delivery(server.db, delivery_id)
    assert stored is not None and stored.body == body  # kept exactly as received
    rows = await server.decisions_of(delivery_id)
    assert rows  # read through the form field; its shape decides the reason
    # The form body itself is not what Gitea signs.
    headers["X-Gitea-Delivery"] = str(uuid.uuid4())
    headers["X-Gitea-Signature"] = sign_gitea(GITEA_SECRET.encode(), body)
    status, _ = await server.post("/webhooks/gitea", body, headers)
    assert status == 401


async def test_errors_are_json_with_code_and_detail(server: Running) -> None:
    async with server.http.get(server.base + "/nowhere") as resp:
        assert resp.status == 404
        body = await resp.json()
        assert set(body) == {"error", "detail"} and body["error"] == "not_found"
    async with server.http.get(server.base + "/webhooks/github") as resp:
        assert resp.status == 405
        assert (await resp.json())["error"] == "method_not_allowed"


async def test_healthz_and_metrics(server: Running) -> None:
    await server.github("ping", PING, secret=None)  # refused: counted
    status, body = await server.get("/healthz")
    assert status == 200 and body["status"] == "ok"
    text = await server.scrape()
    assert 'reviewbot_deliveries_refused_total{reason="bad_signature",source="github"} 1.0' in text


async def test_the_signed_secret_is_the_configured_one(server: Running) -> None:
    status, _ = await server.github("ping", PING, secret=GITHUB_SECRET)
    assert status == 200
    status, _ = await server.github("ping", PING, secret=GITEA_SECRET)
    assert status == 401
