"""The pure half of the reviewer sandbox: which folders a reviewer may see, and the
``bwrap`` command line that shows it exactly those.

Rules (docs/reviewers.md):

- A grant names a folder relative to the data directory or absolute. A relative path may
  not climb out of the data directory with ``..``; no grant may be, contain or lie inside a
  database file (the SQLite file, its :data:`SIDECARS`, the lease epoch ledger) or the
  migration backups (copies of the database). Both are refused when the settings are
  loaded, so a bad grant never starts the bot.
- The reviewer sees a read-only system (``/usr``, ``/etc`` basics, the interpreter's
  prefix), a fresh ``/proc`` of its own PID namespace, an empty ``/tmp``, its run folder
  (an empty tmpfs of bounded size holding ``delivery.json``), ``db/migrations/`` read-only,
  and its grants. Nothing else of the host.
- It runs in a user namespace as uid and gid :data:`SANDBOX_ID`, with no capability, a new
  session and the system-call filter of :mod:`reviewbot.core.seccomp`, whoever runs the bot.
  A bot running as root first builds the reviewer's view of the files (as root, so it can
  reach what it grants) and then becomes an unprivileged host user (:class:`HostUser`)
  before the same jail is entered: a reviewer never runs as host root, and the process
  limit counts that user's processes rather than root's (which the kernel never limits).

No I/O here: paths are compared as written (the runtime resolves them first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from reviewbot.core.errors import Refused

# The uid and gid a reviewer has inside its user namespace ("nobody").
SANDBOX_ID = 65534
MIB = 1024 * 1024
RUN_TMPFS_BYTES = MIB  # /run: nothing a reviewer needs is there but its tools socket
# Where a reviewer finds the session tools of its run: the run's private socket folder on
# the host is bound here, so a reviewer reaches them without any network.
TOOLS_FOLDER = PurePosixPath("/run/reviewbot")
TOOLS_SOCKET = "tools.sock"


class GrantMode(StrEnum):
    RO = "ro"
    RW = "rw"


@dataclass(frozen=True)
class Mount:
    """``source`` on the host shown at ``target`` inside (the same path unless told)."""

    source: PurePosixPath
    writable: bool = False
    target: PurePosixPath | None = None
    # Optional mounts (``--ro-bind-try``): system paths that not every host has.
    optional: bool = False

    @property
    def inside(self) -> PurePosixPath:
        return self.target or self.source


# Read-only system folders and files every reviewer gets, where the host has them.
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)


class GrantRefused(Refused):
    """A grant that can never be honoured; the detail names the path and the rule."""

    code = "grant_refused"


# SQLite's own, and the write gate's (:mod:`reviewbot.store.write_gate`).
SIDECARS = ("-wal", "-shm", "-journal", "-writers")


def ledger_file(database_file: PurePosixPath) -> PurePosixPath:
    """The lease epoch ledger: a small SQLite file beside the database."""
    return database_file.with_name(f"{database_file.stem}.lease-epochs.sqlite")


def forbidden_files(database_file: PurePosixPath) -> tuple[str, ...]:
    """Every file a reviewer must never reach: the database, the ledger, their sidecars."""
    out: list[str] = []
    for base in (database_file, ledger_file(database_file)):
        out += [str(base)] + [f"{base}{suffix}" for suffix in SIDECARS]
    return tuple(out)


def _inside(path: PurePosixPath, folder: PurePosixPath) -> bool:
    return path == folder or folder in path.parents


def grant_path(raw: str, data_dir: PurePosixPath) -> PurePosixPath:
    """A grant's path as written, made absolute against the data directory.

    ``..`` is refused in a relative grant (it could climb out of the data directory) and
    normalised nowhere else: an absolute grant means exactly the folder it names.
    """
    if not raw or "\0" in raw:
        raise GrantRefused(f"grant path {raw!r} is empty or holds a NUL byte")
    path = PurePosixPath(raw)
    if ".." in path.parts:
        raise GrantRefused(f"grant path {raw!r} uses '..'; name the folder directly")
    return path if path.is_absolute() else data_dir / path


def check_grant(
    path: PurePosixPath,
    *,
    forbidden: Iterable[str],
    backups_dir: PurePosixPath,
) -> PurePosixPath:
    """``path`` if a reviewer may be granted it; :class:`GrantRefused` otherwise.

    A grant may not be a database file, contain one (mounting its folder would show it), or
    reach the migration backups. ``forbidden`` are absolute paths as the runtime resolved
    them.
    """
    for name in forbidden:
        file = PurePosixPath(name)
        if _inside(file, path) or _inside(path, file):
            raise GrantRefused(f"grant {path} would expose the database file {file}")
    if _inside(backups_dir, path) or _inside(path, backups_dir):
        raise GrantRefused(f"grant {path} would expose the database backups in {backups_dir}")
    return path


@dataclass(frozen=True)
class SandboxLimits:
    """What one reviewer may use (``[reviewer_limits]`` in the settings)."""

    processes: int = 256  # processes and threads, over what its host user runs already
    memory_bytes: int = 2048 * MIB  # address space of each process
    cpu_s: int = 600  # CPU seconds of each process
    open_files: int = 1024  # per process
    file_bytes: int = 64 * MIB  # the largest file it may write, anywhere
    folder_bytes: int = 64 * MIB  # its run folder, /tmp and /dev/shm, each a tmpfs this size


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class DataFile:
    """A file copied into the sandbox from an open descriptor (read-only inside)."""

    fd: int
    target: PurePosixPath
    mode: int = 0o444


@dataclass(frozen=True)
class HostUser:
    """The unprivileged host user a bot running as root hands its reviewers to, and the
    ``setpriv`` that becomes it once the view is built."""

    uid: int
    gid: int
    setpriv: str


@dataclass(frozen=True)
class SandboxSpec:
    """Everything ``bwrap`` needs for one reviewer."""

    bwrap: str
    argv: tuple[str, ...]  # the reviewer's command
    cwd: PurePosixPath  # its run folder: a fresh tmpfs of ``limits.folder_bytes``
    mounts: tuple[Mount, ...]
    seccomp_fd: int  # the compiled filter (reviewbot.core.seccomp), read by bwrap
    network: bool = False
    hidden: tuple[PurePosixPath, ...] = ()  # covered by an empty tmpfs after the mounts
    files: tuple[DataFile, ...] = ()  # copied in after the run folder exists
    folders: tuple[tuple[PurePosixPath, int], ...] = ()  # created inside: (path, mode)
    limits: SandboxLimits = DEFAULT_LIMITS
    drop_to: HostUser | None = None  # set when the bot runs as root


def system_mounts(extra_ro: Sequence[PurePosixPath] = ()) -> tuple[Mount, ...]:
    """The read-only view of the system, plus ``extra_ro`` (an interpreter's prefix...)."""
    mounts = [Mount(PurePosixPath(p), optional=True) for p in SYSTEM_PATHS]
    mounts += [Mount(p) for p in extra_ro]
    return tuple(mounts)


def _depth(path: PurePosixPath) -> int:
    return len(path.parts)


def _view(spec: SandboxSpec, *, keep_run_folder_for_jail: bool) -> list[str]:
    """The host files the reviewer sees: the system, ``/tmp`` and ``/run``, the mounts and
    the hidden folders, shallow before deep (a folder granted inside ``/tmp`` lands on the
    fresh tmpfs rather than under it).

    Every folder on the way to a mount is created first with mode 0755: bwrap (before
    0.9) would otherwise create them 0700, owned by whoever builds the view, and a reviewer
    running as another user could not pass through them.
    """
    tmp = "/tmp"  # noqa: S108 - the sandbox's own, a fresh tmpfs
    ops: list[tuple[PurePosixPath, list[str]]] = [
        (PurePosixPath(tmp), _tmpfs(tmp, spec.limits.folder_bytes, "1777")),
        (PurePosixPath("/run"), _tmpfs("/run", RUN_TMPFS_BYTES, "1777")),
    ]
    for mount in spec.mounts:
        flag = "--bind" if mount.writable else "--ro-bind-try" if mount.optional else "--ro-bind"
        ops.append((mount.inside, [flag, str(mount.source), str(mount.inside)]))
    if keep_run_folder_for_jail:
        ops.append((spec.cwd, ["--dir", str(spec.cwd)]))  # the jail mounts its tmpfs here
    else:
        ops += _run_folder(spec)
    argv: list[str] = []
    made: set[PurePosixPath] = set()
    for target, op in sorted(ops, key=lambda o: _depth(o[0])):
        for parent in reversed(target.parents[:-1]):  # outermost first, never "/"
            if parent not in made:
                made.add(parent)
                argv += ["--dir", str(parent)]
        made.add(target)
        argv += op
    for path in spec.hidden:
        argv += _tmpfs(str(path), RUN_TMPFS_BYTES, "0555")
    return argv


def _tmpfs(target: str, size: int, perms: str) -> list[str]:
    return ["--perms", perms, "--size", str(size), "--tmpfs", target]


def _run_folder(spec: SandboxSpec) -> list[tuple[PurePosixPath, list[str]]]:
    """The run folder's tmpfs, then what is copied or made inside it."""
    run = spec.cwd
    ops = [(run, _tmpfs(str(run), spec.limits.folder_bytes, "0755"))]
    for folder, mode in spec.folders:
        ops.append((folder, ["--perms", f"{mode:o}", "--dir", str(folder)]))
    for file in spec.files:
        ops.append(
            (
                file.target,
                ["--perms", f"{file.mode:o}", "--ro-bind-data", str(file.fd), str(file.target)],
            )
        )
    return ops


def _jail(spec: SandboxSpec) -> list[str]:
    """The namespaces and the privileges: the same flags whoever runs the bot."""
    argv = [
        "--unshare-user",
        "--uid",
        str(SANDBOX_ID),
        "--gid",
        str(SANDBOX_ID),
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not spec.network:
        argv.append("--unshare-net")
    argv += [
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--seccomp",
        str(spec.seccomp_fd),
        "--hostname",
        "reviewer",
    ]
    return argv


def bwrap_argv(spec: SandboxSpec) -> list[str]:
    """The command line that runs ``spec.argv`` inside its own namespaces.

    New user, PID, IPC, UTS (and, unless ``network``, network) namespaces, in which the
    reviewer is uid and gid :data:`SANDBOX_ID` with no capability and the system-call filter;
    the reviewer dies with the server (``--die-with-parent``) and cannot reach the
    controlling terminal (``--new-session``). Its environment is the one bwrap is started
    with (the allow-listed one), not ``--setenv`` arguments: a command line is readable by
    every process of the host, an environment only by its owner.

    With ``drop_to`` (the bot runs as root) there are two steps: a first bwrap builds the
    view as root, keeping only the capabilities to change user; ``setpriv`` becomes the
    unprivileged host user; a second bwrap, unprivileged like any user's, enters the jail
    with that view as its root. Without it one bwrap does both.
    """
    # Last, whoever builds the view: a bounded /dev/shm, then /dev and the root read-only, so
    # the only places a reviewer writes are its bounded tmpfs and its writable grants.
    tail = [
        *_tmpfs("/dev/shm", spec.limits.folder_bytes, "1777"),  # noqa: S108 - its own
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        str(spec.cwd),
        "--",
        *spec.argv,
    ]
    if spec.drop_to is None:
        return [
            spec.bwrap,
            *_jail(spec),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *_view(spec, keep_run_folder_for_jail=False),
            *tail,
        ]
    user = spec.drop_to
    inside = [op for _, ops in _run_folder(spec) for op in ops]
    return [
        spec.bwrap,
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        # The host's /proc as it is: a new one may be mounted in a user namespace only where
        # a complete one is visible (the jail mounts its own).
        "--bind",
        "/proc",
        "/proc",
        "--dev",
        "/dev",
        *_view(spec, keep_run_folder_for_jail=True),
        "--",
        user.setpriv,
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--clear-groups",
        "--",
        spec.bwrap,
        *_jail(spec),
        "--bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *inside,
        *tail,
    ]


def may_access(mode: int, owner: int, group: int, *, uid: int, gid: int, write: bool) -> bool:
    """Whether a user (``uid``, primary group ``gid``, no other group, no capability) may
    list a folder with permission bits ``mode`` (and, with ``write``, create files in it):
    the owner's bits for its owner, the group's for its group, the others' otherwise."""
    shift = 6 if uid == owner else 3 if gid == group else 0
    bits = (mode >> shift) & 0o7
    needed = 0o5 | (0o2 if write else 0)
    return bits & needed == needed
