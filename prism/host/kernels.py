"""The supported kernels, pinned in one place, and how to fetch them.

A kernel is Debian's image + headers packages (installed with apt, as on
a real machine) and the matching linux-source package, of which only
block/ (the private elevator headers) and checkpatch are extracted into
the cache. Nothing from the kernel tree ever enters the repository.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from ..common.errors import PrismError, UsageError


@dataclasses.dataclass(frozen=True)
class Kernel:
    series: str   # "6.12": what the user types
    abi: str      # "6.12.117+deb12-amd64": uname -r, package name suffix
    version: str  # Debian package version, same for image, headers, source

    @property
    def image_pkg(self) -> str:
        return f"linux-image-{self.abi}"

    @property
    def headers_pkg(self) -> str:
        return f"linux-headers-{self.abi}"

    @property
    def source_pkg(self) -> str:
        return f"linux-source-{self.series}"

    @property
    def vmlinuz(self) -> Path:
        return Path("/boot") / f"vmlinuz-{self.abi}"

    @property
    def headers_dir(self) -> Path:
        return Path("/usr/src") / f"linux-headers-{self.abi}"

    @property
    def modules_dir(self) -> Path:
        return Path("/lib/modules") / self.abi


# The pins. Change a kernel here and nowhere else.
KERNELS = {
    "6.1": Kernel("6.1", "6.1.0-56-amd64", "6.1.192-2"),
    "6.12": Kernel("6.12", "6.12.117+deb12-amd64", "6.12.117-1~deb12u1"),
}


def get(series: str) -> Kernel:
    try:
        return KERNELS[series]
    except KeyError:
        raise UsageError(f"unknown kernel {series!r}; supported: "
                         + ", ".join(sorted(KERNELS)) + " (or all)") from None


def parse(arg: str) -> list[Kernel]:
    """--kernel's value: one series, a comma list, or "all"."""
    if arg == "all":
        return [KERNELS[s] for s in sorted(KERNELS)]
    return [get(s.strip()) for s in arg.split(",") if s.strip()]


def cache_dir() -> Path:
    """Downloads and builds live here, never in the repository."""
    env = os.environ.get("PRISM_CACHE")
    if env:
        base = Path(env)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME",
                                   Path.home() / ".cache")) / "prism"
    base.mkdir(parents=True, exist_ok=True)
    return base


def source_dir(k: Kernel) -> Path:
    """Where block/ of the matching source is extracted."""
    return cache_dir() / "src" / f"{k.series}-{k.version}"


def block_dir(k: Kernel) -> Path:
    return source_dir(k) / "block"


def checkpatch(k: Kernel) -> Path:
    return source_dir(k) / "scripts" / "checkpatch.pl"


def log(msg: str) -> None:
    print(f"prism: {msg}", flush=True)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def offered_versions(pkg: str) -> list[str]:
    """Versions of @pkg that apt can install, newest first."""
    if not shutil.which("apt-cache"):
        raise PrismError("apt-cache not found: fetching kernels needs Debian's apt")
    out = _run(["apt-cache", "madison", pkg]).stdout
    return [line.split("|")[1].strip() for line in out.splitlines()
            if line.count("|") >= 2]


_apt_updated = False


def _ensure_apt_lists(pkg: str) -> list[str]:
    """Offered versions of @pkg, running apt-get update once if apt knows none."""
    global _apt_updated
    versions = offered_versions(pkg)
    if not versions and not _apt_updated:
        log(f"apt knows no versions of {pkg}; running apt-get update")
        r = _run(["apt-get", "update", "-q"])
        _apt_updated = True
        if r.returncode:
            raise PrismError("apt-get update failed: " + r.stderr.strip()[-500:])
        versions = offered_versions(pkg)
    return versions


def check_offered(k: Kernel, pkg: str) -> None:
    versions = _ensure_apt_lists(pkg)
    if k.version not in versions:
        offered = ", ".join(versions) if versions else "nothing"
        raise PrismError(
            f"{pkg}={k.version} (pinned in prism/host/kernels.py) is not offered by "
            f"apt; offered: {offered}")


def installed(k: Kernel) -> bool:
    return (k.vmlinuz.exists() and (k.headers_dir / "Makefile").exists()
            and k.modules_dir.exists())


def install_packages(k: Kernel) -> None:
    """Install the image and headers with apt (they land in /boot,
    /lib/modules and /usr/src, where a real machine has them too)."""
    if installed(k):
        return
    if os.geteuid() != 0:
        raise PrismError(f"{k.image_pkg} is not installed and installing it "
                         "needs root (apt-get install)")
    for pkg in (k.image_pkg, k.headers_pkg):
        check_offered(k, pkg)
    log(f"installing {k.image_pkg} and {k.headers_pkg} {k.version} with apt")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                        f"{k.image_pkg}={k.version}", f"{k.headers_pkg}={k.version}"],
                       text=True, capture_output=True, env=env)
    if r.returncode or not installed(k):
        raise PrismError(f"apt-get install of kernel {k.abi} failed: "
                         + (r.stderr or r.stdout).strip()[-800:])


def _source_deb(k: Kernel) -> Path:
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    name = f"{k.source_pkg}_{k.version}_all.deb"
    deb = debs / name
    if deb.exists() and deb.stat().st_size > 0:
        return deb
    check_offered(k, k.source_pkg)
    log(f"downloading {k.source_pkg}={k.version} into {debs}")
    # apt's _apt user cannot write into root's cache: download as root.
    r = _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root",
              f"{k.source_pkg}={k.version}"], cwd=debs)
    got = [p for p in debs.glob(f"{k.source_pkg}_*.deb")
           if p.name.replace("%3a", ":") == name]
    if r.returncode or not got:
        raise PrismError(f"apt-get download {k.source_pkg}={k.version} failed: "
                         + r.stderr.strip()[-500:])
    return got[0]


# What is taken out of the source tarball: the private block headers,
# checkpatch with the data files it reads, and the top Makefile, whose
# version the module's Kbuild compares with the target kernel's.
_WANTED = ("Makefile", "block/", "scripts/checkpatch.pl", "scripts/spelling.txt",
           "scripts/const_structs.checkpatch")


def fetch_source(k: Kernel) -> Path:
    """Extract block/ and checkpatch from linux-source into the cache."""
    dest = source_dir(k)
    if ((dest / "block" / "elevator.h").exists() and checkpatch(k).exists()
            and (dest / "Makefile").exists()):
        return dest
    deb = _source_deb(k)
    log(f"extracting block/ from {deb.name}")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    prefix = f"linux-source-{k.series}/"
    inner = f"./usr/src/linux-source-{k.series}.tar.xz"
    # The data tar of the .deb holds the kernel tarball; stream it through
    # xz and let tar pick out only what prism needs.
    pipeline = (f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{inner}' | xz -d | "
                f"tar -x -C '{tmp}' --strip-components=1 "
                + " ".join(f"'{prefix}{w.rstrip('/')}'" for w in _WANTED))
    r = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline],
                       text=True, capture_output=True)
    if r.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrismError(f"extracting {deb.name} failed: {r.stderr.strip()[-500:]}")
    if not (tmp / "block" / "elevator.h").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrismError(f"block/elevator.h missing after extracting {deb.name}: "
                         "the download may be damaged; delete it and retry")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def fetch(k: Kernel) -> None:
    install_packages(k)
    fetch_source(k)
