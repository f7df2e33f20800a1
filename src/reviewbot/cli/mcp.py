"""``reviewbot mcp --stdio``: the MCP tools for a local client, over stdin and stdout.

The same tools, scopes and repository bindings as ``POST /mcp`` of ``reviewbot serve``; the
token comes from ``--token`` or ``REVIEWBOT_TOKEN`` and is checked before anything is served
(a refused token exits non-zero with its reason). Logs go to stderr; stdout carries only
MCP messages. See docs/agents.md for a whole session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from reviewbot.cli import CommandError
from reviewbot.config import load_settings
from reviewbot.core.errors import ReviewbotError


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "mcp",
        help="serve the MCP tools over stdio to a local client",
        description=__doc__,
        epilog="Example:\n  REVIEWBOT_TOKEN=rbt_... reviewbot mcp --stdio\n"
        "As an MCP client's server entry:\n"
        '  {"command": "reviewbot", "args": ["mcp", "--stdio"],\n'
        '   "env": {"REVIEWBOT_TOKEN": "rbt_..."}}',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--stdio", action="store_true", help="speak MCP on stdin/stdout (the only transport here)"
    )
    parser.add_argument("--token", help="the bearer token (default: $REVIEWBOT_TOKEN)")
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="only journal review requests; a process with workers gates them",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="at start, put deliveries left 'processing' back in the queue (only when no "
        "`serve` or other process gates deliveries of this store: it would take theirs over)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.stdio:
        raise CommandError(
            "give --stdio (HTTP clients use POST /mcp of `reviewbot serve`)", exit_status=2
        )
    token = args.token or os.environ.get("REVIEWBOT_TOKEN") or None
    if token is None:
        raise CommandError("give a token: --token TOKEN or REVIEWBOT_TOKEN")
    settings = load_settings()
    # Start-up cost: every command's module loads with `reviewbot --help`; the SDK only here.
    from reviewbot.server.mcp_stdio import serve_stdio
    from reviewbot.service import configure_logging

    # Standard error only: standard output carries the MCP messages.
    configure_logging(settings)

    try:
        asyncio.run(
            serve_stdio(settings, token, run_workers=not args.no_workers, resume=args.resume)
        )
    except ReviewbotError as exc:
        raise CommandError(f"{exc.code}: {exc.detail}") from None
    return 0
