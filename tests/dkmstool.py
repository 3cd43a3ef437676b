"""DKMS as the tests drive it: the module's source copied into a private
source tree, DKMS's own tree private too, the block/ headers taken from
the cached linux-source .debs (module/find-block-dir.sh). Only the install
step may reach the real module tree, when no install tree is given."""

import os
import shutil
import subprocess
from pathlib import Path

from prism.host import kernels

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "module"
VERSION = (MODULE / "VERSION").read_text().strip()


def trees(tmp: Path) -> list[str]:
    return ["--sourcetree", str(tmp / "src"), "--dkmstree", str(tmp / "tree")]


def dkms(tmp: Path, step: list[str]) -> subprocess.CompletedProcess:
    """Run `dkms STEP...` on prism-iosched in @tmp's private trees."""
    env = dict(os.environ, PRISM_SOURCE_DIR=str(kernels.cache_dir() / "debs"))
    cmd = ["dkms", step[0], "-m", "prism-iosched", "-v", VERSION] + step[1:] + trees(tmp)
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def add_build_install(tmp: Path, k: kernels.Kernel, installtree: Path | None = None) -> None:
    """Copy the source into @tmp and dkms add, build and install it for
    @k: into @installtree, or the kernel's own module tree (depmod run)."""
    src = tmp / "src" / f"prism-iosched-{VERSION}"
    shutil.copytree(MODULE, src, ignore=shutil.ignore_patterns("*.o", "*.ko", ".*"))
    (tmp / "tree").mkdir(exist_ok=True)
    install = ["--installtree", str(installtree)] if installtree else []
    for step in (["add"], ["build", "-k", k.abi], ["install", "-k", k.abi] + install):
        r = dkms(tmp, step)
        assert r.returncode == 0, (step, r.stdout[-2000:], r.stderr[-2000:])


def installed_kos(k: kernels.Kernel) -> list[Path]:
    """prism-iosched as DKMS installs it in @k's own module tree."""
    return list((k.modules_dir / "updates" / "dkms").glob("prism-iosched.ko*"))


def package_installed() -> bool:
    """Whether dpkg knows prism-iosched-dkms as installed here (a user's
    package, which the tests leave alone)."""
    state = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "prism-iosched-dkms"],
                           capture_output=True, text=True).stdout
    return "installed" in state
