"""The kernels prism builds for, pinned in one place, and how to fetch them.

A kernel is Debian's image + headers packages and the matching
linux-source package, of which only block/ (the private elevator headers),
the top Makefile and checkpatch are extracted into the cache. Nothing from
the kernel tree ever enters the repository.

Two sets: the tested set (KERNELS), built and booted by the test suite,
and the build-only set (BUILD_ONLY), kernels people run that prism must
build for without a warning but that are never booted (other flavours,
other releases' builds of a series). Beside them, in no set, the debug
kernel (DEBUG): a pin's own source built by prism with lockdep, KASAN and
kmemleak (debugkernel.py), booted only when named. Three kinds, told by
Kernel.build_only and Kernel.debug:
- a tested kernel, of the host's own Debian release (6.1 and 6.12 from
  bookworm) or a newer one (7.3 from trixie, whose kbuild tools need a
  newer glibc and gcc than the host has): its headers and linux-source
  are installed into a build root of its release (Kernel.root) made with
  mmdebstrap (build_root()), the module is built there (build.py), and
  the image with its /lib/modules tree is extracted from the .deb with
  dpkg-deb -x (image_dir()), which QEMU boots with the host's userspace.
  Nothing is installed on the host itself: its /boot, GRUB and
  /lib/modules stay as they were. The build roots, the extracted images
  and a private apt setup for a release other than the host's (its own
  sources list and lists directory; the host's /etc/apt is never
  touched) live in roots_dir(), shared by every PRISM_CACHE;
- a build-only kernel (build_only=True), of any release: its headers are
  extracted with dpkg-deb into a build root of its release of their own
  (build_only_root(): the compiler and tools the headers ask for,
  installed with mmdebstrap), never installed with apt, as 6.12's depend
  on their image (100 MB, and initramfs-tools, which would build an
  initramfs in the root); no image is fetched, and its linux-source .deb
  is downloaded into the cache;
- the debug kernel (debug=True): the whole linux-source tree of a pin
  extracted and built on the host (`prism kernels debug-build`), which
  is then both its headers and its block/, and its image and modules
  installed beside it in the layout of an extracted .deb (image_dir()).

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

# The host's Debian release: its apt lists (the host's own) say what
# bookworm offers; nothing is installed from them but the tools.
HOST_RELEASE = "bookworm"


@dataclasses.dataclass(frozen=True)
class Kernel:
    series: str   # "6.12": the Linux series (linux-source-SERIES)
    abi: str      # "6.12.117+deb12-amd64": uname -r, package name suffix
    version: str  # Debian package version, same for image, headers, source
    # The Debian release whose build root builds it (None: the debug
    # kernel, built on the host; see the module's docstring).
    root: str | None = None
    # THE switch of the VM suite: whether the test suite boots this kernel
    # by default (tests/conftest.py's --kernels; CI runs that default).
    # False for a kernel that is fetched and built but never yet booted:
    # set True once `prism selftest --kernel SERIES` and
    # `prism blktests --kernel SERIES` have passed on it (and move
    # module/kernel-range's newest series with it: test_kernels.py checks).
    vm_tested: bool = True
    # What the user types (--kernel): the series unless the set holds
    # another kernel of the same series ("6.12-rt").
    name: str = ""
    # In the build-only set: built, never booted (vm_tested is then False).
    build_only: bool = False
    # A build-only kernel that a command may boot all the same (the -rt
    # flavours, for `prism stress --kernel 6.12-rt`: PREEMPT_RT turns
    # spinlocks into sleeping locks and timers soft): its image is fetched
    # the first time it boots, never by the build-only set's fetch, so CI
    # downloads no image it does not boot.
    boots: bool = False
    # Built by prism from the source of the pin of the same version, with
    # the kernel's own checkers on (DEBUG; vm_tested is then False).
    debug: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.series)
        if self.build_only or self.debug:
            object.__setattr__(self, "vm_tested", False)

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
        """Booted from image_dir() (an extracted .deb, or the debug
        kernel's install), never from the host's /boot."""
        return image_dir(self) / "boot" / f"vmlinuz-{self.abi}"

    @property
    def headers_dir(self) -> Path:
        """The headers as the host sees them (in the build root, where
        build.py runs make on them; the debug kernel's built tree)."""
        if self.debug:
            return debug_tree(self)
        return build_root(self) / "usr" / "src" / f"linux-headers-{self.abi}"

    @property
    def modules_dir(self) -> Path:
        """The module tree extracted beside the image (where vng finds it
        from the image's path and links it into the guest)."""
        return image_dir(self) / "lib" / "modules" / self.abi


# The pins: the tested set. Change a kernel here and nowhere else
# (`prism kernels update` rewrites these lines).
KERNELS = {
    "6.1": Kernel("6.1", "6.1.0-57-amd64", "6.1.192-3", root="bookworm"),
    "6.12": Kernel("6.12", "6.12.118+deb12-amd64", "6.12.118-1~deb12u1", root="bookworm"),
    "7.3": Kernel("7.3", "7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", root="trixie"),
}

# The build-only set: kernels prism must build for without a warning,
# never booted (`prism build --kernel build-only`; `prism kernels update`
# moves these too). root names the Debian release they come from: sid's
# 7.2 is built with sid's gcc-16; Debian 13's own 6.12 with trixie's
# gcc-14; the -cloud and -rt flavours of the tested 6.12 and 7.3 with
# their release's compiler, from the same source as the tested kernel.
BUILD_ONLY = {k.name: k for k in (
    Kernel("6.12", "6.12.118+deb12-cloud-amd64", "6.12.118-1~deb12u1", root="bookworm",
           name="6.12-cloud", build_only=True),
    Kernel("6.12", "6.12.118+deb12-rt-amd64", "6.12.118-1~deb12u1", root="bookworm",
           name="6.12-rt", build_only=True, boots=True),
    Kernel("6.12", "6.12.118+deb13-amd64", "6.12.118-1", root="trixie",
           name="6.12-deb13", build_only=True),
    Kernel("7.2", "7.2.13+deb14-amd64", "7.2.13-1", root="sid",
           name="7.2", build_only=True),
    Kernel("7.3", "7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1", root="trixie",
           name="7.3-cloud", build_only=True),
    Kernel("7.3", "7.3.4+deb13-rt-amd64", "7.3.4-1~bpo13+1", root="trixie",
           name="7.3-rt", build_only=True, boots=True),
)}


# The debug kernels' LOCALVERSION: their release string is the upstream
# version and this.
DEBUG_LOCALVERSION = "-prism-debug"


def _debug_of(pin: Kernel) -> Kernel:
    """@pin's own source built with the kernel's checkers on: the same
    series and Debian version, named SERIES-debug, with a release string
    of its own (the upstream version and DEBUG_LOCALVERSION), so that
    nothing of it is taken for the pin's."""
    upstream = pin.version.split("-")[0]
    return Kernel(pin.series, upstream + DEBUG_LOCALVERSION, pin.version,
                  name=f"{pin.series}-debug", debug=True)


# The debug kernels, in no set: `--kernel all` and the test suite never
# boot one, `--kernel 6.12-debug` does once `prism kernels debug-build`
# has built it. They follow their pin when `prism kernels update` moves it.
DEBUG = {k.name: k for k in (_debug_of(KERNELS["6.12"]),)}
DEBUG_BUILDER = "prism kernels debug-build"


def vm_tested() -> list[Kernel]:
    """The kernels the test suite boots by default (Kernel.vm_tested)."""
    return [KERNELS[s] for s in sorted(KERNELS, key=series_key) if KERNELS[s].vm_tested]


def series_key(series: str) -> tuple[int, ...]:
    """Order series by number: 6.1 < 6.12 < 7.3."""
    return tuple(int(x) for x in series.split("."))


def _ordered(table: dict[str, Kernel]) -> list[Kernel]:
    """By series, then name: 6.12 < 6.12-cloud < 6.12-rt < 7.2."""
    return sorted(table.values(), key=lambda k: (series_key(k.series), k.name))


def build_only() -> list[Kernel]:
    """The build-only set (BUILD_ONLY), in series order."""
    return _ordered(BUILD_ONLY)


# --kernel's names for the sets (parse()).
SETS = {"all": "the tested set", "build-only": "the build-only set",
        "every": "both"}


def get(name: str) -> Kernel:
    try:
        return KERNELS.get(name) or BUILD_ONLY.get(name) or DEBUG[name]
    except KeyError:
        raise UsageError(
            f"unknown kernel {name!r}; tested: "
            + ", ".join(k.name for k in _ordered(KERNELS)) + "; build-only: "
            + ", ".join(k.name for k in build_only()) + "; debug: "
            + ", ".join(k.name for k in _ordered(DEBUG)) + f" ({DEBUG_BUILDER})"
            + "; or " + ", ".join(f"{s} ({what})" for s, what in SETS.items())) from None


def parse(arg: str) -> list[Kernel]:
    """--kernel's value: one kernel by name, a comma list, "all" (the
    tested set: every pin of KERNELS, booted or not yet), "build-only"
    (BUILD_ONLY) or "every" (both). A debug kernel only by its name."""
    if arg == "all":
        return _ordered(KERNELS)
    if arg == "build-only":
        return build_only()
    if arg == "every":
        return _ordered(KERNELS) + build_only()
    ks = [get(s.strip()) for s in arg.split(",") if s.strip()]
    if not ks:
        # An empty --kernel '' would otherwise do nothing and exit 0.
        raise UsageError(f"--kernel {arg!r} names no kernel; tested: "
                         + ", ".join(k.name for k in _ordered(KERNELS))
                         + "; or " + ", ".join(SETS))
    return ks


def parse_booted(arg: str) -> list[Kernel]:
    """parse() for a command that boots: a build-only kernel is refused
    before anything is built."""
    ks = parse(arg)
    refused = [k.name for k in ks if k.build_only and not k.boots]
    if refused:
        raise UsageError(f"{', '.join(refused)}: in the build-only set (prism/host/kernels.py), "
                         "built but never booted (no image is fetched); boot one of "
                         + ", ".join(k.name for k in _ordered(KERNELS))
                         + " (or " + ", ".join(k.name for k in build_only() if k.boots)
                         + ", for prism stress)")
    return ks


def ensure_bootable(k: Kernel) -> None:
    """Before a boot: a build-only kernel that boots (Kernel.boots) gets
    its image, which the build-only set's fetch leaves out."""
    if k.build_only and k.boots and not image_ready(k):
        fetch_image(k)


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
    """Build roots, extracted images, the private apt setup and the debug
    kernels: big, slow to make and independent of the module's sources,
    so shared by every PRISM_CACHE (a developer's private cache included).
    $PRISM_ROOTS, else ~/.cache/prism-7x (named for the 7.x kernels that
    first needed it)."""
    return _cache("PRISM_ROOTS", "prism-7x")


def build_root(k: Kernel) -> Path:
    """The mmdebstrap'd root that builds @k (one per Debian release, and
    one per release for the build-only set: build_only_root())."""
    assert k.root, k
    if k.build_only:
        return build_only_root(k)
    return roots_dir() / f"{k.root}-root"


def build_only_root(k: Kernel) -> Path:
    """The root that builds the build-only kernels of @k's release: apart
    from the tested kernels' roots, whose package lists it leaves alone."""
    assert k.build_only and k.root, k
    return roots_dir() / f"{k.root}-build-only-root"


def image_dir(k: Kernel) -> Path:
    """@k's image .deb extracted (boot/, lib/modules/), for QEMU; the
    debug kernel's install, in the same layout, beside its tree."""
    if k.debug:
        return debug_dir(k) / "image"
    return roots_dir() / "images" / k.abi


def debug_dir(k: Kernel) -> Path:
    """The debug kernel @k's tree and install: one directory per version
    of its source (a moved pin's leaves the old one behind, which the
    next build removes: debugkernel.py)."""
    assert k.debug, k
    return roots_dir() / "debug" / k.name / k.version


def debug_tree(k: Kernel) -> Path:
    """The debug kernel's whole source tree, configured and built in place."""
    return debug_dir(k) / "linux"


def source_dir(k: Kernel) -> Path:
    """Where block/ of the matching source is extracted (for the debug
    kernel, the tree it was built from)."""
    if k.debug:
        return debug_tree(k)
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
    "sid": ((DEBIAN, "sid"),),
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
        f"{pkg}={k.version} (the {k.name} pin in prism/host/kernels.py) is not offered "
        f"by Debian's archive ({k.release}) any more; offered: {offered}. "
        f"Run '{UPDATER}' to move the pins to the newest ABI of each series, "
        "then build and test on it")


def installed(k: Kernel) -> bool:
    if k.debug:
        return debug_ready(k)
    if k.build_only:
        return build_only_ready(k)
    return root_ready(k) and image_ready(k)


def install_packages(k: Kernel) -> None:
    """Make @k buildable and bootable: its build root (with its headers
    and linux-source) and its extracted image; for a build-only kernel
    its headers in the build-only root; the debug kernel must be built."""
    if k.debug:
        require_debug(k)
        return
    if k.build_only:
        ensure_build_only(k)
        return
    ensure_root(k)
    fetch_image(k)


# A build root per Debian release: minbase, make, dkms and the rest of
# prism-iosched-dkms's dependencies (packaging/debian/control: the tests
# install the package there with dpkg -i, tests/dkmstool.py's
# install_in_root()), and the headers and linux-source of every pin of
# that release (installed, so that the package's DKMS build in the root
# finds /usr/src/linux-source-X.Y.tar.xz as on a machine of that
# release). The headers bring the compiler they were built with (gcc-12
# in bookworm, gcc-14 in trixie).
ROOT_TOOLS = ("make", "xz-utils", "bzip2", "python3", "kmod", "dkms")
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


def _can_mmdebstrap(what: str) -> None:
    """PrismError unless @what (a build root) can be made here: as root,
    with mmdebstrap installed."""
    if os.geteuid() != 0:
        raise PrismError(f"making {what} needs root (mmdebstrap)")
    if not shutil.which("mmdebstrap"):
        raise PrismError("mmdebstrap not found: apt-get install mmdebstrap "
                         "(scripts/setup.sh does)")


def ensure_root(k: Kernel) -> Path:
    """Make @k's build root with mmdebstrap, unless it is there with the
    right packages: into a temporary directory, renamed when complete,
    so a half-made root is never taken for one. About 35 s and 590 MB."""
    root = build_root(k)
    if root_ready(k):
        return root
    _can_mmdebstrap(f"the {k.root} build root {root}")
    release = k.root or ""
    for pin in (p for p in KERNELS.values() if p.root == release):
        for pkg in (pin.headers_pkg, pin.source_pkg, pin.image_pkg):
            check_offered(pin, pkg)
    _mmdebstrap(root, release, root_packages(release),
                Path("usr") / "src" / f"linux-headers-{k.abi}" / "Makefile")
    return root


# Releases whose Release file may be taken after its Valid-Until: sid's
# is valid for a week and re-signed several times a day, so a mirror that
# lags behind (the one this was written on served a month-old sid) fails
# mmdebstrap's apt-get update; the packages are still checked against the
# signed file's hashes. Only the build-only root, which compiles and is
# never booted, is made from sid.
STALE_RELEASE_OK = ("sid",)


# A headers package that depends on its image (bookworm's 6.12) brings
# the image into the root, whose postinst would build an initramfs there
# (40 MB, half a minute) through initramfs-tools' kernel hook: the root
# gets no such hook, and with no initramfs, initramfs-tools' own trigger
# has nothing to update. Nothing boots from a build root.
NO_INITRAMFS = "/etc/kernel/postinst.d/initramfs-tools"


def _mmdebstrap(root: Path, release: str, pkgs: list[str], check: Path) -> None:
    """Make @root, a minbase @release with @pkgs, in which @check must
    exist; stamped with @pkgs (root_ready())."""
    tmp = root.with_name(root.name + ".tmp")
    _remove_tree(tmp)
    log(f"making the {release} build root {root} with mmdebstrap ({', '.join(pkgs)})")
    stale = (['--aptopt=Acquire::Check-Valid-Until "false"']
             if release in STALE_RELEASE_OK else [])
    r = _run(["mmdebstrap", "--variant=minbase", "--mode=root", "-q"] + stale
             + [f"--dpkgopt=path-exclude={NO_INITRAMFS}",
                "--include=" + ",".join(pkgs), release, str(tmp)] + sources_lines(release))
    if r.returncode or not (tmp / check).exists():
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


# The build-only set's roots (build_only_root()) hold the tools below and
# what the headers' packages depend on besides other linux-* packages (the
# compiler they were built with, pahole, kbuild's libraries), installed
# with mmdebstrap; the headers' own packages, and the linux-* packages of
# the same version they depend on (-common, -common-rt, linux-kbuild-*,
# linux-base-ABI), are extracted into it with dpkg-deb, not installed:
# 6.12's headers depend on their image.
BUILD_ONLY_TOOLS = ("make",)


def _depends(deb: Path) -> list[str]:
    """The first alternative of each of @deb's Depends, without versions."""
    out = _run(["dpkg-deb", "-f", str(deb), "Depends"]).stdout
    return [alt.split("|")[0].split("(")[0].strip() for alt in out.split(",") if alt.strip()]


def _is_extracted(pkg: str) -> bool:
    """Whether a dependency of a build-only kernel's headers is extracted
    (the kernel's own linux-* packages) rather than installed; its image
    and the unversioned linux-base are neither."""
    return (pkg.startswith("linux-") and pkg != "linux-base"
            and not pkg.startswith("linux-image-"))


def headers_debs(k: Kernel) -> tuple[list[Path], list[str]]:
    """Download @k's headers and the linux-* packages they need at @k's
    version (roots_dir()/debs, kept); (those .debs, the other packages
    they depend on, which the root installs)."""
    debs = roots_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    todo, seen, got, tools = [k.headers_pkg], set(), [], []
    while todo:
        pkg = todo.pop(0)
        if pkg in seen:
            continue
        seen.add(pkg)
        deb = _download(k, pkg, debs)
        got.append(deb)
        for dep in _depends(deb):
            if _is_extracted(dep):
                todo.append(dep)
            elif dep != "linux-base" and not dep.startswith("linux-image-") and dep not in tools:
                tools.append(dep)
    return got, tools


def build_only_packages(release: str) -> list[str]:
    """What the build-only root of @release installs: BUILD_ONLY_TOOLS and
    what the headers of each build-only pin of @release depend on
    (downloading those headers)."""
    pkgs = list(BUILD_ONLY_TOOLS)
    for k in build_only():
        if k.root == release:
            pkgs += [p for p in headers_debs(k)[1] if p not in pkgs]
    return pkgs


def build_only_ready(k: Kernel) -> bool:
    """The build-only root is there (its stamp says with which packages:
    ensure_build_only() checks them against the pins) with @k's headers."""
    root = build_only_root(k)
    return (root / _ROOT_STAMP).exists() and (k.headers_dir / "Makefile").exists()


def ensure_build_only(k: Kernel) -> Path:
    """@k's headers extracted into the build-only root of its release,
    made first (with mmdebstrap, as ensure_root()) unless it is there with
    the packages today's pins need. About 30 s and 300-500 MB a root."""
    root = build_only_root(k)
    if build_only_ready(k):
        return root
    _can_mmdebstrap(f"the {k.root} build-only root {root}")
    release = k.root or ""
    check_offered(k, k.source_pkg)
    pkgs = build_only_packages(release)
    stamp = root / _ROOT_STAMP
    if not stamp.exists() or stamp.read_text().split() != pkgs:
        _mmdebstrap(root, release, pkgs, Path("usr") / "bin" / "make")
    debs, _ = headers_debs(k)
    log(f"extracting {', '.join(d.name for d in debs)} into {root}")
    for deb in debs:
        # Into the root as it is: a merged-/usr root's /lib is a symlink.
        r = subprocess.run(["bash", "-o", "pipefail", "-c",
                            f"dpkg-deb --fsys-tarfile '{deb}' | "
                            f"tar -x --keep-directory-symlink -C '{root}'"],
                           text=True, capture_output=True)
        if r.returncode:
            raise PrismError(f"extracting {deb.name} into {root} failed: "
                             + r.stderr.strip()[-500:])
    if not (k.headers_dir / "Makefile").exists():
        raise PrismError(f"no {k.headers_dir}/Makefile after extracting "
                         + ", ".join(d.name for d in debs))
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


# Written into the debug kernel's image directory when its install is
# complete: what it was built from (debugkernel.py compares it).
DEBUG_STAMP = ".prism-debug"


def debug_ready(k: Kernel) -> bool:
    """The debug kernel @k is built: its install complete and the tree
    that modules build against (its Module.symvers) still there."""
    return ((image_dir(k) / DEBUG_STAMP).exists() and image_ready(k)
            and (debug_tree(k) / "Module.symvers").exists())


def fetch_command(k: Kernel) -> str:
    """What makes @k bootable and buildable for (an error's advice)."""
    return DEBUG_BUILDER if k.debug else f"prism fetch --kernel {k.name}"


def require_debug(k: Kernel) -> None:
    """PrismError, naming the command that builds it, unless the debug
    kernel @k is built: prism never builds one as a side effect (about
    25 minutes of two cores)."""
    if not debug_ready(k):
        raise PrismError(f"{k.name} is not built yet (no complete {image_dir(k)}): "
                         f"run '{DEBUG_BUILDER}' (once per release, outside CI; about "
                         "25 minutes on two cores)")


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


def _download_options(release: str) -> list[str]:
    """apt-get download's options for @release (apt_options()), as root:
    apt's _apt user cannot write into root's cache."""
    return apt_options(release) or ["-o", "APT::Sandbox::User=root"]


def _download(k: Kernel, pkg: str, debs: Path) -> Path:
    """apt-get download PKG=VERSION of @k's release into @debs (kept: a
    second extraction needs no network)."""
    # amd64, or all (a -common headers package)
    name = f"{pkg}_{k.version}_"
    got = [p for p in debs.glob(f"{pkg}_*.deb")
           if p.name.replace("%3a", ":").startswith(name)]
    if got and got[0].stat().st_size > 0:
        return got[0]
    check_offered(k, pkg)
    log(f"downloading {pkg}={k.version} into {debs}")
    r = _run(["apt-get", "download", "-q"] + _download_options(k.release)
             + [f"{pkg}={k.version}"], cwd=debs)
    got = [p for p in debs.glob(f"{pkg}_*.deb")
           if p.name.replace("%3a", ":").startswith(name)]
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
    r = _run(["apt-get", "download", "-q"] + _download_options(k.release)
             + [f"{k.source_pkg}={k.version}"], cwd=debs)
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
    """Extract block/ and checkpatch from linux-source into the cache
    (the debug kernel's whole tree is there once it is built)."""
    dest = source_dir(k)
    if k.debug:
        require_debug(k)
        return dest
    if ((dest / "block" / "elevator.h").exists() and checkpatch(k).exists()
            and (dest / "Makefile").exists()):
        return dest
    prefix = f"linux-source-{k.series}/"
    inner = f"./usr/src/linux-source-{k.series}.tar.xz"
    if k.root and not k.build_only:
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
