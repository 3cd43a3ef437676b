"""The debug kernel (prism/host/debugkernel.py, kernels.DEBUG): a pin's
own source built with lockdep, KASAN and kmemleak, booted only when named
(`--kernel 6.12-debug`), never built as a side effect. On the host, no
build: the kernel's make and virtme-ng are stood in for, the build of an
hour or more is left to `prism kernels debug-build`, once per release."""

import re
import shutil
from pathlib import Path

import pytest

from prism import cli
from prism.common.errors import PrismError
from prism.guest import selftest
from prism.host import build, debugkernel, kernels, klog, vm

DEBUG = kernels.DEBUG["6.12-debug"]


@pytest.fixture
def roots(monkeypatch, tmp_path):
    """An empty PRISM_ROOTS: the debug kernel not built."""
    monkeypatch.setenv("PRISM_ROOTS", str(tmp_path / "roots"))
    return tmp_path / "roots"


def test_the_debug_kernel_is_its_pins_source_in_no_set():
    pin = kernels.KERNELS["6.12"]
    assert (DEBUG.series, DEBUG.version, DEBUG.source_pkg) == (pin.series, pin.version,
                                                              pin.source_pkg)
    assert DEBUG.abi == pin.version.split("-")[0] + "-prism-debug"
    assert DEBUG.debug and not DEBUG.vm_tested and not DEBUG.build_only and not DEBUG.root
    for name in ("all", "build-only", "every"):
        assert DEBUG not in kernels.parse(name), name
    assert DEBUG not in kernels.vm_tested()
    assert DEBUG.abi not in {k.abi for k in kernels.parse("every")}
    # It follows its pin when `prism kernels update` moves it.
    moved = kernels.Kernel("6.12", "6.12.200+deb12-amd64", "6.12.200-1~deb12u1")
    assert kernels._debug_of(moved).abi == "6.12.200-prism-debug"


def test_kernel_6_12_debug_selects_it_explicitly():
    assert kernels.parse("6.12-debug") == [DEBUG]
    assert kernels.parse("6.12,6.12-debug") == [kernels.KERNELS["6.12"], DEBUG]
    assert kernels.parse_booted("6.12-debug") == [DEBUG]
    with pytest.raises(PrismError, match=r"debug: 6\.12-debug \(prism kernels debug-build\)"):
        kernels.get("6.1-debug")


def test_it_is_no_pin_to_move(capsys):
    assert cli.main(["kernels", "update", "--kernel", "6.12-debug", "--dry-run"]) == 2
    assert "follows the pin of its series" in capsys.readouterr().err


def test_its_tree_and_install_are_under_the_roots(roots):
    """The image and modules in the layout of an extracted .deb (what
    vm.run() boots for every kernel); the built tree is its headers and its
    block/; nothing in /boot, /lib/modules or /usr/src."""
    image = roots / "debug" / "6.12-debug" / DEBUG.version / "image"
    tree = roots / "debug" / "6.12-debug" / DEBUG.version / "linux"
    assert kernels.image_dir(DEBUG) == image and kernels.debug_tree(DEBUG) == tree
    assert DEBUG.vmlinuz == image / "boot" / f"vmlinuz-{DEBUG.abi}"
    assert DEBUG.modules_dir == image / "lib" / "modules" / DEBUG.abi
    assert DEBUG.headers_dir == tree
    assert kernels.block_dir(DEBUG) == tree / "block"
    assert kernels.checkpatch(DEBUG) == tree / "scripts" / "checkpatch.pl"


def test_an_unbuilt_debug_kernel_names_the_command_that_builds_it(roots, monkeypatch, capsys):
    """Every way to it fails before anything boots or downloads, naming
    `prism kernels debug-build`; nothing builds it as a side effect."""
    def refuse(*args, **kwargs):
        raise AssertionError("booted or downloaded")
    monkeypatch.setattr(vm, "_boot", refuse)
    monkeypatch.setattr(kernels, "_source_deb", refuse)
    monkeypatch.setattr(debugkernel, "build", refuse)
    assert not kernels.installed(DEBUG)
    with pytest.raises(PrismError, match="run 'prism kernels debug-build'"):
        kernels.fetch(DEBUG)
    for argv in (["fetch"], ["build"], ["selftest"], ["stress"], ["vm", "--", "true"]):
        assert cli.main(argv[:1] + ["--kernel", "6.12-debug"] + argv[1:]) == 1, argv
        err = capsys.readouterr().err
        assert "6.12-debug is not built yet" in err and "prism kernels debug-build" in err
    assert not (roots / "debug").exists()


# --- the config: asked for, made, verified --------------------------------

FAKE_CONFIG = """\
#
# Automatically generated file; DO NOT EDIT.
#
CONFIG_PROVE_LOCKING=y
CONFIG_BLK_DEV_NULL_BLK=y
# CONFIG_KASAN is not set
CONFIG_LOCALVERSION="-prism-debug"
CONFIG_LOCKDEP_BITS=15
# CONFIG_DEBUG_INFO_BTF is not set
"""


def test_parse_config_reads_values_and_unset_symbols():
    have = debugkernel.parse_config(FAKE_CONFIG)
    assert have == {"PROVE_LOCKING": "y", "BLK_DEV_NULL_BLK": "y", "KASAN": "n",
                    "LOCALVERSION": '"-prism-debug"', "LOCKDEP_BITS": "15",
                    "DEBUG_INFO_BTF": "n"}


def test_the_verifier_names_each_item_that_did_not_hold():
    wanted = {"PROVE_LOCKING": "y", "BLK_DEV_NULL_BLK": "m", "KASAN": "y",
              "DEBUG_KMEMLEAK": "y", "LOCALVERSION": '"-prism-debug"', "LOCKDEP_BITS": "16",
              "DEBUG_INFO_BTF": "n", "DRM": "n"}
    assert debugkernel.misses(FAKE_CONFIG, wanted) == [
        "CONFIG_BLK_DEV_NULL_BLK=m (got y)",   # built in: no module parameters
        "CONFIG_KASAN=y (got n)",
        "CONFIG_DEBUG_KMEMLEAK=y (got n)",     # absent: a dependency unmet
        "CONFIG_LOCKDEP_BITS=16 (got 15)"]
    # A symbol wanted off holds when it is not set, or absent.
    assert debugkernel.misses(FAKE_CONFIG, {"DRM": "n", "KASAN": "n"}) == []


def test_the_fragment_holds_what_it_asks_for_last_line_winning():
    """What configure() appends reads back as WANTED, over the base config's
    own lines for the same symbols (as Kconfig takes the last)."""
    text = FAKE_CONFIG + debugkernel.fragment(debugkernel.WANTED)
    assert debugkernel.misses(text, debugkernel.WANTED) == []
    assert "# CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN is not set\n" in debugkernel.fragment(
        debugkernel.WANTED)


def test_the_config_asks_for_the_checkers_and_what_the_guest_suite_uses():
    w = debugkernel.WANTED
    for item in ("PROVE_LOCKING", "DEBUG_ATOMIC_SLEEP", "KASAN", "KASAN_GENERIC",
                 "KASAN_INLINE", "DEBUG_KMEMLEAK", "DEBUG_FS", "BLK_DEBUG_FS", "MODULES",
                 "MODULE_UNLOAD", "CONFIGFS_FS", "VIRTIO_BLK", "BLK_DEV_NVME",
                 "MQ_IOSCHED_DEADLINE", "BFQ_GROUP_IOSCHED", "BLK_CGROUP", "CGROUPS", "MEMCG",
                 "CGROUP_WRITEBACK", "EXT4_FS", "DETECT_HUNG_TASK", "SOFTLOCKUP_DETECTOR",
                 "9P_FS", "NET_9P_VIRTIO"):
        assert w[item] == "y", item
    # Modules, as the guest loads them with parameters or by name.
    for item in ("BLK_DEV_NULL_BLK", "SCSI_DEBUG", "BLK_DEV_LOOP", "MQ_IOSCHED_KYBER",
                 "IOSCHED_BFQ"):
        assert w[item] == "m", item
    assert w["DEBUG_KMEMLEAK_AUTO_SCAN"] == "n" and w["DEBUG_INFO"] == "n"
    assert w["LOCALVERSION"] == f'"{kernels.DEBUG_LOCALVERSION}"'
    assert all(re.fullmatch(r"[0-9A-Z_]+", name) for name in w)


# --- the build, with make and virtme-ng stood in for ------------------------

def test_a_missing_tool_is_named_with_its_package(roots, monkeypatch, tmp_path, capsys):
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda t: None if t in ("flex", "bison") else real(t))
    monkeypatch.setattr(debugkernel, "HEADERS", {
        tmp_path / "libelf.h": "apt-get install libelf-dev",
        Path(__file__): "apt-get install python3"})
    missing = debugkernel.missing_tools()
    assert "flex: apt-get install flex" in missing and "bison: apt-get install bison" in missing
    assert "libelf.h: apt-get install libelf-dev" in missing
    assert not [m for m in missing if "python3" in m]
    assert cli.main(["kernels", "debug-build"]) == 1
    err = capsys.readouterr().err
    assert "6.12-debug needs what this machine lacks: " in err and "libelf-dev" in err
    assert not (roots / "debug").exists()


class FakeKbuild:
    """Stands in for vng and make in a tree that has only a Makefile that
    prints its version: each command is recorded and leaves what the real
    one leaves behind."""

    def __init__(self, k: kernels.Kernel, release: str):
        self.k, self.release, self.calls = k, release, []

    def __call__(self, cmd, cwd, log, what):
        self.calls.append(cmd[:2])
        if cmd == ["vng", "--kconfig"]:
            (cwd / ".config").write_text("CONFIG_KASAN=n\nCONFIG_BLK_DEV_NULL_BLK=y\n")
        elif "bzImage" in cmd:
            (cwd / "include" / "config").mkdir(parents=True, exist_ok=True)
            (cwd / "include" / "config" / "kernel.release").write_text(self.release + "\n")
            (cwd / "arch" / "x86" / "boot").mkdir(parents=True, exist_ok=True)
            (cwd / "arch" / "x86" / "boot" / "bzImage").write_text("kernel")
            (cwd / "Module.symvers").write_text("")
        elif "modules_install" in cmd:
            dest = Path(next(a for a in cmd if a.startswith("INSTALL_MOD_PATH="))
                        .partition("=")[2])
            mods = dest / "lib" / "modules" / self.k.abi
            mods.mkdir(parents=True)
            (mods / "modules.dep").write_text("")


@pytest.fixture
def fake_tree(roots, monkeypatch):
    """The extracted tree, as a Makefile that knows its version, and the
    build's tools said present; returns the stand-in for vng and make."""
    def extract(k):
        tree = kernels.debug_tree(k)
        tree.mkdir(parents=True, exist_ok=True)
        version = k.version.split("-")[0]
        (tree / "Makefile").write_text(f"kernelversion:\n\t@echo {version}\n")
        return tree
    fake = FakeKbuild(DEBUG, DEBUG.abi)
    monkeypatch.setattr(debugkernel, "missing_tools", lambda: [])
    monkeypatch.setattr(debugkernel, "extract", extract)
    monkeypatch.setattr(debugkernel, "_logged", fake)
    monkeypatch.setattr(debugkernel, "_version", lambda cmd: f"{cmd[0]} 1.0")
    return fake


def test_the_build_installs_as_an_extracted_deb_and_once(fake_tree, roots, monkeypatch):
    debugkernel.build(DEBUG, jobs=3)
    assert fake_tree.calls == [["vng", "--kconfig"], ["make", "olddefconfig"],
                               ["make", "-j3"], ["make", "LOCALVERSION="]]
    assert kernels.debug_ready(DEBUG) and kernels.installed(DEBUG)
    assert DEBUG.vmlinuz.read_text() == "kernel"
    assert (DEBUG.modules_dir / "modules.dep").exists()
    config = (kernels.debug_tree(DEBUG) / ".config").read_text()
    assert debugkernel.misses(config, debugkernel.WANTED) == []
    stamp = (kernels.image_dir(DEBUG) / kernels.DEBUG_STAMP).read_text()
    assert f"abi {DEBUG.abi}\n" in stamp and f"={DEBUG.version}\n" in stamp
    kernels.fetch(DEBUG)     # built: fetching it asks for nothing more
    # The same inputs again: nothing done.
    fake_tree.calls.clear()
    debugkernel.build(DEBUG)
    assert fake_tree.calls == []
    # An item more: configured and built again.
    monkeypatch.setattr(debugkernel, "WANTED", dict(debugkernel.WANTED, DEBUG_LIST="n"))
    debugkernel.build(DEBUG, jobs=1)
    assert ["make", "-j1"] in fake_tree.calls
    assert (kernels.image_dir(DEBUG) / kernels.DEBUG_STAMP).read_text() != stamp


def test_config_only_stops_before_the_compiler(fake_tree):
    debugkernel.build(DEBUG, config_only=True)
    assert fake_tree.calls == [["vng", "--kconfig"], ["make", "olddefconfig"]]
    assert not kernels.debug_ready(DEBUG)


def test_an_item_that_did_not_hold_fails_the_build_before_make(fake_tree, monkeypatch):
    monkeypatch.setattr(debugkernel, "fragment", lambda wanted: "CONFIG_KASAN=y\n")
    with pytest.raises(PrismError, match=r"did not hold .*CONFIG_KASAN_INLINE=y \(got n\)"):
        debugkernel.build(DEBUG)
    assert ["make", "-j1"] not in fake_tree.calls and not kernels.debug_ready(DEBUG)


def test_a_tree_of_another_release_is_refused(fake_tree, monkeypatch):
    monkeypatch.setattr(kernels, "DEBUG_LOCALVERSION", "-other")
    with pytest.raises(PrismError, match=f"its release would be .*-other, not {DEBUG.abi}"):
        debugkernel.build(DEBUG)


def test_an_earlier_versions_tree_is_removed(fake_tree, roots):
    old = kernels.debug_dir(DEBUG).parent / "6.12.1-1~deb12u1"
    (old / "linux").mkdir(parents=True)
    debugkernel.build(DEBUG, config_only=True)
    assert not old.exists() and kernels.debug_tree(DEBUG).exists()


def test_a_module_is_built_again_for_a_rebuilt_debug_kernel(roots):
    """Under the same release string a rebuilt debug kernel may lay its
    structs out otherwise: its stamp is part of the module build's digest."""
    stamp = kernels.image_dir(DEBUG) / kernels.DEBUG_STAMP
    stamp.parent.mkdir(parents=True)
    stamp.write_text("config sha256 1\n")
    first = build._sources_digest(DEBUG)
    stamp.write_text("config sha256 2\n")
    assert build._sources_digest(DEBUG) != first


# --- booting it: kmemleak's scan, the lifecycle's checks ---------------------

def test_kmemleak_is_scanned_after_the_command_on_a_debug_kernel_only(tmp_path):
    script = vm._guest_script("true", tmp_path, None, kmemleak=True)
    assert script.count("echo scan > /sys/kernel/debug/kmemleak") == 1
    scan = script.index("echo scan")
    assert script.index('echo "$rc"') < scan < script.index("dmesg >")
    assert '> "$PRISM_RUNDIR/kmemleak.txt"' in script
    assert "/sys/kernel/debug/kmemleak" not in vm._guest_script("true", tmp_path, None)


@pytest.mark.parametrize("line", [
    "[ 812.1] kmemleak: 3 new suspected memory leaks (see /sys/kernel/debug/kmemleak)",
    "[   0.9] kmemleak: Kernel memory leak detector disabled",
    "[  12.3] BUG: KASAN: slab-use-after-free in prism_finish_request+0x1/0x2",
])
def test_a_debug_kernels_reports_fail_the_boot(line):
    assert klog.problems(line)


def test_a_debug_kernels_selftest_runs_the_lifecycles_checks(monkeypatch, tmp_path):
    """The checks that time the policy or the drives are left out (and
    status_tool, whose lockdown would keep kmemleak from scanning), unless
    --only names checks."""
    ran = []

    def run_vm(k, command, args, rundir=None):
        ran.append(command)
        return vm.VmResult(0, "", "", tmp_path, 1.0)
    monkeypatch.setattr(cli, "_run_vm", run_vm)
    cli.main(["selftest", "--kernel", "6.12-debug"])
    skip = ran[-2].split("--skip ")[1].split()[0].split(",")
    assert set(skip) == set(selftest.SAME_ON_EVERY_KERNEL) | {"status_tool", "tag_reserve",
                                                              "writeback_low", "shared_tags"}
    # shared_tags in a boot of its own, after the others.
    assert "--only shared_tags" in ran[-1] and "--skip" not in ran[-1]
    cli.main(["selftest", "--kernel", "6.12-debug", "--only", "status_tool"])
    assert "--skip" not in ran[-1] and "--only status_tool" in ran[-1]
    cli.main(["selftest", "--kernel", "6.12"])
    assert "--skip" not in ran[-1]
