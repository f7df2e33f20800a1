"""Runaway queries through the DB tools on a real ``serve``: while several infinite recursive
queries run, ``/healthz`` and the lease API answer, and SIGTERM stops the process within the
shutdown grace (far sooner than the queries' own time limit). On both stores: on
PostgreSQL the runaways run on the server and the stopping bot cancels them there."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.faults.support import LIMIT_S, start, stop, world

pytestmark = pytest.mark.slow

RUNAWAY = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c"
GRACE_S = 2.0
QUERY_LIMIT_S = 300.0  # the queries would run this long: only the shutdown can end them


async def test_sigterm_stops_the_server_within_the_grace_while_queries_run_away(
    tmp_path: Path, store_kind: str, request: pytest.FixtureRequest
) -> None:
    settings = {"REVIEWBOT_DB_ACCESS": "read", "REVIEWBOT_QUERY_TIMEOUT_S": str(QUERY_LIMIT_S)}
    if store_kind == "postgresql":
        settings["REVIEWBOT_DATABASE_URL"] = request.getfixturevalue("postgres_url")
    async with world(tmp_path, settings=settings) as w:
        bot = await start(w.env, "--shutdown-grace", str(GRACE_S))
        try:
            reader = w.token("db:read")
            leaser = w.token("lease,read")
            timeout = aiohttp.ClientTimeout(total=QUERY_LIMIT_S)
            async with aiohttp.ClientSession(timeout=timeout) as http:

                async def runaway() -> int:
                    async with http.post(
                        f"{bot.base}/api/v1/tools/query_workflow_db",
                        json={"arguments": {"sql": RUNAWAY}},
                        headers={"Authorization": f"Bearer {reader}"},
                    ) as resp:
                        return resp.status

                queries = [asyncio.create_task(runaway()) for _ in range(8)]
                await asyncio.sleep(0.5)  # every thread the tools may use is busy now
                for path, token in (("/healthz", None), ("/api/v1/leases", leaser)):
                    for _ in range(3):
                        async with asyncio.timeout(LIMIT_S / 4):
                            status, body = await w.get(bot, path, token)
                        assert status == 200, (path, body)
                assert not any(q.done() for q in queries)  # still running away

                stopping = time.monotonic()
                bot.proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(bot.proc.wait(), QUERY_LIMIT_S / 2)
                took = time.monotonic() - stopping
                for q in queries:  # cut off with the process, never answered
                    q.cancel()
                await asyncio.gather(*queries, return_exceptions=True)
        finally:
            await stop(bot)
        # The grace, plus what closing the store and the process needs; a hang on the
        # queries would take QUERY_LIMIT_S.
        assert took <= 2 * GRACE_S, f"stopped after {took:.1f} s, grace {GRACE_S} s"
        assert bot.proc.returncode == 0, "".join(bot.output[-20:])
