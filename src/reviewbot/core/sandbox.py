"""The pure half of the reviewer sandbox: which folders a reviewer may see, and the
``bwrap`` command line that shows it exactly those.

Rules (docs/reviewers.md):

- A grant names a folder relative to the data directory or absolute. A relative path may
  not climb out of the data directory with ``..``; no grant may be, contain or lie inside a
  database file (the SQLite file, its ``-wal``/``-shm``/``-journal`` sidecars, the lease
  epoch ledger) or the migration backups (copies of the database). Both are refused when
  the settings are loaded, so a bad grant never starts the bot.
- The reviewer sees a read-only system (``/usr``, ``/etc`` basics, the interpreter's
  prefix), a fresh ``/proc`` of its own PID namespace, an empty ``/tmp``, its run folder
  writable, ``db/migrations/`` read-only, and its grants. Nothing else of the host.

No I/O here: paths are compared as written (the runtime resolves them first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from reviewbot.core.errors import Refused


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


def ledger_file(database_file: PurePosixPath) -> PurePosixPath:
    """The lease epoch ledger: a small SQLite file beside the database."""
    return database_file.with_name(f"{database_file.stem}.lease-epochs.sqlite")


def forbidden_files(database_file: PurePosixPath) -> tuple[str, ...]:
    """Every file a reviewer must never reach: the database, the ledger, their sidecars."""
    out: list[str] = []
    for base in (database_file, ledger_file(database_file)):
        out += [str(base)] + [f"{base}{suffix}" for suffix in ("-wal", "-shm", "-journal")]
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
class SandboxSpec:
    """Everything ``bwrap`` needs for one reviewer."""

    bwrap: str
    argv: tuple[str, ...]  # the reviewer's command
    cwd: PurePosixPath
    mounts: tuple[Mount, ...]
    network: bool = False
    hidden: tuple[PurePosixPath, ...] = ()  # covered by an empty tmpfs after the mounts


def system_mounts(extra_ro: Sequence[PurePosixPath] = ()) -> tuple[Mount, ...]:
    """The read-only view of the system, plus ``extra_ro`` (an interpreter's prefix...)."""
    mounts = [Mount(PurePosixPath(p), optional=True) for p in SYSTEM_PATHS]
    mounts += [Mount(p) for p in extra_ro]
    return tuple(mounts)


def bwrap_argv(spec: SandboxSpec) -> list[str]:
    """The command line that runs ``spec.argv`` inside its own namespaces.

    New PID, IPC, UTS (and, unless ``network``, network) namespaces; the reviewer dies with
    the server (``--die-with-parent``), cannot reach the controlling terminal
    (``--new-session``). Its environment is the one bwrap is started with (the allow-listed
    one), not ``--setenv`` arguments: a command line is readable by every process of the
    host, an environment only by its owner. Mounts are applied shallow before deep, so a
    folder granted inside ``/tmp`` lands on the fresh tmpfs rather than under it.
    """
    argv = [
        spec.bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "reviewer",
    ]
    if not spec.network:
        argv.append("--unshare-net")
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]  # noqa: S108
    for mount in sorted(spec.mounts, key=lambda m: len(m.inside.parts)):
        flag = "--bind" if mount.writable else "--ro-bind-try" if mount.optional else "--ro-bind"
        argv += [flag, str(mount.source), str(mount.inside)]
    for path in spec.hidden:
        argv += ["--tmpfs", str(path)]
    argv += ["--chdir", str(spec.cwd)]
    argv += ["--", *spec.argv]
    return argv
