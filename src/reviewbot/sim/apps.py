"""GitHub Apps: registration with an RSA key pair, installations and installation tokens."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from reviewbot.sim.core import SimCore, token_hash
from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.permissions import GITHUB_DOCUMENTED, LEVELS
from reviewbot.sim.state import SimApp, SimInstallation, SimInstallationToken

INSTALLATION_TOKEN_TTL = 3600.0


class GitHubApps(SimCore):
    # ------------------------------------------------------------------ GitHub Apps
    def create_github_app(
        self, bot_login: str = "reviewbot[bot]", name: str | None = None, owner: str = "acme"
    ) -> tuple[int, str]:
        """Register an app and its bot user; returns ``(app_id, private_key_pem)``."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        public_pem = (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        slug = bot_login.removesuffix("[bot]")
        self.user("github", owner)
        self.add_user("github", bot_login, token=f"unused-{slug}-{self.next_id()}", bot=True)
        app = SimApp(
            id=self.next_id(),
            slug=slug,
            name=name or slug,
            owner=owner,
            bot_login=bot_login,
            public_key_pem=public_pem,
            created_at=self.now(),
        )
        self.apps[app.id] = app
        return app.id, private_pem

    def install_app(self, app_id: int, repo: str) -> int:
        """Install the app on ``repo`` (one installation per account); returns its id."""
        if app_id not in self.apps:
            raise ScenarioError(f"no app {app_id}")
        state = self.repo("github", repo)
        for installation in self.installations.values():
            if installation.app_id == app_id and installation.account == state.owner:
                installation.repos.add(state.full_name.lower())
                return installation.id
        installation = SimInstallation(
            id=self.next_id(),
            app_id=app_id,
            account=state.owner,
            permissions=dict(GITHUB_DOCUMENTED),
            repos={state.full_name.lower()},
            created_at=self.now(),
        )
        self.installations[installation.id] = installation
        return installation.id

    def set_installation_permissions(
        self, installation_id: int, permissions: dict[str, str]
    ) -> None:
        """Replace what an installation was granted (``{"contents": "read", ...}``)."""
        installation = self.installations.get(installation_id)
        if installation is None:
            raise ScenarioError(f"no installation {installation_id}")
        for name, level in permissions.items():
            if level not in LEVELS or level == "admin":
                raise ScenarioError(f"permission {name}: level {level!r} is not read or write")
        installation.permissions = {n: lv for n, lv in permissions.items() if lv != "none"}

    def issue_installation_token(self, installation: SimInstallation) -> tuple[str, float]:
        token = (
            "ghs_" + hashlib.sha256(f"{installation.id}:{self.next_id()}".encode()).hexdigest()[:36]
        )
        expires_at = self.now() + INSTALLATION_TOKEN_TTL
        self._installation_tokens[token_hash(token)] = SimInstallationToken(
            token_hash=token_hash(token), installation_id=installation.id, expires_at=expires_at
        )
        return token, expires_at

    def installation_for_token(self, token: str) -> SimInstallationToken | None:
        return self._installation_tokens.get(token_hash(token))
