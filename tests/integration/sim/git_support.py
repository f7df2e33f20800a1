"""Helpers for the simulator's git tests: real ``git`` subprocesses against a served
simulator (asynchronous, since the simulator answers on the same event loop)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from reviewbot.sim.git import ClientGitResult as GitResult
from reviewbot.sim.git import client_git


async def git(
    *args: str, cwd: Path, user: str = "", token: str = "", check: bool = True
) -> GitResult:
    """Run git; credentials go in an environment-provided header, never in argv."""
    result = await client_git(*args, cwd=cwd, user=user, token=token)
    if check and result.code != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.err}")
    return result


@dataclass
class Clone:
    """A working clone of a simulated repository."""

    path: Path
    user: str
    token: str

    async def run(self, *args: str, check: bool = True) -> GitResult:
        return await git(*args, cwd=self.path, user=self.user, token=self.token, check=check)

    async def commit(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            await self.run("add", name)
        await self.run("commit", "-q", "-m", message)
        return (await self.run("rev-parse", "HEAD")).out.strip()

    async def push(self, branch: str, check: bool = True) -> GitResult:
        return await self.run("push", "-q", "origin", f"HEAD:refs/heads/{branch}", check=check)


async def clone(url: str, into: Path, token: str, user: str = "") -> Clone:
    await git("clone", "-q", url, str(into), cwd=into.parent, user=user, token=token)
    return Clone(into, user, token)


@dataclass
class Hooks:
    """A webhook receiver on loopback."""

    url: str = ""
    received: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def of(self, event: str) -> list[dict[str, Any]]:
        return [
            body
            for headers, body in self.received
            if event in (headers.get("X-GitHub-Event"), headers.get("X-Gitea-Event"))
        ]


async def call(
    method: str, url: str, token: str, body: Any = None, forge: str = "github"
) -> tuple[int, Any]:
    """One API request with a token; the status and the parsed JSON answer (or None)."""
    headers = {"Authorization": f"token {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers, json=body) as response,
    ):
        raw = await response.read()
        return response.status, (await response.json(content_type=None) if raw else None)
