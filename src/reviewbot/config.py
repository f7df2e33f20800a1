"""Settings: a TOML file plus ``REVIEWBOT_*`` environment variables (``__`` nests).

The environment wins over the file. The file is ``REVIEWBOT_CONFIG`` or, when that is
unset, ``./reviewbot.toml`` if it exists. Invalid settings never start the bot: they raise
:class:`ConfigError` with one line naming the key and the problem.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.leases import DEFAULT_TIMING, MAX_TTL_S, MAX_WAIT_S
from reviewbot.core.models import RepoRef
from reviewbot.core.queue_control import Schedule
from reviewbot.core.quota import Rate, RouteClass
from reviewbot.core.sandbox import (
    GrantRefused,
    SandboxLimits,
    check_grant,
    forbidden_files,
    grant_path,
)

ENV_PREFIX = "REVIEWBOT_"
CONFIG_ENV = "REVIEWBOT_CONFIG"
DEFAULT_CONFIG_FILE = Path("reviewbot.toml")
GIT_FOLDER = "git"  # under the data folder: the forges' git clones

MergeMethod = Literal["merge", "squash", "rebase"]


class ConfigError(ReviewbotError):
    """A setting is invalid; the message is one line naming the key."""


def _web_url(value: str, example: str) -> str:
    """``value`` when it is an absolute http(s) URL; otherwise a one-line reason."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http(s) URL; write it in full, e.g. {example}")
    return value.strip()


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GitHubSettings(_Section):
    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    app_id: int | None = None
    private_key_path: Path | None = None
    webhook_secret: SecretStr | None = None
    bot_login: str | None = None
    # Read a pull (checks, rules, reviews, the state comment) with one GraphQL query; false:
    # REST only. A part GraphQL cannot read is read over REST either way.
    graphql: bool = True

    @field_validator("api_url")
    @classmethod
    def _api_url_is_a_url(cls, value: str) -> str:
        return _web_url(value, "https://api.github.com")

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

    @field_validator("url")
    @classmethod
    def _url_is_the_instance_base(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = _web_url(value, "https://gitea.example.com")
        base = url.rstrip("/")
        if base.endswith("/api/v1"):
            # The API path is added to this URL; given twice, every request 404s.
            raise ValueError(
                f"give the instance's base URL without /api/v1 (reviewbot adds it): "
                f"{base.removesuffix('/api/v1') or url}"
            )
        return url

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
    # The longest term a caller may ask for (ttl_s); longer requests are refused.
    max_lease_s: float = Field(DEFAULT_TIMING.max_lease_s, gt=0, le=MAX_TTL_S)
    # A waiter in a target's line silent this long has left it (default: renew_s).
    line_ttl_s: float = Field(DEFAULT_TIMING.line_ttl_s, gt=0)
    # The longest wait_s one acquire may ask for.
    max_wait_s: float = Field(DEFAULT_TIMING.max_wait_s, ge=0, le=MAX_WAIT_S)

    @model_validator(mode="after")
    def _ordered(self) -> LeaseSettings:
        if not self.max_lease_s >= self.lease_s:
            raise ValueError(
                f"max_lease_s ({self.max_lease_s:g}) must be at least lease_s ({self.lease_s:g})"
            )
        if not self.renew_s < self.lease_s:
            raise ValueError(
                f"renew_s ({self.renew_s:g}) must be less than lease_s ({self.lease_s:g})"
            )
        if not self.renew_s > 1.2 * self.retry_s:
            raise ValueError(
                f"renew_s ({self.renew_s:g}) must be greater than 1.2 x retry_s "
                f"({1.2 * self.retry_s:g})"
            )
        if "line_ttl_s" not in self.model_fields_set:
            self.line_ttl_s = self.renew_s
        if not 1.2 * self.retry_s < self.line_ttl_s <= self.lease_s:
            raise ValueError(
                f"line_ttl_s ({self.line_ttl_s:g}) must be greater than 1.2 x retry_s "
                f"({1.2 * self.retry_s:g}) and at most lease_s ({self.lease_s:g})"
            )
        return self


class RateLimitSettings(_Section):
    """Calls a token (or a reviewer's session) may make on each write path: a token bucket
    of ``*_burst`` calls refilled at ``*_per_s`` a second, per caller and route class (see
    :mod:`reviewbot.core.quota`). A ``*_per_s`` of 0 leaves that class unlimited."""

    review_per_s: float = Field(0.25, ge=0)
    review_burst: int = Field(20, ge=1)
    lease_per_s: float = Field(5.0, ge=0)
    lease_burst: int = Field(60, ge=1)
    merge_per_s: float = Field(0.2, ge=0)
    merge_burst: int = Field(10, ge=1)
    tools_per_s: float = Field(2.0, ge=0)
    tools_burst: int = Field(30, ge=1)
    forge_reads_per_s: float = Field(2.0, ge=0)
    forge_reads_burst: int = Field(30, ge=1)

    def rates(self) -> dict[RouteClass, Rate | None]:
        found: dict[RouteClass, Rate | None] = {}
        for route in RouteClass:
            per_s = float(getattr(self, f"{route.value}_per_s"))
            burst = int(getattr(self, f"{route.value}_burst"))
            found[route] = Rate(per_s, burst) if per_s > 0 else None
        return found


class RetentionSettings(_Section):
    """How long the rows that callers add are kept, in days; 0 keeps them for good."""

    # The lease audit trail: rows whose last activity (a grant's last renewal) is older are
    # deleted, a bounded number at every grant.
    lease_history_days: float = Field(30.0, ge=0, le=36500)
    # The rest is deleted after every reconcile sweep, a bounded number each time: deliveries
    # that ended (with their bodies, gate decisions and review jobs), ...
    journal_days: float = Field(30.0, ge=0, le=36500)
    # ... the audit of workflow-DB tool calls, ...
    tool_calls_days: float = Field(30.0, ge=0, le=36500)
    # ... and workers a token registered that were not heard from since.
    workers_days: float = Field(30.0, ge=0, le=36500)
    # Refused webhooks (what explain says about them) are kept by number, not age: the
    # newest this many; 0 keeps none.
    refused_webhooks: int = Field(1000, ge=0, le=1_000_000)

    @property
    def lease_history(self) -> float | None:
        """``lease_history_days`` as the lease store takes it (``None``: kept for good)."""
        return self.lease_history_days or None


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


_MIB = 1024 * 1024


class ReviewerLimitSettings(_Section):
    """``[reviewer_limits]``: what one external reviewer may use (docs/reviewers.md)."""

    timeout_s: float = Field(300.0, gt=0, le=86400)  # until it exits; then its sandbox dies
    # Processes and threads it may start, over what its host user runs already.
    processes: int = Field(SandboxLimits.processes, ge=4, le=1_000_000)
    memory_bytes: int = Field(SandboxLimits.memory_bytes, ge=64 * _MIB)  # per process
    cpu_s: int = Field(SandboxLimits.cpu_s, ge=1)  # CPU seconds per process
    open_files: int = Field(SandboxLimits.open_files, ge=16, le=1_048_576)  # per process
    file_bytes: int = Field(SandboxLimits.file_bytes, ge=_MIB)  # the largest file it writes
    folder_bytes: int = Field(SandboxLimits.folder_bytes, ge=_MIB)  # run folder and /tmp, each
    stdout_bytes: int = Field(1024 * 1024, ge=1024, le=64 * _MIB)
    findings: int = Field(500, ge=1, le=100_000)  # kept per reviewer (errors first)
    run_findings: int = Field(1000, ge=1, le=100_000)  # kept per run, all reviewers together
    run_findings_bytes: int = Field(_MIB, ge=1024, le=64 * _MIB)  # their paths and messages

    def sandbox(self) -> SandboxLimits:
        return SandboxLimits(
            processes=self.processes,
            memory_bytes=self.memory_bytes,
            cpu_s=self.cpu_s,
            open_files=self.open_files,
            file_bytes=self.file_bytes,
            folder_bytes=self.folder_bytes,
        )


class QueueRules(_Section):
    """How a repository's merge queue splits and sizes its work (``[repos."...".merge_queue]``)."""

    # Glob -> area, first match wins; a path no glob matches keys on its top-level directory.
    path_groups: dict[str, str] = Field(default_factory=dict)
    # Globs whose files put the entries touching them in one serial train (lockfiles).
    serial_paths: list[str] = Field(default_factory=list)
    # A train's cars test PRs on the base plus their train; the landing line's cars test what
    # passed a train on the base plus the landing cars ahead, and land.
    batch_max: int = Field(4, ge=1, le=64)
    cars_per_train: int = Field(2, ge=1, le=64)
    landing_batch_max: int = Field(8, ge=1, le=64)
    landing_cars: int = Field(4, ge=1, le=64)
    ci_budget: int = Field(16, ge=1, le=1000)  # cars in flight over every train
    car_timeout_s: float = Field(3600.0, gt=0, le=7 * 86400)
    priority_labels: list[str] = Field(default_factory=lambda: ["hotfix"])
    # A green car whose base another train moved lands as a merge of the new base and its
    # tested commit, untested, when nothing that landed touches its train's keys.
    land_disjoint_untested: bool = False
    # Freezes and merge windows stop landing, not testing (syntax: core.queue_control).
    freeze: list[str] = Field(default_factory=list)
    merge_windows: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _valid_schedule(self) -> QueueRules:
        Schedule.parse(self.freeze, self.merge_windows)  # raises ValueError
        return self

    def schedule(self) -> Schedule:
        return Schedule.parse(self.freeze, self.merge_windows)


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
    # After a merge by the bot: delete the PR's head branch (never a fork's, the base or
    # default branch, nor one that moved), and close the issues its description closes.
    delete_head_branch_after_merge: bool = False
    close_linked_issues_after_merge: bool = False
    # Merge queue: admit every PR that is approved and green at its head by itself.
    queue: bool = False
    merge_queue: QueueRules = Field(default_factory=QueueRules)


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
    # Where `serve --sim` runs its forge simulator: by default a free loopback port; a
    # container sets a fixed one on every interface so that its port can be published.
    sim_host: str = "127.0.0.1"
    sim_port: int = Field(0, ge=0, le=65535)
    github: GitHubSettings = Field(default_factory=GitHubSettings)
    gitea: GiteaSettings = Field(default_factory=GiteaSettings)
    # Raw on purpose: any value other than read / read-write means "no access".
    db_access: str | None = None
    # What agent and reviewer sessions get, never more than db_access; unset: none.
    reviewer_db_access: str | None = None
    query_timeout_s: float = Field(5.0, gt=0, le=3600)  # per tool / CLI statement
    forge_timeout_s: float = Field(10.0, gt=0, le=300)  # per forge request (then retried)
    # How long /readyz reuses a forge's probe answer: about a load balancer's probe interval.
    forge_probe_ttl_s: float = Field(10.0, gt=0, le=3600)
    max_body_bytes: int = Field(25 * 1024 * 1024, gt=0)
    # A review request (API, Crew) names one PR: its body is kept in the journal, so it is
    # bounded far below a forge webhook's.
    max_request_bytes: int = Field(256 * 1024, gt=0)
    # Bytes buffered at once for webhook bodies whose signature is not checked yet, and how
    # long one such body may take to arrive: an unauthenticated sender cannot hold more.
    unverified_body_budget_bytes: int = Field(64 * 1024 * 1024, gt=0)
    body_read_timeout_s: float = Field(30.0, gt=0)
    # What ``serve`` runs: ingest (acknowledge and journal), work (gate, review, merge), all.
    role: Literal["ingest", "work", "all"] = "all"
    workers: int = Field(4, ge=1, le=64)
    # PostgreSQL replicas: how long a replica's claim on a delivery lasts (the deliveries of
    # a replica that died wait this long before another takes them up).
    delivery_claim_s: float = Field(120.0, gt=0, le=86400)
    delivery_max_attempts: int = Field(5, ge=1, le=100)
    delivery_retry_base_s: float = Field(1.0, ge=0)
    ready_max_queue_age_s: float = Field(300.0, gt=0)
    reconcile_interval_s: float = Field(300.0, gt=0)
    missing_check_grace_s: float = Field(600.0, ge=0)
    # An explicit review request (API, MCP, Crew) at a head the bot judged less than this
    # long ago repeats nothing: it is answered from that verdict (an approval: for good).
    review_request_dedupe_s: float = Field(60.0, ge=0)
    # How long a comparison of the running process with the disk (code, configuration,
    # schema) stands before a review or a merge compares again (0: before each of them).
    runtime_check_s: float = Field(1.0, ge=0, le=3600)
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    defaults: RepoRules | None = None
    repos: dict[str, RepoRules] = Field(default_factory=dict)
    # "off" runs reviewers without the sandbox; only ever explicit (logged loudly at start).
    sandbox: Literal["on", "off"] = "on"
    bwrap: str = "bwrap"  # the bubblewrap binary: a name looked up on PATH, or a path
    # The host user and group reviewers run as when the bot runs as root (never root).
    sandbox_uid: int = Field(65534, ge=1, le=2**32 - 2)
    sandbox_gid: int = Field(65534, ge=1, le=2**32 - 2)
    reviewer_limits: ReviewerLimitSettings = Field(default_factory=ReviewerLimitSettings)
    # Logs on standard error: "auto" is console lines on a terminal, JSON lines otherwise.
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # /metrics needs a token with scope metrics or read ("token"), or nobody's ("open").
    metrics_auth: Literal["token", "open"] = "token"
    # A listener of its own serving /metrics without a token (None: none), on metrics_host.
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
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

    @field_validator("repos")
    @classmethod
    def _repo_keys_are_references(cls, repos: dict[str, RepoRules]) -> dict[str, RepoRules]:
        # Keys become canonical (``forge:owner/name``) here, so any casing of a repository
        # reaches its table; two keys for one repository would make the rules ambiguous.
        canonical: dict[str, RepoRules] = {}
        spelled: dict[str, str] = {}
        for key, rules in repos.items():
            try:
                ref = RepoRef.parse(key)
            except ValueError:
                owner, _, repo = key.partition(":")[2].partition("/")
                raise ValueError(
                    f"repos key {key!r} must look like FORGE:OWNER/NAME, "
                    f'e.g. [repos."github:{owner or "acme"}/{repo or "api"}"]'
                ) from None
            if ref.qualified_key in spelled:
                raise ValueError(
                    f"repos keys {spelled[ref.qualified_key]!r} and {key!r} name the same "
                    "repository (repository names are case-insensitive)"
                )
            spelled[ref.qualified_key] = key
            canonical[ref.qualified_key] = rules
        return canonical

    @property
    def postgres_url(self) -> str | None:
        """The PostgreSQL URL when ``database_url`` is ``postgresql://...``, else ``None``."""
        url = self.database_url
        if url is not None and url.split(":", 1)[0] in ("postgresql", "postgres"):
            return url
        return None

    @property
    def git_dir(self) -> Path:
        """The bot's git clones (``<data_dir>/git``): made on use, safe to delete."""
        return self.data_dir / GIT_FOLDER

    @property
    def database_path(self) -> Path:
        """The SQLite file (``sqlite:///PATH`` or the default in the data dir). With a
        PostgreSQL ``database_url`` this is the file the bot does *not* use; the sandbox
        still keeps reviewers away from it."""
        if self.database_url is None or self.postgres_url is not None:
            return self.data_dir / "db" / "db.sqlite"
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url.removeprefix("sqlite:///"))
        raise ConfigError(
            f"database_url: unsupported scheme in {self.database_url.split(':', 1)[0]!r}; "
            "use sqlite:///PATH or postgresql://..."
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
    """Read settings, turning every problem into a one-line :class:`ConfigError`.

    Beyond the model's own checks, credentials that live in files (the GitHub App key) are
    read here, so a wrong file stops the start instead of the first request.
    """
    explicit = os.environ.get(CONFIG_ENV)
    if explicit and not Path(explicit).exists():
        raise ConfigError(f"{CONFIG_ENV}: config file {explicit} does not exist")
    toml_file = config_file_path()
    if toml_file is not None:
        _check_toml(toml_file)
    _check_variable_names(os.environ)
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, toml_file)) from None
    except ValueError as exc:  # any other parse problem of the file, as one line
        env_problem = _env_parse_problem(str(exc), os.environ)
        if env_problem is not None:
            raise ConfigError(env_problem) from None
        raise ConfigError(f"config file {toml_file}: {exc}".splitlines()[0]) from None
    if settings.github.private_key_path is not None:
        read_private_key(settings.github.private_key_path)
    return settings


def read_private_key(path: Path) -> bytes:
    """The GitHub App's PEM private key in ``path``, or a one-line :class:`ConfigError`."""
    # Loaded only when an App key is configured: settings load for every command.
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key_env = f"{ENV_PREFIX}GITHUB__PRIVATE_KEY_PATH"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"github.private_key_path: cannot read {path}: {exc.strerror or exc} "
            f"(point {key_env} at the App's private key file, or mount it there)"
        ) from None
    try:
        load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ConfigError(
            f"github.private_key_path: {path} is not a PEM private key; download the "
            "App's private key (a .pem file starting with -----BEGIN RSA PRIVATE KEY-----) "
            "from the App's settings page"
        ) from None
    return data


# REVIEWBOT_* variables that are not settings (read by the command line or by reviewers).
_OTHER_VARIABLES = frozenset(
    {CONFIG_ENV, "REVIEWBOT_SESSION_TOKEN", "REVIEWBOT_TOOLS_SOCKET", "REVIEWBOT_RUN_FOLDER"}
    | {"REVIEWBOT_TRIGGER_FILE", "REVIEWBOT_VENV", "REVIEWBOT_INVOKED_AS"}
    | {"REVIEWBOT_TOKEN", "REVIEWBOT_CLIENT", "REVIEWBOT_SESSION_ID"}
)


def setting_variables() -> list[str]:
    """The environment variable of every setting (``repos`` is set only in the file)."""
    names: list[str] = []
    for field in Settings.model_fields:
        section = _SECTIONS.get(field)
        if section is None or field == "repos":
            names.append(f"{ENV_PREFIX}{field.upper()}")
        if section is not None and field != "repos":
            names += [f"{ENV_PREFIX}{field.upper()}__{sub.upper()}" for sub in section.model_fields]
    return names


def _check_variable_names(environ: Mapping[str, str]) -> None:
    """Refuse a variable that is a near miss of a setting's (``REVIEWBOT_GITEA_TOKEN``).

    The settings reader ignores unknown variables, so a typo would silently leave the
    setting unset. Unknown names that resemble no setting are left alone.
    """
    known = setting_variables()
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in _OTHER_VARIABLES:
            continue
        if upper in known or upper.startswith(f"{ENV_PREFIX}REPOS__"):
            continue
        head = upper.split("__", 1)[0]
        if head in known and "__" in upper:
            continue  # a section variable: the model names a wrong key precisely
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
        if close:
            raise ConfigError(
                f"environment variable {name} is not a setting; did you mean {close[0]}?"
            )


_ENV_PARSE = re.compile(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"')


def _env_parse_problem(text: str, environ: Mapping[str, str]) -> str | None:
    """The settings reader's "error parsing value" of a variable, said with the variables
    it read and the form they take (a list or a table is JSON), or ``None``."""
    found = _ENV_PARSE.search(text)
    if found is None:
        return None
    field = found[1].upper()
    names = sorted(
        n
        for n in environ
        if n.upper() in (f"{ENV_PREFIX}{field}",) or n.upper().startswith(f"{ENV_PREFIX}{field}__")
    )
    named = ", ".join(names) or f"{ENV_PREFIX}{field}"
    return (
        f"invalid setting {found[1]} ({named}): a list or a table in an environment variable "
        f"is written as JSON, e.g. {ENV_PREFIX}DEFAULTS__REQUIRED_CHECKS='[\"ci/test\"]'"
    )


def _check_toml(path: Path) -> None:
    """One line naming the file for an unreadable file or a TOML syntax error."""
    try:
        with path.open("rb") as fh:
            tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: TOML syntax error: {exc}") from None


# The model of each section, for "did you mean" on an unknown key.
_SECTIONS: dict[str, type[BaseModel]] = {
    "github": GitHubSettings,
    "gitea": GiteaSettings,
    "leases": LeaseSettings,
    "rate_limits": RateLimitSettings,
    "retention": RetentionSettings,
    "defaults": RepoRules,
    "repos": RepoRules,
}


def _one_line(exc: ValidationError, toml_file: Path | None = None) -> str:
    """Every problem of ``exc``: one line for one, else a count and one line each (a fix
    of the first must not reveal the next one only at the next start)."""
    problems = [_problem(err, toml_file) for err in exc.errors()]
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} invalid settings:\n" + "\n".join(f"  - {p}" for p in problems)


# The form a value of each kind takes, for a value of the wrong kind.
_EXPECTED: dict[str, str] = {
    "list_type": 'a list, e.g. ["ci/test", "ci/*"]',
    "int_parsing": "a whole number, e.g. 30",
    "int_type": "a whole number, e.g. 30",
    "int_from_float": "a whole number, e.g. 30",
    "float_parsing": "a number, e.g. 2.5",
    "float_type": "a number, e.g. 2.5",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": 'text in quotes, e.g. "main"',
    "dict_type": 'a table, e.g. [defaults] with required_checks = ["ci/*"]',
    "model_type": 'a table, e.g. [defaults] with required_checks = ["ci/*"]',
    "model_attributes_type": 'a table, e.g. [defaults] with required_checks = ["ci/*"]',
}


def _problem(err: Any, toml_file: Path | None) -> str:
    loc = [str(part) for part in err["loc"]]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if loc and loc[0] == "repos":
        # Repository rules are set only in the file: there is no variable to name.
        key = "repos" if len(loc) < 2 else f'repos."{loc[1]}"' + "".join(f".{p}" for p in loc[2:])
        where = f"in {toml_file}" if toml_file is not None else "from the environment"
    else:
        key = ".".join(loc) or "settings"
        where = ENV_PREFIX + "__".join(loc).upper()
        if toml_file is not None:
            where = f"{where} or {toml_file}"
    if err["type"] == "extra_forbidden" and loc:
        msg = "unknown key" + _did_you_mean(loc)
    expected = _EXPECTED.get(str(err["type"]))
    if expected is not None:
        got = err.get("input")
        shown = f" (got {json.dumps(got)[:60]})" if isinstance(got, str | int | float) else ""
        msg = f"{msg}{shown}; expected {expected}"
        if expected.startswith("a list") and not (loc and loc[0] in ("repos", "defaults")):
            msg += f" (as an environment variable, JSON: {ENV_PREFIX}{'__'.join(loc).upper()}"
            msg += """='["ci/test"]')"""
    return f"invalid setting {key} ({where}): {msg}"


def _did_you_mean(loc: list[str]) -> str:
    model: type[BaseModel] = Settings
    if len(loc) > 1:
        model = _SECTIONS.get(loc[0], Settings)
    known = list(model.model_fields)
    close = difflib.get_close_matches(loc[-1].lower(), known, n=1, cutoff=0.6)
    if not close:
        return f"; known keys: {', '.join(known)}"
    if model is RepoRules and loc[0] == "repos":
        return f"; did you mean {close[0]}?"
    path = [*loc[:-1], close[0]]
    return f"; did you mean {'.'.join(path)} ({ENV_PREFIX}{'__'.join(path).upper()})?"
