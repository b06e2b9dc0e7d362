"""A seccomp filter for sandboxed programs, in the binary form ``bwrap --seccomp FD`` reads.

Code golf needs none of the system calls below; they are the kernel's usual attack surface
from inside a container (tracing other processes, eBPF, io_uring, keyrings, mounts, modules,
namespaces). Each fails with EPERM instead of running. Syscall numbers come from the
kernel's ``asm/unistd_64.h`` (x86_64) and ``asm-generic/unistd.h`` (aarch64).
"""

from __future__ import annotations

import errno
import os
import struct

# classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFFSET_NR, _OFFSET_ARCH = 0, 4  # struct seccomp_data
_X32_SYSCALL_BIT = 0x40000000

#: name -> (x86_64 number, aarch64 number)
DENIED: dict[str, tuple[int, int]] = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "swapon": (167, 224),
    "swapoff": (168, 225), "reboot": (169, 142), "setns": (308, 268), "unshare": (272, 97),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "mount_setattr": (442, 442),
    "acct": (163, 89), "quotactl": (179, 60),
}
#: machine -> (AUDIT_ARCH value, column in DENIED)
ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def deny_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for ``machine`` (default: this one), or None where the syscall
    numbers are not known. A process of another architecture (x32, 32-bit) is killed."""
    machine = machine or os.uname().machine
    if machine not in ARCHES:
        return None
    arch, column = ARCHES[machine]
    numbers = sorted({row[column] for row in DENIED.values()})
    deny = _RET_ERRNO | errno.EPERM
    program = [_insn(_LD_W_ABS, _OFFSET_ARCH),
               _insn(_JEQ_K, arch, jt=1),
               _insn(_RET_K, _RET_KILL_PROCESS),
               _insn(_LD_W_ABS, _OFFSET_NR)]
    if machine == "x86_64":  # x32 system calls share the arch value; refuse them all
        program += [_insn(_JGE_K, _X32_SYSCALL_BIT, jf=1), _insn(_RET_K, deny)]
    # one comparison per number, each jumping to the shared "deny" at the end when equal
    for index, number in enumerate(numbers):
        program.append(_insn(_JEQ_K, number, jt=len(numbers) - index))
    program += [_insn(_RET_K, _RET_ALLOW), _insn(_RET_K, deny)]
    return b"".join(program)
