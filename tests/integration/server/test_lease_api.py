"""Worker identities and leases over the HTTP API of a real server (real SQLite, loopback)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reviewbot.core.leases import mint_worker_identity
from tests.integration.server_support import Running

HEAD = "a" * 40
NEW_HEAD = "b" * 40
IDENTITY = re.compile(r"^[A-Za-z0-9._]+-\d{8}T\d{6}Z-[0-9a-f]{12}$")
TARGET = {"forge": "gitea", "repo": "acme/api", "number": 12, "role": "merger"}


async def call(
    srv: Running, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with srv.http.request(method, srv.base + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def register(srv: Running, token: str, name: str = "agent") -> str:
    status, body = await call(
        srv,
        "POST",
        "/api/v1/workers",
        token,
        {"name": name, "client": "script", "session_id": "s-1", "role": "merger"},
    )
    assert status == 201, body
    identity: str = body["worker_identity"]
    return identity


async def test_register_mints_an_identity_and_an_existing_one_is_409(server: Running) -> None:
    token = server.token("lease")
    first = await register(server, token)
    second = await register(server, token)
    assert IDENTITY.match(first) and first.startswith("agent-")
    assert first != second  # names repeat, identities never do

    own = mint_worker_identity(
        "agent", client="script", session_id="s-1", now_ns=1, nonce=b"01234567"
    )
    body = {"name": "agent", "client": "script", "session_id": "s-1", "role": "merger"}
    status, answer = await call(
        server, "POST", "/api/v1/workers", token, {**body, "worker_identity": own}
    )
    assert (status, answer["worker_identity"]) == (201, own)
    status, answer = await call(
        server, "POST", "/api/v1/workers", token, {**body, "worker_identity": own}
    )
    assert status == 409
    assert answer["error"] == "worker_exists" and own in answer["detail"]


async def test_acquire_held_heartbeat_release_and_superseded(server: Running) -> None:
    token = server.token("lease")
    a = await register(server, token, "a")
    b = await register(server, token, "b")

    status, lease = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": a, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 200, lease
    assert lease["target"] == TARGET
    assert (lease["holder"], lease["epoch"], lease["head_sha"], lease["phase"]) == (
        a,
        1,
        HEAD,
        "claimed",
    )
    assert lease["expires_at"].endswith("Z")

    # another worker is refused, told who holds it and until when
    status, refused = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": b, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 409
    assert refused["error"] == "lease_held"
    assert refused["holder"] == a and refused["expires_at"] == lease["expires_at"]
    assert a in refused["detail"]

    claim = {**TARGET, "worker_identity": a, "epoch": 1}
    status, beat = await call(server, "POST", "/api/v1/leases/heartbeat", token, claim)
    assert status == 200 and beat["epoch"] == 1 and beat["phase"] == "claimed"
    assert beat["expires_at"] >= lease["expires_at"]

    status, released = await call(server, "POST", "/api/v1/leases/release", token, claim)
    assert status == 200 and released["phase"] == "released"

    status, taken = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": b, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 200 and (taken["holder"], taken["epoch"]) == (b, 2)

    # the old epoch changes nothing any more
    for path in ("/api/v1/leases/heartbeat", "/api/v1/leases/release"):
        status, answer = await call(server, "POST", path, token, claim)
        assert status == 409 and answer["error"] == "superseded"
        assert answer["holder"] == b and "epoch" not in answer  # the holder's epoch stays private
    # a claim that never existed is not held
    status, answer = await call(
        server, "POST", "/api/v1/leases/heartbeat", token, {**claim, "worker_identity": b}
    )
    assert status == 409 and answer["error"] == "superseded"
    status, answer = await call(
        server, "POST", "/api/v1/leases/heartbeat", token, {**claim, "epoch": 3}
    )
    assert status == 409 and answer["error"] == "lease_not_held"
    status, _ = await call(
        server, "POST", "/api/v1/leases/heartbeat", token,
        {**claim, "worker_identity": b, "epoch": 2},
    )  # fmt: skip
    assert status == 200


async def test_a_new_head_gets_a_new_epoch_for_the_same_worker(server: Running) -> None:
    token = server.token("lease")
    a = await register(server, token)
    _, first = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": a, "head_sha": HEAD},
    )  # fmt: skip
    _, again = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": a, "head_sha": HEAD},
    )  # fmt: skip
    _, moved = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": a, "head_sha": NEW_HEAD},
    )  # fmt: skip
    assert (first["epoch"], again["epoch"], moved["epoch"]) == (1, 1, 2)
    assert moved["head_sha"] == NEW_HEAD


async def test_list_leases_with_a_read_token(server: Running) -> None:
    token = server.token("lease")
    a = await register(server, token)
    for number, role in ((12, "merger"), (12, "reviewer"), (13, "merger")):
        status, _ = await call(
            server, "POST", "/api/v1/leases/acquire", token,
            {**TARGET, "number": number, "role": role, "worker_identity": a, "head_sha": HEAD},
        )  # fmt: skip
        assert status == 200
    reader = server.token("read")
    status, body = await call(
        server, "GET", "/api/v1/leases?forge=gitea&repo=acme/api&number=12", reader
    )
    assert status == 200
    assert [(x["target"]["number"], x["target"]["role"]) for x in body["leases"]] == [
        (12, "merger"),
        (12, "reviewer"),
    ]
    assert all(x["holder"] == a and x["phase"] == "claimed" for x in body["leases"])
    status, body = await call(server, "GET", "/api/v1/leases", reader)
    assert status == 200 and len(body["leases"]) == 3
    status, body = await call(server, "GET", "/api/v1/leases?number=x", reader)
    assert status == 400 and body["error"] == "invalid_request"


async def test_scopes_bindings_and_unproven_workers(server: Running) -> None:
    reader = server.token("read")
    body = {"name": "a", "client": "c", "session_id": "s", "role": "merger"}
    status, answer = await call(server, "POST", "/api/v1/workers", reader, body)
    assert status == 403 and answer["error"] == "missing_scope" and "lease" in answer["detail"]
    status, answer = await call(server, "POST", "/api/v1/workers", None, body)
    assert status == 401
    status, answer = await call(server, "GET", "/api/v1/leases", server.token("lease"))
    assert status == 403 and answer["error"] == "missing_scope"

    bound = server.token("lease,read", repo="gitea:acme/other")
    a = await register(server, bound)
    status, answer = await call(
        server, "POST", "/api/v1/leases/acquire", bound,
        {**TARGET, "worker_identity": a, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 403 and answer["error"] == "repo_not_allowed"
    status, answer = await call(server, "GET", "/api/v1/leases?repo=acme/api", bound)
    assert status == 403 and answer["error"] == "repo_not_allowed"
    status, answer = await call(server, "GET", "/api/v1/leases", bound)
    assert status == 200 and answer["leases"] == []

    token = server.token("lease")
    ghost = "ghost-20260101T000000Z-0123456789ab"
    status, answer = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": ghost, "head_sha": HEAD},
    )  # fmt: skip
    assert status == 403 and answer["error"] == "worker_unproven"
    status, answer = await call(
        server, "POST", "/api/v1/workers/heartbeat", token, {"worker_identity": ghost}
    )
    assert status == 404 and answer["error"] == "worker_unproven"
    # a worker answers only to the token that registered it
    status, answer = await call(
        server, "POST", "/api/v1/workers/heartbeat", token, {"worker_identity": a}
    )
    assert status == 403 and answer["error"] == "not_worker_owner"
    status, answer = await call(
        server, "POST", "/api/v1/workers/heartbeat", bound, {"worker_identity": a}
    )
    assert status == 200 and answer["status"] == "live"


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"role": "boss"}, "role"),
        ({"number": 0}, "number"),
        ({"head_sha": "not a sha"}, "head_sha"),
        ({"ttl_s": 0.5}, "ttl_s"),
        ({"forge": "gitlab"}, "forge"),
        ({"repo": "no-slash"}, "repo"),
        ({"surprise": 1}, "surprise"),
    ],
)
async def test_bad_bodies_are_400_and_store_nothing(
    server: Running, change: dict[str, Any], word: str
) -> None:
    token = server.token("lease,read")
    a = await register(server, token)
    status, answer = await call(
        server, "POST", "/api/v1/leases/acquire", token,
        {**TARGET, "worker_identity": a, "head_sha": HEAD, **change},
    )  # fmt: skip
    assert status == 400, answer
    assert answer["error"] == "invalid_request" and word in answer["detail"]
    _, listed = await call(server, "GET", "/api/v1/leases", token)
    assert listed["leases"] == []


async def test_a_body_that_is_not_json_or_too_large(server: Running) -> None:
    token = server.token("lease")
    headers = {"Authorization": f"Bearer {token}"}
    async with server.http.post(
        server.base + "/api/v1/leases/acquire", data=b"{nope", headers=headers
    ) as resp:
        assert resp.status == 400 and (await resp.json())["error"] == "invalid_request"
    big = b'{"name": "' + b"x" * 20_000 + b'"}'
    async with server.http.post(server.base + "/api/v1/workers", data=big, headers=headers) as resp:
        assert resp.status == 413 and (await resp.json())["error"] == "body_too_large"
