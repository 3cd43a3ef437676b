"""The Debian package prism-iosched-dkms: built by scripts/build-deb.sh,
lintian-clean of errors, installable with apt, building and installing
the module through DKMS for both pinned kernels, and removed cleanly; and
the udev rules it ships."""

import fnmatch
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


def kernel_range() -> tuple[str, str]:
    """module/kernel-range's oldest and newest series."""
    v = dict(line.split("=", 1) for line in (REPO / "module" / "kernel-range").read_text()
             .splitlines() if "=" in line and not line.startswith("#"))
    return v["PRISM_OLDEST_SERIES"], v["PRISM_NEWEST_SERIES"]


def _need(*tools: str) -> None:
    for tool in tools:
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (apt-get install dpkg-dev debhelper dh-dkms "
                        "lintian dkms; scripts/setup.sh does)")


@pytest.fixture(scope="module")
def deb(dkms_package) -> Path:
    _need(*dkmstool.BUILD_TOOLS)
    r = dkms_package.build
    assert r is not None, dkms_package.why_not
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]   # lintian errors fail it
    assert dkms_package.deb.name == DEB
    return dkms_package.deb


def test_package_holds_the_source_and_the_rules(deb):
    files = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True,
                           text=True).stdout
    src = f"./usr/src/prism-iosched-{VERSION}/"
    for name in ("dkms.conf", "Makefile", "Kbuild", "VERSION", "find-block-dir.sh",
                 "kernel-range", "check-kernel-range.sh",
                 *build.MODULE_FILES):
        assert src + name in files, name
    for rules in ("60-prism-rotational.rules", "60-prism-nonrotational.rules",
                  "60-prism-all.rules"):
        assert "./usr/share/prism-iosched/udev/" + rules in files
    # The description states the series prism is tested on (kernel-range).
    desc = subprocess.run(["dpkg-deb", "-f", str(deb), "Description"], capture_output=True,
                          text=True).stdout
    assert "Linux {} to {}".format(*kernel_range()) in " ".join(desc.split()), desc
    # Off until the admin links them: nothing in udev's own directories.
    assert "/lib/udev/rules.d" not in files and "/etc/udev" not in files


def test_apt_installs_it_and_dkms_builds_both_kernels(deb, dkms_package):
    """apt install ./deb succeeds even without linux-source (DKMS skips
    those kernels); with the sources (the cached .debs) DKMS builds and
    installs for both kernels. The session's install (conftest.py's
    dkms_package, which the main boots' autoload checks load from): apt
    purge at the session's end must remove everything, or the session
    fails there."""
    pkg = dkms_package
    if pkg.install is None:
        pytest.skip(pkg.why_not)
    assert pkg.install.returncode == 0, pkg.install.stdout[-3000:] + pkg.install.stderr[-2000:]
    for k in kernels.host_kernels():
        r = pkg.dkms[k.abi]
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert dkmstool.installed_kos(k), f"nothing installed for {k.abi}"
        info = subprocess.run(["modinfo", "-k", k.abi, "prism-iosched"],
                              capture_output=True, text=True).stdout
        assert f"version:        {VERSION}" in info, info
        assert "/updates/dkms/" in info, info


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
