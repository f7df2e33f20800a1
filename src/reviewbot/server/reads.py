"""Reading deliveries and decisions: ``GET /api/v1/deliveries/{id}`` and ``/decisions``."""

from __future__ import annotations

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.models import MAX_NUMBER, number_problem, repo_key
from reviewbot.server import pull_actions
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate


def query_number(text: str | None) -> int | None:
    """A ``number`` query parameter, refused unless it is digits."""
    if text is None:
        return None
    # ASCII only: str.isdigit() also takes "²", which int() refuses.
    if not (text.isascii() and text.isdigit()) or number_problem(int(text)) is not None:
        raise Refused(
            f"number: {text[:40]!r} is not a number from 1 to {MAX_NUMBER}", code="invalid_request"
        )
    return int(text)


def query_repo(text: str | None) -> str | None:
    """A ``repo`` query parameter as the canonical key (names are case-insensitive)."""
    if not text:
        return None
    try:
        return repo_key(text)
    except ValueError as exc:
        raise Refused(f"repo: {exc}", code="invalid_request") from None


async def api_delivery(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    delivery_id = request.match_info["delivery_id"]
    return web.json_response(
        await pull_actions.explain_delivery(request.app[SERVICE], info, delivery_id)
    )


async def api_decisions(request: web.Request) -> web.Response:
    info = await authenticate(request, "read")
    number = query_number(request.query.get("number") or None)
    forge = request.query.get("forge") or None
    repo = query_repo(request.query.get("repo"))
    return web.json_response(
        await pull_actions.explain_pull(request.app[SERVICE], info, forge, repo, number)
    )
