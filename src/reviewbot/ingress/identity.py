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
from reviewbot.ingress.forge_kinds import FORGE_KINDS

# The sources that are not forges (each forge in FORGE_KINDS is a source of its own).
# "sweep": a synthetic delivery of the reconcile sweep, shaped like an API request.
OTHER_SOURCES = ("crew", "api", "file", "sweep", "mcp")


def is_source(source: str) -> bool:
    return source in FORGE_KINDS or source in OTHER_SOURCES


def sources() -> tuple[str, ...]:
    """Every delivery source: the forges, then the others."""
    return (*FORGE_KINDS, *OTHER_SOURCES)


def _usable(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > MAX_DELIVERY_ID_CHARS or not text.isprintable():
        return None
    return text


def delivery_identity(source: str, headers: Mapping[str, str], body: bytes) -> str | None:
    """The delivery id of a delivery from ``source``.

    A forge: its row's delivery header (``github``: ``X-GitHub-Delivery``; ``gitea``:
    ``X-Gitea-Delivery``, ``X-Forgejo-Delivery`` or ``X-Gogs-Delivery``); ``crew``:
    ``payload.call_id``; ``file``: the file's ``delivery_id``. Each falls back to
    ``sha256:<hex of the body>``. ``api`` returns ``None``: every API request is new, and
    the caller mints its id.
    """
    if source in ("api", "sweep", "mcp"):
        return None
    found: str | None = None
    kind = FORGE_KINDS.get(source)
    if kind is not None:
        found = kind.delivery_id(headers)
    elif source in ("crew", "file"):
        found = _json_id(source, body)
    else:
        raise ValueError(f"unknown delivery source {source!r}; expected one of {sources()}")
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
