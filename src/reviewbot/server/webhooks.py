"""Forge webhooks: the acknowledgement path.

It does only what cannot wait: refuse a delivery without a signature or an event header
before reading its body, read the body within the byte budget of unverified bodies
(:mod:`reviewbot.server.budget`) and a deadline, check the HMAC over the raw bytes, take the
delivery id from the headers, and commit the delivery to the journal (group commit,
``synchronous=FULL``). Parsing, forge reads and the gate run in the worker pool.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping

from aiohttp import web

from reviewbot.core.errors import Refused, ReviewbotError
from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.errors import UnknownForge
from reviewbot.ingress.forge_kinds import (
    FORGE_KINDS,
    ForgeKind,
    forge_kind,
    forge_of_headers,
    kept_header_names,
)
from reviewbot.ingress.identity import delivery_identity
from reviewbot.ingress.signatures import is_form
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.body import check_length, read_body
from reviewbot.store import refused_webhooks
from reviewbot.store.journal import NewDelivery
from reviewbot.store.refused_webhooks import RefusedWebhook

log = logging.getLogger(__name__)

# The one route of every forge in the table of forge kinds: /webhooks/{forge}.
ROUTE = "/webhooks/{forge}"
# What a forge's event header looks like; anything else is refused unread.
EVENT_NAME = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")


async def webhook(request: web.Request) -> web.Response:
    """``POST /webhooks/{forge}``: a forge without a row is ``unknown_forge``, unread.

    A refusal is recorded (headers only) before it is answered, so that ``explain`` can
    say what became of a delivery the forge shows as failed."""
    forge = request.match_info["forge"]
    try:
        try:
            forge_kind(forge)
        except UnknownForge as exc:
            raise Refused(exc.detail, code="unknown_forge") from None
        return await forge_webhook(request, forge)
    except ReviewbotError as exc:
        if "delivery_id" not in exc.extra:  # a journalled delivery is explained from there
            await _record_refusal(request, forge, exc)
        raise


async def _record_refusal(request: web.Request, forge: str, exc: ReviewbotError) -> None:
    service = request.app[SERVICE]
    if service.db is None or not request.app[STATE].refusal_records.take(service.clock()):
        return
    headers = request.headers
    try:
        kind: ForgeKind | None = forge_kind(forge)
    except UnknownForge:
        kind = None
    # The headers of any forge may name the delivery (an unknown route, the wrong endpoint).
    named = [k.delivery_id(headers) for k in ((kind,) if kind else FORGE_KINDS.values())]
    event = event_of(kind, headers) if kind is not None else None
    entry = RefusedWebhook(
        delivery_id=next((d for d in named if d), "") or "",
        forge=forge,
        event=event or None,
        code=exc.code,
        detail=exc.detail,
        received_at=service.clock(),
    )
    try:
        await service.db.run(
            refused_webhooks.record,
            service.db,
            entry,
            keep=service.settings.retention.refused_webhooks,
        )
    except Exception:  # the refusal is answered all the same; the record is a courtesy
        log.warning("could not record a refused webhook (%s)", exc.code, exc_info=True)


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a journal keeps; aiohttp's headers are already case-insensitive."""
    return {name: value for name in kept_header_names() if (value := headers.get(name)) is not None}


def event_of(forge: str | ForgeKind, headers: Mapping[str, str]) -> str:
    """The event name the forge put in its headers (Gitea: the fine one);
    :class:`~reviewbot.ingress.errors.UnknownForge` for a forge without a row."""
    kind = forge if isinstance(forge, ForgeKind) else forge_kind(forge)
    return kind.event(headers)[:100]


def looks_like_json_object(body: bytes, content_type: str | None) -> bool:
    """A cheap shape check (no parse): a JSON object starts with ``{`` and ends with ``}``.

    It catches truncated and non-JSON bodies at once; anything subtler is found by the
    worker's parse and recorded the same way.
    """
    if is_form(content_type):
        return body.startswith(b"payload=")
    if body[:1] == b"{" and body[-1:] == b"}":
        return True  # the usual body, without copying it to strip it
    text = body.strip()
    return text.startswith(b"{") and text.endswith(b"}")


async def forge_webhook(request: web.Request, forge: str) -> web.Response:
    started = time.perf_counter()
    service, st = request.app[SERVICE], request.app[STATE]
    kind = forge_kind(forge)  # first: nothing of an unknown forge is read or counted
    sender = forge_of_headers(request.headers)
    if sender is not None and sender != forge:
        # Before the signature: the other forge's secret would only say "wrong signature".
        st.metrics.refused.labels(forge, "wrong_endpoint").inc()
        raise Refused(
            f"this is a {sender} webhook sent to /webhooks/{forge}; point it at /webhooks/{sender}",
            code=ReasonCode.WRONG_ENDPOINT.value,
        )
    secret = st.secrets.get(forge)
    if secret is None:
        st.metrics.refused.labels(forge, "no_secret").inc()
        raise Refused(
            f"no webhook secret is configured for {forge}, so every delivery is refused "
            f"(set REVIEWBOT_{forge.upper()}__WEBHOOK_SECRET)",
            code="signature_invalid",
        )
    headers = request.headers
    # Refused before a byte of the body is read: nothing unsigned or unnamed is buffered.
    if kind.signature(headers) is None:
        st.metrics.refused.labels(forge, "bad_signature").inc()
        raise Refused("missing or empty webhook signature header", code="signature_invalid")
    if not EVENT_NAME.match(event_of(kind, headers)):
        st.metrics.refused.labels(forge, "unknown_event").inc()
        raise Refused(
            f"missing or malformed event header ({', '.join(kind.event_headers)})",
            code="unknown_event",
        )
    limit = service.settings.max_body_bytes
    check_length(request, limit)
    size = limit if request.content_length is None else request.content_length
    async with st.body_budget.reserve(size):
        body = await read_body(request, size, timeout_s=service.settings.body_read_timeout_s)
        return await _accept(request, kind, secret, body, started)


async def _accept(
    request: web.Request, kind: ForgeKind, secret: bytes, body: bytes, started: float
) -> web.Response:
    """Check the signature of a body read within the budget, and journal it."""
    service, st = request.app[SERVICE], request.app[STATE]
    headers, forge = request.headers, kind.name
    if not kind.verify(secret, headers, body):
        st.metrics.refused.labels(forge, "bad_signature").inc()
        raise Refused("missing, empty or wrong webhook signature", code="signature_invalid")
    delivery_id = delivery_identity(forge, headers, body) or ""
    event = event_of(kind, headers)
    assert service.journal is not None
    new = await service.journal.append(
        NewDelivery(
            delivery_id=delivery_id,
            source=forge,
            body=body,
            received_at=service.clock(),
            forge=forge,
            event=event or None,
            headers=kept_headers(headers),
        )
    )
    st.metrics.acknowledged(delivery_id, forge, event or None, started, new=new)
    if not new:
        return web.json_response({"delivery_id": delivery_id, "status": "duplicate"}, status=200)
    if not looks_like_json_object(body, headers.get("Content-Type")):
        # Stored all the same: the worker records delivery_unresolved with the parse error.
        raise Refused(
            "the body is not a JSON object; recorded as delivery_unresolved",
            code="unparseable",
            delivery_id=delivery_id,
        )
    status = 200 if event == "ping" else 202
    return web.json_response({"delivery_id": delivery_id, "status": "queued"}, status=status)
