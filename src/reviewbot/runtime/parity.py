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
import os
import shutil
import stat
import subprocess
import time
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
RACY_S = 2.0  # a file changed more recently than this is read again, whatever its stamps


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


def _code_files(package_dir: Path) -> list[tuple[str, os.stat_result]]:
    """The package's source files: relative name and ``stat``, in name order."""
    found: list[tuple[str, os.stat_result]] = []
    for folder, dirs, names in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # compiled copies, not sources
        for name in names:
            if os.path.splitext(name)[1] in _CODE_SUFFIXES:
                path = os.path.join(folder, name)
                info = os.stat(path)
                if stat.S_ISREG(info.st_mode):
                    found.append((Path(path).relative_to(package_dir).as_posix(), info))
    return sorted(found, key=lambda item: item[0])


def code_hash(
    package_dir: Path = PACKAGE_DIR, files: list[tuple[str, os.stat_result]] | None = None
) -> str:
    """SHA-256 over the package's source files (relative names and bytes), in name order
    (``files``: the listing of :func:`_code_files`, when the caller has it already)."""
    digest = hashlib.sha256()
    for name, _ in _code_files(package_dir) if files is None else files:
        data = (package_dir / name).read_bytes()
        for part in (name.encode(), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return "sha256:" + digest.hexdigest()


Stamps = tuple[tuple[str, int, int, int, int], ...]


def _stamp(name: str, info: os.stat_result) -> tuple[str, int, int, int, int]:
    # The change time is set by the kernel on every write and cannot be set back by hand,
    # unlike the modification time; a replaced file has a new inode.
    return (name, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _settled(stamps: Stamps, now: float) -> Stamps | None:
    """``stamps``, or ``None`` when a file changed within the last :data:`RACY_S`: its time
    stamps have a coarse tick, so a second write in the same tick could leave them alike."""
    if any(now - ctime / 1e9 < RACY_S for *_, ctime in stamps):
        return None
    return stamps


def _git(package_dir: Path, *args: str) -> list[str] | None:
    """The lines ``git -C package_dir ARGS`` prints, or ``None`` (no git, not a checkout,
    too slow)."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [git, "-C", str(package_dir), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.splitlines() if done.returncode == 0 else None


def git_commit(package_dir: Path = PACKAGE_DIR) -> str | None:
    """The commit checked out where the package lives, or ``None`` (not a checkout, no git)."""
    lines = _git(package_dir, "rev-parse", "HEAD")
    commit = lines[0] if lines else ""
    return commit if len(commit) in (40, 64) else None


def head_stamps(git_dir: Path, common_dir: Path, now: float) -> tuple[bytes, Stamps] | None:
    """What says where HEAD points: the text of ``HEAD`` and the stamps of ``HEAD``, the
    branch's loose ref and the packed refs (``None``: one changed just now, or HEAD cannot
    be read)."""
    try:
        head = (git_dir / "HEAD").read_bytes()
    except OSError:
        return None
    files = [(git_dir, "HEAD"), (common_dir, "packed-refs")]
    if head.startswith(b"ref: "):
        files.append((common_dir, head[5:].strip().decode("utf-8", "replace")))
    stamps: list[tuple[str, int, int, int, int]] = []
    for base, name in files:
        try:
            stamps.append(_stamp(name, os.stat(base / name)))
        except OSError:
            stamps.append((name, -1, 0, 0, 0))  # absent: a ref may be packed only
    settled = _settled(tuple(stamps), now)
    return None if settled is None else (head, settled)


class DiskWatch:
    """The package's hash and the checkout's commit as last read, each kept with the time
    stamps it was read under: a comparison that finds the same stamps reuses them instead of
    hashing every source file and starting git again (the parity gate compares every
    ``runtime_check_s`` while the bot works). ``clock``: the wall clock that file times are
    compared with."""

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock
        self.hashed = 0  # how often the files were read and hashed
        self.asked_git = 0  # how often git was started
        self._code: tuple[Stamps, str] | None = None
        self._dirs_read = False
        self._dirs: tuple[Path, Path] | None = None  # the checkout's git folders
        self._commit: tuple[tuple[bytes, Stamps], str] | None = None

    def code_hash(self, package_dir: Path) -> str:
        # Stamped before reading: a change made meanwhile shows at the next comparison.
        files = _code_files(package_dir)
        stamps = _settled(tuple(_stamp(name, info) for name, info in files), self.clock())
        if stamps is not None and self._code is not None and self._code[0] == stamps:
            return self._code[1]
        self.hashed += 1
        value = code_hash(package_dir, files)
        self._code = None if stamps is None else (stamps, value)
        return value

    def git_commit(self, package_dir: Path) -> str | None:
        if not self._dirs_read:
            self._dirs_read = True
            self.asked_git += 1
            dirs = _git(
                package_dir, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir"
            )
            self._dirs = (Path(dirs[0]), Path(dirs[1])) if dirs and len(dirs) == 2 else None
        stamps = None if self._dirs is None else head_stamps(*self._dirs, self.clock())
        if stamps is not None and self._commit is not None and self._commit[0] == stamps:
            return self._commit[1]
        self.asked_git += 1
        value = git_commit(package_dir)
        # An unread commit (git slow) is asked again next time.
        self._commit = None if stamps is None or value is None else (stamps, value)
        return value


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
    disk: DiskWatch = field(default_factory=DiskWatch, compare=False, repr=False)


def boot_snapshot(
    settings: Settings,
    *,
    started_at: float,
    reload: Callable[[], Settings] | None = None,
    package_dir: Path = PACKAGE_DIR,
    disk: DiskWatch | None = None,
) -> Boot:
    disk = disk or DiskWatch()
    return Boot(
        version=reviewbot.__version__,
        commit=disk.git_commit(package_dir),
        code_hash=disk.code_hash(package_dir),
        config_hash=config_hash(settings),
        config=config_view(settings),
        started_at=started_at,
        reload=reload,
        package_dir=package_dir,
        disk=disk,
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
    changed_code = boot.disk.code_hash(boot.package_dir) != boot.code_hash
    if changed_code:
        reasons.append("the code on disk differs from the running code")
    commit_now = boot.disk.git_commit(boot.package_dir)
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
