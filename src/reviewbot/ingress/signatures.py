"""Webhook signatures: HMAC-SHA256 over the raw bytes, compared in constant time.

Checked before anything is parsed. A missing or empty header, a malformed value or a forge
without a configured secret is always a refusal (Gitea sends an empty ``X-Gitea-Signature``
when its webhook has no secret, so "present but empty" must fail too).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from urllib.parse import unquote_to_bytes

from reviewbot.ingress.headers import (
    GITEA_SIGNATURE_HEADERS,
    GITHUB_SIGNATURE,
    first_header,
    header,
)

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"

_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _digest(secret: bytes, data: bytes) -> bytes:
    # The one-shot form runs in OpenSSL without building an HMAC object (every delivery).
    return hmac.digest(secret, data, "sha256")


def _matches(secret: bytes | None, data: bytes, hex_value: str) -> bool:
    if not secret:
        return False
    if _HEX_SHA256.fullmatch(hex_value) is None:
        return False
    return hmac.compare_digest(_digest(secret, data), bytes.fromhex(hex_value))


def sign_github(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value for ``body``: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def sign_gitea(secret: bytes, payload: bytes) -> str:
    """The ``X-Gitea-Signature`` / ``X-Forgejo-Signature`` value: bare lowercase hex."""
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def verify_github(secret: bytes | None, body: bytes, header_value: str | None) -> bool:
    """Check ``X-Hub-Signature-256`` (``sha256=<hex>``) against the raw request body."""
    if not header_value or not header_value.startswith("sha256="):
        return False
    return _matches(secret, body, header_value.removeprefix("sha256="))


def verify_gitea(secret: bytes | None, payload: bytes, header_value: str | None) -> bool:
    """Check ``X-Gitea-Signature`` (or ``X-Forgejo-Signature``): hex, no prefix.

    ``payload`` is the signed bytes: the raw body, or for a form delivery the JSON in its
    ``payload`` field (see :func:`gitea_signed_bytes`).
    """
    if not header_value:
        return False
    return _matches(secret, payload, header_value)


def is_form(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == FORM_CONTENT_TYPE


def form_payload(body: bytes) -> bytes | None:
    """The exact bytes of the single ``payload`` field of a form body, or ``None``.

    Decoded by hand (not through ``str``) so the bytes are exactly the JSON the sender
    signed, whatever its encoding.
    """
    found: list[bytes] = []
    for part in body.split(b"&"):
        key, sep, value = part.partition(b"=")
        if unquote_to_bytes(key.replace(b"+", b" ")) == b"payload" and sep:
            found.append(unquote_to_bytes(value.replace(b"+", b" ")))
    return found[0] if len(found) == 1 else None


def json_bytes(body: bytes, content_type: str | None) -> bytes | None:
    """The JSON document of a delivery: the body, or a form body's ``payload`` field.

    ``None`` when a form body has no single ``payload`` field.
    """
    return form_payload(body) if is_form(content_type) else body


def gitea_signed_bytes(body: bytes, content_type: str | None) -> bytes | None:
    """What a Gitea/Forgejo signature covers: the JSON, even in a form body."""
    return json_bytes(body, content_type)


def verify_github_delivery(secret: bytes | None, headers: Mapping[str, str], body: bytes) -> bool:
    """A GitHub delivery: the raw body is signed, whatever its content type."""
    return verify_github(secret, body, header(headers, GITHUB_SIGNATURE))


def verify_gitea_delivery(secret: bytes | None, headers: Mapping[str, str], body: bytes) -> bool:
    """A Gitea or Forgejo delivery: the JSON is signed (a form body's ``payload`` field)."""
    signed = gitea_signed_bytes(body, header(headers, "Content-Type"))
    if signed is None:
        return False
    return verify_gitea(secret, signed, first_header(headers, GITEA_SIGNATURE_HEADERS))
