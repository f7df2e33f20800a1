"""Delivery files: a delivery handed to ``reviewbot gate --delivery FILE`` as a step.

The file holds the Crew envelope shape, optionally with a ``delivery_id`` and, for a forge
delivery, the forge's ``headers`` with the forge event as ``payload``::

    {"delivery_id": "...", "variables": {...}, "payload": {...}, "headers": {...}}

Its identity is ``delivery_id`` when given, else ``sha256:`` + the SHA-256 of its bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reviewbot.core.models import Trigger
from reviewbot.ingress.envelope import Source, envelope_sources, resolve_target
from reviewbot.ingress.errors import DeliveryFileError, TriggerError
from reviewbot.ingress.forge_kinds import forge_kind, forge_of_headers
from reviewbot.ingress.payload import parse_json_object, shown, type_name

SOURCE = "file"
MAX_DELIVERY_FILE_BYTES = 25 * 1024 * 1024
MAX_DELIVERY_ID_CHARS = 200
ENVELOPE_KEYS = frozenset({"delivery_id", "variables", "payload", "headers"})


@dataclass(frozen=True)
class DeliveryFile:
    """A delivery file that was read and is a JSON object (its fields not yet resolved)."""

    path: Path | None
    delivery_id: str
    envelope: Mapping[str, Any]
    headers: Mapping[str, str]


def bytes_identity(data: bytes) -> str:
    """The identity of a delivery known only by its bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_delivery_file(path: Path, *, max_bytes: int = MAX_DELIVERY_FILE_BYTES) -> DeliveryFile:
    """Read and check one delivery file; :class:`DeliveryFileError` says what is wrong."""
    if not path.exists():
        raise DeliveryFileError(f"delivery file {path}: does not exist")
    if path.is_dir():
        raise DeliveryFileError(f"delivery file {path}: is a directory, not a file")
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise DeliveryFileError(f"delivery file {path}: cannot be read: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise DeliveryFileError(f"delivery file {path}: larger than {max_bytes} bytes")
    return delivery_from_bytes(data, path=path)


def delivery_from_bytes(data: bytes, *, path: Path | None = None) -> DeliveryFile:
    """Check the bytes of a delivery file (``path`` only names it in errors)."""
    what = f"delivery file {path}" if path is not None else "delivery file"
    if not data.strip():
        raise DeliveryFileError(f"{what}: is empty")
    identity = bytes_identity(data)
    try:
        envelope = parse_json_object(data, what)
        return DeliveryFile(path, _delivery_id(envelope, identity), envelope, _headers(envelope))
    except DeliveryFileError:
        raise
    except TriggerError as exc:
        raise DeliveryFileError(exc.detail, delivery_id=identity) from None


def _delivery_id(envelope: Mapping[str, Any], identity: str) -> str:
    value = envelope.get("delivery_id")
    if value is None:
        return identity
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise DeliveryFileError(
            f"delivery_id: {shown(value)} is not a non-empty string", delivery_id=identity
        )
    if len(value) > MAX_DELIVERY_ID_CHARS:
        raise DeliveryFileError(
            f"delivery_id: longer than {MAX_DELIVERY_ID_CHARS} characters", delivery_id=identity
        )
    return value.strip()


def _headers(envelope: Mapping[str, Any]) -> dict[str, str]:
    headers = envelope.get("headers")
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TriggerError(f"headers: expected an object, got {type_name(headers)}")
    for key, value in headers.items():
        if not isinstance(value, str):
            raise TriggerError(f"headers.{key}: {shown(value)} is not a string")
    return dict(headers)


def delivery_file_trigger(
    delivery: DeliveryFile,
    *,
    configured_forges: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> Trigger:
    """The trigger of a delivery file.

    With forge ``headers`` the payload is parsed as that forge's webhook endpoint would
    parse it; when that names a PR, the envelope's other places (``variables``, args, flat
    keys, then ``VAR_*``) are still read in the usual order around it. Without forge
    headers the envelope alone names the PR.
    """
    try:
        return _trigger(delivery, configured_forges, env or {})
    except DeliveryFileError:
        raise
    except TriggerError as exc:
        detail = exc.detail
        unread = sorted(str(key) for key in delivery.envelope if key not in ENVELOPE_KEYS)
        if unread:
            detail += f" (top-level keys that are not read: {', '.join(unread)})"
        raise DeliveryFileError(detail, delivery_id=delivery.delivery_id) from None


def trigger_from_delivery_file(
    path: Path,
    *,
    configured_forges: Sequence[str],
    env: Mapping[str, str] | None = None,
    max_bytes: int = MAX_DELIVERY_FILE_BYTES,
) -> Trigger:
    """Read ``path`` and return its trigger; :class:`DeliveryFileError` on any problem."""
    delivery = read_delivery_file(path, max_bytes=max_bytes)
    return delivery_file_trigger(delivery, configured_forges=configured_forges, env=env)


def _trigger(delivery: DeliveryFile, forges: Sequence[str], env: Mapping[str, str]) -> Trigger:
    envelope, headers = delivery.envelope, delivery.headers
    forge = forge_of_headers(headers)
    if forge is None:
        target = resolve_target(envelope_sources(envelope, env=env), configured_forges=forges)
        return Trigger(
            source=SOURCE,
            delivery_id=delivery.delivery_id,
            forge=target.forge,
            event="delivery_file",
            kind="pull",
            owner=target.owner,
            name=target.name,
            number=target.number,
            head_sha=target.head_sha,
            extra={"semantic": delivery.delivery_id, "read_from": target.read_from()},
        )
    payload = envelope.get("payload")
    if not isinstance(payload, Mapping):
        raise TriggerError(
            f"payload: expected the {forge} event as an object, got {type_name(payload)}"
        )
    # A name without a row is UnknownForge (a TriggerError), never parsed as another forge.
    trigger = forge_kind(forge).parse(
        headers, payload, delivery_id=delivery.delivery_id, source=SOURCE
    )
    if trigger.kind != "pull":
        return trigger
    # The forge event takes its place in the read order: after variables, args and flat
    # keys, before VAR_*.
    event_fields = Source(
        "the forge event in the payload",
        {
            "forge": (trigger.forge, "the delivery's headers"),
            "repository": (f"{trigger.owner}/{trigger.name}", "payload.repository"),
            "number": (trigger.number, "payload"),
            **({"head_sha": (trigger.head_sha, "payload")} if trigger.head_sha else {}),
        },
    )
    sources = envelope_sources({"variables": envelope.get("variables")}, env={})
    sources = [*sources[:-1], event_fields, *envelope_sources({}, env=env)[-1:]]
    target = resolve_target(sources, configured_forges=forges)
    return dataclasses.replace(
        trigger,
        forge=target.forge,
        owner=target.owner,
        name=target.name,
        number=target.number,
        head_sha=target.head_sha,
        extra={**trigger.extra, "read_from": target.read_from()},
    )
