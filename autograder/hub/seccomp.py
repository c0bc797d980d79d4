"""The system calls a student's server may not make: a seccomp filter for her wall (bubblewrap's --seccomp).

A notebook, its kernel, JupyterLab and a terminal need none of these; each is a way past a wall or into the kernel's
rarer corners, so each answers EPERM:

- new namespaces and mounts (unshare, setns, mount and the new mount API, clone or clone3 with a namespace flag),
  on top of bubblewrap's --disable-userns: her wall is the only one she lives in;
- the kernel's keyring, BPF programs, perf events, userfaultfd and io_uring, whose bugs have been the usual way
  from a sandbox to the kernel;
- modules, kexec, reboot, swap, the clock and accounting, which need privileges she has not, refused before any.

clone3 answers ENOSYS, as container runtimes do, so that the C library falls back to clone, whose flags a filter
can read (clone3 passes them in memory, out of its reach). Only x86-64 and AArch64 are described; on any other
architecture `program()` is None and the wall has bubblewrap's --disable-userns alone. A system call made in another
ABI (x32, or 32-bit code on a 64-bit kernel) is refused whole.
"""
from __future__ import annotations

import errno
import os
import platform
import struct

DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
          "fsmount", "fspick", "mount_setattr", "add_key", "request_key", "keyctl", "bpf", "perf_event_open",
          "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load",
          "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "settimeofday",
          "clock_settime", "clock_adjtime", "adjtimex")
NAMESPACE_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000
# CLONE_NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWNS

# each system call's number on x86-64 and on AArch64 (asm/unistd.h); each architecture's AUDIT_ARCH and column
ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}
NUMBERS = {"clone": (56, 220), "clone3": (435, 435), "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40),
           "umount2": (166, 39), "pivot_root": (155, 41), "add_key": (248, 217), "request_key": (249, 218),
           "keyctl": (250, 219), "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
           "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
           "finit_module": (313, 273), "delete_module": (176, 106), "reboot": (169, 142), "swapon": (167, 224),
           "swapoff": (168, 225), "acct": (163, 89), "settimeofday": (164, 170), "clock_settime": (227, 112),
           "clock_adjtime": (305, 266), "adjtimex": (159, 171)}
# the same numbers on every architecture since Linux 5.1 (the unified table)
UNIFIED = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
           "mount_setattr": 442, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
X32_BIT = 0x40000000  # x86-64's x32 ABI

# classic BPF, as seccomp reads it: struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
LOAD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH, ARG0 = 0, 4, 16  # offsets; ARG0: the low half of the first argument (little-endian)
ALLOW, ERRNO = 0x7FFF0000, 0x00050000


def program(machine=None):
    """The filter as bytes (an array of struct sock_filter, as bubblewrap reads it), or None where the
    architecture is not described here."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        return None
    arch, column = ARCHES[machine]
    numbers = {name: pair[column] for name, pair in NUMBERS.items()} | UNIFIED
    eperm, enosys = ERRNO | errno.EPERM, ERRNO | errno.ENOSYS
    code = [(LOAD, 0, 0, ARCH), (JEQ, 1, 0, arch), (RET, 0, 0, eperm), (LOAD, 0, 0, NR)]
    if machine == "x86_64":
        code += [(JGE, 0, 1, X32_BIT), (RET, 0, 0, eperm)]
    for name in DENIED:
        code += [(JEQ, 0, 1, numbers[name]), (RET, 0, 0, eperm)]
    code += [(JEQ, 0, 1, numbers["clone3"]), (RET, 0, 0, enosys),
             (JEQ, 0, 3, numbers["clone"]), (LOAD, 0, 0, ARG0), (JSET, 0, 1, NAMESPACE_FLAGS), (RET, 0, 0, eperm),
             (RET, 0, 0, ALLOW)]
    return b"".join(struct.pack("<HBBI", *op) for op in code)


def memfd(machine=None):
    """A descriptor holding the filter, at its start, for bubblewrap's --seccomp; None where there is none."""
    code = program(machine)
    if code is None:
        return None
    fd = os.memfd_create("seqcourse-seccomp", 0)  # not close-on-exec: bubblewrap inherits it
    os.write(fd, code)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
