"""Reading a guest's kernel log for signs that something went wrong.

Every VM run ends with this check: a scheduler bug shows up first as a
WARN, a BUG or oops, a lockdep report or a hung task (and on a debug
kernel a KASAN report or a leak), often while the workload itself still
"passes".
"""

from __future__ import annotations

import re

# One pattern per kind of report; each names what it catches.
PROBLEMS = {
    "warning": re.compile(r"WARNING: CPU: \d+ PID: \d+|------------\[ cut here \]------------"),
    "bug": re.compile(r"\bBUG: |kernel BUG at "),
    "oops": re.compile(r"\bOops: |general protection fault|Kernel panic"),
    # lockdep's reports by their titles, not the word: a lockdep kernel
    # (the debug kernel) says "RCU lockdep checking is enabled" at boot.
    "lockdep": re.compile(r"possible circular locking dependency|"
                          r"possible recursive locking|inconsistent lock state|"
                          r"INFO: trying to register non-static key|"
                          r"suspicious RCU usage|possible irq lock inversion|"
                          r"bad unlock balance|held lock freed|"
                          r"lock held when returning to user space|DEBUG_LOCKS_WARN_ON|"
                          r"turning off the locking correctness validator"),
    "hung task": re.compile(r"INFO: task .+ blocked for more than|hung_task"),
    "soft lockup": re.compile(r"soft lockup|hard LOCKUP"),
    "sanitizer": re.compile(r"UBSAN:|KASAN:|KCSAN:"),
    # The debug kernels' kmemleak, after vm.run()'s scans (the leaks'
    # stacks are in the run directory's kmemleak.txt), or turned off.
    "memory leak": re.compile(r"kmemleak: \d+ new suspected memory leaks|"
                              r"Kernel memory leak detector disabled"),
    "list corruption": re.compile(r"list_(add|del) corruption"),
}

# Lines that contain a trigger word but are not reports.
_IGNORE = re.compile(r"lockdep is turned off|Lockdep is disabled")


def problems(dmesg: str) -> list[tuple[str, str]]:
    """(kind, line) for each line of @dmesg that reports a kernel problem."""
    found = []
    for line in dmesg.splitlines():
        if _IGNORE.search(line):
            continue
        for kind, pat in PROBLEMS.items():
            if pat.search(line):
                found.append((kind, line.strip()))
                break
    return found
