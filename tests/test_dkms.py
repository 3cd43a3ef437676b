"""The module as a real machine gets it: DKMS builds and installs it for
both pinned kernels on the host (private source, build and install
trees; DKMS keeps its signing key in /var/lib/dkms), from the cached
linux-source .debs through module/find-block-dir.sh; its version is the
project's everywhere."""

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import dkmstool
import pytest

import prism
from prism.host import build, kernels

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "module"
VERSION = (MODULE / "VERSION").read_text().strip()


def test_one_version_everywhere():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    dkms = dict(line.split("=", 1) for line in (MODULE / "dkms.conf").read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    assert dkms["PACKAGE_VERSION"].strip('"') == VERSION
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"]["file"] == "module/VERSION"
    assert prism.__version__ == VERSION


def test_missing_source_names_the_package(tmp_path):
    k = kernels.get("6.1")
    r = subprocess.run([str(MODULE / "find-block-dir.sh"), k.abi, str(tmp_path / "src")],
                       capture_output=True, text=True,
                       env=dict(os.environ, PRISM_SOURCE_DIR=str(tmp_path)))
    if "cannot tell which Debian package" in r.stderr:
        pytest.skip(f"linux-headers-{k.abi} is not installed")
    assert r.returncode == 1
    assert f"needs linux-source-6.1 version {k.version}" in r.stderr
    assert f"apt-get install linux-source-6.1={k.version}" in r.stderr


def test_mismatched_source_is_refused(tmp_path):
    """The 6.12 block/ against 6.1's headers: Kbuild stops with a message
    instead of building a module with the wrong struct layouts."""
    old, new = kernels.get("6.1"), kernels.get("6.12")
    for k in (old, new):
        kernels.fetch(k)
    for f in ("Kbuild", "VERSION") + build.MODULE_FILES:
        shutil.copy2(MODULE / f, tmp_path / f)
    r = subprocess.run(["make", "-C", str(old.headers_dir), f"M={tmp_path}",
                        f"PRISM_BLOCK_DIR={kernels.block_dir(new)}", "modules"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "is from Linux 6.12.117 but the kernel is 6.1." in r.stdout + r.stderr
    assert not (tmp_path / "prism-iosched.ko").exists()


@pytest.mark.parametrize("series", [k.series for k in kernels.host_kernels()])
def test_dkms_builds_and_installs(tmp_path, series, request):
    """DKMS builds and installs the module into a copy of the kernel's
    module tree. When this run boots @series, the session's package
    (conftest.py's dkms_package) has DKMS build it into the kernel's own
    tree and the boot loads what it installed
    (test_vm.py::test_vm_autoloads_the_dkms_module checks its path and
    version): done there, not twice (CI time)."""
    if not request.config.getoption("--no-vm") and series in request.config.prism_kernels:
        pytest.skip(f"the session's package has DKMS build it for {series} and the boot "
                    "loads it (test_deb.py, test_vm_autoloads_the_dkms_module)")
    if not shutil.which("dkms"):
        pytest.skip("dkms not installed (apt-get install dkms; scripts/setup.sh does)")
    k = kernels.get(series)
    kernels.fetch(k)
    install = tmp_path / "install" / k.abi
    install.mkdir(parents=True)
    for f in k.modules_dir.glob("modules.*"):
        shutil.copy2(f, install / f.name)
    dkmstool.add_build_install(tmp_path, k, tmp_path / "install")
    built = list((install / "updates" / "dkms").glob("prism-iosched.ko*"))
    assert built, list(install.rglob("*"))
    ko = built[0]
    if ko.suffix == ".xz":
        subprocess.run(["xz", "-dk", str(ko)], check=True)
        ko = ko.with_suffix("")
    info = subprocess.run(["modinfo", str(ko)], capture_output=True, text=True).stdout
    assert f"version:        {VERSION}" in info and f"vermagic:       {k.abi} " in info
    assert "alias:          prism-iosched" in info
