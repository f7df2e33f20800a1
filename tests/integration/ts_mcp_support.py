"""The official TypeScript SDK's MCP client (the one MCP Inspector is built on), driven from
the tests through ``tests/integration/server/mcp/ts_client/driver.mjs``.

The SDK checks every tool result against the tool's ``outputSchema`` as Inspector does, so
a result it cannot read comes back as ``exception``. The client is installed by
``npm ci`` in that folder (``.ci/run`` does it); without Node or the installed SDK the
tests that need it skip, saying which is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TS_CLIENT = Path(__file__).parent / "server" / "mcp" / "ts_client"
SDK = TS_CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk"
ANSWER_S = 60.0  # a bound on one answer, never a speed check


def ts_client_or_skip() -> str:
    """The path of ``node``, or skip the test naming what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("the TypeScript SDK client needs Node.js: `node` is not on PATH")
    if not SDK.is_dir():
        pytest.skip(f"the TypeScript SDK client is not installed: run `npm ci` in {TS_CLIENT}")
    return node


@dataclass
class TsClient:
    proc: asyncio.subprocess.Process
    notifications: list[dict[str, Any]] = field(default_factory=list)
    _answers: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    _notified: asyncio.Event = field(default_factory=asyncio.Event)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            message = json.loads(raw)
            if "notification" in message:
                self.notifications.append(message["notification"])
                self._notified.set()
            else:
                await self._answers.put(message)

    async def _ask(self, command: dict[str, Any], timeout_s: float = ANSWER_S) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        await self.proc.stdin.drain()
        return await asyncio.wait_for(self._answers.get(), timeout_s)

    async def list_tools(self) -> list[str]:
        names: list[str] = (await self._ask({"op": "list"}))["tools"]
        return names

    async def call(self, tool: str, arguments: Mapping[str, Any], **opts: Any) -> dict[str, Any]:
        """``{"isError", "text", "structured"}``, or ``{"exception"}`` when the SDK rejected
        the result (for example for structured content outside the output schema)."""
        wait = float(opts.get("timeout_s", 30))
        command = {
            "op": "call",
            "tool": tool,
            "arguments": dict(arguments),
            "timeout_s": wait,
            "progress": bool(opts.get("progress", False)),
        }
        return await self._ask(command, timeout_s=wait + ANSWER_S)

    async def notification(self, method: str | None = None) -> dict[str, Any]:
        """The first notification (of ``method``) received so far, waiting for one."""
        while True:
            for note in self.notifications:
                if method is None or note["method"] == method:
                    return note
            self._notified.clear()
            await asyncio.wait_for(self._notified.wait(), ANSWER_S)


def ok(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The structured result of a call that succeeded and passed the SDK's schema check."""
    assert "exception" not in answer and not answer["isError"], answer
    structured: dict[str, Any] = answer["structured"]
    return structured


def refused(answer: Mapping[str, Any]) -> tuple[str, str]:
    """The code and detail of a refusal as the TypeScript client shows it (its first text
    block, ``CODE: detail``); the SDK must not have rejected the result."""
    assert "exception" not in answer, answer["exception"]
    assert answer["isError"] is True and answer["structured"] is None, answer
    code, _, detail = answer["text"][0].partition(": ")
    return code, detail


@asynccontextmanager
async def ts_client(*args: str, env: Mapping[str, str] | None = None) -> AsyncIterator[TsClient]:
    """``node driver.mjs ARGS`` (``http URL TOKEN`` or ``stdio COMMAND ARG...``), connected."""
    node = ts_client_or_skip()
    proc = await asyncio.create_subprocess_exec(
        node,
        str(TS_CLIENT / "driver.mjs"),
        *args,
        cwd=TS_CLIENT,
        env=None if env is None else dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=16 * 1024 * 1024,
    )
    client = TsClient(proc)
    reader = asyncio.create_task(client._read())
    try:
        first = await asyncio.wait_for(client._answers.get(), ANSWER_S)
        assert first.get("ready") is True, first
        yield client
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        reader.cancel()


def node_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without its ``REVIEWBOT_*`` variables, plus ``extra``: what the
    driver runs with, and what a stdio server it starts inherits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    return {**env, **extra}


@asynccontextmanager
async def ts_http(base: str, token: str) -> AsyncIterator[TsClient]:
    async with ts_client("http", f"{base}/mcp", token) as client:
        yield client
