"""blktests on the host: the project pins a snapshot of osandov/blktests
(it has no Debian package), ../shared/third-party/blktests-<commit>.tar.gz
next to the checkout, or the tarball or checkout named by $PRISM_BLKTESTS.
The host unpacks and builds it once in the cache (its helpers need gcc,
make and GNU awk), copies it into the VM's run directory for the guest
side (prism.guest.blktests) to run, and sums up what it found.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from ..common.errors import UsageError
from ..guest.blktests import (
    CI_FIO_TIMEOUT,
    EVERY_KERNEL_TESTS,
    FIO_TIMEOUT,
    SCHED_TESTS,
    SCRATCH_SERIAL,
)
from .build import REPO

__all__ = ["CI_FIO_TIMEOUT", "EVERY_KERNEL_TESTS", "FIO_TIMEOUT", "SCHED_TESTS", "SCRATCH_SERIAL",
           "Missing", "source", "prepare", "copy_to", "summary", "available_tests",
           "check_tests"]

COMMIT = "613b837"
TARBALL_NAME = f"blktests-{COMMIT}.tar.gz"


class Missing(Exception):
    """blktests is not available here; the message says how to get it."""


def source() -> Path:
    """The blktests snapshot: $PRISM_BLKTESTS, or the pinned tarball in
    ../shared/third-party/ next to the checkout."""
    env = os.environ.get("PRISM_BLKTESTS")
    repo = REPO
    candidates = [Path(env)] if env else [repo.parent / "shared" / "third-party" / TARBALL_NAME]
    for c in candidates:
        if c.exists():
            return c
    raise Missing(
        f"blktests not found (looked for {', '.join(map(str, candidates))}); get it with "
        f"'git clone https://github.com/osandov/blktests && git -C blktests checkout "
        f"{COMMIT}' and set PRISM_BLKTESTS to that directory (or to a tarball of it)")


def available_tests() -> set[str]:
    """The tests (GROUP/NNN) in the blktests snapshot, read from its
    directory or listed from its tarball (Missing if there is none)."""
    src = source()
    if src.is_dir():
        return {f"{p.parent.name}/{p.name}" for p in src.glob("tests/*/[0-9][0-9][0-9]")}
    with tarfile.open(src) as tf:
        return {m[1] for m in (re.fullmatch(r"[^/]+/tests/([a-z]+/\d{3})", n)
                               for n in tf.getnames()) if m}


def check_tests(text: str) -> list[str]:
    """--tests: "block" (the whole group) or a comma list of tests the
    snapshot has, such as block/005; a UsageError otherwise, before
    anything is built or booted. Without the snapshot only the form is
    checked (prepare() then says how to get it)."""
    if text == "block":
        return ["block"]
    tests = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in tests if not re.fullmatch(r"[a-z]+/\d{3}", t)]
    if not tests or bad:
        raise UsageError(f"--tests {text!r}: 'block' (the whole group) or a comma list of "
                         "blktests' tests such as block/005")
    try:
        known = available_tests()
    except Missing:
        return tests
    unknown = [t for t in tests if t not in known]
    if unknown:
        raise UsageError(f"--tests: blktests {COMMIT} has no {', '.join(unknown)}")
    return tests


def prepare(cache: Path) -> Path:
    """Unpack and build blktests once under @cache; returns its directory."""
    src = source()
    dest = cache / f"blktests-{COMMIT}"
    if (dest / ".built").exists():
        return dest
    if not shutil.which("gawk"):
        raise Missing("blktests needs GNU awk: apt-get install gawk")
    shutil.rmtree(dest, ignore_errors=True)
    if src.is_dir():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git", "results"))
    else:
        tmp = cache / f"blktests-{COMMIT}.unpack"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(src) as tf:
            tf.extractall(tmp)
        (top,) = list(tmp.iterdir())
        top.rename(dest)
        tmp.rmdir()
    r = subprocess.run(["make", "-C", str(dest), "-j2"], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"building blktests failed:\n{r.stderr[-2000:]}")
    (dest / ".built").write_text("ok\n")
    return dest


def copy_to(built: Path, rundir: Path) -> Path:
    dest = rundir / "blktests"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(built, dest, symlinks=True)
    return dest


def summary(doc: dict) -> dict[str, list[str]]:
    """Tests by outcome: passed, flaky (passed, but only when run again),
    failed (prism's), failed_elsewhere, not_run."""
    out: dict[str, list[str]] = {"passed": [], "flaky": [], "failed": [],
                                 "failed_elsewhere": [], "not_run": []}
    for t, r in sorted(doc.get("results", {}).items()):
        if r["status"] == "pass":
            out["flaky" if r.get("flaky") else "passed"].append(t)
        elif r["status"] == "fail":
            out["failed" if r.get("prism_failure") else "failed_elsewhere"].append(t)
        else:
            out["not_run"].append(f"{t}: {r.get('reason', r['status'])}")
    return out
