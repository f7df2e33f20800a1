"""GitHub authentication: tokens, App JWTs (RS256 against the app's public key), installations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jwt

from reviewbot.sim.errors import ApiError

if TYPE_CHECKING:
    from reviewbot.sim.simulator import Simulator

JWT_MAX_LIFETIME = 600  # GitHub refuses an exp more than 10 minutes after iat
CLOCK_DRIFT = 60


@dataclass(frozen=True)
class GitHubIdentity:
    kind: str  # "user", "installation" or "app"
    login: str
    app_id: int | None = None
    installation_id: int | None = None


def bearer(header: str) -> str | None:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() in ("token", "bearer") and value.strip():
        return value.strip()
    return None


def verify_app_jwt(sim: Simulator, token: str) -> GitHubIdentity:
    """An App JWT: RS256, ``iss`` = app id, ``iat``/``exp`` checked against the sim's clock."""
    try:
        claims = jwt.decode(
            token,
            options={"verify_signature": False, "verify_exp": False, "verify_iat": False},
        )
        app_id = int(claims.get("iss", ""))
    except (jwt.PyJWTError, ValueError, TypeError):
        raise ApiError(401, "A JSON web token could not be decoded") from None
    app = sim.apps.get(app_id)
    if app is None:
        raise ApiError(401, f"Integration not found for id {claims.get('iss')!r}")
    try:
        jwt.decode(
            token,
            app.public_key_pem,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
        )
    except jwt.PyJWTError:
        raise ApiError(401, "A JSON web token could not be decoded") from None
    now = sim.now()
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int | float) or iat > now + CLOCK_DRIFT:
        raise ApiError(
            401,
            "'Issued at' claim ('iat') must be an Integer representing the time that the "
            "assertion was issued.",
        )
    if not isinstance(exp, int | float) or exp <= now:
        raise ApiError(
            401,
            "'Expiration time' claim ('exp') must be a numeric value representing the future "
            "time at which the assertion expires.",
        )
    if exp - iat > JWT_MAX_LIFETIME:
        raise ApiError(401, "'Expiration time' claim ('exp') is too far in the future.")
    return GitHubIdentity(kind="app", login=app.bot_login, app_id=app.id)


def identify(sim: Simulator, header: str | None) -> GitHubIdentity:
    """Who is calling; a missing, unknown or expired credential is a 401."""
    token = bearer(header or "")
    if token is None:
        raise ApiError(401, "Requires authentication")
    if token.count(".") == 2 and token.startswith("ey"):
        return verify_app_jwt(sim, token)
    login = sim.login_for_token("github", token)
    if login is not None:
        return GitHubIdentity(kind="user", login=login)
    issued = sim.installation_for_token(token)
    if issued is not None and issued.expires_at > sim.now():
        installation = sim.installations.get(issued.installation_id)
        if installation is not None:
            app = sim.apps[installation.app_id]
            return GitHubIdentity(
                kind="installation",
                login=app.bot_login,
                app_id=app.id,
                installation_id=installation.id,
            )
    raise ApiError(401, "Bad credentials")
