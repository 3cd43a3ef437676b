"""The Debian package prism-iosched-dkms: built by scripts/build-deb.sh,
lintian-clean of errors, installable with apt, building and installing
the module through DKMS for both pinned kernels, and removed cleanly; and
the udev rules it ships."""

import fnmatch
import re
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
                  "60-prism-all.rules", "61-prism-settings.rules"):
        assert "./usr/share/prism-iosched/udev/" + rules in files
    # The helper that applies systemd's IOWeight= to io.prism.weight.
    assert "./usr/sbin/prism-cgroup-weight" in files
    # prism status, standalone (tests/test_status.py checks it needs only the
    # standard library), and the python3 it runs on.
    assert "./usr/sbin/prism-status" in files
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True,
                             text=True).stdout
    assert "python3 (>= 3.10)" in depends, depends
    # The description states the series prism is tested on (kernel-range).
    desc = subprocess.run(["dpkg-deb", "-f", str(deb), "Description"], capture_output=True,
                          text=True).stdout
    assert "Linux {} to {}".format(*kernel_range()) in " ".join(desc.split()), desc
    # Off until the admin links them: nothing in udev's own directories.
    assert "/lib/udev/rules.d" not in files and "/etc/udev" not in files


def test_the_build_roots_hold_what_the_package_depends_on():
    """install_in_root() installs the package with dpkg -i, which
    resolves nothing: every dependency the control file names must be
    among the roots' tools (a missing python3 left the package
    unconfigured in the roots, and the autoload boots skipped)."""
    control = (REPO / "packaging" / "debian" / "control").read_text()
    depends = re.search(r"^Depends: (.*)$", control, re.M).group(1)
    names = [d.split("(")[0].strip() for d in depends.split(",")]
    assert [n for n in names if not n.startswith("${")
            and n not in kernels.ROOT_TOOLS] == [], kernels.ROOT_TOOLS


def test_apt_installs_it_and_dkms_builds_every_booted_kernel(deb, dkms_package):
    """apt install ./deb succeeds on the host, which has no kernel headers
    (DKMS builds nothing there); in the build root of each kernel the
    session boots, the package installed as a machine of its release gets
    it, DKMS builds and installs the module, and the copy beside the
    kernel's image is the one the boot loads (test_vm.py's autoload
    check). The session's install (conftest.py's dkms_package): purging it
    at the session's end must remove everything, or the session fails
    there."""
    pkg = dkms_package
    if pkg.install is None:
        pytest.skip(pkg.why_not)
    assert pkg.install.returncode == 0, pkg.install.stdout[-3000:] + pkg.install.stderr[-2000:]
    for k in pkg.roots:
        r = pkg.dkms[k.abi]
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert dkmstool.installed_kos(k), f"nothing installed for {k.abi}"
        info = subprocess.run(["modinfo", "-b", str(kernels.image_dir(k)), "-k", k.abi,
                               "prism-iosched"], capture_output=True, text=True).stdout
        assert f"version:        {VERSION}" in info, info
        assert "/updates/dkms/" in info, info


def test_dpkg_runs_the_trigger_when_a_package_puts_files_in_usr_src(dkms_package, tmp_path):
    """The host's dpkg honours the package's interest in /usr/src: a
    package putting a file there (a 1-byte stand-in for linux-source) has
    dpkg run prism's postinst triggered, which succeeds (nothing to build:
    no kernel gained its source), and the package stays installed."""
    if dkms_package.install is None:
        pytest.skip(dkms_package.why_not)
    probe = "prism-iosched-trigger-probe"
    tree = tmp_path / probe
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {probe}\nVersion: 1\nArchitecture: all\n"
        "Maintainer: prism tests <prism-iosched@example.invalid>\n"
        "Description: puts a file under /usr/src (tests/test_deb.py)\n")
    (tree / "usr" / "src" / probe).mkdir(parents=True)
    (tree / "usr" / "src" / probe / "probe").write_text("\n")
    deb = tmp_path / f"{probe}_1_all.deb"
    subprocess.run(["dpkg-deb", "-b", "-Zgzip", str(tree), str(deb)], check=True,
                   capture_output=True)
    try:
        r = subprocess.run(["dpkg", "-i", str(deb)], capture_output=True, text=True,
                           env=dkmstool.APT_ENV)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "Processing triggers for prism-iosched-dkms" in r.stdout, r.stdout
    finally:
        subprocess.run(["dpkg", "--purge", probe], capture_output=True)
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "prism-iosched-dkms"],
                            capture_output=True, text=True).stdout
    assert status == "install ok installed", status


def _control(deb: Path, tmp: Path) -> Path:
    """The .deb's control files (postinst, triggers, ...), in @tmp/ctl."""
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp / "ctl")], check=True)
    return tmp / "ctl"


def test_package_recommends_the_source_and_watches_usr_src(deb, tmp_path):
    """Recommends linux-source (the default kernel's series); a file
    trigger on /usr/src, without making the source package wait; the
    postinst keeps dh_dkms's part and has every token replaced."""
    recommends = subprocess.run(["dpkg-deb", "-f", str(deb), "Recommends"],
                                capture_output=True, text=True).stdout
    assert "linux-source" in [r.strip() for r in recommends.split(",")], recommends
    ctl = _control(deb, tmp_path)
    triggers = [line for line in (ctl / "triggers").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert triggers == ["interest-noawait /usr/src"]
    postinst = (ctl / "postinst").read_text()
    assert "/usr/lib/dkms/common.postinst" in postinst       # dh_dkms's, from #DEBHELPER#
    assert f"/usr/src/prism-iosched-{VERSION}" in postinst
    assert not re.search(r"#[A-Za-z0-9_.+]+#", postinst), "a token left unreplaced"


def test_the_trigger_builds_each_kernel_whose_source_arrived(deb, tmp_path):
    """postinst triggered, from the .deb, on a stand-in system (its files
    under PRISM_ROOT, stub dpkg-query and dkms): DKMS installs prism for
    the kernel whose source is there and which lacks it, not for one that
    has it or one without source (named with its command instead); a
    failing DKMS is printed and the trigger still exits 0."""
    fs = dkmstool.fake_system(tmp_path, {"6.1.0-56-amd64": "6.1.192-2",
                                         "6.1.0-57-amd64": "6.1.192-3",
                                         "6.12.117+deb12-amd64": "6.12.117-1~deb12u1"},
                              {"linux-source-6.1": "6.1.192-2"})
    subprocess.run(["dpkg-deb", "-x", str(deb), str(fs.root)], check=True)
    (fs.root / "usr/src/linux-source-6.1.tar.xz").touch()
    (fs.root / "usr/src/linux-source-6.1_6.1.192-3_all.deb").touch()
    fs.has_prism("6.1.0-57-amd64")
    postinst = _control(deb, tmp_path) / "postinst"
    for rc in (0, 10):
        Path(fs.env["FAKE_DKMS_LOG"]).unlink(missing_ok=True)
        r = subprocess.run([str(postinst), "triggered", "/usr/src"], capture_output=True,
                           text=True, env=dict(fs.env, FAKE_DKMS_RC=str(rc)))
        assert r.returncode == 0, r.stdout + r.stderr
        assert fs.dkms_calls == [f"install prism-iosched/{VERSION} -k 6.1.0-56-amd64"]
        assert "apt-get install linux-source-6.12=6.12.117-1~deb12u1" in r.stderr
        failed = "DKMS failed for 6.1.0-56-amd64 (exit 10, see above)"
        assert (failed in r.stdout) == bool(rc), r.stdout


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


def test_settings_rule_is_off_guarded_and_names_real_tunables():
    """61-prism-settings.rules ships with every setting commented out, acts
    only where prism is in force, and its examples name tunables the module
    has (selftest's udev_rules check has udev apply it, uncommented, in a
    guest)."""
    text = (RULES / "61-prism-settings.rules").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert 'TEST!="queue/iosched/low_share", GOTO="prism_settings_end"' in lines
    assert lines[-1] == 'LABEL="prism_settings_end"'
    assert not any("ATTR{queue/iosched/" in line and "=\"" in line.split("ATTR{queue/iosched/")[1]
                   for line in lines), "a setting is on by default"
    examples = re.findall(r'^#.*ATTR\{queue/iosched/(\w+)\}="(\d+)"', text, re.M)
    assert len(examples) >= 3
    known = build.module_tunables()
    for name, _value in examples:
        assert name in known, name
