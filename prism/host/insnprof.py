"""`prism profile`: where a scheduler's CPU goes, in instructions per I/O.

One boot under icount (one vCPU, the guest's clock counting instructions)
with a QEMU TCG plugin (insnprof.c, built here with gcc) that counts every
guest-kernel instruction per translation block. The guest
(prism.guest.insnprof) runs the same fixed number of 4 KiB random reads on
a delay-free null_blk under each scheduler and marks the start and end of
each run; the plugin snapshots its counters at each mark. Here the
difference of two snapshots is attributed to kernel functions by the
guest's /proc/kallsyms and divided by the reads done: exact counts, which
repeat from boot to boot, where a sampling profiler under TCG gives noise.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

from ..common.errors import PrismError
from . import kernels, vm

PLUGIN_SOURCE = Path(__file__).with_name("insnprof.c")


def plugin() -> Path:
    """The plugin, built from insnprof.c once per version of its source."""
    src = PLUGIN_SOURCE.read_bytes()
    out = kernels.cache_dir() / "insnprof" / \
        f"libinsnprof-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if out.exists():
        return out
    if not shutil.which("gcc"):
        raise PrismError("gcc not found: apt-get install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-fvisibility=hidden",
                        "-o", str(out), str(PLUGIN_SOURCE), "-lpthread"],
                       capture_output=True, text=True)
    if r.returncode:
        raise PrismError(f"building the QEMU plugin failed:\n{r.stderr}")
    return out


def run(k: kernels.Kernel, ko: Path, schedulers: list[str], ios: int, jobs: int,
        rundir: Path, timeout: float, twin_ko: Path | None = None) -> vm.VmResult:
    """Boot @k once and profile each scheduler in turn (@twin_ko: prism's
    twin's module, for prism-v2 or prism-v3)."""
    cmd = f"python3 -m prism.guest.insnprof --ios {ios} --jobs {jobs} " + " ".join(schedulers)
    return vm.run(k, cmd, ko=ko, twin_ko=twin_ko, cpus=1, accel="icount", timeout=timeout,
                  rundir=rundir, plugin=plugin())


@dataclasses.dataclass(frozen=True)
class Symbols:
    """Text symbols by address, from a kallsyms file."""
    addrs: list[int]
    names: list[str]

    @classmethod
    def load(cls, path: Path) -> Symbols:
        syms = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                name = parts[2] + (f" {parts[3]}" if len(parts) > 3 else "")
                syms.append((int(parts[0], 16), name))
        syms.sort()
        return cls([a for a, _ in syms], [n for _, n in syms])

    def name(self, addr: int) -> str:
        i = bisect.bisect_right(self.addrs, addr) - 1
        return self.names[i] if i >= 0 else "?"

    def start(self, func: str) -> int:
        for a, n in zip(self.addrs, self.names, strict=True):
            if n.split()[0] == func:
                return a
        raise PrismError(f"{func}: no such function in the guest's kallsyms")


def load_snapshot(path: Path) -> collections.Counter:
    """{(block address, its instructions): executions} from a plugin snapshot."""
    snap: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        vaddr, insns, execs = line.split()
        snap[(int(vaddr, 16), int(insns))] += int(execs)
    return snap


def block_delta(before: collections.Counter, after: collections.Counter) -> dict:
    """Executions of each block between two snapshots."""
    return {key: n - before.get(key, 0) for key, n in after.items() if n > before.get(key, 0)}


def per_function(delta: dict, syms: Symbols) -> collections.Counter:
    """Instructions executed in each function."""
    funcs: collections.Counter = collections.Counter()
    for (vaddr, insns), execs in delta.items():
        funcs[syms.name(vaddr)] += insns * execs
    return funcs


@dataclasses.dataclass
class Profile:
    scheduler: str
    iops: float
    ios: int
    funcs: collections.Counter      # instructions per I/O by function
    delta: dict                     # block -> executions, for line annotation
    syms: Symbols

    @property
    def total(self) -> float:
        return sum(self.funcs.values())


def load(rundir: Path) -> tuple[int, list[Profile]]:
    """The profiles a boot left in @rundir (see prism.guest.insnprof)."""
    meta = rundir / "insnprof.json"
    if not meta.exists():
        raise PrismError(f"{meta} missing: the guest did not finish (see its console)")
    doc = json.loads(meta.read_text())
    profiles = []
    for r in doc["runs"]:
        syms = Symbols.load(rundir / r["kallsyms"])
        delta = block_delta(load_snapshot(rundir / f"snap-{r['before']}"),
                            load_snapshot(rundir / f"snap-{r['after']}"))
        funcs = per_function(delta, syms)
        ios = max(1, r["ios"])
        profiles.append(Profile(r["scheduler"], r["iops"], r["ios"],
                                collections.Counter({f: n / ios for f, n in funcs.items()}),
                                delta, syms))
    return doc["jobs"], profiles


def report(jobs: int, profiles: list[Profile], top: int = 30) -> str:
    """A markdown report: totals, then the functions that differ most from
    the first scheduler's."""
    base = profiles[0]
    lines = [f"Kernel instructions per 4 KiB random read (io_uring, iodepth 32, {jobs} "
             "job(s), delay-free null_blk, one vCPU under QEMU icount), counted "
             "between the marks around each scheduler's run.", "",
             "| scheduler | reads | IOPS (guest clock) | instructions per I/O | "
             f"vs {base.scheduler} |", "|---|---|---|---|---|"]
    for p in profiles:
        lines.append(f"| {p.scheduler} | {p.ios} | {p.iops:,.0f} | {p.total:,.0f} | "
                     f"{p.total - base.total:+,.0f} ({p.iops / base.iops:.3f}x IOPS) |")
    names: set[str] = set().union(*(p.funcs for p in profiles))
    for p in profiles[1:]:
        rows = sorted(names, key=lambda f: -abs(p.funcs[f] - base.funcs[f]))[:top]
        lines += ["", f"Functions by difference, {p.scheduler} against {base.scheduler} "
                  "(instructions per I/O):", "",
                  f"| function | {base.scheduler} | {p.scheduler} | difference |",
                  "|---|---|---|---|"]
        lines += [f"| `{f}` | {base.funcs[f]:.1f} | {p.funcs[f]:.1f} | "
                  f"{p.funcs[f] - base.funcs[f]:+.1f} |" for f in rows]
    return "\n".join(lines) + "\n"


_SRC_LINE = re.compile(r"^(/\S+):(\d+)")
_INSN = re.compile(r"^\s+([0-9a-f]+):\s")
_FUNC = re.compile(r"^([0-9a-f]+) <")


def annotate(p: Profile, func: str, ko: Path, top: int = 40) -> str:
    """Instructions per I/O by source line of @func, one of @ko's functions
    (objdump -dl on the module as built, with its debug information)."""
    start = p.syms.start(func)
    dis = subprocess.run(["objdump", "-dl", "--no-show-raw-insn", f"--disassemble={func}",
                          str(ko)], capture_output=True, text=True, check=True).stdout
    insns: list[tuple[int, str]] = []
    base, where = None, "?"
    for line in dis.splitlines():
        if m := _FUNC.match(line):
            base = int(m.group(1), 16)
        elif m := _SRC_LINE.match(line):
            where = f"{m.group(1)}:{m.group(2)}"
        elif (m := _INSN.match(line)) and base is not None:
            insns.append((int(m.group(1), 16) - base, where))
    if not insns:
        raise PrismError(f"{func}: not found in {ko}")
    offsets = [o for o, _ in insns]
    by_line: collections.Counter = collections.Counter()
    end = start + insns[-1][0] + 16
    for (vaddr, n), execs in p.delta.items():
        if not start <= vaddr < end:
            continue
        i = bisect.bisect_left(offsets, vaddr - start)
        for _, where in insns[i:i + n]:
            by_line[where] += execs / max(1, p.ios)
    out = [f"`{func}` under {p.scheduler}: {sum(by_line.values()):.1f} instructions per I/O",
           "", "| source line | instructions per I/O | code |", "|---|---|---|"]
    out += [f"| {_short(w)} | {n:.1f} | `{_source(w)}` |"
            for w, n in by_line.most_common(top)]
    return "\n".join(out) + "\n"


def _short(where: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{Path(path).name}:{line}"


def _source(where: str) -> str:
    """The text of a file:line objdump named, if the file is still there."""
    path, _, line = where.rpartition(":")
    try:
        text = Path(path).read_text(errors="replace").splitlines()[int(line) - 1]
    except (OSError, ValueError, IndexError):
        return ""
    return text.strip().replace("|", "\\|").replace("`", "'")[:70]
