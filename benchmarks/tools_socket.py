"""Tools socket benchmark: what a review run's own tools socket costs, against TCP loopback.

Measured in one run, in one process, on one store:

  (a) open + close   a run's tools socket (``server/tools_socket.py``: private folder, aiohttp
                     site on a Unix socket, removed again), against the same application on
                     a TCP loopback site opened and closed the same way;
  (b) tool calls     ``query_workflow_db`` (``SELECT 1``) by a run's session, sequential, over
                     the run's socket, against the same handler on TCP loopback.

Prints the mean of each and the ratio socket / loopback.

Usage:
  python benchmarks/tools_socket.py            # 300 opens, 2000 calls
  python benchmarks/tools_socket.py --quick    # 50 opens, 300 calls
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from reviewbot.config import Settings
from reviewbot.runtime.reviewers.tools import run_tools
from reviewbot.server.errors import errors_middleware
from reviewbot.server.tools import TOOLS_ROUTE, tool_handler
from reviewbot.server.tools_socket import service_tools_sockets
from reviewbot.service import Parts, Service, build_service
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths

BODY = {"arguments": {"sql": "SELECT 1"}}


async def loopback_open_close(service: Service) -> None:
    assert service.tools is not None
    app = web.Application(middlewares=[errors_middleware()])
    app.router.add_post(TOOLS_ROUTE, tool_handler(service.tools))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    await runner.cleanup()


async def calls(session: aiohttp.ClientSession, url: str, token: str, n: int) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    for _ in range(n):
        async with session.post(url, json=BODY, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()
    return (time.perf_counter() - started) / n


async def main(opens: int, n_calls: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        # Tools calls unlimited: the baseline has no rate limit either.
        settings = Settings(data_dir=Path(data), rate_limits={"tools_per_s": 0})
        async with build_service(settings, parts=Parts(0)) as service:
            sockets = service_tools_sockets(service)
            started = time.perf_counter()
            for i in range(opens):
                async with sockets(f"run-open-{i}"):
                    pass
            socket_open = (time.perf_counter() - started) / opens
            started = time.perf_counter()
            for _ in range(opens):
                await loopback_open_close(service)
            tcp_open = (time.perf_counter() - started) / opens

            sessions = service.sessions
            paths = WorkflowPaths.from_settings(settings)
            sessions.open_run(
                "run-calls", db_access=DBAccess.READ, tools=run_tools(paths, sessions)
            )
            token = sessions.issue_token(sessions.open_child("run-calls", "step").id, ttl_s=3600)
            assert service.tools is not None
            app = web.Application(middlewares=[errors_middleware()])
            app.router.add_post(TOOLS_ROUTE, tool_handler(service.tools))
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            host, port = runner.addresses[0][:2]
            route = TOOLS_ROUTE.replace("{name}", "query_workflow_db")
            try:
                async with sockets("run-calls") as path:
                    unix = aiohttp.UnixConnector(path=str(path))
                    async with aiohttp.ClientSession(connector=unix) as client:
                        await calls(client, f"http://localhost{route}", token, 20)  # warm up
                        socket_call = await calls(
                            client, f"http://localhost{route}", token, n_calls
                        )
                async with aiohttp.ClientSession() as client:
                    url = f"http://{host}:{port}{route}"
                    await calls(client, url, token, 20)
                    tcp_call = await calls(client, url, token, n_calls)
            finally:
                await runner.cleanup()
    print(f"(a) open + close, mean of {opens}:")
    print(f"    run's tools socket  {socket_open * 1e3:8.3f} ms")
    print(f"    TCP loopback site   {tcp_open * 1e3:8.3f} ms   ratio {socket_open / tcp_open:.2f}")
    print(f"(b) query_workflow_db call, mean of {n_calls}:")
    print(f"    run's tools socket  {socket_call * 1e3:8.3f} ms")
    print(f"    TCP loopback        {tcp_call * 1e3:8.3f} ms   ratio {socket_call / tcp_call:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(50, 300) if args.quick else main(300, 2000))
