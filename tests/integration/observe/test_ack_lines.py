"""The acknowledgement's log line from a real ``serve --role ingest`` under a burst.

Lines of acknowledgements wait for the end of the event loop's turn and are written together
(``EventLogger.info_soon``). Over HTTP, with signed deliveries whose ids a sender chose (quotes
that would break a hand-made line, a secret-shaped token, the webhook secret itself, an id too
long to keep): every acknowledged delivery has exactly one well-formed line, written even when
the process is stopped right after the burst, and no secret is in any of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path

import aiohttp
import pytest

from tests.integration.process_support import serve_process

SECRET = "ack-line-secret-3d8e"
TOKEN = "rbt_AbCdEf0123456789ghijk"
BODY = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()

pytestmark = pytest.mark.slow


def headers(delivery: str) -> dict[str, str]:
    signature = hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": f"sha256={signature}",
        "Content-Type": "application/json",
    }


async def test_every_acknowledgement_has_one_whole_line_and_no_secret(tmp_path: Path) -> None:
    hostile = [
        'quote" "level": "error',
        f"token-{TOKEN}",
        SECRET,
        "x" * 400,  # longer than an id is kept: the body's hash names the delivery
    ]
    plain = [f"burst-{n}" for n in range(60)]
    env = {"REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET}
    async with (
        serve_process("--role", "ingest", "--log-format", "json", cwd=tmp_path, env=env) as server,
        aiohttp.ClientSession() as http,
    ):

        async def send(delivery: str) -> int:
            url = server.base + "/webhooks/github"
            async with http.post(url, data=BODY, headers=headers(delivery)) as resp:
                return resp.status

        statuses = await asyncio.gather(*(send(d) for d in [*hostile, *plain]))
        log = await server.stop()  # at once: the last turn's lines must still be written

    assert all(s in (200, 202) for s in statuses), statuses
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    received = [x for x in lines if x["msg"] in ("delivery received", "delivery duplicate")]
    assert len(received) == len(hostile) + len(plain)
    assert all(x["level"] == "info" and x["event"] == "ping" for x in received)
    ids = [x["delivery_id"] for x in received]
    assert set(plain) <= set(ids) and hostile[0] in ids
    assert sum(i.startswith("sha256:") for i in ids) == 1  # the over-long id, named by the body
    assert SECRET not in log and TOKEN not in log
