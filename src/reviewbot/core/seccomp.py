"""The reviewer sandbox's system-call filter: a classic BPF program for ``bwrap --seccomp``.

Pure. :func:`filter_program` assembles, for one machine architecture, the program the kernel
runs on every system call of a reviewer:

- a call made through another ABI than the machine's own (32-bit ``int 0x80`` calls on
  x86_64, the x32 ABI) kills the process: the numbers below would not mean what they say;
- the calls in :data:`REFUSED` fail with ``EPERM``: mounting, leaving or entering namespaces,
  opening files by handle, tracing other processes, kernel keyrings, BPF, modules, kexec,
  perf events, io_uring, changing the clock, and the like. No reviewer needs them, and each
  is a known way out of a sandbox or into the kernel;
- ``clone`` asking for a new namespace fails with ``EPERM``; ``clone3`` (whose flags a
  filter cannot read) fails with ``ENOSYS``, so C libraries fall back to ``clone``;
- everything else is allowed.

Only ``x86_64`` and ``aarch64`` are known; any other architecture is refused
(:class:`UnsupportedArchitecture`), so the sandbox never runs without a filter.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from reviewbot.core.errors import Refused

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

# Return values (linux/seccomp.h).
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
EPERM = 1
ENOSYS = 38

# Offsets in struct seccomp_data: int nr; __u32 arch; __u64 ip; __u64 args[6].
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0 = 16  # args[0]: its low half here on little-endian machines, 4 bytes on big-endian

X32_SYSCALL_BIT = 0x40000000

# clone() flags that create namespaces (linux/sched.h).
NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

# Refused with EPERM on every architecture that has them.
REFUSED = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "userfaultfd",
    "perf_event_open",
    "fanotify_init",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "lookup_dcookie",
    "nfsservctl",
    "iopl",
    "ioperm",
    "uselib",
)


@dataclass(frozen=True)
class Architecture:
    name: str
    audit_arch: int  # AUDIT_ARCH_* of linux/audit.h
    numbers: Mapping[str, int]  # system call numbers of its native ABI
    x32_bit: bool = False  # numbers with X32_SYSCALL_BIT set are another ABI


_X86_64 = Architecture(
    "x86_64",
    0xC000003E,
    {
        "clone": 56,
        "clone3": 435,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "move_mount": 429,
        "open_tree": 428,
        "mount_setattr": 442,
        "unshare": 272,
        "setns": 308,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_getfd": 438,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "userfaultfd": 323,
        "perf_event_open": 298,
        "fanotify_init": 300,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "acct": 163,
        "syslog": 103,
        "quotactl": 179,
        "quotactl_fd": 443,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "vhangup": 153,
        "lookup_dcookie": 212,
        "nfsservctl": 180,
        "iopl": 172,
        "ioperm": 173,
        "uselib": 134,
    },
    x32_bit=True,
)

# aarch64 uses the generic table (asm-generic/unistd.h); it has no iopl, ioperm or uselib.
_AARCH64 = Architecture(
    "aarch64",
    0xC00000B7,
    {
        "clone": 220,
        "clone3": 435,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "move_mount": 429,
        "open_tree": 428,
        "mount_setattr": 442,
        "unshare": 97,
        "setns": 268,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_getfd": 438,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "userfaultfd": 282,
        "perf_event_open": 241,
        "fanotify_init": 262,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "acct": 89,
        "syslog": 116,
        "quotactl": 60,
        "quotactl_fd": 443,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "vhangup": 58,
        "lookup_dcookie": 18,
        "nfsservctl": 42,
    },
)

ARCHITECTURES = {a.name: a for a in (_X86_64, _AARCH64)}
# What ``platform.machine()`` says on machines of a known architecture.
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


class UnsupportedArchitecture(Refused):
    """No filter is known for this machine: reviewers do not run (fail closed)."""

    code = "sandbox_unavailable"


def architecture(machine: str) -> Architecture:
    """The architecture ``platform.machine()`` names; :class:`UnsupportedArchitecture`
    for any other."""
    name = _ALIASES.get(machine.lower(), machine.lower())
    found = ARCHITECTURES.get(name)
    if found is None:
        known = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedArchitecture(
            f"no system-call filter is known for the {machine!r} architecture (known: {known})"
        )
    return found


@dataclass(frozen=True)
class _Insn:
    code: int
    k: int
    jt: str | None = None  # a label, for jumps
    jf: str | None = None


def _assemble(program: list[_Insn | str], order: str) -> bytes:
    """Resolve labels (strings in ``program``) to forward jump offsets and pack the
    instructions as ``struct sock_filter`` (u16 code, u8 jt, u8 jf, u32 k) in byte
    ``order`` (``<`` or ``>``)."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(at: int, label: str | None) -> int:
        if label is None:
            return 0
        distance = labels[label] - at - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"jump to {label} out of range ({distance})")
        return distance

    return b"".join(
        struct.pack(f"{order}HBBI", i.code, offset(n, i.jt), offset(n, i.jf), i.k)
        for n, i in enumerate(insns)
    )


def filter_program(machine: str, byteorder: str = "little") -> bytes:
    """The compiled filter for ``machine`` (``platform.machine()``) whose byte order is
    ``byteorder`` (``sys.byteorder``), as ``bwrap --seccomp`` reads it: an array of
    ``struct sock_filter``."""
    arch = architecture(machine)
    if byteorder not in ("little", "big"):
        raise ValueError(f"byte order {byteorder!r}: little or big")
    little = byteorder == "little"
    program: list[_Insn | str] = [
        _Insn(LD_W_ABS, OFFSET_ARCH),
        _Insn(JEQ_K, arch.audit_arch, jf="kill"),
        _Insn(LD_W_ABS, OFFSET_NR),
    ]
    if arch.x32_bit:
        program.append(_Insn(JGE_K, X32_SYSCALL_BIT, jt="kill"))
    program.append(_Insn(JEQ_K, arch.numbers["clone"], jt="clone"))
    program.append(_Insn(JEQ_K, arch.numbers["clone3"], jt="enosys"))
    for name in REFUSED:
        number = arch.numbers.get(name)
        if number is not None:
            program.append(_Insn(JEQ_K, number, jt="eperm"))
    program += [
        _Insn(RET_K, RET_ALLOW),
        "clone",
        _Insn(LD_W_ABS, OFFSET_ARG0 if little else OFFSET_ARG0 + 4),  # the flags' low half
        _Insn(JSET_K, NAMESPACE_FLAGS, jt="eperm"),
        _Insn(RET_K, RET_ALLOW),
        "eperm",
        _Insn(RET_K, RET_ERRNO | EPERM),
        "enosys",
        _Insn(RET_K, RET_ERRNO | ENOSYS),
        "kill",
        _Insn(RET_K, RET_KILL_PROCESS),
    ]
    return _assemble(program, "<" if little else ">")
