"""The reviewer sandbox at run time: the start-up probe, grants, secrets and the launcher.

A reviewer runs under bubblewrap or not at all. :func:`probe` runs ``bwrap`` once, with the
very flags, limits and user a reviewer gets, and reads the ``/proc/self/status`` of what runs
inside: it must hold no capability, be under the system-call filter and unable to gain
privileges. When ``bwrap`` is missing, cannot create the namespaces (user namespaces refused
by the kernel), or what runs inside is not contained, every reviewer is refused with
``sandbox_unavailable`` and the reason, unless the operator set ``sandbox = "off"`` (logged
as an error at start, and shown by :meth:`SandboxState.describe`). A bot running as root
hands its reviewers to an unprivileged host user (``sandbox_uid``, see
:mod:`reviewbot.core.sandbox`); it never runs them with its own privileges.

:meth:`Sandbox.prepare` turns one reviewer entry of the repository rules into what the
runner needs: the command, the ``SECRET_*`` variables of that reviewer alone, a function that
turns its argv into a :class:`Launch` (the ``bwrap`` command line, the descriptors it reads,
the resource limits), and a cleanup that removes its secret files. Anything that cannot be
honoured (no sandbox, a grant refused, a secret without a value) is a :class:`PrepareFailed`,
and the reviewer does not run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import platform
import re
import resource
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from reviewbot.config import ReviewerRule, ReviewerSettings, Settings
from reviewbot.core.errors import Refused
from reviewbot.core.sandbox import (
    DEFAULT_LIMITS,
    SYSTEM_PATHS,
    TOOLS_FOLDER,
    DataFile,
    GrantRefused,
    HostUser,
    Mount,
    SandboxLimits,
    SandboxSpec,
    bwrap_argv,
    check_grant,
    forbidden_files,
    grant_path,
    may_access,
    system_mounts,
)
from reviewbot.core.seccomp import UnsupportedArchitecture, filter_program
from reviewbot.runtime.reviewers.runs import DELIVERY_FILE, RunFolder, RunFolderError, grant_folder
from reviewbot.workflowdb.paths import WorkflowPaths

log = logging.getLogger(__name__)

SECRETS_FOLDER = "secrets"  # in the run folder, while the reviewer that owns them runs
PROBE_TIMEOUT_S = 10.0
# Where the probe's run folder is (inside the sandbox only: it is a tmpfs).
PROBE_RUN_FOLDER = PurePosixPath("/reviewbot-probe/run")
# --size needs bubblewrap 0.5; older ones are refused by name rather than by a usage error.
MIN_BWRAP = (0, 5)


@dataclass(frozen=True)
class SandboxState:
    """What the start-up probe found. ``enforced``: reviewers run inside bwrap."""

    mode: str  # "on" or "off", as configured
    bwrap: str | None  # the binary's path, when found
    available: bool
    reason: str = ""  # why it is not available (or why it is off)
    limits: SandboxLimits = DEFAULT_LIMITS
    drop_to: HostUser | None = None  # the host user reviewers become (the bot runs as root)

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
        user = self.drop_to
        return {
            "status": status,
            "mode": self.mode,
            "bwrap": self.bwrap,
            "reason": self.reason,
            # The host uid reviewers run as: the bot's own, or sandbox_uid under a root bot.
            "host_uid": user.uid if user is not None else os.geteuid(),
        }


def _python_prefixes() -> tuple[PurePosixPath, ...]:
    # The interpreter a reviewer command most often is: ours, its venv and its base install.
    seen = dict.fromkeys(PurePosixPath(p) for p in (sys.prefix, sys.base_prefix))
    return tuple(seen)


def probe(
    mode: str = "on",
    *,
    bwrap: str = "bwrap",
    limits: SandboxLimits = DEFAULT_LIMITS,
    sandbox_uid: int = 65534,
    sandbox_gid: int = 65534,
) -> SandboxState:
    """Try the sandbox once; never raises. ``mode == "off"`` skips the probe.

    ``sandbox_uid``/``sandbox_gid`` are the host user reviewers become when the bot runs as
    root (see :mod:`reviewbot.core.sandbox`); a bot running as another user runs them as
    itself.
    """
    if mode == "off":
        return SandboxState(
            "off", shutil.which(bwrap), False, 'sandbox = "off" in the settings', limits
        )
    return _probe_cached(bwrap, limits, sandbox_uid, sandbox_gid)


@functools.cache
def _probe_cached(bwrap: str, limits: SandboxLimits, uid: int, gid: int) -> SandboxState:
    def unavailable(found: str | None, reason: str) -> SandboxState:
        return SandboxState("on", found, False, reason, limits)

    found = shutil.which(bwrap)
    if found is None:
        return unavailable(None, f"{bwrap!r} is not installed (package bubblewrap)")
    drop_to = None
    if os.geteuid() == 0:
        if uid == 0 or gid == 0:
            return unavailable(found, "sandbox_uid and sandbox_gid must not be 0 (root)")
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return unavailable(
                found, "the bot runs as root and 'setpriv' (package util-linux) is missing"
            )
        drop_to = HostUser(uid, gid, setpriv)
    too_old = _too_old(found)
    if too_old:
        return unavailable(found, too_old)
    state = SandboxState("on", found, True, "", limits, drop_to)
    cat = shutil.which("cat") or "/bin/cat"
    try:
        launch = Launcher(state, environ=os.environ).launch(
            [cat, "/proc/self/status"],
            cwd=PROBE_RUN_FOLDER,
            mounts=system_mounts() + tuple(Mount(p) for p in _python_prefixes()),
            files=((PROBE_RUN_FOLDER / DELIVERY_FILE, None, 0o444),),
        )
    except UnsupportedArchitecture as exc:
        return unavailable(found, exc.detail)
    except OSError as exc:
        return unavailable(found, f"the sandbox could not be prepared: {exc}")
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            launch.argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            **launch.popen_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return unavailable(found, f"{found} could not be started: {exc}")
    finally:
        launch.close()
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = why[-1] if why else f"exit status {done.returncode}"
        return unavailable(found, f"{found} cannot create the sandbox: {reason}")
    leak = contained(done.stdout.decode("utf-8", "replace"))
    if leak:
        return unavailable(found, f"a reviewer would not be contained: {leak}")
    return state


def _too_old(bwrap: str) -> str:
    """Why ``bwrap`` is too old for the sandbox's flags; empty when it is not (or when it
    does not say: the probe itself then tells)."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [bwrap, "--version"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = re.search(rb"(\d+)\.(\d+)", done.stdout)
    if found is None:
        return ""
    version = (int(found.group(1)), int(found.group(2)))
    if version < MIN_BWRAP:
        have = ".".join(map(str, version))
        return f"{bwrap} is bubblewrap {have}; the sandbox needs 0.5 or newer (--size)"
    return ""


def contained(status: str) -> str:
    """What a ``/proc/self/status`` read inside the sandbox shows that it should not:
    a capability, no system-call filter, a way to gain privileges. Empty when none."""
    fields = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in status.splitlines())
    )
    problems = [
        f"{key} {fields.get(key)!r}"
        for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
        if fields.get(key, "").strip("0") != "" or key not in fields
    ]
    if fields.get("Seccomp") != "2":
        problems.append(f"Seccomp {fields.get('Seccomp')!r} (2: filtered)")
    if fields.get("NoNewPrivs") != "1":
        problems.append(f"NoNewPrivs {fields.get('NoNewPrivs')!r}")
    return ", ".join(problems)


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
        user = state.drop_to
        log.info(
            "external reviewers run under %s%s",
            state.bwrap,
            f" as host uid {user.uid}, gid {user.gid}" if user is not None else "",
        )


# -- launching -----------------------------------------------------------------------------


@dataclass
class Launch:
    """One reviewer ready to start: its command line, the descriptors bwrap reads (the
    filter, the files it copies in), and the resource limits set in the child before it
    runs anything. The caller passes :meth:`popen_kwargs` to the process it starts and
    calls :meth:`close` once it has started (or failed to)."""

    argv: list[str]
    fds: list[int] = field(default_factory=list)
    rlimits: tuple[tuple[int, int, int], ...] = ()  # (resource, soft, hard)

    def popen_kwargs(self) -> dict[str, Any]:
        return {"pass_fds": tuple(self.fds), "preexec_fn": self._set_limits}

    def _set_limits(self) -> None:
        # In the child between fork and exec: nothing here may take a lock or allocate much.
        for which, soft, hard in self.rlimits:
            resource.setrlimit(which, (soft, hard))

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


def host_tasks(uid: int, proc: Path = Path("/proc")) -> int:
    """Processes and threads of host user ``uid`` now (what ``RLIMIT_NPROC`` counts)."""
    total = 0
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "status").read_text(encoding="utf-8", errors="replace")
        except OSError:  # gone meanwhile
            continue
        real = threads = None
        for line in text.splitlines():
            if line.startswith("Uid:"):
                real = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        if real == uid:
            total += threads or 1
    return total


def resource_limits(limits: SandboxLimits, *, running: int) -> tuple[tuple[int, int, int], ...]:
    """``limits`` as ``setrlimit`` arguments. The process limit counts every process and
    thread of the reviewer's host user, so it is set to what that user ``running`` now
    plus ``limits.processes``. A limit is never raised above the current hard limit."""
    wanted = (
        (resource.RLIMIT_NPROC, running + limits.processes, running + limits.processes),
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
        # The soft limit sends SIGXCPU, the hard one SIGKILL a moment later.
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
    )
    out = []
    for which, soft, hard in wanted:
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        out.append((which, soft, hard))
    return tuple(out)


def _seccomp_fd() -> int:
    """A descriptor holding the compiled system-call filter, read from its start."""
    program = filter_program(platform.machine(), sys.byteorder)
    fd = os.memfd_create("reviewbot-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


# A file copied into the sandbox: (where inside, the host file or None for an empty one, mode).
CopiedFile = tuple[PurePosixPath, Path | None, int]


@dataclass(frozen=True)
class Launcher:
    """Builds :class:`Launch` values for one probed sandbox state."""

    state: SandboxState
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def host_uid(self) -> int:
        return self.state.drop_to.uid if self.state.drop_to is not None else os.getuid()

    def plain(self, argv: list[str]) -> Launch:
        """The sandbox is off: the command as it is, with the resource limits."""
        running = host_tasks(os.getuid())
        return Launch(list(argv), [], resource_limits(self.state.limits, running=running))

    def launch(
        self,
        argv: list[str],
        *,
        cwd: PurePosixPath,
        mounts: tuple[Mount, ...],
        network: bool = False,
        hidden: tuple[PurePosixPath, ...] = (),
        files: tuple[CopiedFile, ...] = (),
        folders: tuple[tuple[PurePosixPath, int], ...] = (),
    ) -> Launch:
        """``argv`` inside the sandbox, in the run folder ``cwd`` (a fresh tmpfs) holding
        ``files`` and ``folders``. Raises :class:`OSError` when a file cannot be opened and
        :class:`UnsupportedArchitecture` on a machine without a known filter."""
        assert self.state.bwrap is not None
        fds: list[int] = []
        try:
            fds.append(_seccomp_fd())
            copied = []
            for target, source, mode in files:
                fd = os.open(source if source is not None else os.devnull, os.O_RDONLY)
                fds.append(fd)
                copied.append(DataFile(fd, target, mode))
            user = self.state.drop_to
            extra = tool_mounts([self.state.bwrap, user.setpriv]) if user is not None else ()
            spec = SandboxSpec(
                self.state.bwrap,
                tuple(argv),
                cwd,
                mounts + extra,
                seccomp_fd=fds[0],
                network=network,
                hidden=hidden,
                files=tuple(copied),
                folders=folders,
                limits=self.state.limits,
                drop_to=user,
            )
            running = host_tasks(self.host_uid())
            return Launch(
                bwrap_argv(spec), fds, resource_limits(self.state.limits, running=running)
            )
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise


@dataclass(frozen=True)
class PrepareFailed:
    """The reviewer does not run; ``code`` is a reviewer error kind."""

    code: str  # sandbox_unavailable, grant_refused, secret_unavailable
    detail: str


@dataclass
class Prepared:
    command: str
    env: dict[str, str]  # SECRET_* of this reviewer, added to its allow-listed environment
    launch: Callable[[list[str]], Launch]  # its argv, in the sandbox (or not, when off)
    secrets_dir: Path | None = None
    notes: list[str] = field(default_factory=list)
    # The run's tools socket where the reviewer sees it (REVIEWBOT_TOOLS_SOCKET).
    tools_socket: str | None = None

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
        state = probe(
            settings.sandbox,
            bwrap=settings.bwrap,
            limits=settings.reviewer_limits.sandbox(),
            sandbox_uid=settings.sandbox_uid,
            sandbox_gid=settings.sandbox_gid,
        )
        return cls(state, settings.reviewers)

    def prepare(
        self,
        entry: str | ReviewerRule,
        *,
        run: RunFolder,
        paths: WorkflowPaths,
        tools_socket: Path | None = None,
    ) -> Prepared | PrepareFailed:
        """What the runner needs to start ``entry`` of ``run``. ``tools_socket`` is the run's
        own tools socket on the host (``None``: the run has none); inside the sandbox its
        private folder is bound read-only at :data:`TOOLS_FOLDER`, so the reviewer reaches
        the session tools of its run, and only those, with the network off."""
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
                mounts, hidden = workspace_mounts(
                    rule, run=run, paths=paths, notes=notes, user=self.state.drop_to
                )
            except GrantRefused as exc:
                return PrepareFailed(exc.code, exc.detail)
        for note in notes:
            log.warning("reviewer %r: %s", command, note)
        try:
            env, secrets_dir = self._secrets(rule, run)
        except SecretUnavailable as exc:
            return PrepareFailed(exc.code, exc.detail)
        launcher = Launcher(self.state, self.environ)
        if not self.state.enforced:
            plain = None if tools_socket is None else str(tools_socket)
            return Prepared(command, env, launcher.plain, secrets_dir, notes, plain)
        tools: tuple[Mount, ...] = ()
        inside = None
        if tools_socket is not None:
            tools = (Mount(PurePosixPath(tools_socket.parent), target=TOOLS_FOLDER),)
            inside = str(TOOLS_FOLDER / tools_socket.name)
        cwd = PurePosixPath(run.path)
        # The run folder inside is a tmpfs: delivery.json and the secrets are copied in.
        files: list[CopiedFile] = [(cwd / DELIVERY_FILE, run.delivery_file, 0o444)]
        folders: tuple[tuple[PurePosixPath, int], ...] = ()
        if secrets_dir is not None:
            folders = ((cwd / SECRETS_FOLDER, 0o700),)
            files += [
                (cwd / SECRETS_FOLDER / f.name, f, 0o400) for f in sorted(secrets_dir.iterdir())
            ]

        def launch(argv: list[str]) -> Launch:
            # bwrap would start and then fail to exec: say so as the runner would.
            if shutil.which(argv[0], path=self.environ.get("PATH", os.defpath)) is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
            return launcher.launch(
                argv,
                cwd=cwd,
                mounts=system_mounts()
                + tuple(mounts)
                + program_mounts(argv, self.environ, paths)
                + tools,
                network=rule.network,
                hidden=hidden,
                files=tuple(files),
                folders=folders,
            )

        return Prepared(command, env, launch, secrets_dir, notes, inside)

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
    rule: ReviewerRule,
    *,
    run: RunFolder,
    paths: WorkflowPaths,
    notes: list[str],
    user: HostUser | None = None,
) -> tuple[list[Mount], tuple[PurePosixPath, ...]]:
    """The mounts and the hidden folders of one reviewer: ``db/migrations/`` (read-only,
    its ``.backups/`` covered by an empty folder) and the reviewer's grants, under the grant
    rules (its run folder is a tmpfs of the sandbox, not a mount):

    - a missing read-only grant grants nothing (and is noted);
    - a missing writable one is created (given to ``user`` when the bot runs as root); one
      that cannot be created or written refuses;
    - a folder that exists but cannot be read refuses;
    - a grant that is, holds or lies in a database file or the backups refuses.

    "Read" and "written" are by the host user reviewers run as: the bot's, or ``user``.
    """
    data_dir = PurePosixPath(paths.data_dir.resolve())
    backups = PurePosixPath(paths.backups_dir.resolve())
    forbidden = _forbidden(paths)
    mounts: list[Mount] = []
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
        existed = requested.exists()
        try:
            built = grant_folder(requested, writable=writable)
        except (RunFolderError, OSError) as exc:
            raise GrantRefused(f"writable grant {requested} cannot be created: {exc}") from None
        if built is None:
            notes.append(f"read-only grant {requested} does not exist and grants nothing")
            continue
        real = PurePosixPath(built.path.resolve())
        check_grant(real, forbidden=forbidden, backups_dir=backups)
        if writable and not existed and user is not None:
            os.chown(real, user.uid, user.gid)  # made for the reviewer: its user's folder
        if not _reviewer_may(Path(real), user, write=writable):
            what = "read and written" if writable else "read"
            who = f"uid {user.uid} (sandbox_uid)" if user is not None else "the server"
            raise GrantRefused(f"grant {requested} exists but cannot be {what} by {who}")
        mounts.append(Mount(real, writable=writable))
    return mounts, hidden


def _reviewer_may(path: Path, user: HostUser | None, *, write: bool) -> bool:
    """Whether the host user reviewers run as may list (and write) the folder ``path``."""
    if user is None:
        return os.access(path, os.R_OK | os.X_OK | (os.W_OK if write else 0))
    try:
        st = path.stat()
    except OSError:
        return False
    return may_access(
        stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, uid=user.uid, gid=user.gid, write=write
    )


def tool_mounts(tools: list[str]) -> tuple[Mount, ...]:
    """``bwrap`` and ``setpriv`` where the system folders do not show them already (the
    second step of a root bot's sandbox runs them from the view the first one built)."""
    covered = tuple(PurePosixPath(p) for p in SYSTEM_PATHS)
    out = []
    for tool in tools:
        pure = PurePosixPath(Path(tool).resolve())
        if not any(pure == c or c in pure.parents for c in covered):
            out.append(Mount(pure, target=PurePosixPath(tool)))
    return tuple(out)


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
