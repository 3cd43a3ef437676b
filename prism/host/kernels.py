"""The tested kernels, pinned in one place, and how to fetch them.

A kernel is Debian's image + headers packages and the matching
linux-source package, of which only block/ (the private elevator headers),
the top Makefile and checkpatch are extracted into the cache. Nothing from
the kernel tree ever enters the repository.

Two kinds, told by Kernel.root:
- the host's own Debian release (bookworm): image and headers installed
  with the host's apt into /boot, /lib/modules and /usr/src, as on a real
  machine;
- a newer release's kernel (root="trixie"), whose kbuild tools need a
  newer glibc and gcc than the host has: the headers and linux-source are
  installed into a build root made with mmdebstrap (build_root()), the
  module is built there (build.py), and the image with its /lib/modules
  tree is extracted from the .deb with dpkg-deb -x (image_dir()), which
  QEMU boots with the host's userspace. The build roots, the extracted
  images and a private apt setup for the other release (its own sources
  list and lists directory; the host's /etc/apt is never touched) live in
  roots_dir(), shared by every PRISM_CACHE.

`prism kernels update` (pins.py) moves the pins below to the newest ABI
of each series in the archive.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..common.errors import PrismError, UsageError

# The host's Debian release: kernels with root=None come from its apt.
HOST_RELEASE = "bookworm"


@dataclasses.dataclass(frozen=True)
class Kernel:
    series: str   # "6.12": what the user types
    abi: str      # "6.12.117+deb12-amd64": uname -r, package name suffix
    version: str  # Debian package version, same for image, headers, source
    # The Debian release whose build root builds it (None: the host's own
    # apt installs it; see the module's docstring).
    root: str | None = None
    # THE switch of the VM suite: whether the test suite boots this kernel
    # by default (tests/conftest.py's --kernels; CI runs that default).
    # False for a kernel that is fetched and built but never yet booted:
    # set True once `prism selftest --kernel SERIES` and
    # `prism blktests --kernel SERIES` have passed on it (and move
    # module/kernel-range's newest series with it: test_kernels.py checks).
    vm_tested: bool = True

    @property
    def release(self) -> str:
        """The Debian release the pin comes from (what the updater reads)."""
        return self.root or HOST_RELEASE

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
        if self.root:
            return image_dir(self) / "boot" / f"vmlinuz-{self.abi}"
        return Path("/boot") / f"vmlinuz-{self.abi}"

    @property
    def headers_dir(self) -> Path:
        """The headers as the host sees them (in the build root for a
        root kernel; build.py runs make on them inside it)."""
        if self.root:
            return build_root(self) / "usr" / "src" / f"linux-headers-{self.abi}"
        return Path("/usr/src") / f"linux-headers-{self.abi}"

    @property
    def modules_dir(self) -> Path:
        """/lib/modules/ABI, or the one extracted beside the image (where
        vng finds it from the image's path and links it into the guest)."""
        if self.root:
            return image_dir(self) / "lib" / "modules" / self.abi
        return Path("/lib/modules") / self.abi


# The pins: the tested set. Change a kernel here and nowhere else
# (`prism kernels update` rewrites these lines).
KERNELS = {
    "6.1": Kernel("6.1", "6.1.0-57-amd64", "6.1.192-3"),
    "6.12": Kernel("6.12", "6.12.117+deb12-amd64", "6.12.117-1~deb12u1"),
    "7.3": Kernel("7.3", "7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", root="trixie"),
}


def vm_tested() -> list[Kernel]:
    """The kernels the test suite boots by default (Kernel.vm_tested)."""
    return [KERNELS[s] for s in sorted(KERNELS, key=series_key) if KERNELS[s].vm_tested]


def host_kernels() -> list[Kernel]:
    """The pins the host's apt installs (DKMS on the host builds for these)."""
    return [KERNELS[s] for s in sorted(KERNELS, key=series_key) if not KERNELS[s].root]


def series_key(series: str) -> tuple[int, ...]:
    """Order series by number: 6.1 < 6.12 < 7.3."""
    return tuple(int(x) for x in series.split("."))


def get(series: str) -> Kernel:
    try:
        return KERNELS[series]
    except KeyError:
        raise UsageError(f"unknown kernel {series!r}; supported: "
                         + ", ".join(sorted(KERNELS, key=series_key)) + " (or all)") from None


def parse(arg: str) -> list[Kernel]:
    """--kernel's value: one series, a comma list, or "all" (the tested
    set: every pin, booted or not yet)."""
    if arg == "all":
        return [KERNELS[s] for s in sorted(KERNELS, key=series_key)]
    return [get(s.strip()) for s in arg.split(",") if s.strip()]


def _cache(var: str, name: str) -> Path:
    """$@var, else @name under the user's cache directory; made if missing."""
    env = os.environ.get(var)
    if env:
        base = Path(env)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME",
                                   Path.home() / ".cache")) / name
    base.mkdir(parents=True, exist_ok=True)
    return base


def cache_dir() -> Path:
    """Downloads and builds live here, never in the repository."""
    return _cache("PRISM_CACHE", "prism")


def roots_dir() -> Path:
    """Build roots, extracted images and the private apt setup: big, slow
    to make and independent of the module's sources, so shared by every
    PRISM_CACHE (a developer's private cache included). $PRISM_ROOTS, else
    ~/.cache/prism-7x (named for the 7.x kernels that first needed it)."""
    return _cache("PRISM_ROOTS", "prism-7x")


def build_root(k: Kernel) -> Path:
    """The mmdebstrap'd root that builds @k (one per Debian release)."""
    assert k.root, k
    return roots_dir() / f"{k.root}-root"


def image_dir(k: Kernel) -> Path:
    """@k's image .deb extracted (boot/, lib/modules/), for QEMU."""
    return roots_dir() / "images" / k.abi


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


# Where a release other than the host's gets its packages: the private
# apt setup's sources, and the build root's. Main only: kernels are there.
DEBIAN = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
SUITES = {
    "bookworm": ((DEBIAN, "bookworm"), (DEBIAN, "bookworm-updates"),
                 (SECURITY, "bookworm-security")),
    "trixie": ((DEBIAN, "trixie"), (DEBIAN, "trixie-backports"),
               (SECURITY, "trixie-security")),
}

UPDATER = "prism kernels update"


def sources_lines(release: str) -> list[str]:
    return [f"deb {uri} {suite} main" for uri, suite in SUITES[release]]


def apt_options(release: str) -> list[str]:
    """apt-get/apt-cache options for @release: the host's own apt for the
    host's release; else a private sources list, lists directory and
    cache under roots_dir()/apt/RELEASE (created here), so that the host's
    /etc/apt and /var/lib/apt stay as they are."""
    if release == HOST_RELEASE:
        return []
    d = roots_dir() / "apt" / release
    for sub in ("lists/partial", "cache/archives/partial", "sources.list.d",
                "preferences.d"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    src = d / "sources.list"
    text = "".join(line + "\n" for line in sources_lines(release))
    if not src.exists() or src.read_text() != text:
        src.write_text(text)
    return ["-o", f"Dir::Etc::SourceList={src}",
            "-o", f"Dir::Etc::SourceParts={d / 'sources.list.d'}",
            "-o", f"Dir::Etc::PreferencesParts={d / 'preferences.d'}",
            "-o", f"Dir::State::Lists={d / 'lists'}",
            "-o", f"Dir::Cache={d / 'cache'}",
            "-o", "Acquire::Languages=none",
            # apt's _apt user cannot write into root's cache.
            "-o", "APT::Sandbox::User=root"]


def apt_update(release: str) -> None:
    log(f"apt-get update ({release}"
        + (")" if release == HOST_RELEASE else f", private lists in {roots_dir() / 'apt'})"))
    r = _run(["apt-get", "update", "-q"] + apt_options(release))
    if r.returncode:
        raise PrismError(f"apt-get update ({release}) failed: " + r.stderr.strip()[-500:])


def offered_versions(pkg: str, release: str = HOST_RELEASE) -> list[str]:
    """Versions of @pkg that apt can install from @release, newest first."""
    if not shutil.which("apt-cache"):
        raise PrismError("apt-cache not found: fetching kernels needs Debian's apt")
    out = _run(["apt-cache"] + apt_options(release) + ["madison", pkg]).stdout
    return [line.split("|")[1].strip() for line in out.splitlines()
            if line.count("|") >= 2]


_apt_updated: set[str] = set()


def _ensure_apt_lists(pkg: str, release: str = HOST_RELEASE) -> list[str]:
    """Offered versions of @pkg, running apt-get update once if apt knows none."""
    versions = offered_versions(pkg, release)
    if not versions and release not in _apt_updated:
        log(f"apt knows no versions of {pkg}")
        apt_update(release)
        _apt_updated.add(release)
        versions = offered_versions(pkg, release)
    return versions


def check_offered(k: Kernel, pkg: str) -> None:
    """Fail, naming the updater, when a pinned package is not (or no
    longer: Debian's archive keeps only the latest few ABIs) offered."""
    versions = _ensure_apt_lists(pkg, k.release)
    if k.version in versions:
        return
    if k.release not in _apt_updated:
        # The lists may be older than the pin: read them again, once.
        apt_update(k.release)
        _apt_updated.add(k.release)
        versions = offered_versions(pkg, k.release)
        if k.version in versions:
            return
    offered = ", ".join(versions) if versions else "nothing"
    raise PrismError(
        f"{pkg}={k.version} (the {k.series} pin in prism/host/kernels.py) is not offered "
        f"by Debian's archive ({k.release}) any more; offered: {offered}. "
        f"Run '{UPDATER}' to move the pins to the newest ABI of each series, "
        "then build and test on it")


def installed(k: Kernel) -> bool:
    if k.root:
        return root_ready(k) and image_ready(k)
    return (k.vmlinuz.exists() and (k.headers_dir / "Makefile").exists()
            and k.modules_dir.exists())


def install_packages(k: Kernel) -> None:
    """Install the image and headers with apt (they land in /boot,
    /lib/modules and /usr/src, where a real machine has them too)."""
    if k.root:
        ensure_root(k)
        fetch_image(k)
        return
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


# A build root per Debian release: minbase, the compiler and make, dkms,
# and the headers and linux-source of every pin of that release
# (installed, so that the package's DKMS build in the root finds
# /usr/src/linux-source-X.Y.tar.xz as on a machine of that release:
# tests/dkmstool.py's install_in_root()).
ROOT_TOOLS = ("gcc-14", "make", "xz-utils", "kmod", "dkms")
_ROOT_STAMP = ".prism-root"


def root_packages(release: str) -> list[str]:
    pins = [k for k in KERNELS.values() if k.root == release]
    return list(ROOT_TOOLS) + [f"{p}={k.version}" for k in pins
                               for p in (k.headers_pkg, k.source_pkg)]


def root_ready(k: Kernel) -> bool:
    """The root exists and was made with the packages today's pins need
    (the stamp lists them: a pin moved, the root is made again)."""
    stamp = build_root(k) / _ROOT_STAMP
    return (stamp.exists() and stamp.read_text().split() == root_packages(k.root or "")
            and (k.headers_dir / "Makefile").exists())


def ensure_root(k: Kernel) -> Path:
    """Make @k's build root with mmdebstrap, unless it is there with the
    right packages: into a temporary directory, renamed when complete,
    so a half-made root is never taken for one. About 35 s and 590 MB."""
    root = build_root(k)
    if root_ready(k):
        return root
    if os.geteuid() != 0:
        raise PrismError(f"making the {k.root} build root {root} needs root (mmdebstrap)")
    if not shutil.which("mmdebstrap"):
        raise PrismError("mmdebstrap not found: apt-get install mmdebstrap "
                         "(scripts/setup.sh does)")
    release = k.root or ""
    for pin in (p for p in KERNELS.values() if p.root == release):
        for pkg in (pin.headers_pkg, pin.source_pkg, pin.image_pkg):
            check_offered(pin, pkg)
    pkgs = root_packages(release)
    tmp = root.with_name(root.name + ".tmp")
    _remove_tree(tmp)
    log(f"making the {release} build root {root} with mmdebstrap ({', '.join(pkgs)})")
    r = _run(["mmdebstrap", "--variant=minbase", "--mode=root", "-q",
              "--include=" + ",".join(pkgs), release, str(tmp)] + sources_lines(release))
    if r.returncode or not (tmp / "usr" / "src" / f"linux-headers-{k.abi}" / "Makefile").exists():
        _remove_tree(tmp)
        raise PrismError(f"mmdebstrap of the {release} build root failed: "
                         + (r.stderr or r.stdout).strip()[-1500:])
    (tmp / _ROOT_STAMP).write_text("\n".join(pkgs) + "\n")
    if root.exists():
        old = root.with_name(root.name + ".old")
        _remove_tree(old)
        root.rename(old)
        _remove_tree(old)
    tmp.rename(root)
    return root


def _remove_tree(path: Path) -> None:
    """rm -rf, refusing a tree with something mounted in it (a build's
    /proc that outlived its mount namespace would be the host's)."""
    if not path.exists():
        return
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    inside = [m for m in mounts if len(m.split()) > 1
              and (m.split()[1] + "/").startswith(str(path) + "/")]
    if inside:
        raise PrismError(f"not removing {path}: mounted inside it: {inside[0]}")
    shutil.rmtree(path)


def image_ready(k: Kernel) -> bool:
    return k.vmlinuz.exists() and (k.modules_dir / "modules.dep").exists()


def fetch_image(k: Kernel) -> Path:
    """Download @k's image .deb (private apt) and extract it with dpkg-deb -x
    into image_dir(): boot/vmlinuz-ABI and lib/modules/ABI, with the
    modules.dep that the package's postinst would have made (depmod -b).
    Newer packages split the image: linux-image-ABI is then empty and
    depends on linux-binary-ABI (the image) and linux-modules-ABI (the
    modules tree) of the same version, extracted with it."""
    dest = image_dir(k)
    if image_ready(k):
        return dest
    debs = roots_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    image = _download(k, k.image_pkg, debs)
    parts = [image] + [_download(k, pkg, debs) for pkg in _same_abi_depends(k, image)]
    log(f"extracting {', '.join(d.name for d in parts)} into {dest}")
    tmp = dest.with_name(dest.name + ".tmp")
    _remove_tree(tmp)
    tmp.mkdir(parents=True)
    for deb in parts:
        r = _run(["dpkg-deb", "-x", str(deb), str(tmp)])
        if r.returncode:
            _remove_tree(tmp)
            raise PrismError(f"dpkg-deb -x {deb.name} failed: {r.stderr.strip()[-500:]}")
    # Newer packages ship /usr/lib/modules: give the tree one layout, the
    # one vng looks for beside the image.
    if not (tmp / "lib").exists() and (tmp / "usr" / "lib" / "modules").exists():
        (tmp / "lib").symlink_to("usr/lib")
    # They also keep the image in the modules tree (the postinst puts it
    # in /boot): name it as in /boot.
    boot = tmp / "boot" / f"vmlinuz-{k.abi}"
    if not boot.exists() and (tmp / "lib" / "modules" / k.abi / "vmlinuz").exists():
        boot.parent.mkdir(exist_ok=True)
        boot.symlink_to(f"../lib/modules/{k.abi}/vmlinuz")
    if not boot.exists():
        _remove_tree(tmp)
        raise PrismError(f"no boot/vmlinuz-{k.abi} in {', '.join(d.name for d in parts)}")
    r = _run(["depmod", "-b", str(tmp), k.abi])
    if r.returncode or not (tmp / "lib" / "modules" / k.abi / "modules.dep").exists():
        _remove_tree(tmp)
        raise PrismError(f"depmod -b for {k.abi} failed: {r.stderr.strip()[-500:]}")
    _remove_tree(dest)
    tmp.rename(dest)
    return dest


def _same_abi_depends(k: Kernel, deb: Path) -> list[str]:
    """The packages @deb depends on that carry @k's ABI in their name, at
    @k's version (linux-binary-ABI, linux-modules-ABI, linux-base-ABI)."""
    depends = _run(["dpkg-deb", "-f", str(deb), "Depends"]).stdout
    out = []
    for alt in depends.split(","):
        m = re.fullmatch(r"\s*(linux-[a-z]+-" + re.escape(k.abi) + r")\s*\(=\s*(\S+)\)\s*",
                         alt)
        if m and m.group(2) == k.version:
            out.append(m.group(1))
    return out


def _download(k: Kernel, pkg: str, debs: Path) -> Path:
    """apt-get download PKG=VERSION of @k's release into @debs (kept: a
    second extraction needs no network)."""
    name = f"{pkg}_{k.version}_amd64.deb"
    got = [p for p in debs.glob(f"{pkg}_*.deb") if p.name.replace("%3a", ":") == name]
    if got and got[0].stat().st_size > 0:
        return got[0]
    check_offered(k, pkg)
    log(f"downloading {pkg}={k.version} into {debs}")
    r = _run(["apt-get", "download", "-q"] + apt_options(k.release) + [f"{pkg}={k.version}"],
             cwd=debs)
    got = [p for p in debs.glob(f"{pkg}_*.deb") if p.name.replace("%3a", ":") == name]
    if r.returncode or not got:
        raise PrismError(f"apt-get download {pkg}={k.version} failed: "
                         + r.stderr.strip()[-500:])
    return got[0]


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
    prefix = f"linux-source-{k.series}/"
    inner = f"./usr/src/linux-source-{k.series}.tar.xz"
    if k.root:
        # Installed in the build root (ensure_root): the tarball is there.
        ensure_root(k)
        tarball = build_root(k) / inner.removeprefix("./")
        what = str(tarball)
        stream = f"xz -dc '{tarball}'"
    else:
        deb = _source_deb(k)
        what = deb.name
        # The data tar of the .deb holds the kernel tarball; stream it
        # through xz and let tar pick out only what prism needs.
        stream = f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{inner}' | xz -d"
    log(f"extracting block/ from {what}")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pipeline = (f"{stream} | tar -x -C '{tmp}' --strip-components=1 "
                + " ".join(f"'{prefix}{w.rstrip('/')}'" for w in _WANTED))
    r = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline],
                       text=True, capture_output=True)
    if r.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrismError(f"extracting {what} failed: {r.stderr.strip()[-500:]}")
    if not (tmp / "block" / "elevator.h").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrismError(f"block/elevator.h missing after extracting {what}: "
                         "the download may be damaged; delete it and retry")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def fetch(k: Kernel) -> None:
    install_packages(k)
    fetch_source(k)
