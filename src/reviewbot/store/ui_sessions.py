"""Signed, expiring credentials of the status page: its session cookie and its login links.

Both have the form ``TOKEN_ID.EXPIRES.MAC``: the MAC is an HMAC-SHA256 keyed by the stored
hash of the bearer token they stand for, over the purpose, the token id and the expiry. So
no signing key is kept anywhere (the token's hash is a 256-bit secret no user route may
read), neither ever carries the token itself, and revoking the token ends its sessions and
its links at once. A link and a session are signed for different purposes: one cannot be
used as the other.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from reviewbot.store.database import Database
from reviewbot.store.tokens import TokenInfo

Purpose = Literal["session", "link"]
MAX_TEXT = 200  # a longer credential is not one of ours: refused before any lookup


def _mac(key: bytes, purpose: Purpose, token_id: int, expires: int) -> str:
    message = f"reviewbot-ui|{purpose}|{token_id}|{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _token(db: Database, token_id: int) -> tuple[TokenInfo, bytes] | None:
    with db.read() as tx:
        row = tx.one("SELECT * FROM api_tokens WHERE id = ?", (token_id,))
    if row is None:
        return None
    return TokenInfo.from_row(row), bytes.fromhex(row["token_hash"])


def same_text(expected: str, given: str) -> bool:
    """Constant-time equality of a credential a browser sent with the one expected. Header
    values may hold any byte; one that is not ASCII is never ours (and compare_digest
    raises on it, or .encode() on an undecodable byte), so it is simply unequal."""
    return expected.isascii() and given.isascii() and hmac.compare_digest(expected, given)


def issue(db: Database, token_id: int, purpose: Purpose, expires: int) -> str | None:
    """A credential for the token until ``expires`` (epoch seconds); None for no such token."""
    found = _token(db, token_id)
    if found is None:
        return None
    return f"{token_id}.{expires}.{_mac(found[1], purpose, token_id, expires)}"


def verify(db: Database, text: str, purpose: Purpose, now: float) -> TokenInfo | None:
    """The token a credential stands for, if it is well formed, signed and unexpired.

    The caller still checks that the token is active and holds the scope it needs."""
    if len(text) > MAX_TEXT:
        return None
    token_id, _, rest = text.partition(".")
    expires, _, mac = rest.partition(".")
    if not (token_id.isascii() and token_id.isdigit() and expires.isascii() and expires.isdigit()):
        return None
    if int(expires) <= now or len(token_id) > 18:
        return None
    found = _token(db, int(token_id))
    if found is None:
        return None
    info, key = found
    if not same_text(_mac(key, purpose, info.id, int(expires)), mac):
        return None
    return info
