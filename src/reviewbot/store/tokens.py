"""Bearer tokens for the API and the Crew endpoint: shown once, stored as a SHA-256 hash.

A token is ``rbt_`` followed by 32 random bytes (URL-safe base64). Its hash is the lookup
key, so checking a token is one indexed read and never compares secrets in Python.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from reviewbot.core.clock import iso, iso_or_none
from reviewbot.core.errors import ReviewbotError
from reviewbot.core.models import RepoRef
from reviewbot.store.database import Database, Row, opt_float, row_as

TOKEN_PREFIX = "rbt_"  # noqa: S105 - a recognisable prefix, not a secret
SCOPES = ("read", "review", "lease", "merge", "db:read", "db:write", "metrics")


class TokenError(ReviewbotError, ValueError):
    """A token request is invalid (unknown scope, bad repository, name taken, not found)."""


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    prefix: str  # the first characters, to recognise a token in a list
    scopes: tuple[str, ...]
    repo: str | None  # FORGE:OWNER/NAME the token is bound to, or None for every repository
    created_at: float  # seconds since the epoch
    revoked_at: float | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def allows_repo(self, forge: str | None, repo: str | None) -> bool:
        """A bound token may act only on its repository; ``None`` values match nothing."""
        if self.repo is None:
            return True
        if forge is None or repo is None:
            return False
        try:
            named = RepoRef.parse(repo, forge=forge)
            bound = RepoRef.parse(self.repo)
        except ValueError:
            return False
        return named == bound  # case-insensitive, as the forges compare names

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "prefix": self.prefix,
            "scopes": list(self.scopes),
            "repo": self.repo,
            "created_at": iso(self.created_at, timespec="seconds"),
            "revoked_at": iso_or_none(self.revoked_at, timespec="seconds"),
        }

    @classmethod
    def from_row(cls, row: Row) -> TokenInfo:
        return row_as(
            cls,
            row,
            scopes=lambda r: tuple(s for s in str(r["scopes"]).split(",") if s),
            created_at=lambda r: float(r["created_at"]),
            revoked_at=lambda r: opt_float(r["revoked_at"]),
        )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_scopes(text: str | Iterable[str]) -> tuple[str, ...]:
    items = text.split(",") if isinstance(text, str) else list(text)
    scopes = tuple(dict.fromkeys(s.strip() for s in items if s.strip()))
    if not scopes:
        raise TokenError(f"no scope given; choose from {', '.join(SCOPES)}")
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise TokenError(f"unknown scope {unknown[0]!r}; choose from {', '.join(SCOPES)}")
    return scopes


def parse_repo_binding(text: str | None) -> str | None:
    """``FORGE:OWNER/NAME`` checked and normalised, or ``None``."""
    if text is None:
        return None
    try:
        return RepoRef.parse(text).qualified_key
    except ValueError:
        raise TokenError(
            f"--repo {text!r} must look like FORGE:OWNER/NAME (e.g. gitea:acme/api)"
        ) from None


def create_token(
    db: Database,
    *,
    name: str,
    scopes: Iterable[str] | str,
    repo: str | None,
    now: float,
    token: str | None = None,
) -> tuple[str, TokenInfo]:
    """A new token (the only time the plain token exists) and its stored description."""
    name = name.strip()
    if not name:
        raise TokenError("a token needs a --name")
    scope_list = parse_scopes(scopes)
    binding = parse_repo_binding(repo)
    plain = token or TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.write() as tx:
        taken = tx.one("SELECT 1 FROM api_tokens WHERE name = ? AND revoked_at IS NULL", (name,))
        if taken is not None:
            raise TokenError(f"an active token named {name!r} exists; revoke it first")
        row = tx.one(
            "INSERT INTO api_tokens (name, token_hash, prefix, scopes, repo, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
            (name, hash_token(plain), plain[:8], ",".join(scope_list), binding, now),
        )
    assert row is not None
    return plain, TokenInfo.from_row(row)


def list_tokens(db: Database, *, include_revoked: bool = True) -> list[TokenInfo]:
    sql = "SELECT * FROM api_tokens"
    if not include_revoked:
        sql += " WHERE revoked_at IS NULL"
    with db.read() as tx:
        rows = tx.all(sql + " ORDER BY id")
    return [TokenInfo.from_row(r) for r in rows]


def revoke_token(db: Database, name_or_id: str, *, now: float) -> list[TokenInfo]:
    """Revoke the active token(s) with this name, or the token with this id."""
    with db.write() as tx:
        if name_or_id.isdigit():
            rows = tx.all(
                "SELECT id FROM api_tokens WHERE id = ? AND revoked_at IS NULL",
                (int(name_or_id),),
            )
        else:
            rows = tx.all(
                "SELECT id FROM api_tokens WHERE name = ? AND revoked_at IS NULL", (name_or_id,)
            )
        if not rows:
            raise TokenError(f"no active token named or numbered {name_or_id!r}")
        ids = [int(r["id"]) for r in rows]
        for token_id in ids:
            tx.execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ?", (now, token_id))
        out = [tx.one("SELECT * FROM api_tokens WHERE id = ?", (i,)) for i in ids]
    return [TokenInfo.from_row(r) for r in out if r is not None]


def rescope_token(
    db: Database, name_or_id: str, *, scopes: Iterable[str] | str, repo: str | None
) -> TokenInfo:
    """Give the active token with this name (or id) new scopes and binding (``repo``; ``None``
    for every repository). Every entry path reads a token at each request, so the change
    holds from the token's next call on."""
    scope_list = parse_scopes(scopes)
    binding = parse_repo_binding(repo)
    by_id = name_or_id.isdigit()
    sql = (
        "UPDATE api_tokens SET scopes = ?, repo = ? "
        + ("WHERE id = ?" if by_id else "WHERE name = ?")
        + " AND revoked_at IS NULL RETURNING *"
    )
    key: int | str = int(name_or_id) if by_id else name_or_id
    with db.write() as tx:
        row = tx.one(sql, (",".join(scope_list), binding, key))
    if row is None:
        raise TokenError(f"no active token named or numbered {name_or_id!r}")
    return TokenInfo.from_row(row)


def lookup_token(db: Database, token: str) -> TokenInfo | None:
    """The token's description (revoked ones included), or ``None`` when unknown."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    with db.read() as tx:
        row = tx.one("SELECT * FROM api_tokens WHERE token_hash = ?", (hash_token(token),))
    return None if row is None else TokenInfo.from_row(row)
