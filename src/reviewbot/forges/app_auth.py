"""GitHub App authentication: an app JWT, and installation tokens cached per installation.

The JWT is RS256, issued 60 s in the past (clock drift) and valid for at most 10
minutes, as GitHub requires. The installation of a repository is looked up once; its
token (valid one hour) is reused until ``refresh_margin_s`` before it expires, then a
new one is requested. The clock is injected so the whole life cycle is testable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import jwt

from reviewbot.core.clock import Clock
from reviewbot.forges.errors import ForgeError

JWT_BACKDATE_S = 60
JWT_LIFETIME_S = 540  # from now; with the backdate, exp - iat is exactly 10 minutes
MAX_JWT_LIFETIME_S = 600


class InstallationApi(Protocol):
    """The two GitHub calls the token cache needs (made with the app JWT)."""

    async def repo_installation_id(self, repo: str, app_jwt: str) -> int: ...

    async def create_installation_token(
        self, installation_id: int, app_jwt: str
    ) -> tuple[str, str, Mapping[str, str] | None]:
        """``(token, expires_at, permissions)``: ``expires_at`` as ISO 8601, and the
        repository permissions the installation was granted (``{"contents": "write"}``;
        ``None`` when the answer did not say)."""
        ...


@dataclass(frozen=True)
class InstallationToken:
    token: str
    expires_at: float  # seconds since the epoch
    permissions: Mapping[str, str] | None = None  # None: the forge did not say


class GitHubAppAuth:
    """Mints app JWTs and hands out installation tokens for repositories."""

    def __init__(
        self,
        app_id: int | str,
        private_key_pem: str | bytes,
        *,
        clock: Clock = time.time,
        refresh_margin_s: float = 300.0,
        jwt_lifetime_s: int = JWT_LIFETIME_S,
    ) -> None:
        if not 0 < jwt_lifetime_s <= MAX_JWT_LIFETIME_S - JWT_BACKDATE_S:
            raise ValueError(
                f"jwt_lifetime_s must be in (0, {MAX_JWT_LIFETIME_S - JWT_BACKDATE_S}]"
            )
        self.app_id = str(app_id)
        self._key = private_key_pem
        self._clock = clock
        self._refresh_margin_s = refresh_margin_s
        self._jwt_lifetime_s = jwt_lifetime_s
        self._installations: dict[str, int] = {}
        self._tokens: dict[int, InstallationToken] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def app_jwt(self) -> str:
        """A fresh JWT identifying the app (``iss`` = app id)."""
        now = int(self._clock())
        claims = {
            "iat": now - JWT_BACKDATE_S,
            "exp": now + self._jwt_lifetime_s,
            "iss": self.app_id,
        }
        return jwt.encode(claims, self._key, algorithm="RS256")

    async def installation_id(self, repo: str, api: InstallationApi) -> int:
        """The installation that covers ``repo`` (looked up once per repository)."""
        found = self._installations.get(repo)
        if found is None:
            found = await api.repo_installation_id(repo, self.app_jwt())
            self._installations[repo] = found
        return found

    async def token_for_repo(self, repo: str, api: InstallationApi) -> str:
        """An installation token valid for ``repo``, reused until near its expiry."""
        installation = await self.installation_id(repo, api)
        lock = self._locks.setdefault(installation, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(installation)
            if cached is not None and self._clock() < cached.expires_at - self._refresh_margin_s:
                return cached.token
            return (await self._mint(installation, api)).token

    async def granted(self, repo: str, api: InstallationApi) -> Mapping[str, str] | None:
        """The repository permissions of ``repo``'s installation, as its token reported
        (``None`` when the token was dropped meanwhile: unknown, not "nothing")."""
        await self.token_for_repo(repo, api)
        found = self._tokens.get(await self.installation_id(repo, api))
        return found.permissions if found is not None else None

    async def _mint(self, installation: int, api: InstallationApi) -> InstallationToken:
        token, expires_at, permissions = await api.create_installation_token(
            installation, self.app_jwt()
        )
        try:
            expiry = parse_timestamp(expires_at)
        except ValueError as exc:
            raise ForgeError(f"installation token: {exc}", operation="app_token") from None
        minted = InstallationToken(
            token, expiry, dict(permissions) if permissions is not None else None
        )
        self._tokens[installation] = minted
        return minted

    def forget_token(self, repo: str) -> None:
        """Drop the cached token of ``repo``'s installation (after the forge refused it)."""
        installation = self._installations.get(repo)
        if installation is not None:
            self._tokens.pop(installation, None)


def parse_timestamp(value: str) -> float:
    """ISO 8601 (GitHub writes ``2016-07-11T22:14:10Z``) to seconds since the epoch."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {value!r}")
    return parsed.timestamp()
