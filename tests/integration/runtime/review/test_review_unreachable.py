"""``reviewbot review`` against a forge that is down: it says what it waits for, then gives up.

The command used to sit silent for seconds and end in several lines; now each retry wait is
one stderr line as it starts, and the end is one line and exit status 1.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

from tests.integration.process_support import clean_env, run_reviewbot


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_review_says_it_waits_for_the_forge_then_gives_up_in_one_line(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    (tmp_path / "reviewbot.toml").write_text('[repos."gitea:acme/api"]\n')
    env = {
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        "REVIEWBOT_GITEA__URL": url,
        "REVIEWBOT_GITEA__TOKEN": "token",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reviewbot",
        "review",
        "gitea:acme/api#1",
        cwd=tmp_path,
        env=clean_env(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None and proc.stdout is not None
    lines: list[tuple[float, str]] = []  # when each stderr line arrived
    async with asyncio.timeout(60):
        while line := await proc.stderr.readline():
            lines.append((time.monotonic(), line.decode().rstrip("\n")))
        out = (await proc.stdout.read()).decode()
        code = await proc.wait()

    assert code == 1
    assert out == ""
    text = [line for _, line in lines]
    waiting = [f"reviewbot: waiting for the forge at {url} (retrying: connection refused; "]
    assert [line.startswith(waiting[0]) for line in text] == [True, True, True, False], text
    assert "attempt 1 of 4 failed, next in 0.5 s" in text[0]
    gave_up = text[-1]
    assert gave_up.startswith(f"reviewbot: gave up: the forge at {url} did not answer"), gave_up
    assert "connection refused" in gave_up and "Traceback" not in "\n".join(text)
    # The first line is printed when the wait starts, not after it: the backoffs
    # (0.5 + 1 + 2 s) all lie between it and the last line.
    assert lines[-1][0] - lines[0][0] >= 3.0

    # The attempt is recorded with the reason a person can act on.
    shown = await asyncio.to_thread(
        run_reviewbot, "explain", "gitea:acme/api#1", cwd=tmp_path, env=env
    )
    assert shown.returncode == 0, shown.stderr
    assert "forge_unreachable" in shown.stdout
