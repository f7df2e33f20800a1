"""Webhook bodies are bounded before they are trusted (a real server over loopback).

A forge webhook's body must be buffered before its signature can be checked, so anyone who
reaches the port can make the server read. A delivery without a signature or an event
header is refused before its body is read; the bodies being read at once share a byte
budget; a body that never ends is cut off by a deadline.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.process_support import serve_process
from tests.integration.server_support import WAIT_S, Running, make_settings, running_server

MB = 1024 * 1024
BAD_SIGNATURE = "sha256=" + "0" * 64  # well-formed, wrong: the body must be read to know


async def raw_request(base: str, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` and ``body`` on a socket and read the status line and what follows,
    without ever sending the rest of a body the head declares."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        rest = await reader.read(4096)
        return int(status_line.split()[1]), rest
    finally:
        writer.close()


def post_head(path: str, length: int, headers: dict[str, str]) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines) + "\r\n\r\n"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    settings = make_settings(
        tmp_path / "data",
        max_body_bytes=1 * MB,
        unverified_body_budget_bytes=2 * MB,
        body_read_timeout_s=1.0,
    )
    async with running_server(settings, forges={}) as running:
        yield running


async def metric(srv: Running, name: str) -> float:
    text = await srv.scrape()
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert match is not None, text
    return float(match.group(1))


@pytest.mark.parametrize(
    ("path", "headers", "code"),
    [
        ("/webhooks/github", {"X-GitHub-Event": "pull_request"}, b"signature_invalid"),
        (
            "/webhooks/github",
            {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": ""},
            b"signature_invalid",
        ),
        ("/webhooks/gitea", {"X-Gitea-Event-Type": "pull_request"}, b"signature_invalid"),
        ("/webhooks/github", {"X-Hub-Signature-256": BAD_SIGNATURE}, b"unknown_event"),
        (
            "/webhooks/github",
            {"X-Hub-Signature-256": BAD_SIGNATURE, "X-GitHub-Event": "<script>"},
            b"unknown_event",
        ),
    ],
)
async def test_no_signature_or_no_event_is_refused_before_the_body_is_read(
    server: Running, path: str, headers: dict[str, str], code: bytes
) -> None:
    # The head declares a body that is never sent: only an answer given unread can arrive.
    head = post_head(path, MB, {"Content-Type": "application/json", **headers})
    status, rest = await asyncio.wait_for(raw_request(server.base, head), WAIT_S)
    assert status in (400, 401) and code in rest
    assert await metric(server, "reviewbot_unverified_body_bytes_peak") == 0


async def test_concurrent_large_unsigned_posts_share_one_budget(server: Running) -> None:
    body = b"{" + b" " * (MB - 2) + b"}"
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-Hub-Signature-256": BAD_SIGNATURE,
    }

    async def post() -> tuple[int, str | None]:
        try:
            async with server.http.post(
                server.base + "/webhooks/github", data=body, headers=headers
            ) as resp:
                return resp.status, resp.headers.get("Retry-After")
        except aiohttp.ClientError:
            return 0, None  # answered and closed before it finished sending: refused too

    answers = await asyncio.wait_for(asyncio.gather(*(post() for _ in range(40))), 60)
    statuses = [status for status, _ in answers]
    # every body that was read failed its signature; no more than the budget was read at once
    assert statuses.count(401) >= 2
    assert set(statuses) <= {401, 503, 0}
    assert all(retry == "5" for status, retry in answers if status == 503)
    assert await metric(server, "reviewbot_unverified_body_bytes_peak") <= 2 * MB
    assert await metric(server, "reviewbot_unverified_body_bytes") == 0
    with server.db.read() as tx:
        assert tx.all("SELECT delivery_id FROM deliveries") == []


async def test_a_body_that_never_ends_loses_its_share(server: Running) -> None:
    headers = {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": BAD_SIGNATURE}
    head = post_head("/webhooks/github", MB, headers)
    started = time.monotonic()
    status, rest = await asyncio.wait_for(raw_request(server.base, head, b"{ partial"), WAIT_S)
    assert (status, b"body_timeout" in rest) == (408, True)
    assert time.monotonic() - started < WAIT_S
    assert await metric(server, "reviewbot_unverified_body_bytes") == 0
    assert await metric(server, "reviewbot_unverified_body_bytes_peak") == MB


# --- a real `reviewbot serve` process ----------------------------------------------------------


def serve_env(data_dir: Path) -> dict[str, str]:
    return {
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_GITHUB__WEBHOOK_SECRET": "s3cret",
        "REVIEWBOT_GITHUB__TOKEN": "unused",
        "REVIEWBOT_GITHUB__API_URL": "http://127.0.0.1:9/",  # never called: nothing is signed
        "REVIEWBOT_RECONCILE_INTERVAL_S": "3600",
        "REVIEWBOT_WORKERS": "1",
    }


def peak_rss_bytes(pid: int) -> int:
    """The process's high-water mark of resident memory (Linux ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
async def test_forty_concurrent_25mb_posts_do_not_hold_a_gigabyte(tmp_path: Path) -> None:
    body = b"{" + b" " * (25 * MB - 2) + b"}"
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-Hub-Signature-256": BAD_SIGNATURE,
    }
    async with (
        serve_process(cwd=tmp_path, env=serve_env(tmp_path / "data")) as bot,
        aiohttp.ClientSession() as http,
    ):
        base, pid = bot.base, bot.proc.pid
        before = peak_rss_bytes(pid)

        async def post() -> int:
            try:
                async with http.post(base + "/webhooks/github", data=body, headers=headers) as r:
                    return r.status
            except aiohttp.ClientError:
                return 0

        statuses = await asyncio.wait_for(asyncio.gather(*(post() for _ in range(40))), 120)
        peak = peak_rss_bytes(pid)
    assert set(statuses) <= {401, 503, 0} and 401 in statuses
    # 40 x 25 MB is 1000 MB; the default budget (64 MB) lets about two bodies in at once.
    # The bound is generous (allocator slack, a copy of each body) and far below 1 GB.
    assert peak - before < 400 * MB, (before, peak)
