"""Forge webhooks: the acknowledgement path.

It does only what cannot wait: refuse a delivery without a signature or an event header
before reading its body, read the body within the byte budget of unverified bodies
(:mod:`reviewbot.server.budget`) and a deadline, check the HMAC over the raw bytes, take the
delivery id from the headers, and commit the delivery to the journal (group commit,
``synchronous=FULL``). Parsing, forge reads and the gate run in the worker pool.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.reasons import ReasonCode
from reviewbot.ingress.headers import (
    GITEA_EVENT_HEADERS,
    GITEA_EVENT_TYPE_HEADERS,
    GITHUB_EVENT,
    KEPT_HEADERS,
    first_header,
    forge_of_headers,
)
from reviewbot.ingress.identity import delivery_identity
from reviewbot.ingress.signatures import is_form, signature_of, verify_delivery
from reviewbot.server.app_keys import SERVICE, STATE
from reviewbot.server.body import check_length, read_body
from reviewbot.store.journal import NewDelivery

FORGE_SOURCES = ("github", "gitea")
# What a forge's event header looks like; anything else is refused unread.
EVENT_NAME = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")


async def github_webhook(request: web.Request) -> web.Response:
    return await forge_webhook(request, "github")


async def gitea_webhook(request: web.Request) -> web.Response:
    return await forge_webhook(request, "gitea")


def kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a journal keeps; aiohttp's headers are already case-insensitive."""
    return {name: value for name in KEPT_HEADERS if (value := headers.get(name)) is not None}


def event_of(forge: str, headers: Mapping[str, str]) -> str:
    """The event name the forge put in its headers (Gitea: the fine one)."""
    if forge == "github":
        event = headers.get(GITHUB_EVENT)
    else:
        event = first_header(headers, (*GITEA_EVENT_TYPE_HEADERS, *GITEA_EVENT_HEADERS))
    return (event or "").strip()[:100]


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
    sender = forge_of_headers(request.headers)
    if sender is not None and sender != forge:
        # Before the signature: the other forge's secret would only say "wrong signature".
        st.metrics.refused.labels(forge, "wrong_endpoint").inc()
        raise Refused(
            f"this is a {sender} webhook sent to /webhooks/{forge}; point it at /webhooks/{sender}",
            code=ReasonCode.WRONG_ENDPOINT.value,
        )
    secret = st.secrets[forge]
    if secret is None:
        st.metrics.refused.labels(forge, "no_secret").inc()
        raise Refused(
            f"no webhook secret is configured for {forge}, so every delivery is refused "
            f"(set REVIEWBOT_{forge.upper()}__WEBHOOK_SECRET)",
            code="signature_invalid",
        )
    headers = request.headers
    # Refused before a byte of the body is read: nothing unsigned or unnamed is buffered.
    if signature_of(forge, headers) is None:
        st.metrics.refused.labels(forge, "bad_signature").inc()
        raise Refused("missing or empty webhook signature header", code="signature_invalid")
    if not EVENT_NAME.match(event_of(forge, headers)):
        st.metrics.refused.labels(forge, "unknown_event").inc()
        raise Refused(
            "missing or malformed event header (X-GitHub-Event, X-Gitea-Event-Type)",
            code="unknown_event",
        )
    limit = service.settings.max_body_bytes
    check_length(request, limit)
    size = limit if request.content_length is None else request.content_length
    async with st.body_budget.reserve(size):
        body = await read_body(request, size, timeout_s=service.settings.body_read_timeout_s)
        return await _accept(request, forge, secret, body, started)


async def _accept(
    request: web.Request, forge: str, secret: bytes, body: bytes, started: float
) -> web.Response:
    """Check the signature of a body read within the budget, and journal it."""
    service, st = request.app[SERVICE], request.app[STATE]
    headers = request.headers
    if not verify_delivery(forge, secret, headers, body):
        st.metrics.refused.labels(forge, "bad_signature").inc()
        raise Refused("missing, empty or wrong webhook signature", code="signature_invalid")
    delivery_id = delivery_identity(forge, headers, body) or ""
    event = event_of(forge, headers)
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
