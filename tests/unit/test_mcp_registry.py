"""The MCP tool registry: what a registration must carry, and how a call's failure is told.

The server is reached in process with the official client; no store or forge is involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field

from reviewbot.config import Settings
from reviewbot.core.errors import Refused
from reviewbot.server.mcp_registry import (
    SESSION_TOOLS,
    Caller,
    Registry,
    ToolEnv,
)
from reviewbot.server.mcp_schema import pr_spellings
from reviewbot.server.mcp_server import build_server
from reviewbot.server.mcp_tools import TOOLS
from reviewbot.service import build_service
from reviewbot.store.tokens import TokenInfo

TOKEN = TokenInfo(1, "agent", "rbt_abcd", ("read",), None, "2026-01-01T00:00:00Z", None)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1)


class Out(BaseModel):
    n: int


def registry() -> Registry:
    tools = Registry()

    @tools.tool(scope="read", input=Args, output=Out, example={"n": 1})
    async def double(env: ToolEnv, info: TokenInfo, args: Args) -> dict[str, Any]:
        """Twice n."""
        return {"n": args.n * 2}

    @tools.tool(scope="read", input=Args, output=Out, example={"n": 1})
    async def broken(env: ToolEnv, info: TokenInfo, args: Args) -> dict[str, Any]:
        """Fails the way a bug does."""
        raise KeyError("secret-internal-detail")

    @tools.tool(scope="read", input=Args, output=Out, example={"n": 1})
    async def refusing(env: ToolEnv, info: TokenInfo, args: Args) -> dict[str, Any]:
        """Refuses, naming its reason."""
        raise Refused("not now", code="lease_held", holder="w-1")

    @tools.tool(scope="merge", input=Args, output=Out, example={"n": 1})
    async def scoped(env: ToolEnv, info: TokenInfo, args: Args) -> dict[str, Any]:
        """Needs merge."""
        return {"n": 0}

    return tools


@pytest.fixture
def client(tmp_path: Path) -> Client:
    service = build_service(Settings(data_dir=tmp_path))

    async def caller_of(_ctx: Any) -> Caller:
        return Caller("test", token=TOKEN)

    return Client(build_server(registry(), service, caller_of))


async def test_a_call_answers_structured_content_and_text(client: Client) -> None:
    async with client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"double", "broken", "refusing"}  # not "scoped": no merge scope
        assert listed["double"].input_schema["examples"] == [{"n": 1}]
        assert "Example arguments" in (listed["double"].description or "")
        result = await client.call_tool("double", {"n": 21})
        assert not result.is_error and result.structured_content == {"n": 42}


async def test_refusals_and_failures_are_tool_errors_with_a_code(client: Client) -> None:
    async with client:
        held = await client.call_tool("refusing", {"n": 1})
        assert held.is_error and error_body(held) == {
            "error": "lease_held",
            "detail": "not now",
            "holder": "w-1",
        }
        bad = await client.call_tool("double", {"n": 0})
        assert bad.is_error and error_body(bad)["error"] == "invalid_request"
        assert "n" in error_body(bad)["detail"]
        scoped = await client.call_tool("scoped", {"n": "not even a number"})
        assert error_body(scoped)["error"] == "missing_scope"  # before the arguments
        broken = await client.call_tool("broken", {"n": 1})
        assert broken.is_error and error_body(broken)["error"] == "internal_error"
        assert "secret-internal-detail" not in str(broken.content)


async def test_an_error_result_carries_no_structured_content_against_the_schema(
    client: Client,
) -> None:
    # A client checks structured content against the tool's output schema ({"n": int}): an
    # error body there would fail that check and hide the refusal. The code and detail are
    # the first text block, the whole body the second.
    async with client:
        held = await client.call_tool("refusing", {"n": 1})
    assert held.is_error and held.structured_content is None
    first = held.content[0]
    assert isinstance(first, TextContent) and first.text == "lease_held: not now"


def error_body(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is None
    block = result.content[1]
    assert isinstance(block, TextContent)
    body: dict[str, Any] = json.loads(block.text)
    return body


def test_a_registration_needs_a_unique_name_and_a_valid_example() -> None:
    tools = registry()
    with pytest.raises(ValueError, match="twice"):
        tools.tool(scope="read", input=Args, output=Out, example={"n": 1}, name="double")(
            lambda env, info, args: None  # type: ignore[arg-type, return-value]
        )
    with pytest.raises(ValueError):
        tools.tool(scope="read", input=Args, output=Out, example={"n": 0}, name="other")


@pytest.mark.parametrize("tool", list(TOOLS), ids=lambda t: t.name)
def test_every_tool_is_documented_with_a_valid_example(tool: Any) -> None:
    assert len(tool.description) > 40, tool.name
    tool.input.model_validate(pr_spellings(tool.input, tool.example))
    definition = tool.definition()
    assert definition.output_schema is not None
    assert definition.input_schema["examples"] == [tool.example]
    assert tool.scope in ("read", "review", "lease", "merge", None)  # None: whoami alone


def test_every_tool_is_in_the_agents_page_table() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()
    names = [t.name for t in TOOLS] + list(SESSION_TOOLS)
    missing = [n for n in names if f"| `{n}` |" not in page]
    assert not missing, f"docs/agents.md does not list {missing}"
