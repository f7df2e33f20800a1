"""Running ``reviewbot`` as a real process: one-shot commands and a ``serve`` on loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.server_support import WAIT_S

# A serve starts in a second or two on a quiet machine, in tens of seconds on one running
# many of them at once: a bound on the wait, never a speed check.
START_S = 60.0


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any ``REVIEWBOT_*`` setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    env.update(extra or {})
    return env


def run_reviewbot(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``reviewbot ARGS`` in ``cwd`` with only the ``REVIEWBOT_*`` variables of ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "reviewbot", *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class ServeProcess:
    base: str
    proc: asyncio.subprocess.Process
    printed: list[str] = field(default_factory=list)  # stdout up to the listening line
    # Every line the server wrote on stderr so far (its log), read as it comes so that a
    # chatty log never fills the pipe and blocks the server.
    log: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    async def stop(self) -> str:
        """Stop the server as SIGTERM does and return its whole log."""
        if self.proc.returncode is None:
            self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), WAIT_S)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, WAIT_S)
        return "".join(self.log)


@asynccontextmanager
async def serve_process(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    start_s: float = START_S,
    user: int | None = None,
    python: str = sys.executable,
    command: Sequence[str] | None = None,
) -> AsyncIterator[ServeProcess]:
    """``reviewbot serve --port 0 ARGS`` until its ``listening on`` line (at most ``start_s``);
    killed on exit. ``user``: run it as that uid (and gid, with no other group); only root
    can. ``python``: the interpreter that runs it; ``command``: what runs reviewbot instead
    of ``python -m reviewbot`` (``["./dev", "reviewbot"]``)."""
    as_user: dict[str, object] = (
        {} if user is None else {"user": user, "group": user, "extra_groups": []}
    )
    launcher = [python, "-m", "reviewbot"] if command is None else list(command)
    proc = await asyncio.create_subprocess_exec(
        *launcher,
        "serve",
        "--port",
        "0",
        *args,
        cwd=cwd,
        env=clean_env(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **as_user,  # type: ignore[arg-type]
    )
    log: list[str] = []
    assert proc.stderr is not None
    reader = asyncio.create_task(_collect(proc.stderr, log))
    try:
        assert proc.stdout is not None
        base = ""
        printed: list[str] = []
        async with asyncio.timeout(start_s):
            while not base:
                line = (await proc.stdout.readline()).decode()
                printed.append(line.rstrip("\n"))
                if not line:
                    await asyncio.wait_for(reader, WAIT_S)
                    raise AssertionError(f"serve exited before listening: {''.join(log)}")
                if "listening on " in line:
                    base = line.split("listening on ", 1)[1].split()[0]
        yield ServeProcess(base, proc, printed, log, reader)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await asyncio.wait_for(reader, WAIT_S)


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    while line := await stream.readline():
        into.append(line.decode("utf-8", "replace"))
