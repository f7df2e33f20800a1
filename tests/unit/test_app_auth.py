"""GitHub App authentication: JWT claims and the installation token cache (fake clock)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from reviewbot.forges.app_auth import GitHubAppAuth, parse_timestamp
from reviewbot.forges.errors import ForgeError

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def key_pair() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeInstallations:
    """Answers like GitHub: one installation per repository, one-hour tokens."""

    def __init__(self, clock: Clock, public_key: bytes) -> None:
        self.clock = clock
        self.public_key = public_key
        self.lookups: list[str] = []
        self.minted: list[int] = []

    def _verify(self, app_jwt: str) -> None:
        jwt.decode(
            app_jwt,
            self.public_key,
            algorithms=["RS256"],
            issuer="42",
            options={"verify_exp": False, "verify_iat": False},
        )

    async def repo_installation_id(self, repo: str, app_jwt: str) -> int:
        self._verify(app_jwt)
        self.lookups.append(repo)
        return {"acme/api": 1, "acme/web": 1, "other/lib": 2}[repo]

    async def create_installation_token(
        self, installation_id: int, app_jwt: str
    ) -> tuple[str, str, dict[str, str]]:
        self._verify(app_jwt)
        await asyncio.sleep(0)  # a real request yields to other tasks
        self.minted.append(installation_id)
        token = f"ghs_{installation_id}_{len(self.minted)}"
        return token, iso(self.clock() + 3600), {"contents": "read"}


def test_jwt_claims_and_signature(key_pair: tuple[bytes, bytes]) -> None:
    private, public = key_pair
    clock = Clock()
    token = GitHubAppAuth(42, private, clock=clock).app_jwt()
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = jwt.decode(
        token,
        public,
        algorithms=["RS256"],
        issuer="42",
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iat"] == NOW - 60
    assert claims["exp"] - NOW <= 600
    assert claims["exp"] - claims["iat"] <= 600
    assert claims["exp"] > NOW


def test_jwt_from_another_key_is_rejected(key_pair: tuple[bytes, bytes]) -> None:
    _, public = key_pair
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = GitHubAppAuth(42, other, clock=Clock()).app_jwt()  # type: ignore[arg-type]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, public, algorithms=["RS256"], options={"verify_exp": False})


def test_jwt_lifetime_above_ten_minutes_is_refused(key_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError, match="jwt_lifetime_s"):
        GitHubAppAuth(42, key_pair[0], jwt_lifetime_s=600)


async def test_token_reused_until_near_expiry_then_refreshed(key_pair: tuple[bytes, bytes]) -> None:
    private, public = key_pair
    clock = Clock()
    api = FakeInstallations(clock, public)
    auth = GitHubAppAuth(42, private, clock=clock, refresh_margin_s=300)

    first = await auth.token_for_repo("acme/api", api)
    clock.now += 3600 - 301  # still more than the margin before expiry
    assert await auth.token_for_repo("acme/api", api) == first
    assert await auth.token_for_repo("acme/web", api) == first  # same installation
    assert api.minted == [1]

    clock.now += 2  # inside the refresh margin
    second = await auth.token_for_repo("acme/api", api)
    assert second != first
    assert api.minted == [1, 1]
    # The installation of a repository is looked up once.
    assert api.lookups == ["acme/api", "acme/web"]


async def test_tokens_are_cached_per_installation(key_pair: tuple[bytes, bytes]) -> None:
    private, public = key_pair
    clock = Clock()
    api = FakeInstallations(clock, public)
    auth = GitHubAppAuth(42, private, clock=clock)
    a = await auth.token_for_repo("acme/api", api)
    b = await auth.token_for_repo("other/lib", api)
    assert a != b and api.minted == [1, 2]
    auth.forget_token("other/lib")
    assert await auth.token_for_repo("acme/api", api) == a
    assert await auth.token_for_repo("other/lib", api) != b


async def test_bad_expiry_is_a_forge_error(key_pair: tuple[bytes, bytes]) -> None:
    private, public = key_pair

    class Broken(FakeInstallations):
        async def create_installation_token(
            self, installation_id: int, app_jwt: str
        ) -> tuple[str, str, dict[str, str]]:
            return "ghs_x", "tomorrow", {}

    auth = GitHubAppAuth(42, private, clock=Clock())
    with pytest.raises(ForgeError, match="installation token"):
        await auth.token_for_repo("acme/api", Broken(Clock(), public))


def test_parse_timestamp() -> None:
    assert parse_timestamp("2026-01-01T00:00:00Z") == NOW
    with pytest.raises(ValueError):
        parse_timestamp("2026-01-01T00:00:00")


async def test_concurrent_callers_share_one_new_token(key_pair: tuple[bytes, bytes]) -> None:
    private, public = key_pair
    clock = Clock()
    api = FakeInstallations(clock, public)
    auth = GitHubAppAuth(42, private, clock=clock)
    await auth.installation_id("acme/api", api)
    tokens = await asyncio.gather(*(auth.token_for_repo("acme/api", api) for _ in range(5)))
    assert len(set(tokens)) == 1 and api.minted == [1]


async def test_grants_the_token_answer_leaves_out_are_unknown_not_nothing(
    key_pair: tuple[bytes, bytes],
) -> None:
    private, public = key_pair

    class Silent(FakeInstallations):
        async def create_installation_token(
            self, installation_id: int, app_jwt: str
        ) -> tuple[str, str, dict[str, str] | None]:
            token, expires, _ = await super().create_installation_token(installation_id, app_jwt)
            return token, expires, None

    auth = GitHubAppAuth(42, private, clock=Clock())
    assert await auth.granted("acme/api", Silent(Clock(), public)) is None
    assert (
        await auth.granted("acme/api", FakeInstallations(Clock(), public)) is None
    )  # cached token
    auth.forget_token("acme/api")
    assert await auth.granted("acme/api", FakeInstallations(Clock(), public)) == {
        "contents": "read"
    }
