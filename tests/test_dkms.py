"""The module as a real machine gets it: DKMS builds and installs it for
the pinned kernels, in each one's build root (private source, build and
install trees; DKMS keeps its signing key in the root's /var/lib/dkms),
from the root's linux-source through module/find-block-dir.sh; its
version is the project's everywhere. And the supported range
(module/kernel-range): the series the VM suite passes on, in modinfo,
refused outside by make and skipped by DKMS (without failing `dkms
autoinstall`, which a kernel package's postinst runs), built anyway with
the opt-in."""

import io
import shutil
import subprocess
import tarfile
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
    """A kernel whose linux-source is in neither /usr/src nor
    $PRISM_SOURCE_DIR: the package and the command that installs it."""
    k = kernels.get("6.1")
    fs = dkmstool.fake_system(tmp_path, {k.abi: k.version}, {})
    r = subprocess.run([str(MODULE / "find-block-dir.sh"), k.abi, str(tmp_path / "src")],
                       capture_output=True, text=True,
                       env=dict(fs.env, PRISM_SOURCE_DIR=str(tmp_path / "debs")))
    assert r.returncode == 1
    assert f"needs linux-source-6.1 version {k.version}" in r.stderr
    assert f"apt-get install linux-source-6.1={k.version}" in r.stderr


def test_mismatched_source_is_refused(tmp_path):
    """The 6.12 block/ against 6.1's headers: Kbuild stops with a message
    instead of building a module with the wrong struct layouts."""
    old, new = kernels.get("6.1"), kernels.get("6.12")
    for k in (old, new):
        kernels.fetch(k)
    for f in build.KBUILD_FILES + build.MODULE_FILES:
        shutil.copy2(MODULE / f, tmp_path / f)
    r = subprocess.run(build.root_command(
        old, ["make", "-C", f"/usr/src/linux-headers-{old.abi}", f"M={build.ROOT_OUT}",
              f"PRISM_BLOCK_DIR={build.ROOT_SRC}/block", "modules"],
        {tmp_path: build.ROOT_OUT, kernels.source_dir(new): build.ROOT_SRC}),
        capture_output=True, text=True)
    assert r.returncode != 0
    release = new.abi.split("+")[0]
    assert f"is from Linux {release} but the kernel is 6.1." in r.stdout + r.stderr
    assert not (tmp_path / "prism-iosched.ko").exists()


@pytest.mark.parametrize("series", [k.series for k in kernels.vm_tested()])
def test_dkms_builds_and_installs(tmp_path, series, request):
    """DKMS builds and installs the module into a copy of the kernel's
    module tree, in its build root. When this run boots @series, the session's package
    (conftest.py's dkms_package) has DKMS build it into the kernel's own
    tree and the boot loads what it installed
    (test_vm.py::test_vm_autoloads_the_dkms_module checks its path and
    version): done there, not twice (CI time)."""
    if not request.config.getoption("--no-vm") and series in request.config.prism_kernels:
        pytest.skip(f"the session's package has DKMS build it for {series} and the boot "
                    "loads it (test_deb.py, test_vm_autoloads_the_dkms_module)")
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


def kernel_range() -> tuple[str, str]:
    v = dict(line.split("=", 1) for line in (MODULE / "kernel-range").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return v["PRISM_OLDEST_SERIES"], v["PRISM_NEWEST_SERIES"]


def test_the_range_is_the_series_the_vm_suite_passes_on():
    """module/kernel-range and the pins' vm_tested switch say the same:
    flipping a pin's vm_tested (prism/host/kernels.py) moves the range."""
    tested = [k.series for k in kernels.vm_tested()]
    assert kernel_range() == (tested[0], tested[-1]), (
        "module/kernel-range must name the oldest and newest series with vm_tested=True "
        f"in prism/host/kernels.py: {tested[0]} and {tested[-1]}")


def _range_env(monkeypatch) -> None:
    """No opt-in from this machine's /etc/default/prism-iosched or environment."""
    monkeypatch.setenv("PRISM_DEFAULTS", "/nonexistent")
    monkeypatch.delenv("PRISM_ANY_KERNEL", raising=False)


@pytest.mark.parametrize("kver", ["7.9.1+deb14-amd64", "5.10.0-30-amd64"])
def test_make_refuses_a_kernel_outside_the_range(tmp_path, monkeypatch, kver):
    """Before any build: the message names the range, the kernel and the
    opt-in; with the opt-in, the range is no longer what stops it."""
    _range_env(monkeypatch)
    shutil.copytree(MODULE, tmp_path / "m", ignore=shutil.ignore_patterns("*.o", "*.ko", ".*"))
    r = subprocess.run(["make", "-C", str(tmp_path / "m"), f"KVER={kver}"],
                       capture_output=True, text=True)
    oldest, newest = kernel_range()
    series = ".".join(kver.split(".")[:2])
    assert r.returncode != 0
    assert f"kernel {kver} is Linux {series}, outside {oldest} to {newest}" in r.stderr
    assert "make PRISM_ANY_KERNEL=1" in r.stderr and "PRISM_ANY_KERNEL=yes in" in r.stderr
    r = subprocess.run(["make", "-C", str(tmp_path / "m"), f"KVER={kver}",
                        "PRISM_ANY_KERNEL=1"], capture_output=True, text=True)
    assert "building anyway (PRISM_ANY_KERNEL=1)" in r.stderr
    assert "outside" not in r.stderr.split("building anyway")[1]


def test_dkms_skips_a_kernel_outside_the_range_and_builds_it_when_asked(tmp_path):
    """6.12, in its build root, against a range that ends below it (a copy
    of the source whose kernel-range says so): dkms build says why and
    exits 77 (a skip to the package's postinst), `dkms autoinstall` leaves
    the module out and succeeds (bookworm's dkms would fail a kernel's
    postinst on a BUILD_EXCLUSIVE skip there), and with
    PRISM_ANY_KERNEL=yes DKMS builds and installs it. One DKMS build
    (about 20 s)."""
    older, k = kernels.get("6.1"), kernels.get("6.12")
    # No opt-in from the root's /etc/default/prism-iosched.
    env = {"PRISM_DEFAULTS": "/nonexistent"}
    dkmstool.add(tmp_path, k, kernel_range=(older.series, older.series))
    r = dkmstool.dkms(tmp_path, k, ["build", "-k", k.abi], env)
    assert r.returncode == 77, r.stdout[-2000:] + r.stderr[-2000:]
    said = r.stdout + r.stderr
    assert (f"kernel {k.abi} is Linux {k.series}, outside {older.series} to {older.series}"
            in said)
    assert f"dkms autoinstall -k {k.abi}" in said and "PRISM_ANY_KERNEL=yes" in said
    assert "BUILD_EXCLUSIVE" in said
    r = dkmstool.dkms(tmp_path, k, ["autoinstall", "-k", k.abi], env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"dkms autoinstall leaves it out for {k.abi}" in r.stderr
    assert not list((tmp_path / "tree").rglob("prism-iosched.ko*"))

    install = tmp_path / "install" / k.abi
    install.mkdir(parents=True)
    for f in k.modules_dir.glob("modules.*"):
        shutil.copy2(f, install / f.name)
    dkmstool.build_install(tmp_path, k, tmp_path / "install", env | {"PRISM_ANY_KERNEL": "yes"})
    assert list((install / "updates" / "dkms").glob("prism-iosched.ko*"))


# Which source each kernel needs, against a stand-in system (PRISM_ROOT,
# stub dpkg-query; dkmstool.fake_system): what the package's postinst
# prints at install and what its dpkg trigger builds from.
BOOKWORM = {"6.1.0-56-amd64": "6.1.192-2", "6.12.117+deb12-amd64": "6.12.117-1~deb12u1"}


def _find(fs: dkmstool.FakeSystem, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MODULE / "find-block-dir.sh"), *args], capture_output=True,
                          text=True, env=fs.env)


def test_installed_lists_the_kernels_ready_and_the_command_for_the_others(tmp_path):
    """--installed: on stdout the tested-range kernels with /lib/modules/
    ABI/build and no prism whose source is there; for each other one the
    exact apt-get command, at the version of its linux-image package. A
    kernel outside the range, one that has prism (its source may be gone:
    no rebuild is due), and a module tree without build/ say nothing."""
    fs = dkmstool.fake_system(tmp_path, BOOKWORM | {"5.10.0-30-amd64": "5.10.218-1",
                                                    "6.1.0-57-amd64": "6.1.192-3"},
                              {"linux-source-6.12": "6.12.117-1~deb12u1"})
    (fs.root / "usr/src/linux-source-6.12.tar.xz").touch()
    (fs.root / "lib/modules/6.1.0-47-amd64").mkdir()
    fs.has_prism("6.1.0-57-amd64")
    r = _find(fs, "--installed")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["6.12.117+deb12-amd64"]
    assert ("building for 6.1.0-56-amd64 needs linux-source-6.1 version 6.1.192-2 "
            "(installed: none): apt-get install linux-source-6.1=6.1.192-2\n") in r.stderr
    assert "dkms autoinstall -k KVER" in r.stderr
    for quiet in ("6.12.117", "5.10", "6.1.0-47", "6.1.0-57"):
        assert quiet not in r.stderr, quiet

    (fs.root / "usr/src/linux-source-6.12.tar.xz").unlink()
    r = _find(fs, "--check", "6.12.117+deb12-amd64")
    assert r.returncode == 1
    assert "apt-get install --reinstall linux-source-6.12=6.12.117-1~deb12u1" in r.stderr


def test_a_second_kernel_of_a_series_gets_its_source_beside_the_first(tmp_path):
    """dpkg holds one version of linux-source-6.1: the other 6.1 kernel is
    told to put its version's .deb in /usr/src, which then counts."""
    fs = dkmstool.fake_system(tmp_path, {"6.1.0-56-amd64": "6.1.192-2",
                                         "6.1.0-57-amd64": "6.1.192-3"},
                              {"linux-source-6.1": "6.1.192-3"})
    (fs.root / "usr/src/linux-source-6.1.tar.xz").touch()
    r = _find(fs, "--installed")
    assert r.stdout.split() == ["6.1.0-57-amd64"]
    assert "(installed: 6.1.192-3, another kernel's)" in r.stderr
    assert (f"cd {fs.root}/usr/src && apt-get download linux-source-6.1=6.1.192-2 && "
            "dkms autoinstall -k 6.1.0-56-amd64") in r.stderr
    (fs.root / "usr/src/linux-source-6.1_6.1.192-2_all.deb").touch()
    r = _find(fs, "--installed")
    assert r.stdout.split() == ["6.1.0-56-amd64", "6.1.0-57-amd64"] and not r.stderr


def _source_tarball(path: Path, top: str, mode: str) -> None:
    """A linux-source tarball: @top/Makefile, @top/block/elevator.h, and
    a file that extraction leaves out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tar:
        for name, text in (("Makefile", "VERSION = 6\n"), ("block/elevator.h", "/* */\n"),
                           ("kernel/sched.c", "")):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


# (os-release ID, kernel ABI, its package's version, source package, its
# tarball below /usr/src, tarfile's mode)
LAYOUTS = {
    "debian": ("debian", "6.1.0-56-amd64", "6.1.192-2", "linux-source-6.1",
               "linux-source-6.1.tar.xz", "w:xz"),
    "ubuntu": ("ubuntu", "6.8.0-49-generic", "6.8.0-49.49", "linux-source-6.8.0",
               "linux-source-6.8.0/linux-source-6.8.0.tar.bz2", "w:bz2"),
}


@pytest.mark.parametrize("how", ["installed", "deb"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_dir_from_each_layout(tmp_path, layout, how):
    """Debian's /usr/src/linux-source-X.Y.tar.xz and Ubuntu's
    /usr/src/linux-source-X.Y.Z/linux-source-X.Y.Z.tar.bz2, from the
    installed package or its .deb in /usr/src: the missing one is named
    as that system names it, and once there, block/ comes out of it (and
    stays usable after the source is removed)."""
    os_id, abi, version, pkg, member, mode = LAYOUTS[layout]
    fs = dkmstool.fake_system(tmp_path, {abi: version}, {}, os_id=os_id)
    r = _find(fs, "--check", abi)
    assert r.returncode == 1
    assert f"apt-get install {pkg}={version}" in r.stderr
    if how == "installed":
        _source_tarball(fs.root / "usr/src" / member, pkg, mode)
        fs.install(pkg, version)
    else:
        tree = tmp_path / "deb"
        _source_tarball(tree / "usr/src" / member, pkg, mode)
        (tree / "DEBIAN").mkdir()
        (tree / "DEBIAN/control").write_text(
            f"Package: {pkg}\nVersion: {version}\nArchitecture: all\n"
            "Maintainer: test <test@example.org>\nDescription: test\n")
        subprocess.run(["dpkg-deb", "-b", "-Zgzip", str(tree),
                        str(fs.root / "usr/src" / f"{pkg}_{version}_all.deb")],
                       check=True, capture_output=True)
    assert _find(fs, "--check", abi).returncode == 0
    dest = tmp_path / "dest"
    r = _find(fs, abi, str(dest))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{dest}/block"
    assert (dest / "block/elevator.h").exists() and (dest / "Makefile").exists()
    assert not (dest / "kernel").exists()
    assert (dest / ".version").read_text().strip() == version
    # make's extraction (.src-KVER) serves again once the source is gone.
    for f in (fs.root / "usr/src").rglob("linux-source-*"):
        if f.is_file():
            f.unlink()
    assert _find(fs, "--check", abi).returncode == 1
    r = _find(fs, abi, str(dest))
    assert r.returncode == 0 and r.stdout.strip() == f"{dest}/block", r.stderr
