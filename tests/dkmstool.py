"""DKMS as the tests drive it: the module's source copied into a private
source tree, DKMS's own tree private too, run in the build root of the
kernel it builds for (whose headers and linux-source are installed
there, as on a machine of its release: kernels.py), so that nothing of
it reaches the host; it installs into a copy of the kernel's module tree
under the test's directory. And the Debian package
as a machine gets it, installed once a session (install_package(),
conftest.py's dkms_package fixture)."""

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from prism.host import build, kernels

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "module"
VERSION = (MODULE / "VERSION").read_text().strip()

# Where a build root sees a test's private DKMS directory (a bind mount).
ROOT_DKMS = "/prism/dkms"


def inside(tmp: Path, path: Path) -> str:
    """@path, under @tmp, as the build root sees it."""
    return f"{ROOT_DKMS}/{path.relative_to(tmp)}"


def dkms(tmp: Path, k: kernels.Kernel, step: list[str],
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `dkms STEP...` on prism-iosched in @tmp's private trees, in
    @k's build root (add() makes it), with @env (the root's environment
    is otherwise clean)."""
    cmd = (["env"] + [f"{key}={val}" for key, val in (env or {}).items()]
           + ["dkms", step[0], "-m", "prism-iosched", "-v", VERSION] + step[1:]
           + ["--sourcetree", inside(tmp, tmp / "src"),
              "--dkmstree", inside(tmp, tmp / "tree")])
    return subprocess.run(build.root_command(k, cmd, {tmp: ROOT_DKMS}),
                          capture_output=True, text=True)


def add(tmp: Path, k: kernels.Kernel, kernel_range: tuple[str, str] | None = None) -> None:
    """Copy the source into @tmp and dkms add it (in @k's root); @kernel_range:
    the (oldest, newest) series its kernel-range names instead of the real ones."""
    kernels.fetch(k)
    src = tmp / "src" / f"prism-iosched-{VERSION}"
    shutil.copytree(MODULE, src, ignore=shutil.ignore_patterns("*.o", "*.ko", ".*"))
    if kernel_range:
        (src / "kernel-range").write_text("PRISM_OLDEST_SERIES={}\nPRISM_NEWEST_SERIES={}\n"
                                          .format(*kernel_range))
    (tmp / "tree").mkdir(exist_ok=True)
    r = dkms(tmp, k, ["add"])
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])


def build_install(tmp: Path, k: kernels.Kernel, installtree: Path,
                  env: dict[str, str] | None = None) -> None:
    """dkms build and install the added source for @k into @installtree
    (under @tmp; depmod run there)."""
    for step in (["build", "-k", k.abi],
                 ["install", "-k", k.abi, "--installtree", inside(tmp, installtree)]):
        r = dkms(tmp, k, step, env)
        assert r.returncode == 0, (step, r.stdout[-2000:], r.stderr[-2000:])


def add_build_install(tmp: Path, k: kernels.Kernel, installtree: Path) -> None:
    """Copy the source into @tmp and dkms add, build and install it for
    @k into @installtree (under @tmp)."""
    add(tmp, k)
    build_install(tmp, k, installtree)


def installed_kos(k: kernels.Kernel) -> list[Path]:
    """prism-iosched as install_in_root() copies it into the module tree
    beside @k's image."""
    return list((k.modules_dir / "updates" / "dkms").glob("prism-iosched.ko*"))


def root_kos(k: kernels.Kernel) -> list[Path]:
    """prism-iosched as DKMS installs it for @k in @k's build root."""
    return list((kernels.build_root(k) / "lib" / "modules" / k.abi / "updates" / "dkms")
                .glob("prism-iosched.ko*"))


def by_root(ks: list[kernels.Kernel]) -> list[list[kernels.Kernel]]:
    """@ks grouped by build root (one package install per root), in order."""
    return [[k for k in ks if k.root == release]
            for release in dict.fromkeys(k.root for k in ks)]


def package_installed() -> bool:
    """Whether dpkg knows prism-iosched-dkms as installed here (a user's
    package, which the tests leave alone)."""
    state = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "prism-iosched-dkms"],
                           capture_output=True, text=True).stdout
    return "installed" in state


@dataclasses.dataclass
class Package:
    """prism-iosched-dkms as the session installed it (conftest.py's
    dkms_package): the .deb, and what each step printed; why_not says
    why it was not installed, if it was not."""
    deb: Path | None = None
    build: subprocess.CompletedProcess | None = None     # scripts/build-deb.sh
    install: subprocess.CompletedProcess | None = None   # apt-get install ./deb
    dkms: dict[str, subprocess.CompletedProcess] = dataclasses.field(default_factory=dict)
    why_not: str | None = None
    roots: list[kernels.Kernel] = dataclasses.field(default_factory=list)  # install_in_root()

    def built_for(self, k: kernels.Kernel) -> bool:
        r = self.dkms.get(k.abi)
        return self.why_not is None and r is not None and r.returncode == 0


APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
BUILD_TOOLS = ("dpkg-buildpackage", "dh_dkms", "lintian")


def install_package(out: Path, root_kernels: list[kernels.Kernel] = ()) -> Package:
    """Build the .deb into @out, apt-install it on the host (DKMS builds
    what it can at once: nothing, on a host with no kernel headers), then
    install it in the build root of each of @root_kernels, where DKMS
    builds and installs it for that kernel (install_in_root()). Stops at
    the first failure, which the Package records; never raises for one."""
    pkg = Package()
    missing = [t for t in BUILD_TOOLS + ("apt-get", "dkms") if not shutil.which(t)]
    if missing:
        pkg.why_not = (f"{', '.join(missing)} not installed (apt-get install dpkg-dev "
                       "debhelper dh-dkms lintian dkms; scripts/setup.sh does)")
        return pkg
    pkg.build = subprocess.run([str(REPO / "scripts" / "build-deb.sh"), str(out)],
                               capture_output=True, text=True)
    pkg.deb = out / f"prism-iosched-dkms_{VERSION}_all.deb"
    if pkg.build.returncode != 0:
        pkg.why_not = "scripts/build-deb.sh failed (tests/test_deb.py shows why)"
        return pkg
    if os.geteuid() != 0:
        pkg.why_not = "installing a package needs root"
        return pkg
    if package_installed():
        pkg.why_not = "prism-iosched is installed on this machine: not touching it"
        return pkg
    pkg.install = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                  str(pkg.deb)], capture_output=True, text=True, env=APT_ENV)
    if pkg.install.returncode != 0:
        pkg.why_not = "apt-get install failed (tests/test_deb.py shows why)"
        return pkg
    for ks in by_root(root_kernels):
        pkg.dkms.update(install_in_root(ks, pkg.deb))
        pkg.roots += ks
    return pkg


# Where a build root sees the .deb's directory.
ROOT_DEB_DIR = "/prism/deb"


def install_in_root(ks: list[kernels.Kernel], deb: Path) -> dict[str, subprocess.CompletedProcess]:
    """The package as a machine of @ks's release gets it: dpkg -i in their
    build root (its dependencies, dkms among them, are the root's;
    kernels.ROOT_TOOLS), whose postinst has DKMS build for the newest of
    them, then DKMS building it there for each kernel of @ks from the
    root's own linux-source, as on that machine. What DKMS installed is
    copied into the module tree beside each kernel's image, where the
    guest finds it, and depmod run there, so that writing "prism" in the
    guest loads it. What each kernel's steps printed, by ABI."""
    for k in ks:
        kernels.fetch(k)
    script = (f"dpkg --purge prism-iosched-dkms >/dev/null 2>&1 || true; "
              f"dpkg -i {ROOT_DEB_DIR}/{deb.name}")
    r = subprocess.run(build.root_command(ks[0], ["sh", "-c", script], {deb.parent: ROOT_DEB_DIR}),
                       capture_output=True, text=True)
    if r.returncode:
        return {k.abi: r for k in ks}
    done = {}
    for k in ks:
        r = subprocess.run(build.root_command(k, ["dkms", "install", f"prism-iosched/{VERSION}",
                                                  "-k", k.abi], {}),
                           capture_output=True, text=True)
        done[k.abi] = r if r.returncode else _copy_out(k, r)
    return done


def _copy_out(k: kernels.Kernel, r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """What DKMS installed for @k in its root, copied beside its image and
    depmod run there; @r with what that printed, or failed."""
    kos = root_kos(k)
    if not kos:
        return subprocess.CompletedProcess(r.args, 1, r.stdout,
                                           r.stderr + "\nDKMS installed no prism-iosched.ko")
    dest = k.modules_dir / "updates" / "dkms"
    dest.mkdir(parents=True, exist_ok=True)
    for ko in kos:
        shutil.copy2(ko, dest / ko.name)
    dep = subprocess.run(["depmod", "-b", str(kernels.image_dir(k)), k.abi],
                         capture_output=True, text=True)
    return subprocess.CompletedProcess(r.args, dep.returncode, r.stdout + dep.stdout,
                                       r.stderr + dep.stderr)


def purge_from_root(ks: list[kernels.Kernel]) -> list[str]:
    """Undo install_in_root(): purge the package in @ks's root (DKMS
    removes its modules there), drop the copies beside the images; what
    is left, if anything."""
    r = subprocess.run(build.root_command(ks[0], ["dpkg", "--purge", "prism-iosched-dkms"], {}),
                       capture_output=True, text=True)
    left = [] if r.returncode == 0 else [f"dpkg --purge in the {ks[0].root} root failed: "
                                         f"{r.stderr[-1000:]}"]
    for k in ks:
        for ko in installed_kos(k):
            ko.unlink()
        subprocess.run(["depmod", "-b", str(kernels.image_dir(k)), k.abi], capture_output=True)
        left += [str(ko) for ko in root_kos(k)]
    return left


def purge_package(pkg: Package) -> list[str]:
    """apt-get purge what install_package() installed; what it left
    behind, if anything."""
    if pkg.install is None:
        return []
    r = subprocess.run(["apt-get", "purge", "-y", "-q", "prism-iosched-dkms"],
                       capture_output=True, text=True, env=APT_ENV)
    left = [] if r.returncode == 0 else [f"apt-get purge failed: {r.stderr[-1000:]}"]
    for ks in by_root(pkg.roots):
        left += purge_from_root(ks)
    if Path(f"/usr/src/prism-iosched-{VERSION}").exists():
        left.append(f"/usr/src/prism-iosched-{VERSION}")
    return left


# A stand-in system for the package's shell helpers (find-block-dir.sh,
# the postinst): a directory for / (PRISM_ROOT: /lib/modules, /usr/src,
# /etc/os-release) and stubs on PATH for dpkg-query (answering from a
# list of installed packages) and dkms (logging its arguments).

DPKG_QUERY_STUB = r'''#!/usr/bin/env python3
"""dpkg-query -W -f=FORMAT PKG, answered from $FAKE_DPKG ("PKG VERSION" lines)."""
import os, sys
args = sys.argv[1:]
fmt, pkgs = "${Version}", []
while args:
    a = args.pop(0)
    if a.startswith(("-f=", "--showformat=")):
        fmt = a.split("=", 1)[1]
    elif a in ("-f", "--showformat"):
        fmt = args.pop(0)
    elif not a.startswith("-"):
        pkgs.append(a)
have = dict(line.split() for line in open(os.environ["FAKE_DPKG"]) if line.strip())
rc = 0
for p in pkgs:
    if p not in have:
        print(f"dpkg-query: no packages found matching {p}", file=sys.stderr)
        rc = 1
        continue
    out = fmt.replace("${db:Status-Abbrev}", "ii ").replace("${Version}", have[p])
    sys.stdout.write(out.replace("\\n", "\n"))
sys.exit(rc)
'''

DKMS_STUB = r'''#!/bin/sh
# dkms: logged to $FAKE_DKMS_LOG, exits $FAKE_DKMS_RC.
echo "$*" >>"$FAKE_DKMS_LOG"
echo "dkms stub: $*"
exit "${FAKE_DKMS_RC:-0}"
'''


@dataclasses.dataclass
class FakeSystem:
    """@root stands for /; @env runs a helper against it."""
    root: Path
    env: dict[str, str]

    def has_prism(self, abi: str) -> None:
        """Kernel @abi has the module, as DKMS installs it."""
        dkms = self.root / "lib" / "modules" / abi / "updates" / "dkms"
        dkms.mkdir(parents=True)
        (dkms / "prism-iosched.ko.xz").touch()

    def install(self, package: str, version: str) -> None:
        """dpkg-query now knows @package as installed at @version."""
        with open(self.env["FAKE_DPKG"], "a") as f:
            f.write(f"{package} {version}\n")

    @property
    def dkms_calls(self) -> list[str]:
        log = Path(self.env["FAKE_DKMS_LOG"])
        return log.read_text().splitlines() if log.exists() else []


def fake_system(tmp: Path, kernels: dict[str, str], packages: dict[str, str],
                os_id: str = "debian") -> FakeSystem:
    """A root in @tmp with /lib/modules/ABI/build for each of @kernels
    (ABI: the version of its linux-image-ABI package), dpkg-query knowing
    those and @packages (name: version) as installed, /etc/os-release
    saying @os_id, and the stubs first on PATH."""
    root, stubs = tmp / "root", tmp / "stubs"
    for abi in kernels:
        (root / "lib" / "modules" / abi / "build").mkdir(parents=True)
    (root / "usr" / "src").mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(exist_ok=True)
    like = "debian" if os_id == "ubuntu" else ""
    (root / "etc" / "os-release").write_text(f'ID={os_id}\nID_LIKE="{like}"\n')
    stubs.mkdir()
    for name, text in (("dpkg-query", DPKG_QUERY_STUB), ("dkms", DKMS_STUB)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    installed = {f"linux-image-{abi}": v for abi, v in kernels.items()} | packages
    (tmp / "dpkg").write_text("".join(f"{p} {v}\n" for p, v in installed.items()))
    env = dict(os.environ, PRISM_ROOT=str(root), PATH=f"{stubs}:{os.environ['PATH']}",
               FAKE_DPKG=str(tmp / "dpkg"), FAKE_DKMS_LOG=str(tmp / "dkms.log"),
               PRISM_DEFAULTS="/nonexistent")
    for var in ("PRISM_ANY_KERNEL", "PRISM_SOURCE_DIR", "PRISM_BLOCK_DIR"):
        env.pop(var, None)
    return FakeSystem(root, env)
