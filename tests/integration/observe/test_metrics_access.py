"""Who may read ``/metrics``, on the main port and on ``metrics_port``, and what it holds.

The default answers only a token with the ``metrics`` or ``read`` scope, so a public port
shows an anonymous caller nothing; ``metrics_port`` serves a private listener without one.
The shipped Grafana dashboard queries only series a real scrape has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reviewbot.store.tokens import revoke_token
from tests.integration.process_support import serve_process
from tests.integration.server_support import Running, make_settings, running_server
from tests.support.paths import REPO_ROOT as ROOT

DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"


async def scrape_status(server: Running, authorization: str | None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with server.http.get(server.base + "/metrics", headers=headers) as resp:
        return resp.status, await resp.text()


async def test_metrics_need_a_token_with_metrics_or_read_scope(tmp_path: Path) -> None:
    async with running_server(make_settings(tmp_path / "data"), forges={}) as server:
        assert (await scrape_status(server, None))[0] == 401
        assert (await scrape_status(server, "Bearer rbt_" + "x" * 43))[0] == 401
        assert (await scrape_status(server, "Basic " + "a" * 5_000))[0] == 401
        assert (await scrape_status(server, "Bearer " + "rbt_" * 1_500))[0] == 401
        assert (await scrape_status(server, "Bearer " + "a" * 20_000))[0] == 400  # too long
        status, body = await scrape_status(server, f"Bearer {server.token('lease,review')}")
        assert status == 403 and json.loads(body)["error"] == "missing_scope"
        bound = server.token("metrics", repo="github:acme/api")  # a binding does not matter:
        assert (await scrape_status(server, f"Bearer {bound}"))[0] == 200  # no repo labels
        assert (await scrape_status(server, f"Bearer {server.token('read')}"))[0] == 200
        revoked = server.token("metrics", name="old-scraper")
        revoke_token(server.db, "old-scraper", now=1_767_312_000.0)
        assert (await scrape_status(server, f"Bearer {revoked}"))[0] == 401


async def test_open_metrics_answer_anyone_and_name_no_repository(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", metrics_auth="open")
    async with running_server(settings, forges={}, run_workers=False) as server:
        body = b'{"action": "opened", "repository": {"full_name": "secret-org/secret-repo"}}'
        status, _ = await server.github("pull_request", body, delivery_id="d-1")
        assert status == 202
        status, text = await scrape_status(server, None)
    assert status == 200
    assert 'reviewbot_deliveries_accepted_total{source="github"} 1.0' in text
    assert "reviewbot_queue_depth 1.0" in text  # read from the store at scrape time
    assert "secret-org" not in text and "secret-repo" not in text


@pytest.mark.slow
async def test_metrics_port_serves_metrics_alone_without_a_token(tmp_path: Path) -> None:
    env = {"REVIEWBOT_DATA_DIR": str(tmp_path / "data"), "REVIEWBOT_METRICS_PORT": "0"}
    async with serve_process(cwd=tmp_path, env=env) as server, aiohttp.ClientSession() as http:
        said = "\n".join(server.printed)
        match = re.search(r"metrics on (http://\S+)/metrics", said)
        assert match is not None, said
        private = match.group(1)
        assert private.startswith("http://127.0.0.1:")  # metrics_host: loopback by default
        async with http.get(private + "/metrics") as resp:
            assert resp.status == 200 and "reviewbot_queue_depth" in await resp.text()
        async with http.get(server.base + "/metrics") as resp:
            assert resp.status == 401  # the main port still needs a token
        for method, path in (("GET", "/healthz"), ("POST", "/webhooks/github")):
            async with http.request(method, private + path) as resp:
                assert resp.status in (404, 405)  # nothing else is served there


def dashboard_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs, "the dashboard queries nothing"
    return {name for expr in exprs for name in re.findall(r"\b(?:reviewbot|process)_\w+", expr)}


async def test_every_metric_the_dashboard_queries_is_on_a_real_scrape(tmp_path: Path) -> None:
    async with running_server(make_settings(tmp_path / "data"), forges={}) as server:
        text = await server.scrape()
    exported: set[str] = set()
    for family in text_string_to_metric_families(text):
        exported.add(family.name)
        exported |= {s.name for s in family.samples}
    suffixes = ("_total", "_bucket", "_count", "_sum")
    missing = {
        name
        for name in dashboard_metrics()
        if name not in exported
        and not any(name.endswith(s) and name.removesuffix(s) in exported for s in suffixes)
    }
    assert missing == set()
