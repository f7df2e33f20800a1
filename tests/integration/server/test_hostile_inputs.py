"""Hostile values against the read, lease and MCP routes of a real server, over HTTP.

A PR number or an epoch that the store cannot hold (2^63 and above), or digits that are not
ASCII, is a caller's mistake: ``400 invalid_request`` naming the field, never a ``500``, and
never a review request journaled that no worker can ever record.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from reviewbot.config import GiteaSettings, Settings
from reviewbot.runtime.health import PROBE_TTL_S
from reviewbot.server.app import create_app
from reviewbot.service import Parts, build_service
from reviewbot.store import repositories
from tests.integration.mcp_support import mcp_http, refused
from tests.integration.server_support import (
    WAIT_S,
    Running,
    make_settings,
    running_server,
    sim_world,
)
from tests.support.clock import FakeClock

HUGE = 2**63  # one more than SQLite's largest INTEGER
HEAD = "3f2c1a9e0b7d4c5a6e8f9012345678901234abcd"


def q(path: str, **params: str) -> str:
    return f"{path}?{urllib.parse.urlencode(params)}"


@pytest.mark.parametrize(
    "path",
    [
        q("/api/v1/leases/history", pr=f"gitea:acme/api#{HUGE}"),
        q("/api/v1/leases/history", forge="gitea", repo="acme/api", number=str(HUGE)),
        q("/api/v1/leases/history", pr=f"gitea:acme/api#{2**70}"),
        q("/api/v1/capability", pr=f"gitea:acme/api#{HUGE}", role="merge"),
        q("/api/v1/leases", repo="acme/api", number=str(HUGE)),
        q("/api/v1/decisions", forge="gitea", repo="acme/api", number=str(HUGE)),
        # "²".isdigit() is true, int("²") is not a number
        q("/api/v1/decisions", forge="gitea", repo="acme/api", number="²"),
        q("/api/v1/leases", number="١٢"),
    ],
)
async def test_numbers_the_store_cannot_hold_are_refused(server: Running, path: str) -> None:
    status, body = await server.get(path, server.token("read"))
    assert (status, body["error"]) == (400, "invalid_request"), body
    assert "number" in body["detail"]


async def test_lease_and_review_bodies_refuse_huge_numbers(server: Running) -> None:
    token = server.token("lease,review")
    target = {"forge": "gitea", "repo": "acme/api", "role": "merger"}
    claim = {**target, "number": 12, "worker_identity": "w-20260101T000000Z-1a2b3c4d"}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/api/v1/leases/acquire", {**claim, "number": HUGE, "head_sha": HEAD}),
        ("/api/v1/leases/heartbeat", {**claim, "epoch": HUGE}),
        ("/api/v1/leases/release", {**claim, "epoch": HUGE}),
        ("/api/v1/reviews", {"forge": "gitea", "repo": "acme/api", "number": HUGE}),
    ]
    for path, body in cases:
        async with server.http.post(
            server.base + path, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            answer = await resp.json()
            assert (resp.status, answer["error"]) == (400, "invalid_request"), (path, answer)
    # Nothing was journaled: a request no worker could record is not accepted at all.
    assert server.stored_ids() == []


async def test_mcp_tools_refuse_huge_numbers(server: Running) -> None:
    token = server.token("read,review,lease")
    calls = [
        ("list_leases", {"repo": "acme/api", "number": HUGE}),
        ("explain", {"forge": "gitea", "repo": "acme/api", "number": HUGE}),
        ("pr_state", {"forge": "gitea", "repo": "acme/api", "number": HUGE}),
        ("review_pr", {"forge": "gitea", "repo": "acme/api", "number": HUGE}),
    ]
    async with mcp_http(server.base, token) as client:
        for name, args in calls:
            code, detail = refused(await client.call_tool(name, args))
            assert code == "invalid_request", (name, detail)
            assert "number" in detail


async def test_readiness_callers_cannot_spend_the_forge_rate_limit(tmp_path: Path) -> None:
    """``/readyz`` needs no token and every status page load checks readiness; each forge
    probe is a request on the bot's credentials. A burst of callers costs one probe per forge
    per PROBE_TTL_S, not one per call."""
    clock = FakeClock()
    async with (
        sim_world(tmp_path / "data") as world,
        running_server(world.settings, clock=clock) as srv,
    ):

        def probes() -> dict[str, int]:
            seen = [r.forge for r in world.sim.requests if r.route == "/user"]
            return {forge: seen.count(forge) for forge in ("github", "gitea")}

        before = probes()
        reader = srv.token("read")

        async def readyz() -> int:
            async with srv.http.get(srv.base + "/readyz") as resp:
                return resp.status

        async def status_page() -> int:
            headers = {"Authorization": f"Bearer {reader}"}
            async with srv.http.get(srv.base + "/", headers=headers) as resp:
                return resp.status

        statuses = await asyncio.gather(*[readyz() for _ in range(20)])
        statuses += [await readyz() for _ in range(10)]
        statuses += [await status_page() for _ in range(5)]
        assert set(statuses) == {200}
        spent = {f: n - before[f] for f, n in probes().items()}
        assert spent == {"github": 1, "gitea": 1}

        clock.now += PROBE_TTL_S + 1  # the answer is stale: the next caller asks again
        assert await readyz() == 200
        spent = {f: n - before[f] for f, n in probes().items()}
        assert spent == {"github": 2, "gitea": 2}


async def test_a_binding_to_a_renamed_repositorys_old_name_reads_nothing_of_it(
    server: Running,
) -> None:
    """``acme/api`` was renamed ``acme/api2``; a token made afterwards for ``acme/api`` (a
    new repository may take the name) must not read ``acme/api2``'s rows on any route."""
    common = {"forge": "gitea", "signed": True, "seen_at": 1_800_000_000.0}
    repositories.observe(server.db, repo="acme/api", display_name="acme/api", forge_id=7, **common)
    repositories.observe(
        server.db, repo="acme/api2", display_name="acme/api2", forge_id=7, **common
    )
    with server.db.write() as tx:
        tx.execute(
            "INSERT INTO leases (forge, repo, number, role, holder, epoch, head_sha, phase,"
            " ttl_s, acquired_at, heartbeat_at, expires_at) VALUES ('gitea', 'acme/api2', 12,"
            " 'merger', 'worker-private-holder', 3, ?, 'claimed', 60, 0, 0, 4000000000)",
            (HEAD,),
        )
    old_name = server.token("read", repo="gitea:acme/api")
    owner = server.token("read", repo="gitea:acme/api2")

    async def page(path: str, token: str) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"}
        async with server.http.get(server.base + path, headers=headers) as resp:
            return resp.status, await resp.text()

    for path in ("/", "/?repo=gitea:acme/api", "/pr/gitea/acme/api/12"):
        status, text = await page(path, old_name)
        assert status == 403 and "worker-private-holder" not in text, path
        assert "repo_not_allowed" in text or "bound to" in text, path
    status, body = await server.get(q("/api/v1/leases/history", pr="gitea:acme/api#12"), old_name)
    assert (status, body["error"]) == (403, "repo_not_allowed")
    # The renamed repository's own token reads it under either name.
    for path in ("/", "/?repo=gitea:acme/api", "/pr/gitea/acme/api/12"):
        status, text = await page(path, owner)
        assert status == 200 and "worker-private-holder" in text, path


async def raw_request(srv: Running, head: bytes, body: bytes = b"") -> bytes:
    """One request written byte for byte (no client would send these headers); the status
    line of the answer."""
    host, port = srv.base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        length = f"Content-Length: {len(body)}\r\n".encode() if body else b""
        writer.write(head + b"Host: x\r\nConnection: close\r\n" + length + b"\r\n" + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()
    return answer.split(b"\r\n", 1)[0]


async def test_header_bytes_that_are_not_ascii_are_refused_or_ignored(server: Running) -> None:
    token = server.token("read").encode()
    init = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "probe", "version": "1"},
            },
        }
    ).encode()
    # /mcp hands headers to the SDK: UTF-8 in one of them is passed on as bytes, not a 500.
    status = await raw_request(
        server,
        b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer " + token + b"\r\n"
        b"X-Client-Name: \xe4\xb8\xad\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\n",
        init,
    )
    assert status == b"HTTP/1.1 200 OK"
    # A session cookie whose signature is not ASCII is no session: to the sign-in form.
    status = await raw_request(
        server, b"GET / HTTP/1.1\r\nCookie: reviewbot_session=1.99999999999.\xff\xfe\r\n"
    )
    assert status == b"HTTP/1.1 303 See Other"
    # A CSRF cookie of undecodable bytes is a form that expired, not a 500.
    status = await raw_request(
        server,
        b"POST /logout HTTP/1.1\r\nCookie: reviewbot_csrf=\xff\xfe\xfd\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n",
        b"csrf=%ED%A0%80",
    )
    assert status == b"HTTP/1.1 403 Forbidden"


async def test_credentials_in_a_configured_url_are_never_shown(tmp_path: Path) -> None:
    """A forge URL may carry credentials in its user part (a proxy's basic auth, a token as
    the user name): ``/readyz`` needs no token, and the runtime report and the status page
    show the configuration to any ``read`` token."""
    settings = make_settings(
        tmp_path / "data",
        gitea=GiteaSettings(url="http://bot:url-password-9f3@127.0.0.1:9", token="t"),
    )
    async with running_server(settings) as srv:
        reader = srv.token("read")
        answers = []
        for path, token in (("/readyz", None), ("/api/v1/runtime", reader), ("/", reader)):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with srv.http.get(srv.base + path, headers=headers) as resp:
                answers.append((path, resp.status, await resp.text()))
        for path, _, text in answers:
            assert "url-password-9f3" not in text, path
            assert "bot:" not in text, path
        readyz = json.loads(answers[0][2])
        gitea = next(c for c in readyz["checks"] if c["name"] == "forge_gitea")
        assert "http://<secret>@127.0.0.1:9" in gitea["detail"]  # still says which forge
        runtime = json.loads(answers[1][2])
        assert runtime["config"]["gitea"]["url"] == "http://<secret>@127.0.0.1:9"


async def test_a_flood_of_runtime_reads_neither_stalls_the_store_nor_multiplies(
    tmp_path: Path,
) -> None:
    """``GET /api/v1/runtime`` hashes the code and reads the configuration again. Twenty
    ``read`` callers at once share one comparison, and while it runs (held here until the
    test lets it go) the store still answers the lease API."""
    settings = make_settings(tmp_path / "data")
    release = threading.Event()
    reloads: list[float] = []

    def slow_reload() -> Settings:
        reloads.append(0.0)
        release.wait(WAIT_S)
        return settings

    service = build_service(
        settings, parts=Parts.JOURNAL | Parts.MERGE, reload_settings=slow_reload
    )
    server = TestServer(create_app(service), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            srv = Running(server.app, f"http://127.0.0.1:{server.port}", http)
            token = srv.token("read")
            flood = [asyncio.create_task(srv.get("/api/v1/runtime", token)) for _ in range(20)]
            for _ in range(int(WAIT_S / 0.01)):
                if reloads:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # let every caller arrive
            try:
                status, body = await asyncio.wait_for(srv.get("/api/v1/leases", token), 10)
                assert (status, body) == (200, {"leases": []})
            finally:
                release.set()
            answers = await asyncio.gather(*flood)
            assert {status for status, _ in answers} == {200}
            assert len(reloads) == 1
    finally:
        await server.close()
