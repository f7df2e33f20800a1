"""Reading deliveries and decisions: ``GET /api/v1/deliveries/{id}`` and ``/decisions``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.models import repo_key
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate, bound_target, check_binding
from reviewbot.store import decisions as decision_store
from reviewbot.store import journal as journal_store
from reviewbot.store import repositories
from reviewbot.store.journal import delivery_json
from reviewbot.store.reviews import ReviewStore


def query_number(text: str | None) -> int | None:
    """A ``number`` query parameter, refused unless it is digits."""
    if text is None:
        return None
    if not text.isdigit():
        raise Refused(f"number: {text!r} is not a number", code="invalid_request")
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
    service = request.app[SERVICE]
    info = await authenticate(request, "read")
    db = service.db
    assert db is not None
    delivery_id = request.match_info["delivery_id"]
    stored = await db.run(journal_store.get_delivery, db, delivery_id)
    if stored is None:
        raise Refused(f"no delivery {delivery_id!r}", code="not_found")
    rows = await db.run(decision_store.for_delivery, db, delivery_id)
    if info.repo is not None:
        if not rows:  # not gated yet: nothing shows it belongs to the bound repository
            check_binding(info, None, None)
        for row in rows:
            check_binding(info, row.forge, row.repo)
    return web.json_response(delivery_json(stored, [r.to_json() for r in rows]))


async def api_decisions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    info = await authenticate(request, "read")
    number = query_number(request.query.get("number") or None)
    forge, repo = bound_target(
        info, request.query.get("forge") or None, query_repo(request.query.get("repo"))
    )
    db = service.db
    assert db is not None
    rows = await db.run(decision_store.for_pull, db, forge=forge, repo=repo, number=number)
    shown = await db.run(repositories.display_names, db)
    answer: dict[str, Any] = {
        "decisions": [
            {**r.to_json(), "display_name": shown.get((r.forge, r.repo), r.repo)} for r in rows
        ]
    }
    if forge and repo and number is not None:
        # For one PR, also its review verdicts: what the checks said and what was posted.
        reviews = ReviewStore(db, service.clock)
        verdicts = await db.run(reviews.decisions, forge, repo, number)
        answer["reviews"] = [v.to_json() for v in verdicts]
    return web.json_response(answer)
