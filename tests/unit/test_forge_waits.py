"""What the forge HTTP policy tells ``on_wait``: each retry wait and each unanswered request.

A command line turns these into "waiting for the forge at URL (...)" lines, so a forge that is
down or slow is never seconds of silence.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
import respx

from reviewbot.forges.errors import ForgeUnavailable
from reviewbot.forges.gitea import GiteaForge
from reviewbot.forges.http import ForgeWait, RetryPolicy, transport_reason

BASE = "https://gitea.example.test"
PULL = f"{BASE}/api/v1/repos/acme/api/pulls/7"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_forge(
    waits: list[ForgeWait], sleeps: list[float], url: str = BASE, **policy: float
) -> GiteaForge:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return GiteaForge(
        url=url,
        token="t",
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        sleep=sleep,
        on_wait=waits.append,
    )


async def test_each_retry_of_a_refused_connection_is_reported_before_its_wait() -> None:
    # A real refused connection: httpx names it only deep in the exception chain.
    waits: list[ForgeWait] = []
    sleeps: list[float] = []
    url = f"http://127.0.0.1:{closed_port()}"
    forge = make_forge(waits, sleeps, url)
    with pytest.raises(ForgeUnavailable, match=r"connection failed \(ConnectError: connection"):
        await forge.get_pull("acme/api", 7)
    assert [(w.reason, w.attempt, w.attempts, w.wait_s) for w in waits] == [
        ("connection refused", 1, 4, 0.5),
        ("connection refused", 2, 4, 1.0),
        ("connection refused", 3, 4, 2.0),
    ]
    assert sleeps == [0.5, 1.0, 2.0]  # one notice per wait, none after the last attempt
    assert {(w.operation, w.url) for w in waits} == {
        ("get_pull", f"{url}/api/v1/repos/acme/api/pulls/7")
    }
    await forge.aclose()


@respx.mock
async def test_server_errors_and_rate_limits_are_reported_with_their_status() -> None:
    waits: list[ForgeWait] = []
    sleeps: list[float] = []
    forge = make_forge(waits, sleeps)
    respx.get(PULL).mock(
        side_effect=[
            httpx.Response(503, json={"message": "down"}),
            httpx.Response(429, headers={"retry-after": "3"}, json={"message": "slow down"}),
            httpx.Response(404, json={"message": "not found"}),
        ]
    )
    with pytest.raises(Exception, match="not found"):
        await forge.get_pull("acme/api", 7)
    assert [(w.reason, w.attempt, w.attempts, w.wait_s) for w in waits] == [
        ("HTTP 503", 1, 4, 0.5),
        ("rate limited (HTTP 429)", 1, 3, 3.0),
    ]
    await forge.aclose()


@respx.mock
async def test_a_request_unanswered_for_a_while_is_reported_once() -> None:
    waits: list[ForgeWait] = []
    forge = make_forge(waits, [], slow_notice_s=0.05, timeout_s=5.0)

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.3)
        return httpx.Response(404, json={"message": "not found"})

    respx.get(PULL).mock(side_effect=slow)
    with pytest.raises(Exception, match="not found"):
        await forge.get_pull("acme/api", 7)
    assert [(w.reason, w.attempt, w.wait_s) for w in waits] == [("no answer yet", 1, 4.95)]

    # A prompt answer is not reported.
    waits.clear()
    respx.get(PULL).respond(404, json={"message": "not found"})
    with pytest.raises(Exception, match="not found"):
        await forge.get_pull("acme/api", 7)
    await asyncio.sleep(0.1)
    assert waits == []
    await forge.aclose()


def test_transport_reasons_are_said_in_words() -> None:
    def chained(cause: BaseException) -> httpx.TransportError:
        try:
            raise cause
        except BaseException as inner:
            try:
                raise httpx.ConnectError("All connection attempts failed") from inner
            except httpx.ConnectError as outer:
                return outer

    assert transport_reason(chained(ConnectionRefusedError(111, "refused"))) == (
        "connection refused"
    )
    assert transport_reason(chained(socket.gaierror(-2, "Name or service not known"))) == (
        "host name not found"
    )
    assert transport_reason(httpx.ReadTimeout("read")) == "timed out"
    assert transport_reason(httpx.RemoteProtocolError("peer closed")) == "peer closed"
