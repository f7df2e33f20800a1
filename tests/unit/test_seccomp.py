"""The reviewer sandbox's system-call filter, run by a small classic-BPF interpreter.

The interpreter executes the assembled program on a ``struct seccomp_data`` as the kernel
would (loads of absolute words, JEQ/JGE/JSET jumps, RET), so each test states what the
filter decides for a call, not how the program is laid out.
"""

from __future__ import annotations

import struct

import pytest

from reviewbot.core.seccomp import (
    ARCHITECTURES,
    REFUSED,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    UnsupportedArchitecture,
    architecture,
    filter_program,
)

EPERM, ENOSYS = RET_ERRNO | 1, RET_ERRNO | 38
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x00020000, 0x40000000, 17
CLONE_VM, CLONE_THREAD = 0x100, 0x10000
I386 = 0x40000003


def run(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = (), order: str = "<") -> int:
    """What the filter returns for system call ``nr`` with ``args`` from ``arch``."""
    data = struct.pack(f"{order}iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack(f"{order}HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            (acc,) = struct.unpack(f"{order}I", data[k : k + 4])
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("machine", sorted(ARCHITECTURES))
def test_every_refused_call_fails_with_eperm_and_others_are_allowed(machine: str) -> None:
    arch = architecture(machine)
    program = filter_program(machine)
    for name in REFUSED:
        if name in arch.numbers:
            assert run(program, arch=arch.audit_arch, nr=arch.numbers[name]) == EPERM, name
    refused = {arch.numbers[n] for n in REFUSED if n in arch.numbers}
    # Every other number (read, write, openat, fork, execve...) goes through.
    for nr in range(0, 460):
        if nr not in refused and nr not in (arch.numbers["clone"], arch.numbers["clone3"]):
            assert run(program, arch=arch.audit_arch, nr=nr) == RET_ALLOW, nr


@pytest.mark.parametrize("machine", sorted(ARCHITECTURES))
def test_the_calls_the_sandbox_must_refuse_are_all_there(machine: str) -> None:
    arch = architecture(machine)
    for name in (
        "mount",
        "umount2",
        "open_by_handle_at",
        "name_to_handle_at",
        "ptrace",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "unshare",
        "setns",
        "pivot_root",
        "kexec_load",
        "init_module",
        "finit_module",
        "perf_event_open",
        "fsopen",
        "move_mount",
        "open_tree",
    ):
        assert name in REFUSED and name in arch.numbers, name


@pytest.mark.parametrize("machine", sorted(ARCHITECTURES))
def test_clone_may_make_processes_and_threads_but_no_namespace(machine: str) -> None:
    arch = architecture(machine)
    program = filter_program(machine)
    clone = arch.numbers["clone"]
    for flags in (SIGCHLD, CLONE_VM | CLONE_THREAD | SIGCHLD):
        assert run(program, arch=arch.audit_arch, nr=clone, args=(flags,)) == RET_ALLOW
    for flags in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNS | SIGCHLD):
        assert run(program, arch=arch.audit_arch, nr=clone, args=(flags,)) == EPERM
    # clone3 passes its flags in memory a filter cannot read: "not implemented", so C
    # libraries fall back to clone, which is checked.
    assert run(program, arch=arch.audit_arch, nr=arch.numbers["clone3"]) == ENOSYS


def test_calls_through_another_abi_kill_the_process() -> None:
    program = filter_program("x86_64")
    # int 0x80 from an x86_64 process: i386 numbers (21 is mount there).
    assert run(program, arch=I386, nr=21) == RET_KILL_PROCESS
    assert run(program, arch=I386, nr=20) == RET_KILL_PROCESS
    # The x32 ABI shares the architecture value but sets bit 30 of the number.
    x86_64 = architecture("x86_64").audit_arch
    assert run(program, arch=x86_64, nr=0x40000000 | 165) == RET_KILL_PROCESS
    assert run(program, arch=x86_64, nr=0x40000000 | 1) == RET_KILL_PROCESS
    # aarch64's filter refuses x86_64 calls, and the other way round.
    aarch64 = architecture("aarch64").audit_arch
    assert run(filter_program("aarch64"), arch=x86_64, nr=0) == RET_KILL_PROCESS
    assert run(program, arch=aarch64, nr=0) == RET_KILL_PROCESS


def test_a_big_endian_machine_gets_its_own_byte_order() -> None:
    arch = architecture("aarch64")
    program = filter_program("aarch64", "big")
    clone = arch.numbers["clone"]
    assert run(program, arch=arch.audit_arch, nr=arch.numbers["mount"], order=">") == EPERM
    # args[0]'s low half is the second word on a big-endian machine.
    assert run(program, arch=arch.audit_arch, nr=clone, args=(CLONE_NEWUSER,), order=">") == EPERM
    assert run(program, arch=arch.audit_arch, nr=clone, args=(SIGCHLD,), order=">") == RET_ALLOW


@pytest.mark.parametrize("machine", ["riscv64", "ppc64le", "s390x", "i686", ""])
def test_an_unknown_architecture_is_refused(machine: str) -> None:
    with pytest.raises(UnsupportedArchitecture, match="no system-call filter"):
        filter_program(machine)


def test_machine_names_are_read_as_the_platform_spells_them() -> None:
    assert architecture("AMD64").name == "x86_64"
    assert architecture("arm64").name == "aarch64"
