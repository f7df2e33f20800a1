"""A real ``reviewbot serve`` against the simulator, as a child process: the world it is
given, its environment, its start, and a disk that fails on demand.

The fault campaign (``tests/faults``) and the soak benchmark (``benchmarks/soak.py``) both
run the bot this way; they add their own settings and faults on top.
"""

from __future__ import annotations

import asyncio
import re
import resource
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator

REPO = "acme/api"
BOT = "reviewbot"
FORGES = ("github", "gitea")


def prepare(sim: Simulator) -> dict[str, str]:
    """``acme/api`` on both forges, requiring ``ci/test``, ``alice`` may write; the bot's
    token per forge."""
    tokens = {}
    for forge in FORGES:
        tokens[forge] = sim.add_user(forge, BOT, bot=True)
        sim.add_user(forge, "alice")
        sim.create_repo(forge, REPO)
        sim.require_checks(forge, REPO, "main", ["ci/test"])
        sim.set_permission(forge, REPO, "alice", "write")
    return tokens


def serve_env(
    sim_server: SimServer, tokens: Mapping[str, str], *, config: Path, data_dir: Path, secret: str
) -> dict[str, str]:
    """The ``REVIEWBOT_*`` settings of a bot on both of the simulator's forges, with two
    workers, a forge timeout of 5 s (a forge that stops answering shows within seconds, and a
    loaded machine does not time out a forge that answers) and short claim terms (work a
    killed process held is taken up within seconds)."""
    return {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(data_dir),
        "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
        "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
        "REVIEWBOT_GITHUB__WEBHOOK_SECRET": secret,
        "REVIEWBOT_GITHUB__BOT_LOGIN": BOT,
        "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
        "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
        "REVIEWBOT_GITEA__WEBHOOK_SECRET": secret,
        "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
        "REVIEWBOT_WORKERS": "2",
        "REVIEWBOT_FORGE_TIMEOUT_S": "5",
        "REVIEWBOT_LEASES__LEASE_S": "2",
        "REVIEWBOT_LEASES__RENEW_S": "1.5",
        "REVIEWBOT_LEASES__RETRY_S": "1",
    }


async def start_serve(
    env: Mapping[str, str], *args: str, on_line: Callable[[str], None], line_s: float = 30.0
) -> tuple[asyncio.subprocess.Process, str, asyncio.Task[None]]:
    """``reviewbot serve --port 0 ARGS`` with exactly ``env``, once it listens: the process,
    its base URL, and the task that hands every line it prints (stdout and stderr) to
    ``on_line`` until it exits (read as it comes: a full pipe would stall the server)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reviewbot",
        "serve",
        "--port",
        "0",
        *args,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), line_s)).decode(errors="replace")
        if not line:
            raise RuntimeError("reviewbot serve exited before listening:\n" + "".join(seen))
        seen.append(line)
        on_line(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1), asyncio.create_task(_read(proc.stdout, on_line))


async def _read(stream: asyncio.StreamReader, on_line: Callable[[str], None]) -> None:
    while line := await stream.readline():
        on_line(line.decode(errors="replace"))


def limit_file_size(pid: int, limit: int | None) -> None:
    """Process ``pid`` may not write past ``limit`` bytes of any file (``None``: no limit).

    SQLite's writes then fail with an I/O error, as on a full or failing disk; lifting the
    limit is the disk coming back. Only the soft limit changes: no privilege is needed."""
    soft = resource.RLIM_INFINITY if limit is None else limit
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
