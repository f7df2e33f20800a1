"""One entry point from a stored delivery (source, headers, body) to its trigger.

Run by the worker, not on the acknowledgement path: the journal stores the raw bytes and
this parses them later, so a slow or broken body never delays a 202.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from reviewbot.core.models import Trigger
from reviewbot.ingress.api import api_trigger, parse_review_request
from reviewbot.ingress.crew import crew_trigger
from reviewbot.ingress.delivery_file import delivery_file_trigger, delivery_from_bytes
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_kinds import FORGE_KINDS
from reviewbot.ingress.headers import header
from reviewbot.ingress.identity import delivery_identity, is_source
from reviewbot.ingress.payload import parse_json_object
from reviewbot.ingress.signatures import json_bytes


def parse_delivery(
    source: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    configured_forges: Sequence[str],
    env: Mapping[str, str] | None = None,
    delivery_id: str | None = None,
    sender: str | None = None,
) -> Trigger:
    """The trigger of one delivery, or :class:`TriggerError` with the exact reason.

    ``source`` is a forge of :data:`FORGE_KINDS` (``github``, ``gitea``), ``crew``,
    ``api`` or ``file`` (the bytes of a delivery file). ``delivery_id`` defaults to
    :func:`delivery_identity`; an ``api`` delivery must be given one. ``env`` holds
    ``VAR_*`` fallbacks (the server passes none). ``sender`` names the caller of an
    ``api`` request (its token).
    """
    if not is_source(source):
        raise TriggerError(f"unknown delivery source {source!r}")
    if delivery_id is None:
        delivery_id = delivery_identity(source, headers, body)
        if delivery_id is None:
            raise ValueError("an api delivery needs the delivery id its request was given")
    kind = FORGE_KINDS.get(source)
    if kind is not None:
        document = json_bytes(body, header(headers, "Content-Type"))
        if document is None:
            raise TriggerError("form body without a single payload field")
        payload = parse_json_object(document, "body")
        return kind.parse(headers, payload, delivery_id=delivery_id, source=source)
    if source in ("api", "sweep", "mcp"):
        request = parse_review_request(body)
        return api_trigger(
            request,
            delivery_id=delivery_id,
            configured_forges=configured_forges,
            sender=sender,
            source=source,
        )
    if source == "crew":
        envelope = parse_json_object(body, "body")
        return crew_trigger(
            envelope, delivery_id=delivery_id, configured_forges=configured_forges, env=env
        )
    delivery = dataclasses.replace(delivery_from_bytes(body), delivery_id=delivery_id)
    return delivery_file_trigger(delivery, configured_forges=configured_forges, env=env)
