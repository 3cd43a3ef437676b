"""Build prism-iosched.ko for a pinned kernel, and run checkpatch on it."""

from __future__ import annotations

import hashlib
import re
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


def _kbuild(k: kernels.Kernel, out: Path, extra: list[str], what: str) -> None:
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


def _sources_digest(k: kernels.Kernel) -> str:
    """What a build depends on that can change between two calls: every
    source file, the kernel it is built for and the block/ headers used."""
    cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256(f"{k.abi}\n{kernels.block_dir(k)}\n{cc}".encode())
    for f in ("Kbuild", "VERSION") + MODULE_FILES:
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
        raise PrismError(f"{k.headers_dir} missing: run 'prism fetch --kernel {k.series}'")
    out = build_dir(k)
    stamp = out / "sources.sha256"
    digest = _sources_digest(k)
    if (stamp.exists() and stamp.read_text() == digest and module_path(k).exists()
            and testblk_path(k).exists()):
        return module_path(k)
    # A fresh directory per build: no stale objects from the other kernel.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in ("Kbuild", "VERSION") + MODULE_FILES:
        shutil.copy2(MODULE_SRC / f, out / f)
    kernels.log(f"building {MODULE_NAME}.ko for {k.abi}")
    _kbuild(k, out, [f"PRISM_BLOCK_DIR={kernels.block_dir(k)}"], "module")
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
