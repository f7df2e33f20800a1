"""Settings: a TOML file plus ``REVIEWBOT_*`` environment variables (``__`` nests).

The environment wins over the file. The file is ``REVIEWBOT_CONFIG`` or, when that is
unset, ``./reviewbot.toml`` if it exists. Invalid settings never start the bot: they raise
:class:`ConfigError` with one line naming the key and the problem.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from reviewbot.core.leases import DEFAULT_TIMING
from reviewbot.core.models import RepoRef
from reviewbot.core.sandbox import GrantRefused, check_grant, forbidden_files, grant_path

ENV_PREFIX = "REVIEWBOT_"
CONFIG_ENV = "REVIEWBOT_CONFIG"
DEFAULT_CONFIG_FILE = Path("reviewbot.toml")

MergeMethod = Literal["merge", "squash", "rebase"]


class ConfigError(Exception):
    """A setting is invalid; the message is one line naming the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GitHubSettings(_Section):
    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    app_id: int | None = None
    private_key_path: Path | None = None
    webhook_secret: SecretStr | None = None
    bot_login: str | None = None

    @model_validator(mode="after")
    def _app_credentials_come_in_pairs(self) -> GitHubSettings:
        if (self.app_id is None) != (self.private_key_path is None):
            raise ValueError("app_id and private_key_path must be set together")
        return self

    @property
    def configured(self) -> bool:
        return self.token is not None or self.app_id is not None


class GiteaSettings(_Section):
    url: str | None = None
    token: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    bot_login: str | None = None

    @property
    def configured(self) -> bool:
        return self.url is not None

    @property
    def api_url(self) -> str | None:
        return None if self.url is None else self.url.rstrip("/") + "/api/v1"


class LeaseSettings(_Section):
    """Lease timing, in seconds. Refused unless lease > renew > 1.2 x retry."""

    lease_s: float = Field(DEFAULT_TIMING.lease_s, gt=0)
    renew_s: float = Field(DEFAULT_TIMING.renew_s, gt=0)
    retry_s: float = Field(DEFAULT_TIMING.retry_s, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LeaseSettings:
        if not self.renew_s < self.lease_s:
            raise ValueError(
                f"renew_s ({self.renew_s:g}) must be less than lease_s ({self.lease_s:g})"
            )
        if not self.renew_s > 1.2 * self.retry_s:
            raise ValueError(
                f"renew_s ({self.renew_s:g}) must be greater than 1.2 x retry_s "
                f"({1.2 * self.retry_s:g})"
            )
        return self


class GrantRule(_Section):
    """A folder a reviewer may see: relative to the data directory, or absolute."""

    path: str
    mode: Literal["ro", "rw"] = "ro"


class ReviewerRule(_Section):
    """A reviewer with more than a command: its name (for its secrets), grants, network."""

    command: str = Field(min_length=1)
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    grants: list[GrantRule] = Field(default_factory=list)
    network: bool = False  # share the host's network (needed to call the tools API over TCP)


_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class SecretSource(_Section):
    """Where one reviewer secret's value comes from: an environment variable or a file."""

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("a secret names exactly one of env or file")
        return self


class ReviewerSettings(_Section):
    """``[reviewers.NAME]``: what only the reviewer called NAME receives."""

    secrets: dict[str, SecretSource] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> ReviewerSettings:
        for name in self.secrets:
            if not _SECRET_NAME.match(name):
                raise ValueError(f"secret name {name!r}: use letters, digits and '_'")
        return self


class RepoRules(_Section):
    """Rules for one repository (``[repos."FORGE:OWNER/NAME"]``) or for all (``[defaults]``)."""

    required_checks: list[str] = Field(default_factory=list)
    base_branches: list[str] = Field(default_factory=list)  # empty: every base branch
    skip_labels: list[str] = Field(default_factory=list)
    automerge: bool = False
    merge_method: MergeMethod = "merge"
    # External reviewers: a command, or a table with its name, grants and network.
    reviewers: list[str | ReviewerRule] = Field(default_factory=list)
    approve_without_checks: bool = False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        case_sensitive=False,
    )

    data_dir: Path = Path("./reviewbot-data")
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    github: GitHubSettings = Field(default_factory=GitHubSettings)
    gitea: GiteaSettings = Field(default_factory=GiteaSettings)
    # Raw on purpose: any value other than read / read-write means "no access".
    db_access: str | None = None
    # What agent and reviewer sessions get, never more than db_access; unset: none.
    reviewer_db_access: str | None = None
    query_timeout_s: float = Field(5.0, gt=0, le=3600)  # per tool / CLI statement
    max_body_bytes: int = Field(25 * 1024 * 1024, gt=0)
    # Bytes buffered at once for webhook bodies whose signature is not checked yet, and how
    # long one such body may take to arrive: an unauthenticated sender cannot hold more.
    unverified_body_budget_bytes: int = Field(64 * 1024 * 1024, gt=0)
    body_read_timeout_s: float = Field(30.0, gt=0)
    workers: int = Field(4, ge=1, le=64)
    delivery_max_attempts: int = Field(5, ge=1, le=100)
    delivery_retry_base_s: float = Field(1.0, ge=0)
    ready_max_queue_age_s: float = Field(300.0, gt=0)
    reconcile_interval_s: float = Field(300.0, gt=0)
    missing_check_grace_s: float = Field(600.0, ge=0)
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
    defaults: RepoRules | None = None
    repos: dict[str, RepoRules] = Field(default_factory=dict)
    # "off" runs reviewers without the sandbox; only ever explicit (logged loudly at start).
    sandbox: Literal["on", "off"] = "on"
    bwrap: str = "bwrap"  # the bubblewrap binary: a name looked up on PATH, or a path
    reviewers: dict[str, ReviewerSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _grants_never_reach_the_database(self) -> Settings:
        data_dir = PurePosixPath(self.data_dir.absolute())
        try:
            database = self.database_path
        except ConfigError:
            return self  # reported where the database is opened
        forbidden = forbidden_files(PurePosixPath(database.absolute()))
        backups = data_dir / "db" / "migrations" / ".backups"
        tables = ([("defaults", self.defaults)] if self.defaults else []) + list(self.repos.items())
        for key, rules in tables:
            assert rules is not None
            for entry in rules.reviewers:
                if isinstance(entry, str):
                    continue
                for grant in entry.grants:
                    try:
                        check_grant(
                            grant_path(grant.path, data_dir),
                            forbidden=forbidden,
                            backups_dir=backups,
                        )
                    except GrantRefused as exc:
                        raise ValueError(f"reviewers of {key}: {entry.command!r}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _budget_holds_one_body(self) -> Settings:
        if self.unverified_body_budget_bytes < self.max_body_bytes:
            raise ValueError(
                f"unverified_body_budget_bytes ({self.unverified_body_budget_bytes}) must be at"
                f" least max_body_bytes ({self.max_body_bytes}), or no large delivery could"
                " ever be read"
            )
        return self

    @model_validator(mode="after")
    def _repo_keys_are_references(self) -> Settings:
        # Keys become canonical (``forge:owner/name``) here, so any casing of a repository
        # reaches its table; two keys for one repository would make the rules ambiguous.
        canonical: dict[str, RepoRules] = {}
        spelled: dict[str, str] = {}
        for key, rules in self.repos.items():
            try:
                ref = RepoRef.parse(key)
            except ValueError:
                raise ValueError(f"repos key {key!r} must look like FORGE:OWNER/NAME") from None
            if ref.qualified_key in spelled:
                raise ValueError(
                    f"repos keys {spelled[ref.qualified_key]!r} and {key!r} name the same "
                    "repository (repository names are case-insensitive)"
                )
            spelled[ref.qualified_key] = key
            canonical[ref.qualified_key] = rules
        self.repos = canonical
        return self

    @property
    def database_path(self) -> Path:
        """The SQLite file (``sqlite:///PATH`` or the default in the data dir)."""
        if self.database_url is None:
            return self.data_dir / "db" / "db.sqlite"
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url.removeprefix("sqlite:///"))
        raise ConfigError(
            f"database_url: unsupported scheme in {self.database_url.split(':', 1)[0]!r}; "
            "this build supports sqlite:///PATH"
        )

    def rules_for(self, repo: RepoRef) -> RepoRules | None:
        """The rules of ``repo`` in any casing; ``None``: the repository is not configured."""
        return self.repos.get(repo.qualified_key, self.defaults)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = config_file_path()
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


def config_file_path() -> Path | None:
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def load_settings(**overrides: Any) -> Settings:
    """Read settings, turning every problem into a one-line :class:`ConfigError`."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit and not Path(explicit).is_file():
        raise ConfigError(f"{CONFIG_ENV}: config file {explicit} does not exist")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    except ValueError as exc:  # TOML syntax errors surface as ValueError subclasses
        raise ConfigError(f"config file: {exc}".splitlines()[0]) from None


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(part) for part in err["loc"]) or "settings"
    msg = str(err["msg"]).removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    env_name = ENV_PREFIX + "__".join(str(p) for p in err["loc"]).upper()
    return f"invalid setting {key} ({env_name}): {msg}{suffix}"
