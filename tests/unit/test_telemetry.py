"""The service's series: forge calls by status (304s apart), rate limits, one registry each."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from reviewbot.forges.errors import ForgeUnavailable
from reviewbot.forges.http import ForgeHttp, RetryPolicy
from reviewbot.observe import Telemetry


def sample(t: Telemetry, name: str, **labels: str) -> float:
    return t.registry.get_sample_value(name, labels) or 0.0


async def test_forge_calls_are_counted_by_operation_and_status_with_304_apart() -> None:
    answers = iter(
        [
            httpx.Response(200, json={}, headers={"etag": '"v1"', "x-ratelimit-remaining": "4999"}),
            httpx.Response(304, headers={"x-ratelimit-remaining": "4999"}),
            httpx.Response(429, headers={"retry-after": "2"}),
            httpx.Response(200, json={}, headers={"x-ratelimit-remaining": "4998"}),
        ]
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    t = Telemetry()
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: next(answers)))
    http = ForgeHttp(client, sleep=sleep, watch=t.forge_watch("github"))
    url = "https://forge.test/repos/acme/api/pulls/1"
    await http.send("get_pull", "GET", url, headers={})
    await http.send("get_pull", "GET", url, headers={})  # served from the ETag cache
    await http.send("list_reviews", "GET", url + "/reviews", headers={})  # 429, then 200
    await client.aclose()

    calls = "reviewbot_forge_calls_total"
    assert sample(t, calls, forge="github", operation="get_pull", status="200") == 1
    assert sample(t, calls, forge="github", operation="get_pull", status="304") == 1
    assert sample(t, calls, forge="github", operation="list_reviews", status="429") == 1
    assert sample(t, calls, forge="github", operation="list_reviews", status="200") == 1
    assert sample(t, "reviewbot_forge_rate_limit_remaining", forge="github") == 4998
    assert sample(t, "reviewbot_forge_rate_limit_waits_total", forge="github") == 1
    assert slept == [2.0]


async def test_an_unreachable_forge_is_counted_without_a_status() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def sleep(_: float) -> None:
        return None

    t = Telemetry()
    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
    http = ForgeHttp(client, RetryPolicy(attempts=2), sleep=sleep, watch=t.forge_watch("gitea"))
    with pytest.raises(ForgeUnavailable):
        await http.send("get_pull", "GET", "https://forge.test/x", headers={})
    await client.aclose()
    calls = "reviewbot_forge_calls_total"
    assert sample(t, calls, forge="gitea", operation="get_pull", status="unreachable") == 2


def test_two_services_in_one_process_have_registries_of_their_own() -> None:
    first, second = Telemetry(), Telemetry()
    first.deliveries_refused.labels("github", "bad_signature").inc()
    labels = {"source": "github", "reason": "bad_signature"}
    assert first.registry.get_sample_value("reviewbot_deliveries_refused_total", labels) == 1
    assert second.registry.get_sample_value("reviewbot_deliveries_refused_total", labels) is None
    text = generate_latest(first.registry).decode()
    assert "python_info" in text and "python_gc_objects_collected_total" in text
    if Path("/proc/self/stat").exists():  # the process collector reads /proc
        assert "process_cpu_seconds_total" in text and "process_resident_memory_bytes" in text
