"""``reviewbot sim`` as a real process: the control API and a forge API over loopback HTTP."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from reviewbot.cli import build_parser, main
from tests.integration.sim.git_support import clone, git


async def test_sim_command_serves_control_and_forge_apis_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reviewbot",
        "sim",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
        match = re.search(r"listening on (http://\S+)", line)
        assert match, line
        base = match.group(1)
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/_sim/users", json={"forge": "github", "login": "bot"}
            ) as resp:
                assert resp.status == 201
                token = (await resp.json())["token"]
            async with session.post(
                f"{base}/_sim/repos", json={"forge": "github", "repo": "acme/api"}
            ) as resp:
                assert resp.status == 201
            async with session.post(
                f"{base}/_sim/pulls", json={"forge": "github", "repo": "acme/api", "author": "al"}
            ) as resp:
                pull = await resp.json()
            async with session.get(
                f"{base}/github/repos/acme/api/pulls/{pull['number']}",
                headers={"Authorization": f"token {token}"},
            ) as resp:
                assert resp.status == 200
                assert (await resp.json())["head"]["sha"] == pull["head_sha"]
            async with session.get(f"{base}/github/user") as resp:
                assert resp.status == 401
            async with session.get(f"{base}/_sim/requests") as resp:
                log = await resp.json()
            assert [(r["operation_id"], r["status"]) for r in log] == [
                ("pulls/get", 200),
                ("users/get-authenticated", 401),
            ]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=30)
    assert code == 0


def test_sim_is_listed_with_an_example_in_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert "sim" in sub.choices  # type: ignore[attr-defined]
    help_text = sub.choices["sim"].format_help()  # type: ignore[attr-defined]
    assert "Example:" in help_text and "--port" in help_text


def test_sim_refuses_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["sim", "--port", str(port)]) == 1
    assert capsys.readouterr().err.startswith(f"reviewbot: cannot listen on 127.0.0.1:{port}")


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_the_sim_command_serves_real_repositories_at_their_clone_url(
    forge: str, tmp_path: Path
) -> None:
    """``reviewbot sim`` as a user starts it: the repository JSON's clone_url clones with
    a token, a push without one is refused, and a push with one moves the branch."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reviewbot", "sim", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
        match = re.search(r"listening on (http://\S+)", line)
        assert match, line
        base = match.group(1)
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/_sim/users", json={"forge": forge, "login": "alice"}
            ) as resp:
                token = (await resp.json())["token"]
            async with session.post(
                f"{base}/_sim/repos", json={"forge": forge, "repo": "acme/api"}
            ) as resp:
                assert resp.status == 201
            async with session.post(
                f"{base}/_sim/permissions",
                json={"forge": forge, "repo": "acme/api", "login": "alice", "role": "write"},
            ) as resp:
                assert resp.status in (200, 201, 204), await resp.text()
            api = f"{base}/{forge}" if forge == "github" else f"{base}/{forge}/api/v1"
            async with session.get(
                f"{api}/repos/acme/api", headers={"Authorization": f"token {token}"}
            ) as resp:
                url = (await resp.json())["clone_url"]
        user = "x-access-token" if forge == "github" else "alice"
        work = await clone(url, tmp_path / "work", token, user=user)
        assert (work.path / "README.md").exists()
        ours = await work.commit({"NOTES.md": "notes\n"}, "notes")
        refused = await git(
            "push", "-q", "origin", "HEAD:refs/heads/topic", cwd=work.path, check=False
        )
        assert refused.code != 0  # no credentials: refused
        await work.push("topic")
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{api}/repos/acme/api/branches/topic",
                headers={"Authorization": f"token {token}"},
            ) as resp,
        ):
            assert resp.status == 200
            assert (await resp.json())["commit"]["sha" if forge == "github" else "id"] == ours
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), timeout=30)
