"""The Crew and API entry paths: authenticated bodies, parsed now to answer with their
problem, then journaled and gated by a worker like any delivery."""

from __future__ import annotations

import time

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.models import Trigger
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.identity import delivery_identity
from reviewbot.runtime.ingestion.gate_runner import parse_stored_delivery
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.auth import authenticate
from reviewbot.server.body import read_body
from reviewbot.server.pull_actions import bound_request, review_delivery
from reviewbot.store import journal as journal_store
from reviewbot.store.journal import NewDelivery, StoredDelivery


async def crew_webhook(request: web.Request) -> web.Response:
    started = time.perf_counter()
    service = request.app[SERVICE]
    info = await authenticate(request, "review")
    body = await read_body(request, service.settings.max_request_bytes)
    delivery_id = delivery_identity("crew", request.headers, body) or ""
    if info.repo is not None and delivery_id:
        # A bound token's call ids live in its repository's own space: it can neither learn
        # whether another repository's call id was seen nor take one before it arrives.
        delivery_id = f"{delivery_id}@{info.repo}"
    delivery = NewDelivery(
        delivery_id=delivery_id,
        source="crew",
        body=body,
        received_at=service.clock(),
        event="crew",
        headers={"Content-Type": request.headers.get("Content-Type", "")},
    )
    trigger, problem = _preview(delivery, tuple(service.forges))
    if trigger is not None:
        await bound_request(service, info, trigger.forge, trigger.repo_full_name)
    elif info.repo is not None:
        raise Refused(
            f"token {info.name!r} is bound to {info.repo} and the delivery names no "
            f"readable repository: {problem.detail if problem else ''}",
            code="repo_not_allowed",
        )
    return await _journal_and_answer(request, delivery, problem, started)


async def api_reviews(request: web.Request) -> web.Response:
    """A review requested by an agent or a script: validated now, gated by a worker."""
    started = time.perf_counter()
    service = request.app[SERVICE]
    info = await authenticate(request, "review")
    body = await read_body(request, service.settings.max_request_bytes)
    delivery = await review_delivery(service, info, body)
    return await _journal_and_answer(request, delivery, None, started)


async def _journal_and_answer(
    request: web.Request, delivery: NewDelivery, problem: TriggerError | None, started: float
) -> web.Response:
    journal, metrics = request.app[SERVICE].journal, request.app[STATE].metrics
    assert journal is not None
    new = await journal.append(delivery)
    metrics.acknowledged(delivery.delivery_id, delivery.source, delivery.event, started, new=new)
    if not new:
        return web.json_response(
            {"delivery_id": delivery.delivery_id, "status": "duplicate"}, status=200
        )
    if problem is not None:
        raise Refused(problem.detail, code="delivery_unresolved", delivery_id=delivery.delivery_id)
    return web.json_response({"delivery_id": delivery.delivery_id, "status": "queued"}, status=202)


def _preview(
    delivery: NewDelivery, configured_forges: tuple[str, ...]
) -> tuple[Trigger | None, TriggerError | None]:
    """Parse a (small, authenticated) Crew or API body now, to answer with its problem."""
    stored = StoredDelivery(
        delivery_id=delivery.delivery_id,
        source=delivery.source,
        forge=delivery.forge,
        event=delivery.event,
        headers=dict(delivery.headers),
        body=delivery.body,
        received_at=delivery.received_at,
        status=journal_store.QUEUED,
        attempts=0,
        error=None,
        finished_at=None,
    )
    try:
        return parse_stored_delivery(stored, configured_forges), None
    except TriggerError as exc:
        return None, exc
