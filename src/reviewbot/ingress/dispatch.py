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
from reviewbot.ingress.gitea import gitea_trigger
from reviewbot.ingress.github import github_trigger
from reviewbot.ingress.headers import header
from reviewbot.ingress.identity import SOURCES, delivery_identity
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

    ``source`` is ``github``, ``gitea``, ``crew``, ``api`` or ``file`` (the bytes of a
    delivery file). ``delivery_id`` defaults to :func:`delivery_identity`; an ``api``
    delivery must be given one. ``env`` holds ``VAR_*`` fallbacks (the server passes
    none). ``sender`` names the caller of an ``api`` request (its token).
    """
    if source not in SOURCES:
        raise TriggerError(f"unknown delivery source {source!r}")
    if delivery_id is None:
        delivery_id = delivery_identity(source, headers, body)
        if delivery_id is None:
            raise ValueError("an api delivery needs the delivery id its request was given")
    if source in ("github", "gitea"):
        document = json_bytes(body, header(headers, "Content-Type"))
        if document is None:
            raise TriggerError("form body without a single payload field")
        payload = parse_json_object(document, "body")
        parse = github_trigger if source == "github" else gitea_trigger
        return parse(headers, payload, delivery_id=delivery_id, source=source)
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
