"""Bearer tokens: every route checks the token's scope and its repository binding the same
way, and a refusal names the missing scope or the binding."""

from __future__ import annotations

from contextlib import suppress

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.core.models import RepoRef
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.quota import WRITE_SCOPES, admit, token_caller
from reviewbot.store import repositories
from reviewbot.store.database import Database
from reviewbot.store.tokens import TokenInfo, lookup_token


def bearer(request: web.Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``, if the header holds one."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    token = value.strip()
    return token if scheme.lower() == "bearer" and token else None


async def authenticate(request: web.Request, scope: str, *alternatives: str) -> TokenInfo:
    """The calling token, which must be active and hold ``scope`` (or one of
    ``alternatives``); a call that needs a write scope also takes one from the token's rate
    limit for that scope's class (``server/quota.py``)."""
    token = bearer(request)
    if token is None:
        raise Refused("send Authorization: Bearer <token>", code="unauthorized")
    service = request.app[SERVICE]
    assert service.db is not None
    info = await check_token(service.db, token, scope, *alternatives)
    route = WRITE_SCOPES.get(scope)
    if route is not None:
        admit(service, token_caller(info), route)
    return info


async def check_token(db: Database, token: str, scope: str | None, *alternatives: str) -> TokenInfo:
    """The token's description when it is known and active (and holds ``scope``, if one is
    named): the one check every entry path (HTTP routes, MCP) makes of a bearer token."""
    info = await db.run(lookup_token, db, token)
    if info is None:
        raise Refused("unknown token", code="unauthorized")
    if not info.active:
        raise Refused(f"token {info.name!r} was revoked", code="unauthorized")
    if scope is not None:
        require_scope(info, scope, *alternatives)
    return info


def require_scope(info: TokenInfo, scope: str, *alternatives: str) -> None:
    """Refuse a call that needs ``scope`` (or one of ``alternatives``) when the token lacks
    it, naming both."""
    if not {scope, *alternatives} & set(info.scopes):
        wanted = " or ".join(repr(s) for s in (scope, *alternatives))
        raise Refused(
            f"this call needs scope {wanted}; token {info.name!r} has "
            f"{', '.join(info.scopes) or 'none'}",
            code="missing_scope",
            scope=scope,
        )


def check_binding(info: TokenInfo, forge: str | None, repo: str | None) -> None:
    """A token bound to one repository acts only on it."""
    if not info.allows_repo(forge, repo):
        target = f"{forge}:{repo}" if forge and repo else "an unnamed repository"
        raise Refused(
            f"token {info.name!r} is bound to {info.repo}, not {target}", code="repo_not_allowed"
        )


async def current_bound(db: Database, info: TokenInfo, forge: str, repo: str) -> str:
    """``repo``'s current key (a renamed repository's old name is the same repository),
    checked against the token's binding after resolving: a binding naming the name a
    renamed repository left (a token made after the rename) never reaches its rows."""
    key = await db.run(repositories.resolve, db, forge, repo)
    check_binding(info, forge, key)
    return key


def bound_target(
    info: TokenInfo, forge: str | None, repo: str | None
) -> tuple[str | None, str | None]:
    """A listing's repository: a bound token's own when none is named, and checked."""
    if info.repo is not None:
        bound_forge, _, bound_repo = info.repo.partition(":")
        # A binding stored before names were case-insensitive may keep its spelling; one
        # that names no repository is refused by check_binding below.
        with suppress(ValueError):
            bound_repo = RepoRef.parse(info.repo).key
        forge = forge or bound_forge
        repo = repo or bound_repo
        check_binding(info, forge, repo)
    return forge, repo
