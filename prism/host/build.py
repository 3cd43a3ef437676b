"""Build prism-iosched.ko for a pinned kernel, and run checkpatch on it."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from ..common.errors import PrismError
from . import kernels

REPO = Path(__file__).resolve().parents[2]
MODULE_SRC = REPO / "module"
MODULE_NAME = "prism-iosched"
# The files Kbuild compiles (every C source and header in module/, not
# what a build made in place there); checkpatch must pass on each.
MODULE_FILES = tuple(sorted(p.name for p in MODULE_SRC.glob("*.[ch]")
                            if not p.name.endswith(".mod.c")))

# A test-only disk the VM suite loads (tests/kmod/prism_testblk.c): it
# requeues, scribbles on the request unions and takes FUA and multi-range
# discards, which no stock driver does on demand.
# What Kbuild reads besides the sources.
KBUILD_FILES = ("Kbuild", "VERSION", "kernel-range")

TESTBLK_SRC = REPO / "tests" / "kmod"
TESTBLK_NAME = "prism_testblk"

# prism's tunables (queue/iosched/*) are the entries of this array.
SYSFS_SRC = MODULE_SRC / "prism_sysfs.c"
_ATTR_ARRAY = re.compile(r"struct elv_fs_entry \w+\[\] = \{(.*?)\n\};", re.S)
_ATTR_ENTRY = re.compile(r"^\s*\w+\((\w+)", re.M)


def module_tunables(src: Path = SYSFS_SRC) -> list[str]:
    """The tunables of the module that prism builds, read from its
    source (the elv_fs_entry array), so that a scheduler variant is
    checked on the host against the module it will load, before any
    build or boot."""
    try:
        m = _ATTR_ARRAY.search(src.read_text())
    except OSError as e:
        raise PrismError(f"cannot read prism's tunables: {e}") from None
    names = _ATTR_ENTRY.findall(m.group(1)) if m else []
    if not names:
        raise PrismError(f"{src}: no elv_fs_entry array of tunables found")
    return names


# Lines of kbuild output that are not warnings about our code.
_BENIGN = re.compile(r"Skipping BTF generation")


def build_dir(k: kernels.Kernel) -> Path:
    return kernels.cache_dir() / "build" / k.abi


def module_path(k: kernels.Kernel) -> Path:
    return build_dir(k) / f"{MODULE_NAME}.ko"


def testblk_path(k: kernels.Kernel) -> Path:
    return build_dir(k) / "testblk" / f"{TESTBLK_NAME}.ko"


# Where a build root sees the build directory and the extracted source
# (bind mounts, in the build's own mount namespace).
ROOT_OUT = "/prism/out"
ROOT_SRC = "/prism/src"


def root_command(k: kernels.Kernel, cmd: list[str], binds: dict[Path, str]) -> list[str]:
    """@cmd to run inside @k's build root: in a mount namespace of its own
    (unshare --mount, so nothing is mounted on the host), with /proc
    (objtool reads /proc/self) and each host directory of @binds mounted at
    its path in the root, and a clean environment (the host's PATH, CC or
    MAKEFLAGS mean nothing there)."""
    root = kernels.build_root(k)
    script = ["set -e", f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
    for host, inside in binds.items():
        target = shlex.quote(str(root) + inside)
        script += [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(host))} {target}"]
    script.append("exec chroot " + shlex.quote(str(root)) + " env -i "
                  "PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "
                  + " ".join(shlex.quote(c) for c in cmd))
    return ["unshare", "--mount", "--propagation", "private", "--fork",
            "sh", "-c", "; ".join(script)]


def _kbuild(k: kernels.Kernel, out: Path, extra: list[str], what: str) -> None:
    """make modules in @out for @k: on the host, or for a root kernel in
    its build root, where @out is seen as ROOT_OUT and the extracted
    source as ROOT_SRC."""
    if k.root:
        if os.geteuid() != 0:
            raise PrismError(f"building for {k.abi} runs make in the {k.root} build root "
                             "(unshare, chroot): run as root")
        cmd = root_command(k, ["make", "-C", f"/usr/src/linux-headers-{k.abi}",
                               f"M={ROOT_OUT}"] + extra + ["modules"],
                           {out: ROOT_OUT, kernels.source_dir(k): ROOT_SRC})
    else:
        cmd = ["make", "-C", str(k.headers_dir), f"M={out}"] + extra + ["modules"]
    r = subprocess.run(cmd, text=True, capture_output=True)
    text = r.stdout + r.stderr
    if r.returncode:
        raise PrismError(f"{what} build for {k.abi} failed:\n{text[-3000:]}")
    warnings = [line for line in text.splitlines()
                if re.search(r"\bwarning\b", line, re.I) and not _BENIGN.search(line)]
    if warnings:
        raise PrismError(f"{what} build for {k.abi} printed warnings:\n"
                         + "\n".join(warnings[:40]))


def _compiler(k: kernels.Kernel) -> str:
    """What compiles for @k: the build root's packages (a tested root's:
    the pins' headers and the tools; a build-only root's stamp: its tools)
    and its compilers' versions; for the debug kernel, built on the host,
    the host's gcc."""
    if k.root:
        root = kernels.build_root(k)
        gcc = subprocess.run(["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-W",
                              "gcc-[0-9]*"], capture_output=True, text=True).stdout
        stamp = ((root / ".prism-root").read_text() if k.build_only
                 else " ".join(kernels.root_packages(k.root)) + "\n")
        return stamp + gcc
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout


def _kernel_build(k: kernels.Kernel) -> str:
    """What tells one build of the debug kernel from the next under the
    same release string (its stamp: source, config, compiler): a module
    built for the last one may not fit the next one's structs. Nothing
    for the others, whose ABI names their build."""
    stamp = kernels.image_dir(k) / kernels.DEBUG_STAMP
    return stamp.read_text() if k.debug and stamp.exists() else ""


def _sources_digest(k: kernels.Kernel) -> str:
    """What a build depends on that can change between two calls: every
    source file, the kernel it is built for, the compiler and the block/
    headers used."""
    h = hashlib.sha256(f"{k.abi}\n{kernels.block_dir(k)}\n{_compiler(k)}\n"
                       f"{_kernel_build(k)}".encode())
    for f in KBUILD_FILES + MODULE_FILES:
        h.update(f.encode() + b"\0" + (MODULE_SRC / f).read_bytes())
    for f in ("Kbuild", f"{TESTBLK_NAME}.c"):
        h.update(f.encode() + b"\0" + (TESTBLK_SRC / f).read_bytes())
    return h.hexdigest()


def build(k: kernels.Kernel, fetch: bool = True) -> Path:
    """Compile the module out of tree against @k, and the test disk next
    to it (testblk_path); fail on any warning. A build of the same sources
    for the same kernel is reused (the test suite builds once per boot)."""
    if fetch:
        kernels.fetch(k)
    if not (k.headers_dir / "Makefile").exists():
        raise PrismError(f"{k.headers_dir} missing: run '{kernels.fetch_command(k)}'")
    out = build_dir(k)
    stamp = out / "sources.sha256"
    digest = _sources_digest(k)
    if (stamp.exists() and stamp.read_text() == digest and module_path(k).exists()
            and testblk_path(k).exists()):
        return module_path(k)
    # A fresh directory per build: no stale objects from the other kernel.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in KBUILD_FILES + MODULE_FILES:
        shutil.copy2(MODULE_SRC / f, out / f)
    where = (f" in the {k.root} build-only root" if k.build_only
             else f" in the {k.root} build root" if k.root else "")
    kernels.log(f"building {MODULE_NAME}.ko for {k.abi}{where}")
    block = f"{ROOT_SRC}/block" if k.root else str(kernels.block_dir(k))
    _kbuild(k, out, [f"PRISM_BLOCK_DIR={block}"], "module")
    tb = out / "testblk"
    tb.mkdir()
    for f in ("Kbuild", f"{TESTBLK_NAME}.c"):
        shutil.copy2(TESTBLK_SRC / f, tb / f)
    _kbuild(k, tb, [], "test disk")
    ko = module_path(k)
    if not ko.exists():
        raise PrismError(f"build succeeded but {ko} is missing")
    stamp.write_text(digest)
    return ko


def run_checkpatch(k: kernels.Kernel) -> tuple[bool, str]:
    """checkpatch.pl --no-tree -f on every module source; (clean, report)."""
    kernels.fetch_source(k)
    script = kernels.checkpatch(k)
    if not shutil.which("perl"):
        raise PrismError("perl not found: checkpatch needs it (apt-get install perl)")
    r = subprocess.run(["perl", str(script), "--no-tree", "--terse", "--show-types", "-f"]
                       + [str(MODULE_SRC / f) for f in MODULE_FILES]
                       + [str(TESTBLK_SRC / f"{TESTBLK_NAME}.c")],
                       text=True, capture_output=True)
    report = (r.stdout + r.stderr).strip()
    problems = [line for line in report.splitlines()
                if re.search(r": (ERROR|WARNING|CHECK):", line)]
    return (r.returncode == 0 and not problems), report
