"""A delivery's identity, read cheaply on the acknowledgement path.

Forge deliveries are named by a header, so no JSON is parsed; a Crew call is named by its
``payload.call_id`` (which needs the JSON). Without a usable id the identity is the SHA-256
of the body, so resending the same bytes is recognised as the same delivery.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from reviewbot.ingress.crew import crew_call_id
from reviewbot.ingress.delivery_file import MAX_DELIVERY_ID_CHARS, bytes_identity
from reviewbot.ingress.headers import GITEA_DELIVERY_HEADERS, GITHUB_DELIVERY, first_header, header

# "sweep": a synthetic delivery of the reconcile sweep, shaped like an API request.
SOURCES = ("github", "gitea", "crew", "api", "file", "sweep", "mcp")


def _usable(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > MAX_DELIVERY_ID_CHARS or not text.isprintable():
        return None
    return text


def delivery_identity(source: str, headers: Mapping[str, str], body: bytes) -> str | None:
    """The delivery id of a delivery from ``source``.

    ``github``: ``X-GitHub-Delivery``; ``gitea``: ``X-Gitea-Delivery`` (or
    ``X-Forgejo-Delivery``, ``X-Gogs-Delivery``); ``crew``: ``payload.call_id``; ``file``:
    the file's ``delivery_id``. Each falls back to ``sha256:<hex of the body>``. ``api``
    returns ``None``: every API request is new, and the caller mints its id.
    """
    if source in ("api", "sweep", "mcp"):
        return None
    found: str | None = None
    if source == "github":
        found = header(headers, GITHUB_DELIVERY)
    elif source == "gitea":
        found = first_header(headers, GITEA_DELIVERY_HEADERS)
    elif source in ("crew", "file"):
        found = _json_id(source, body)
    else:
        raise ValueError(f"unknown delivery source {source!r}; expected one of {SOURCES}")
    return _usable(found) or bytes_identity(body)


def _json_id(source: str, body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, Mapping):
        return None
    if source == "crew":
        return crew_call_id(document)
    value = document.get("delivery_id")
    return value if isinstance(value, str) else None
