"""The Debian package prism-iosched-dkms: built by scripts/build-deb.sh,
lintian-clean of errors, installable with apt, building and installing
the module through DKMS for both pinned kernels, and removed cleanly; and
the udev rules it ships."""

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import dkmstool
import pytest

from prism.host import build, kernels

REPO = Path(__file__).resolve().parent.parent
VERSION = (REPO / "module" / "VERSION").read_text().strip()
DEB = f"prism-iosched-dkms_{VERSION}_all.deb"
RULES = REPO / "packaging" / "udev"


def _need(*tools: str) -> None:
    for tool in tools:
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (apt-get install dpkg-dev debhelper dh-dkms "
                        "lintian dkms; scripts/setup.sh does)")


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    _need("dpkg-buildpackage", "dh_dkms", "lintian")
    out = tmp_path_factory.mktemp("deb")
    r = subprocess.run([str(REPO / "scripts" / "build-deb.sh"), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]   # lintian errors fail it
    return out / DEB


def test_package_holds_the_source_and_the_rules(deb):
    files = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True,
                           text=True).stdout
    src = f"./usr/src/prism-iosched-{VERSION}/"
    for name in ("dkms.conf", "Makefile", "Kbuild", "VERSION", "find-block-dir.sh",
                 *build.MODULE_FILES):
        assert src + name in files, name
    for rules in ("60-prism-rotational.rules", "60-prism-nonrotational.rules",
                  "60-prism-all.rules"):
        assert "./usr/share/prism-iosched/udev/" + rules in files
    # Off until the admin links them: nothing in udev's own directories.
    assert "/lib/udev/rules.d" not in files and "/etc/udev" not in files


def test_apt_installs_it_and_dkms_builds_both_kernels(deb):
    """apt install ./deb succeeds even without linux-source (DKMS skips
    those kernels); with the sources (the cached .debs) DKMS builds and
    installs for both kernels; apt purge removes everything."""
    _need("apt-get", "dkms")
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root")
    if dkmstool.package_installed():
        pytest.skip("prism-iosched-dkms is installed on this machine: not touching it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                        str(deb)], capture_output=True, text=True, env=env)
    try:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        env["PRISM_SOURCE_DIR"] = str(kernels.cache_dir() / "debs")
        for k in kernels.KERNELS.values():
            kernels.fetch(k)
            r = subprocess.run(["dkms", "install", f"prism-iosched/{VERSION}", "-k", k.abi],
                               capture_output=True, text=True, env=env)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
            ko = list((k.modules_dir / "updates" / "dkms").glob("prism-iosched.ko*"))
            assert ko, f"nothing installed for {k.abi}"
            info = subprocess.run(["modinfo", "-k", k.abi, "prism-iosched"],
                                  capture_output=True, text=True).stdout
            assert f"version:        {VERSION}" in info, info
    finally:
        subprocess.run(["apt-get", "purge", "-y", "-q", "prism-iosched-dkms"],
                       capture_output=True, text=True, env=env)
    for k in kernels.KERNELS.values():
        assert not list((k.modules_dir / "updates" / "dkms").glob("prism-iosched.ko*"))
    assert not Path(f"/usr/src/prism-iosched-{VERSION}").exists()


@pytest.mark.parametrize("name,rotational", [("60-prism-rotational.rules", "1"),
                                             ("60-prism-nonrotational.rules", "0"),
                                             ("60-prism-all.rules", None)])
def test_udev_rules(name, rotational):
    lines = [line for line in (RULES / name).read_text().splitlines()
             if line and not line.startswith("#")]
    # Whole disks only, never the stacked or virtual ones.
    assert 'ENV{DEVTYPE}!="disk", GOTO="prism_end"' in lines
    assert 'KERNEL=="loop*|zram*|dm-*|md*", GOTO="prism_end"' in lines
    assert lines[-1] == 'LABEL="prism_end"'
    sets = [line for line in lines if 'ATTR{queue/scheduler}="prism"' in line]
    assert len(sets) == 1
    if rotational is None:
        assert "rotational" not in sets[0]
    else:
        assert sets[0].startswith(f'ATTR{{queue/rotational}}=="{rotational}", ')
    # nr_requests raised after the scheduler (selecting one resets it), on
    # the same disks, only where below 64.
    raise_line = lines.index(sets[0]) + 1
    assert lines[raise_line].endswith('ATTR{queue/nr_requests}=="[1-9]|[1-5][0-9]|6[0-3]", '
                                      'ATTR{queue/nr_requests}="64"')
    assert lines[raise_line].startswith(sets[0].split("ATTR{queue/scheduler}")[0])
    for nr, raised in ((1, True), (2, True), (32, True), (63, True), (64, False),
                       (256, False), (1023, False)):
        assert any(fnmatch.fnmatch(str(nr), alt)
                   for alt in "[1-9]|[1-5][0-9]|6[0-3]".split("|")) == raised, nr
