"""Who may read the status page, and the cookies that remember it.

A reader is a token with the ``read`` scope, shown either as ``Authorization: Bearer`` (for
scripts) or through the page's session cookie. The cookie holds a signed, expiring session
(:mod:`reviewbot.store.ui_sessions`), never the token: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), Secure over HTTPS. The token is checked
again on every request, so revoking it, or removing its ``read`` scope, ends the session.

Forms that change the session (sign in, sign out) carry a CSRF value that must equal the
``reviewbot_csrf`` cookie (double submit), and a request another site started (``Origin``
not this host, ``Sec-Fetch-Site: cross-site``) is refused before the value is compared.
"""

from __future__ import annotations

import secrets

from aiohttp import web

from reviewbot.core.errors import Refused
from reviewbot.server.app_keys import SERVICE
from reviewbot.server.auth import authenticate
from reviewbot.store import ui_sessions
from reviewbot.store.tokens import TokenInfo

SESSION_COOKIE = "reviewbot_session"
CSRF_COOKIE = "reviewbot_csrf"
SESSION_S = 8 * 3600  # a working day; signing in again is one paste
MAX_CSRF = 64


def secure(request: web.Request) -> bool:
    return request.secure


def set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=secure(request),
        max_age=SESSION_S,
    )


def csrf_value(request: web.Request) -> str:
    """The browser's CSRF value, or a new one (which the caller sets with :func:`keep_csrf`)."""
    value = request.cookies.get(CSRF_COOKIE, "")
    if (
        16 <= len(value) <= MAX_CSRF
        and value.isascii()
        and value.replace("-", "").replace("_", "").isalnum()
    ):
        return value
    return secrets.token_urlsafe(32)


def keep_csrf(request: web.Request, response: web.StreamResponse, value: str) -> None:
    if request.cookies.get(CSRF_COOKIE) != value:
        set_cookie(request, response, CSRF_COOKIE, value)


def check_form_origin(request: web.Request, sent: str) -> None:
    """Refuse a form another site made the browser send, or one without the right value."""
    if request.headers.get("Sec-Fetch-Site", "") == "cross-site":
        raise Refused("a form from another site may not do this", code="csrf_failed")
    origin = request.headers.get("Origin")
    if origin is not None and origin.split("://", 1)[-1] != request.host:
        raise Refused("a form from another site may not do this", code="csrf_failed")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not sent or not ui_sessions.same_text(cookie, sent):
        raise Refused("the form expired; load the page again", code="csrf_failed")


def usable(info: TokenInfo | None) -> TokenInfo | None:
    """A token that may read the page now: active, with the ``read`` scope."""
    if info is None or not info.active or "read" not in info.scopes:
        return None
    return info


async def reader(request: web.Request) -> TokenInfo | None:
    """The reading token, or None (no session, or one that expired or lost its token).

    A bearer header is checked as everywhere else: a bad one is refused, not redirected."""
    if "Authorization" in request.headers:
        return await authenticate(request, "read")
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    service = request.app[SERVICE]
    db = service.db
    assert db is not None
    info = await db.run(ui_sessions.verify, db, cookie, "session", service.clock())
    return usable(info)


async def start_session(
    request: web.Request, response: web.StreamResponse, info: TokenInfo
) -> None:
    service = request.app[SERVICE]
    db = service.db
    assert db is not None
    expires = int(service.clock()) + SESSION_S
    value = await db.run(ui_sessions.issue, db, info.id, "session", expires)
    if value is None:  # the token row went away between the check and now
        raise Refused("unknown token", code="unauthorized")
    set_cookie(request, response, SESSION_COOKIE, value)


def end_session(response: web.StreamResponse) -> None:
    response.del_cookie(SESSION_COOKIE, path="/")
