"""``reviewbot sim``: serve an empty forge simulator (GitHub and Gitea APIs) until Ctrl-C.

GitHub's REST subset is under ``/github`` (use it as the GitHub API URL), Gitea's API under
``/gitea/api/v1`` (use ``/gitea`` as the Gitea URL), and the scenario API under ``/_sim``:
create users, repositories and pull requests, push, set statuses, check runs and required
checks, submit reviews, configure a webhook and deliver events, inject faults, read the
request log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING, Any

from reviewbot.cli import CommandError

if TYPE_CHECKING:
    from reviewbot.sim import Simulator

EXAMPLE = """\
Example:
  reviewbot sim --port 8999 &
  curl -s -X POST localhost:8999/_sim/users -d '{"forge": "github", "login": "bot"}'
  curl -s -X POST localhost:8999/_sim/repos -d '{"forge": "github", "repo": "acme/api"}'
  curl -s -X POST localhost:8999/_sim/pulls \\
       -d '{"forge": "github", "repo": "acme/api", "author": "alice"}'
  curl -s -H "Authorization: token TOKEN" localhost:8999/github/repos/acme/api/pulls/1
  curl -s localhost:8999/_sim/requests"""


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "sim",
        help="run the forge simulator (fake GitHub and Gitea over HTTP)",
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8999, help="listen port; 0 picks a free one (default 8999)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        asyncio.run(_serve(args.host, args.port))
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    return 0


async def _serve(host: str, port: int) -> None:
    # Start-up cost: the simulator loads only for `reviewbot sim`.
    from reviewbot.sim import Simulator

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    # Served repositories are real git ones, cloned from their clone_url (docs/simulator.md).
    sim = Simulator(git=True)
    try:
        await _answer(sim, host, port, stop)
    finally:
        sim.close()
    print("reviewbot sim stopped", file=sys.stderr, flush=True)


async def _answer(sim: Simulator, host: str, port: int, stop: asyncio.Event) -> None:
    from reviewbot.sim import SimServer  # start-up cost, as above

    async with SimServer(sim, host=host, port=port) as server:
        print(
            f"reviewbot sim listening on {server.base_url}\n"
            f"  GitHub API URL: {server.github_api_url}\n"
            f"  Gitea URL:      {server.gitea_url}\n"
            f"  control API:    {server.base_url}/_sim",
            flush=True,
        )
        await stop.wait()
