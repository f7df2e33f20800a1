"""Runtime parity: is the running process the code and configuration on disk?

At start the composition root takes a :class:`Boot` snapshot: the version, the git commit of
the source (when it is a checkout), a hash of the package's files, a hash of the effective
configuration and the start time. :func:`runtime_report` compares it with what is on disk
now (the package's files, the commit, the configuration read again the way ``serve`` read
it) and with the database (schema version, last migration), and says whether a restart is
needed and why.

Secrets (every ``SecretStr`` of the settings) never appear in the shown configuration; they
enter the configuration hash only as their SHA-256, so rotating a secret changes the hash
without the hash revealing the secret.

Parity gates mutation: :class:`ParityGate` answers, before each review and merge of this
process, whether it may act. When the code or the configuration on disk differs from what
runs, or the store's schema is newer than the migrations this code knows (a newer version
migrated it), the action is refused with ``restart_required`` and the report's reasons,
until the process restarts; ``GET /api/v1/runtime`` (and the ``runtime`` tool) says why.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

import reviewbot
from reviewbot.config import Settings
from reviewbot.core.clock import Clock, iso
from reviewbot.core.reasons import ReasonCode
from reviewbot.core.redact import url_for_display
from reviewbot.runtime.reuse import Reused
from reviewbot.store.database import Database
from reviewbot.workflowdb.allowlist import LEDGER_TABLE
from reviewbot.workflowdb.protected import PACKAGED_NAME, packaged_migrations

PACKAGE_DIR = Path(reviewbot.__file__).resolve().parent
SECRET_SHOWN = "<secret>"  # noqa: S105 - what is shown in place of a secret
_CODE_SUFFIXES = (".py", ".sql", ".typed")
_GIT_TIMEOUT_S = 2.0


def _plain(value: Any, *, for_hash: bool) -> Any:
    """Settings as JSON-able data; a secret is hidden (shown) or its SHA-256 (hashed)."""
    if isinstance(value, SecretStr):
        if not for_hash:
            return SECRET_SHOWN
        digest = hashlib.sha256(value.get_secret_value().encode("utf-8")).hexdigest()
        return f"sha256:{digest}"
    if isinstance(value, BaseModel):
        return {
            name: _plain(getattr(value, name), for_hash=for_hash)
            for name in sorted(type(value).model_fields)
        }
    if isinstance(value, Mapping):
        return {str(k): _plain(v, for_hash=for_hash) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v, for_hash=for_hash) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, str) and not for_hash:
        return url_for_display(value)  # a URL's user part may be a credential
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # paths, enums


def config_view(settings: Settings) -> dict[str, Any]:
    """The effective configuration, every secret shown as ``<secret>``."""
    view: dict[str, Any] = _plain(settings, for_hash=False)
    return view


def config_hash(settings: Settings) -> str:
    """SHA-256 of the effective configuration, secrets entering only as their hashes."""
    data = json.dumps(_plain(settings, for_hash=True), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def code_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 over the package's source files (relative names and bytes), in name order."""
    digest = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*") if p.is_file() and p.suffix in _CODE_SUFFIXES)
    for path in files:
        name = path.relative_to(package_dir).as_posix().encode()
        data = path.read_bytes()
        for part in (name, data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return "sha256:" + digest.hexdigest()


def git_commit(package_dir: Path = PACKAGE_DIR) -> str | None:
    """The commit checked out where the package lives, or ``None`` (not a checkout, no git)."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [git, "-C", str(package_dir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) in (40, 64) else None


@dataclass(frozen=True)
class Boot:
    """What this process started with."""

    version: str
    commit: str | None
    code_hash: str
    config_hash: str
    config: dict[str, Any]
    started_at: float
    # How ``serve`` read its settings, to read them again; ``None``: they were given in code
    # (tests, the demo, --sim), so there is no file to compare with.
    reload: Callable[[], Settings] | None = field(default=None, compare=False)
    package_dir: Path = PACKAGE_DIR


def boot_snapshot(
    settings: Settings,
    *,
    started_at: float,
    reload: Callable[[], Settings] | None = None,
    package_dir: Path = PACKAGE_DIR,
) -> Boot:
    return Boot(
        version=reviewbot.__version__,
        commit=git_commit(package_dir),
        code_hash=code_hash(package_dir),
        config_hash=config_hash(settings),
        config=config_view(settings),
        started_at=started_at,
        reload=reload,
        package_dir=package_dir,
    )


@dataclass(frozen=True)
class RuntimeReport:
    version: str
    commit: str | None
    started_at: float
    schema_version: int | None  # the highest packaged migration applied
    last_migration: dict[str, Any] | None
    config_hash: str
    config: dict[str, Any]
    sandbox: dict[str, Any]
    code_changed: bool
    commit_on_disk: str | None
    config_changed: bool | None  # None: no configuration file to compare with
    config_on_disk_hash: str | None
    reasons: tuple[str, ...] = ()

    @property
    def restart_needed(self) -> bool:
        return bool(self.reasons)

    @property
    def refusal(self) -> str | None:
        """Why this process reviews and merges nothing, or ``None`` while parity holds."""
        if not self.reasons:
            return None
        return "; ".join(self.reasons) + "; restart the process"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "commit": self.commit,
            "started_at": iso(self.started_at),
            "schema_version": self.schema_version,
            "last_migration": self.last_migration,
            "config_hash": self.config_hash,
            "config": self.config,
            "sandbox": self.sandbox,
            "code_changed": self.code_changed,
            "commit_on_disk": self.commit_on_disk,
            "config_changed": self.config_changed,
            "config_on_disk_hash": self.config_on_disk_hash,
            "restart_needed": self.restart_needed,
            "reasons": list(self.reasons),
            "schema_known": known_schema(),
            # Reviews and merges by this process are refused until it restarts.
            "mutations": "refused" if self.restart_needed else "allowed",
            "refusal_code": ReasonCode.RESTART_REQUIRED.value if self.restart_needed else None,
        }


def schema_state(db: Database) -> tuple[int | None, dict[str, Any] | None]:
    """The highest packaged migration applied, and the newest ledger row."""
    with db.read() as tx:
        rows = tx.all(f"SELECT file_name, applied_by, applied_at FROM {LEDGER_TABLE} ORDER BY id")
    versions = [int(r["file_name"][:4]) for r in rows if PACKAGED_NAME.match(r["file_name"])]
    last = rows[-1] if rows else None
    shown = None
    if last is not None:
        shown = {k: last[k] for k in ("file_name", "applied_by", "applied_at")}
    return (max(versions) if versions else None), shown


@functools.cache
def known_schema() -> int:
    """The highest packaged migration this code carries."""
    return max(int(name[:4]) for name, _ in packaged_migrations())


async def compare(boot: Boot, db: Database, sandbox: dict[str, Any]) -> RuntimeReport:
    """:func:`runtime_report` for async callers: the schema read on the store's threads,
    hashing the package's files and reading the configuration again on a thread of their
    own (they block far longer than a store read)."""
    schema = await db.run(schema_state, db)
    return await asyncio.to_thread(disk_report, boot, schema, sandbox)


class ParityGate:
    """Asked before each review and merge of this process: ``None`` while the process is
    what is on disk, else why not (``restart_required``). A comparison stands for
    ``ttl_s`` of ``clock``; callers arriving while one runs share it."""

    def __init__(self, boot: Boot, db: Database, clock: Clock, ttl_s: float) -> None:
        self.boot = boot
        self.db = db
        self._reports: Reused[RuntimeReport] = Reused(clock, ttl_s)

    async def __call__(self) -> str | None:
        report = await self._reports.get("gate", lambda: compare(self.boot, self.db, {}))
        return report.refusal


def runtime_report(boot: Boot, db: Database, sandbox: dict[str, Any]) -> RuntimeReport:
    """Compare the running process with the disk now (blocking: reads files and the DB)."""
    return disk_report(boot, schema_state(db), sandbox)


def disk_report(
    boot: Boot,
    schema: tuple[int | None, dict[str, Any] | None],
    sandbox: dict[str, Any],
) -> RuntimeReport:
    """:func:`runtime_report` with the schema state already read (blocking: reads files,
    not the store, so a server runs it off the store's threads)."""
    reasons: list[str] = []
    changed_code = code_hash(boot.package_dir) != boot.code_hash
    if changed_code:
        reasons.append("the code on disk differs from the running code")
    commit_now = git_commit(boot.package_dir)
    # A commit that could not be read now (git slow or gone) is unknown, not moved: the
    # code's own hash above says whether what runs differs from the disk.
    if commit_now is not None and commit_now != boot.commit and not changed_code:
        reasons.append(f"the checkout moved from {boot.commit} to {commit_now}")
    config_changed: bool | None = None
    disk_hash: str | None = None
    if boot.reload is not None:
        try:
            disk_hash = config_hash(boot.reload())
        except Exception as exc:  # a broken file is a reason too, never a crash
            config_changed = True
            reasons.append(f"the configuration on disk does not load: {exc}")
        else:
            config_changed = disk_hash != boot.config_hash
            if config_changed:
                reasons.append("the configuration on disk differs from the running one")
    version, last = schema
    if version is not None and version > known_schema():
        reasons.append(
            f"the store's schema is at migration {version}, newer than this code knows "
            f"({known_schema()}): a newer version migrated it"
        )
    return RuntimeReport(
        version=boot.version,
        commit=boot.commit,
        started_at=boot.started_at,
        schema_version=version,
        last_migration=last,
        config_hash=boot.config_hash,
        config=boot.config,
        sandbox=sandbox,
        code_changed=changed_code,
        commit_on_disk=commit_now,
        config_changed=config_changed,
        config_on_disk_hash=disk_hash,
        reasons=tuple(reasons),
    )
