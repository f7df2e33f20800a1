"""Faults at the front door of a real ``serve``: bodies that never end, and a group-commit
batch holding one row the store cannot take. Neither costs any other sender its answer, and
everything acknowledged is gated."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from reviewbot.ingress.signatures import sign_github
from tests.faults.support import (
    LIMIT_S,
    REPO,
    SECRET,
    acked_ids,
    all_finished,
    assert_every_acked_delivery_finished,
    wait_for,
    world,
)

pytestmark = pytest.mark.slow

READ_TIMEOUT_S = 1.0


async def _connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(base)
    assert url.hostname is not None and url.port is not None
    return await asyncio.open_connection(url.hostname, url.port)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """The status line, or ``b""`` when the server closed the connection without one."""
    async with asyncio.timeout(LIMIT_S):
        return await reader.readline()


async def test_bodies_that_never_end_hold_up_no_one(tmp_path: Path) -> None:
    settings = {"REVIEWBOT_BODY_READ_TIMEOUT_S": str(READ_TIMEOUT_S)}
    async with world(tmp_path, settings=settings) as w, w.serving() as bot:
        stalled = []
        for framing in (b"Content-Length: 1000000\r\n", b"Transfer-Encoding: chunked\r\n"):
            reader, writer = await _connect(bot.base)
            writer.write(
                b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: never-ends\r\n"
                b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n" + framing + b"\r\n"
                b'5\r\n{"a":\r\n'  # a first piece, then nothing more, ever
            )
            await writer.drain()
            stalled.append((reader, writer))
        started = time.monotonic()

        # Meanwhile the forge's deliveries are acknowledged and gated, health answers.
        pulls = [w.sim.open_pr(f, REPO, author="alice") for f in ("github", "gitea") * 3]
        sent = [await w.sim.deliver_pull_request(pr.forge, REPO, pr.number) for pr in pulls]
        status, _ = await w.get(bot, "/healthz")
        assert status == 200
        acked = acked_ids(sent)
        assert len(acked) == len(sent)
        await wait_for(lambda: all_finished(w, acked), "the other deliveries")

        for reader, writer in stalled:
            line = await _answer(reader)
            assert line == b"" or line.split()[1] in (b"400", b"408", b"413"), line
            writer.close()
        # Cut off after the read timeout, not left open for good.
        assert time.monotonic() - started < LIMIT_S
        assert w.rows("SELECT * FROM deliveries WHERE delivery_id = 'never-ends'") == []
        assert_every_acked_delivery_finished(w, acked)


async def test_a_row_the_store_cannot_take_fails_only_its_own_request(tmp_path: Path) -> None:
    """A signed delivery with a header byte that is not UTF-8 arrives with 36 valid ones at
    once: it alone gets 400, every valid one is acknowledged, stored and gated."""
    body = json.dumps({"zen": "hi", "hook_id": 1}).encode()
    async with world(tmp_path) as w, w.serving() as bot:
        reader, writer = await _connect(bot.base)
        raw = (
            b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nX-GitHub-Event: pi\xffng\r\n"
            b"X-GitHub-Delivery: bad-one\r\n"
            b"X-Hub-Signature-256: " + sign_github(SECRET.encode(), body).encode() + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
        )

        async def bad_one() -> int:
            writer.write(raw)
            await writer.drain()
            return int((await _answer(reader)).split()[1])

        async def valid(n: int) -> tuple[str, int]:
            delivery_id = f"valid-{n:02d}"
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": delivery_id,
                "X-Hub-Signature-256": sign_github(SECRET.encode(), body),
            }
            async with w.http.post(
                f"{bot.base}/webhooks/github", data=body, headers=headers
            ) as resp:
                return delivery_id, resp.status

        try:
            bad, *answers = await asyncio.gather(bad_one(), *(valid(n) for n in range(36)))
        finally:
            writer.close()
        assert bad == 400
        assert [status for _, status in answers] == [200] * 36
        ids = [delivery_id for delivery_id, _ in answers]
        await wait_for(lambda: all_finished(w, ids), "the valid deliveries")
        assert_every_acked_delivery_finished(w, ids)
        assert w.rows("SELECT * FROM deliveries WHERE delivery_id = 'bad-one'") == []
