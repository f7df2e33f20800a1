"""MCP clients for the tests: the official SDK's client, over HTTP to a running server's
``/mcp`` and over stdio to ``reviewbot mcp --stdio``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

READ_TIMEOUT_S = 30.0  # a bound for calls that normally take milliseconds


@asynccontextmanager
async def mcp_http(base: str, token: str | None, *, mode: str = "auto") -> AsyncIterator[Client]:
    """The official client, speaking streamable HTTP to ``base``/mcp with ``token``;
    ``mode="legacy"`` forces the initialize handshake of the 2025 protocol versions."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=READ_TIMEOUT_S) as http:
        transport = streamable_http_client(base + "/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=READ_TIMEOUT_S, mode=mode) as client:
            yield client


@asynccontextmanager
async def mcp_stdio(env: dict[str, str], *args: str) -> AsyncIterator[Client]:
    """The official client, starting ``reviewbot mcp --stdio ARGS`` as its subprocess with
    only ``env`` (and the SDK's safe defaults such as PATH)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "reviewbot", "mcp", "--stdio", *args], env=env
    )
    async with Client(params, read_timeout_seconds=READ_TIMEOUT_S) as client:
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a call that must have succeeded."""
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def refused(result: CallToolResult) -> tuple[str, str]:
    """The reason code and detail of a call that must have been refused, read as every MCP
    client reads them: from the text (``CODE: detail``, then the error body as JSON). An
    error result carries no structured content, which a client would check against the
    tool's output schema."""
    assert result.is_error, result.structured_content
    assert result.structured_content is None, result.structured_content
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    body = json.loads(texts[1])
    assert texts[0] == f"{body['error']}: {body['detail']}"
    return str(body["error"]), str(body["detail"])


def refusal_body(result: CallToolResult) -> dict[str, Any]:
    """The whole error body of a refused call (code, detail and extra fields)."""
    refused(result)
    block = result.content[1]
    assert isinstance(block, TextContent)
    body: dict[str, Any] = json.loads(block.text)
    return body
