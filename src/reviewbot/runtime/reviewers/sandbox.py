"""The reviewer sandbox at run time: the start-up probe, grants, secrets and the launcher.

A reviewer runs under bubblewrap or not at all. :func:`probe` tries ``bwrap`` once, with the
very flags a reviewer gets; when it is missing or cannot create the namespaces, every
reviewer is refused with ``sandbox_unavailable`` and the reason, unless the operator set
``sandbox = "off"`` (logged as an error at start, and shown by :meth:`SandboxState.describe`).

:meth:`Sandbox.prepare` turns one reviewer entry of the repository rules into what the
runner needs: the command, the ``SECRET_*`` variables of that reviewer alone, a function that
wraps its argv in ``bwrap`` with its mounts, and a cleanup that removes its secret files.
Anything that cannot be honoured (no sandbox, a grant refused, a secret without a value) is a
:class:`PrepareFailed`, and the reviewer does not run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from reviewbot.config import ReviewerRule, ReviewerSettings, Settings
from reviewbot.core.errors import Refused
from reviewbot.core.sandbox import (
    SYSTEM_PATHS,
    GrantRefused,
    Mount,
    SandboxSpec,
    bwrap_argv,
    check_grant,
    forbidden_files,
    grant_path,
    system_mounts,
)
from reviewbot.runtime.reviewers.runs import RunFolder, RunFolderError, grant_folder
from reviewbot.workflowdb.paths import WorkflowPaths

log = logging.getLogger(__name__)

SECRETS_FOLDER = "secrets"  # in the run folder, while the reviewer that owns them runs
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SandboxState:
    """What the start-up probe found. ``enforced``: reviewers run inside bwrap."""

    mode: str  # "on" or "off", as configured
    bwrap: str | None  # the binary's path, when found
    available: bool
    reason: str = ""  # why it is not available (or why it is off)

    @property
    def enforced(self) -> bool:
        return self.mode == "on" and self.available and self.bwrap is not None

    @property
    def refuses(self) -> bool:
        """Reviewers cannot run: the sandbox is required and not there."""
        return self.mode == "on" and not self.enforced

    def describe(self) -> dict[str, object]:
        """For health and runtime views."""
        status = "enforced" if self.enforced else "off" if self.mode == "off" else "unavailable"
        return {"status": status, "mode": self.mode, "bwrap": self.bwrap, "reason": self.reason}


def _python_prefixes() -> tuple[PurePosixPath, ...]:
    # The interpreter a reviewer command most often is: ours, its venv and its base install.
    seen = dict.fromkeys(PurePosixPath(p) for p in (sys.prefix, sys.base_prefix))
    return tuple(seen)


def probe(mode: str = "on", *, bwrap: str = "bwrap") -> SandboxState:
    """Try the sandbox once; never raises. ``mode == "off"`` skips the probe."""
    if mode == "off":
        return SandboxState("off", shutil.which(bwrap), False, 'sandbox = "off" in the settings')
    return _probe_cached(bwrap)


@functools.cache
def _probe_cached(bwrap: str) -> SandboxState:
    found = shutil.which(bwrap)
    if found is None:
        return SandboxState("on", None, False, f"{bwrap!r} is not installed (package bubblewrap)")
    spec = SandboxSpec(found, ("true",), PurePosixPath("/"), system_mounts(_python_prefixes()))
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            bwrap_argv(spec),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxState("on", found, False, f"{found} could not be started: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = why[-1] if why else f"exit status {done.returncode}"
        return SandboxState("on", found, False, f"{found} cannot create namespaces: {reason}")
    return SandboxState("on", found, True)


def announce(state: SandboxState) -> None:
    """Say at start how reviewers will run; loudly when they are not contained."""
    if state.mode == "off":
        log.error(
            'SANDBOX OFF: sandbox = "off" in the settings; external reviewers run as plain '
            "subprocesses of the server and can read everything its user can"
        )
    elif not state.available:
        log.error("sandbox unavailable, external reviewers will not run: %s", state.reason)
    else:
        log.info("external reviewers run under %s", state.bwrap)


@dataclass(frozen=True)
class PrepareFailed:
    """The reviewer does not run; ``code`` is a reviewer error kind."""

    code: str  # sandbox_unavailable, grant_refused, secret_unavailable
    detail: str


@dataclass
class Prepared:
    command: str
    env: dict[str, str]  # SECRET_* of this reviewer, added to its allow-listed environment
    wrap: Callable[[list[str]], list[str]] | None  # None: the sandbox is off
    secrets_dir: Path | None = None
    notes: list[str] = field(default_factory=list)

    def cleanup(self) -> None:
        """Remove this reviewer's secret files: the next reviewer of the run must not see them."""
        if self.secrets_dir is not None:
            _remove(self.secrets_dir)


def _remove(path: Path) -> None:
    # A reviewer may have replaced the folder with a symlink: remove the link, never follow it.
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def command_of(entry: str | ReviewerRule) -> str:
    return entry if isinstance(entry, str) else entry.command


@dataclass
class Sandbox:
    """The sandbox of one server: its probed state and the reviewers' secrets."""

    state: SandboxState
    secrets: Mapping[str, ReviewerSettings] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def from_settings(cls, settings: Settings) -> Sandbox:
        return cls(probe(settings.sandbox, bwrap=settings.bwrap), settings.reviewers)

    def prepare(
        self, entry: str | ReviewerRule, *, run: RunFolder, paths: WorkflowPaths
    ) -> Prepared | PrepareFailed:
        command = command_of(entry)
        # model_construct: a bare command is checked by the runner (an empty one is its error).
        rule = (
            entry
            if isinstance(entry, ReviewerRule)
            else ReviewerRule.model_construct(command=command, name=None, grants=[], network=False)
        )
        if self.state.refuses:
            return PrepareFailed("sandbox_unavailable", self.state.reason)
        mounts: list[Mount] = []
        hidden: tuple[PurePosixPath, ...] = ()
        notes: list[str] = []
        if self.state.enforced:
            try:
                mounts, hidden = workspace_mounts(rule, run=run, paths=paths, notes=notes)
            except GrantRefused as exc:
                return PrepareFailed(exc.code, exc.detail)
        for note in notes:
            log.warning("reviewer %r: %s", command, note)
        try:
            env, secrets_dir = self._secrets(rule, run)
        except SecretUnavailable as exc:
            return PrepareFailed(exc.code, exc.detail)
        wrap = None
        if self.state.enforced:
            assert self.state.bwrap is not None
            bwrap, network, cwd = self.state.bwrap, rule.network, PurePosixPath(run.path)

            def wrap(argv: list[str]) -> list[str]:
                # bwrap would start and then fail to exec: say so as the runner would.
                if shutil.which(argv[0], path=self.environ.get("PATH", os.defpath)) is None:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
                spec = SandboxSpec(
                    bwrap,
                    tuple(argv),
                    cwd,
                    system_mounts() + tuple(mounts) + program_mounts(argv, self.environ, paths),
                    network=network,
                    hidden=hidden,
                )
                return bwrap_argv(spec)

        return Prepared(command, env, wrap, secrets_dir, notes)

    def _secrets(self, rule: ReviewerRule, run: RunFolder) -> tuple[dict[str, str], Path | None]:
        """Write the reviewer's secrets to ``secrets/NAME`` (0400) in its run folder and
        return them as ``SECRET_NAME`` variables. Values are never logged."""
        configured = self.secrets.get(rule.name) if rule.name else None
        folder = run.path / SECRETS_FOLDER
        _remove(folder)  # whatever an earlier reviewer left there is not this one's
        if configured is None or not configured.secrets:
            return {}, None
        values: dict[str, str] = {}
        for name, source in configured.secrets.items():
            if source.env is not None:
                value = self.environ.get(source.env)
                if value is None:
                    raise SecretUnavailable(
                        f"secret {name} of reviewer {rule.name}: "
                        f"environment variable {source.env} is not set"
                    )
            else:
                assert source.file is not None
                try:
                    value = source.file.read_text(encoding="utf-8").rstrip("\n")
                except (OSError, UnicodeDecodeError) as exc:
                    raise SecretUnavailable(
                        f"secret {name} of reviewer {rule.name}: cannot read {source.file} "
                        f"({type(exc).__name__})"
                    ) from None
            values[name] = value
        folder.mkdir(mode=0o700)
        for name, value in values.items():
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(value)
        return {f"SECRET_{name.upper()}": value for name, value in values.items()}, folder


class SecretUnavailable(Refused):
    """A configured secret of the reviewer has no value here; it does not run."""

    code = "secret_unavailable"


def _forbidden(paths: WorkflowPaths) -> tuple[str, ...]:
    return forbidden_files(PurePosixPath(paths.db_file.resolve()))


def workspace_mounts(
    rule: ReviewerRule, *, run: RunFolder, paths: WorkflowPaths, notes: list[str]
) -> tuple[list[Mount], tuple[PurePosixPath, ...]]:
    """The mounts and the hidden folders of one reviewer: the run folder (writable),
    ``db/migrations/`` (read-only, its ``.backups/`` covered by an empty folder) and the
    reviewer's grants, under the grant rules:

    - a missing read-only grant grants nothing (and is noted);
    - a missing writable one is created; one that cannot be created or written refuses;
    - a folder that exists but cannot be read refuses;
    - a grant that is, holds or lies in a database file or the backups refuses.
    """
    data_dir = PurePosixPath(paths.data_dir.resolve())
    backups = PurePosixPath(paths.backups_dir.resolve())
    forbidden = _forbidden(paths)
    mounts = [Mount(PurePosixPath(run.path.resolve()), writable=True)]
    hidden: tuple[PurePosixPath, ...] = ()
    if paths.migrations_dir.is_dir():
        # The backups folder must exist to be covered: made later, it would show through.
        paths.backups_dir.mkdir(exist_ok=True)
        mounts.append(Mount(PurePosixPath(paths.migrations_dir.resolve())))
        hidden = (backups,)
    for grant in rule.grants:
        writable = grant.mode == "rw"
        # Resolved: a symlink must not carry a grant to where it could not be written.
        requested = Path(grant_path(grant.path, data_dir))
        try:
            built = grant_folder(requested, writable=writable)
        except (RunFolderError, OSError) as exc:
            raise GrantRefused(f"writable grant {requested} cannot be created: {exc}") from None
        if built is None:
            notes.append(f"read-only grant {requested} does not exist and grants nothing")
            continue
        real = PurePosixPath(built.path.resolve())
        check_grant(real, forbidden=forbidden, backups_dir=backups)
        wanted = os.R_OK | os.X_OK | (os.W_OK if writable else 0)
        if not os.access(real, wanted):
            what = "read and written" if writable else "read"
            raise GrantRefused(f"grant {requested} exists but cannot be {what} by the server")
        mounts.append(Mount(real, writable=writable))
    return mounts, hidden


def program_mounts(
    argv: list[str], environ: Mapping[str, str], paths: WorkflowPaths
) -> tuple[Mount, ...]:
    """The reviewer's own program, read-only: the interpreter's prefixes, the resolved
    executable, and files the command names by absolute path (a script it runs). A database
    file is never among them, whatever the command says."""
    out = [Mount(p) for p in _python_prefixes()]
    forbidden = set(_forbidden(paths))
    backups = PurePosixPath(paths.backups_dir.resolve())
    candidates = [a for a in argv if a.startswith("/")]
    found = shutil.which(argv[0], path=environ.get("PATH", os.defpath)) if argv else None
    if found is not None:
        candidates += [found, str(Path(found).resolve())]
    # Already visible through a folder mount: binding again inside a read-only one fails.
    covered = tuple(PurePosixPath(p) for p in SYSTEM_PATHS) + _python_prefixes()
    for name in dict.fromkeys(candidates):
        path = Path(name)
        with contextlib.suppress(OSError):
            if not path.is_file() or str(path.resolve()) in forbidden or name in forbidden:
                continue
            pure = PurePosixPath(path)
            if backups in PurePosixPath(path.resolve()).parents:
                continue
            if any(pure == c or c in pure.parents for c in covered):
                continue
            out.append(Mount(pure))
    return tuple(out)
