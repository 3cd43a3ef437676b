"""Host-side tests of the harness and the module build: no VM needed."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prism import cli
from prism.common.errors import PrismError
from prism.host import build, kernels, klog

REPO = Path(__file__).resolve().parent.parent


def test_pins_match_the_supported_kernels():
    """The series and their kinds; the ABIs only in shape, as
    `prism kernels update` moves them (and nothing but kernels.py may
    spell them)."""
    assert set(kernels.KERNELS) == {"6.1", "6.12", "7.3"}
    k = kernels.get("6.12")
    assert re.fullmatch(r"6\.12\.\d+\+deb12-amd64", k.abi)
    assert re.fullmatch(r"6\.12\.\d+-\d+~deb12u\d+", k.version)
    assert k.root == "bookworm" and k.vm_tested
    k = kernels.get("6.1")
    assert re.fullmatch(r"6\.1\.0-\d+-amd64", k.abi)
    assert re.fullmatch(r"6\.1\.\d+-\d+", k.version)
    assert k.root == "bookworm" and k.vm_tested
    # Built in the trixie root; booted by the suite once someone has
    # booted it (vm_tested, the switch).
    k = kernels.get("7.3")
    assert re.fullmatch(r"7\.3\.\d+\+deb13-amd64", k.abi)
    assert re.fullmatch(r"7\.3\.\d+-\d+~bpo13\+\d+", k.version)
    assert k.root == "trixie" and k.release == "trixie"
    # One place only: no other file of the harness spells a pinned version.
    for py in (REPO / "prism").rglob("*.py"):
        if py.name != "kernels.py":
            text = py.read_text()
            for pin in kernels.KERNELS.values():
                assert pin.abi not in text and pin.version not in text, (py, pin)


def test_the_suite_boots_the_vm_tested_pins_by_default(request):
    """CI's pytest boots kernels.vm_tested(), not every pin: a pin is
    added unbooted (vm_tested=False) and flipped once it has passed."""
    tested = [k.series for k in kernels.vm_tested()]
    assert tested == [k.series for k in kernels.KERNELS.values() if k.vm_tested]
    if "PRISM_TEST_KERNELS" not in os.environ:
        assert request.config.getoption("--kernels") == ",".join(tested)


def test_root_kernel_paths_are_outside_the_host(monkeypatch, tmp_path):
    """A build root's kernel is built there and booted from its extracted
    .deb: nothing of it in /boot, /lib/modules or /usr/src; every tested
    kernel is one (the host's own release's too), so fetching never
    installs a kernel on the host."""
    monkeypatch.setenv("PRISM_ROOTS", str(tmp_path / "roots"))
    for k in kernels.KERNELS.values():
        assert k.root, k
        for path in (k.headers_dir, k.vmlinuz, k.modules_dir):
            assert path.is_relative_to(tmp_path / "roots"), path
    assert kernels.build_root(kernels.get("6.1")) == tmp_path / "roots" / "bookworm-root"
    k = kernels.get("7.3")
    assert kernels.build_root(k) == tmp_path / "roots" / "trixie-root"
    assert k.headers_dir == tmp_path / f"roots/trixie-root/usr/src/linux-headers-{k.abi}"
    assert k.vmlinuz == tmp_path / f"roots/images/{k.abi}/boot/vmlinuz-{k.abi}"
    assert k.modules_dir == tmp_path / f"roots/images/{k.abi}/lib/modules/{k.abi}"
    assert kernels.root_packages("trixie")[-2:] == [f"{k.headers_pkg}={k.version}",
                                                     f"{k.source_pkg}={k.version}"]
    opts = kernels.apt_options("trixie")
    assert f"Dir::State::Lists={tmp_path}/roots/apt/trixie/lists" in opts
    assert "deb http://deb.debian.org/debian trixie-backports main" in (
        tmp_path / "roots/apt/trixie/sources.list").read_text()
    # The host's release uses the host's own apt.
    assert kernels.apt_options("bookworm") == []


# What setup's kernel step must never write to or run on the host.
HOST_TREES = ("/boot", "/lib/modules", "/usr/lib/modules", "/usr/src", "/etc")


def test_fetching_every_kernel_installs_nothing_on_the_host(monkeypatch, tmp_path):
    """scripts/setup.sh's kernel step (`prism fetch --kernel all`) from an
    empty cache, against an archive that offers every pin (no network):
    every command it runs, apt's, mmdebstrap's and dpkg-deb's, stays in
    the cache. None installs a package on the host or names a path under
    /boot, /lib/modules, /usr/src or /etc, so the host's boot, GRUB's
    default and its module tree stay as they were; each kernel ends up
    with headers, an image and a module tree in the cache."""
    monkeypatch.setenv("PRISM_ROOTS", str(tmp_path / "roots"))
    monkeypatch.setenv("PRISM_CACHE", str(tmp_path / "cache"))
    pins = list(kernels.KERNELS.values())
    monkeypatch.setattr(kernels, "_ensure_apt_lists",
                        lambda pkg, release: [k.version for k in pins])
    monkeypatch.setattr(kernels.os, "geteuid", lambda: 0)
    monkeypatch.setattr(kernels.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    ran: list[list[str]] = []

    def fake(cmd, **kw):
        ran.append([str(c) for c in cmd])
        out = ""
        if cmd[0] == "mmdebstrap":
            made = Path(next(c for c in cmd if c.endswith(".tmp")))
            for k in pins:
                if f"{k.headers_pkg}={k.version}" in " ".join(cmd):
                    (made / "usr/src" / f"linux-headers-{k.abi}").mkdir(parents=True)
                    (made / "usr/src" / f"linux-headers-{k.abi}" / "Makefile").touch()
        elif cmd[:2] == ["apt-get", "download"]:
            pkg, version = cmd[-1].split("=")
            (Path(kw["cwd"]) / f"{pkg}_{version}_amd64.deb").write_text("deb")
        elif cmd[:2] == ["dpkg-deb", "-x"]:
            abi = Path(cmd[2]).name.split("_")[0].removeprefix("linux-image-")
            (Path(cmd[3]) / "boot").mkdir(parents=True)
            (Path(cmd[3]) / "boot" / f"vmlinuz-{abi}").touch()
            (Path(cmd[3]) / "lib/modules" / abi).mkdir(parents=True)
        elif cmd[:2] == ["depmod", "-b"]:
            (Path(cmd[2]) / "lib/modules" / cmd[3] / "modules.dep").touch()
        return subprocess.CompletedProcess(cmd, 0, out, "")
    monkeypatch.setattr(kernels, "_run", fake)
    monkeypatch.setattr(kernels.subprocess, "run", fake)
    for k in pins:
        kernels.install_packages(k)
        assert kernels.installed(k), k
        for path in (k.headers_dir, k.vmlinuz, k.modules_dir):
            assert path.is_relative_to(tmp_path), path
    assert {c[0] for c in ran} == {"mmdebstrap", "apt-get", "dpkg-deb", "depmod"}, ran
    for cmd in ran:
        assert cmd[:2] != ["apt-get", "install"] and "-i" not in cmd[:2], cmd
        for arg in cmd:
            assert not any(arg == tree or arg.startswith(tree + "/") for tree in HOST_TREES), cmd
    assert [c for c in ran if c[0] == "mmdebstrap"] and all(
        "--mode=root" in c for c in ran if c[0] == "mmdebstrap")


def test_root_build_runs_in_a_private_mount_namespace(monkeypatch, tmp_path):
    monkeypatch.setenv("PRISM_ROOTS", str(tmp_path))
    k = kernels.get("7.3")
    cmd = build.root_command(k, ["make", "-C", "/usr/src/x", "M=/prism/out"],
                             {tmp_path / "out": build.ROOT_OUT})
    assert cmd[:5] == ["unshare", "--mount", "--propagation", "private", "--fork"]
    script = cmd[-1]
    assert f"mount -t proc proc {tmp_path}/trixie-root/proc" in script
    assert f"mount --bind {tmp_path}/out {tmp_path}/trixie-root/prism/out" in script
    assert script.endswith(f"exec chroot {tmp_path}/trixie-root env -i "
                           "PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "
                           "make -C /usr/src/x M=/prism/out")


def test_unknown_kernel_is_a_clear_error():
    with pytest.raises(PrismError, match="tested: 6.1, 6.12, 7.3; build-only: 6.12-cloud, "):
        kernels.get("5.10")


def test_pinned_version_not_offered_names_what_is_and_the_updater(monkeypatch):
    monkeypatch.setattr(kernels, "_ensure_apt_lists",
                        lambda pkg, release: ["6.1.200-1", "6.1.199-1"])
    monkeypatch.setattr(kernels, "_apt_updated", {"bookworm"})
    k = kernels.get("6.1")
    with pytest.raises(PrismError) as e:
        kernels.check_offered(k, "linux-source-6.1")
    assert f"linux-source-6.1={k.version}" in str(e.value)
    assert "offered: 6.1.200-1, 6.1.199-1" in str(e.value)
    assert "Run 'prism kernels update'" in str(e.value)


def test_cache_is_outside_the_repo(monkeypatch, tmp_path):
    monkeypatch.delenv("PRISM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernels.cache_dir() == tmp_path / "prism"
    assert REPO not in kernels.cache_dir().parents


@pytest.mark.parametrize("line,kind", [
    ("[   12.3] WARNING: CPU: 1 PID: 77 at block/blk-mq.c:123 foo+0x1/0x2", "warning"),
    ("[   12.3] BUG: kernel NULL pointer dereference, address: 0000000000000008", "bug"),
    ("[   12.3] kernel BUG at block/elevator.c:55!", "bug"),
    ("[   12.3] Oops: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("[   12.3] WARNING: possible circular locking dependency detected", "lockdep"),
    ("[  130.0] INFO: task fio:123 blocked for more than 120 seconds.", "hung task"),
    ("[   12.3] watchdog: BUG: soft lockup - CPU#0 stuck for 22s!", "bug"),
    ("[   12.3] list_del corruption. prev->next should be ffff", "list corruption"),
    ("[   12.3] WARNING: bad unlock balance detected!", "lockdep"),
    ("[   12.3] turning off the locking correctness validator.", "lockdep"),
])
def test_klog_finds_problems(line, kind):
    text = "[    1.0] null_blk: module loaded\n" + line + "\n"
    assert klog.problems(text) == [(kind, line.strip())]


def test_klog_clean_boot_log():
    text = ("[    0.0] Linux version 6.12.117+deb12-amd64\n"
            "[   10.7] prism_iosched: loading out-of-tree module taints kernel.\n"
            "[   10.7] io scheduler prism registered\n"
            "[   11.0] null_blk: disk nullb0 created\n"
            # A lockdep kernel's banner (the debug kernel's).
            "[    1.8] rcu: \tRCU lockdep checking is enabled.\n"
            "[    2.2] ... MAX_LOCKDEP_KEYS:        8192\n")
    assert klog.problems(text) == []


def test_cli_errors_are_one_line(capsys):
    assert cli.main(["build", "--kernel", "4.19", "--no-fetch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism: error: unknown kernel")


def test_cli_vm_needs_a_command(capsys, monkeypatch):
    monkeypatch.setattr(build, "build", lambda k: Path("/nonexistent.ko"))
    assert cli.main(["vm", "--kernel", "6.12"]) == 2
    assert "nothing to run" in capsys.readouterr().err


def test_cli_has_one_entry_point():
    r = subprocess.run([sys.executable, "-m", "prism.cli", "--help"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    for sub in ("fetch", "build", "checkpatch", "kernels", "vm", "selftest", "blktests", "bench",
                "disk", "demo"):
        assert sub in r.stdout
    version = subprocess.run([sys.executable, "-m", "prism.cli", "--version"],
                             capture_output=True, text=True, cwd=REPO)
    assert version.stdout.strip() == "prism " + (REPO / "module" / "VERSION").read_text().strip()


def test_vm_and_bench_share_one_list_of_device_names():
    """prism vm and prism bench run name their devices alike: every
    profile of one is a profile of the other, and nullb is nullb-ssd in
    both."""
    ap = cli.parser()
    vm_names = ap.parse_args(["vm", "--", "true"])
    assert vm_names.device == "nullb-ssd"
    for name in cli.plan.VM_PROFILES:
        assert ap.parse_args(["vm", "--device", name, "--", "true"]).device == name
        assert ap.parse_args(["bench", "run", "--workload", "x", "--device", name,
                              "--out", "o"]).device == name
    assert ap.parse_args(["vm", "--device", "nullb", "--", "true"]).device == "nullb-ssd"
    assert ap.parse_args(["bench", "run", "--workload", "x", "--device", "nullb",
                          "--out", "o"]).device == "nullb-ssd"
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["vm", "--device", "nullb-hdd", "--", "true"])
    assert e.value.code == 2


def test_demo_runs_seed_000_on_its_device_or_the_one_asked(monkeypatch, tmp_path):
    """prism demo measures on the device-bound emulated disk unless
    --device names another; the report's command says which; a bad
    device is refused (by plan.run's validation, which comes before any
    kernel is fetched or module built)."""
    ran = []

    def run(args, command):
        cli.plan.validate(args)
        ran.append((args, command))
    monkeypatch.setattr(cli.plan, "run", run)
    assert cli.main(["demo", "--out", str(tmp_path / "a")]) == 0
    args, command = ran[-1]
    assert args.device == cli.DEMO_DEVICE == "hdd"
    assert cli.DEMO_DEVICE in cli.plan.MODEL_PROFILES
    assert (args.workload, args.reps, args.runtime) == ("database_backup", 3, 10)
    assert command == "prism demo --kernel 6.12"
    assert cli.main(["demo", "--quick", "--device", "cloud", "--out", str(tmp_path / "b")]) == 0
    args, command = ran[-1]
    assert (args.device, args.reps, args.runtime) == ("cloud", 1, 3)
    assert command == "prism demo --quick --kernel 6.12 --device cloud"
    assert cli.main(["demo", "--device", "floppy", "--out", str(tmp_path / "c")]) == 2
    assert len(ran) == 2


def test_usage_errors_exit_2_and_failures_exit_1(capsys, monkeypatch):
    # Bad input: nothing done, 2 (as argparse).
    assert cli.main(["bench", "run", "--workload", "nope", "--device", "hdd",
                     "--out", "/nonexistent"]) == 2
    assert cli.main(["bench", "run", "--workload", "database_backup", "--schedulers", "noop",
                     "--device", "hdd", "--out", "/nonexistent"]) == 2

    # A failure while working: 1.
    def broken(k):
        raise cli.PrismError("module build for X failed")
    monkeypatch.setattr(build, "build", broken)
    assert cli.main(["selftest", "--kernel", "6.12"]) == 1
    assert "module build for X failed" in capsys.readouterr().err


def test_kernel_lists():
    assert [k.series for k in kernels.parse("all")] == sorted(kernels.KERNELS)
    assert [k.series for k in kernels.parse("6.12,6.1")] == ["6.12", "6.1"]
    with pytest.raises(cli.UsageError, match="unknown kernel"):
        kernels.parse("6.1,5.10")


# The module build itself, for each supported kernel.

@pytest.fixture(scope="session", params=sorted(kernels.KERNELS))
def built(request):
    k = kernels.get(request.param)
    return k, build.build(k)


def test_a_build_of_the_same_sources_is_reused(tmp_path, monkeypatch):
    """The suite builds once per boot; the same sources for the same kernel
    are compiled once, and a changed source is compiled again."""
    k = kernels.get("6.12")
    src, tb = tmp_path / "module", tmp_path / "kmod"
    shutil.copytree(build.MODULE_SRC, src)
    shutil.copytree(build.TESTBLK_SRC, tb)
    monkeypatch.setattr(build, "MODULE_SRC", src)
    monkeypatch.setattr(build, "TESTBLK_SRC", tb)
    monkeypatch.setattr(build, "build_dir", lambda _k: tmp_path / "out")
    ko = build.build(k, fetch=False)
    first = ko.stat().st_mtime_ns
    assert build.build(k, fetch=False) == ko and ko.stat().st_mtime_ns == first
    policy = src / "prism_policy.c"
    policy.write_text(policy.read_text() + "\n/* changed */\n")
    build.build(k, fetch=False)
    assert ko.stat().st_mtime_ns != first


def test_module_builds_without_warnings(built):
    k, ko = built
    assert ko.exists() and ko.stat().st_size > 10000
    info = subprocess.run(["modinfo", "-F", "vermagic", str(ko)], capture_output=True,
                          text=True).stdout
    assert info.startswith(k.abi + " ")
    lic = subprocess.run(["modinfo", "-F", "license", str(ko)], capture_output=True,
                         text=True).stdout.strip()
    assert lic == "GPL"
    # The series prism is tested on, once (module/kernel-range).
    tested = subprocess.run(["modinfo", "-F", "tested_kernels", str(ko)], capture_output=True,
                            text=True).stdout.splitlines()
    first, last = kernels.vm_tested()[0].series, kernels.vm_tested()[-1].series
    assert tested == [f"{first} to {last}"]


def test_shallow_depth_meaning_detected_per_kernel(built):
    """6.1 limits per sbitmap word, 6.12.117 the whole bitmap (a stable
    backport): the build must tell from the source, not the version."""
    k, ko = built
    cmd = (ko.parent / ".prism_sched.o.cmd").read_text()
    per_word = "-DPRISM_SHALLOW_DEPTH_PER_WORD" in cmd
    assert per_word == (k.series == "6.1")


def test_blkcg_api_detected_per_kernel(built):
    """The blkcg policy API (io.prism.weight) takes the queue on 6.1 and
    the gendisk on 6.12, with blkg_conf_init()/_exit() only on 6.12, and
    blkg_conf_unprep()/_close_bdev() on 7.3; the build tells from
    block/blk-cgroup.h, and compiles the policy in."""
    k, ko = built
    cmd = (ko.parent / ".prism_cgroup.o.cmd").read_text()
    later = k.series != "6.1"
    for macro in ("PRISM_BLKCG_DISK", "PRISM_PD_ALLOC_DISK", "PRISM_BLKG_CONF_INIT"):
        assert (f"-D{macro}" in cmd) == later, macro
    assert ("-DPRISM_BLKG_CONF_UNPREP" in cmd) == (k.series == "7.3")


def test_no_kernel_source_in_repo():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                             cwd=REPO).stdout.split()
    assert not any(p.endswith(("elevator.h", "blk-mq.h", "checkpatch.pl", ".ko"))
                   for p in tracked)


@pytest.mark.parametrize("series", sorted(kernels.KERNELS))
def test_checkpatch_clean(series):
    """Each kernel's own checkpatch: they differ (7.3's asks for
    kzalloc_obj(), which 6.1's and 6.12's do not know)."""
    clean, report = build.run_checkpatch(kernels.get(series))
    assert clean, report


def test_selftest_counts_a_starved_job_as_zero_latency():
    """The aging control expects LOW to complete nothing; its figures must
    then read 0, not be missing (a missing one broke the check once)."""
    import json

    from prism.guest.checks import helpers
    data = json.loads((REPO / "tests" / "data" / "fio-run" / "fio.json").read_text())
    job = data["jobs"][1]
    for d in ("read", "write"):
        job[d]["total_ios"] = 0
        job[d]["iops"] = 0.0
        job[d]["lat_ns"]["N"] = 0
        job[d]["clat_ns"]["N"] = 0
    rec = helpers.job({"jobs": [job]}, job["jobname"])
    assert rec["ios"] == 0
    assert rec["lat_max_us"] == 0.0 and rec["clat_p99_us"] == 0.0 and rec["lat_mean_us"] == 0.0


def test_set_scheduler_always_gives_a_fresh_instance(monkeypatch):
    """Selecting the active scheduler again is a no-op in the kernel, so
    a run of prism:low_share=0 followed by one of plain prism measured
    low_share=0 twice. set_scheduler goes through none in that case."""
    from prism.guest import system as guest

    state = {"active": "prism"}
    writes = []

    def fake_write(dev, sched):
        writes.append(sched)
        state["active"] = sched
    monkeypatch.setattr(guest, "_write_scheduler", fake_write)
    monkeypatch.setattr(guest, "offered_schedulers", lambda dev, sched: [])
    monkeypatch.setattr(guest, "schedulers", lambda dev: ([], state["active"]))
    guest.set_scheduler("vda", "prism")
    assert writes == ["none", "prism"]
    writes.clear()
    guest.set_scheduler("vda", "bfq")
    guest.set_scheduler("vda", "none")
    guest.set_scheduler("vda", "none")
    assert writes == ["bfq", "none", "none"]


def test_blktests_results_and_skip_reasons_from_a_recorded_run():
    """blktests' results files (status per test and device) and the skip
    reasons it prints only on its output, from a recorded 6.12 run."""
    from prism.guest import blktests

    data = Path(__file__).parent / "data" / "blktests"
    results = blktests.parse_results(data / "results")
    assert results["block/005"] == {"status": "pass", "device": "vda"}
    assert results["block/016"]["status"] == "pass"
    assert results["block/014"]["status"] == "not run"
    reasons = blktests.skip_reasons((data / "check-output.txt").read_text())
    assert reasons == {"block/014": "module null_blk does not have parameter timeout"}


def test_blktests_summary_counts_only_prism_failures_against_prism():
    from prism.host import blktests

    doc = {"results": {
        "block/003": {"status": "pass"},
        "block/017": {"status": "pass", "flaky": "diskstats 1"},
        "block/005": {"status": "fail", "without_prism": "pass", "prism_failure": True},
        "block/038": {"status": "fail", "without_prism": "fail", "prism_failure": False},
        "block/014": {"status": "not run", "reason": "no timeout parameter"}}}
    s = blktests.summary(doc)
    assert s["passed"] == ["block/003"]
    assert s["flaky"] == ["block/017"]
    assert s["failed"] == ["block/005"]
    assert s["failed_elsewhere"] == ["block/038"]
    assert s["not_run"] == ["block/014: no timeout parameter"]


def test_blktests_failure_is_prisms_only_if_it_fails_twice_and_not_without():
    """A failure that passes when run again with prism is flaky (017 times
    itself against the emulated CPU); one that fails twice is prism's
    unless it fails without prism too."""
    from prism.guest import blktests

    def fail(detail):
        return {"status": "fail", "device": "nodev", "detail": detail}

    first = {"block/003": {"status": "pass", "device": "vda"},
             "block/017": fail("diskstats 1"), "block/005": fail("hang"),
             "block/038": fail("no such thing")}
    again = {"block/017": {"status": "pass", "device": "nodev"},
             "block/005": fail("hang"), "block/038": fail("no such thing")}
    without = {"block/005": {"status": "pass"}, "block/038": fail("no such thing")}
    assert blktests.mark_flaky(first, again) == ["block/005", "block/038"]
    blktests.blame(first, without)
    assert first["block/003"] == {"status": "pass", "device": "vda"}
    assert first["block/017"] == {"status": "pass", "device": "nodev", "flaky": "diskstats 1"}
    assert first["block/005"]["prism_failure"] is True
    assert first["block/005"]["without_prism"] == "pass"
    assert first["block/038"]["prism_failure"] is False


def test_blktests_missing_says_how_to_get_it(monkeypatch, tmp_path):
    from prism.host import blktests

    monkeypatch.setenv("PRISM_BLKTESTS", str(tmp_path / "nowhere"))
    with pytest.raises(blktests.Missing, match="git clone https://github.com/osandov/blktests"):
        blktests.source()


def test_a_vm_that_exits_before_the_guest_starts_is_booted_once_more(monkeypatch, tmp_path):
    """vng/QEMU giving up before the guest script runs leaves no rc: the
    console is kept, and run() boots once more (the command never ran),
    but only once, and never after a timeout or a command that did run."""
    from prism.host import kernels as kern
    from prism.host import vm

    # _boot itself: the console is kept and the marker is read.
    res = vm._boot(["bash", "-c", "echo qemu: cannot start; exit 1"], tmp_path, 30, False)
    assert res.returncode == -1 and not res.guest_started and not res.timed_out
    assert "cannot start" in (tmp_path / "console.txt").read_text()
    assert "cannot start" in res.tail()

    # A guest that dies (a panic powers it off) leaves no rc and no dmesg:
    # the kernel console, kept apart from the guest's output, says why.
    res = vm._boot(["bash", "-c", "echo '[guest] check x ...'; "
                    "echo 'Kernel panic - not syncing: Fatal exception' >&2; exit 0"],
                   tmp_path, 30, False)
    assert res.returncode == -1 and not res.dmesg
    assert "Kernel panic" not in res.output
    assert "Kernel panic" in res.tail() and "Kernel panic" in (
        tmp_path / "kernel-console.txt").read_text()
    assert res.log_problems, "a panic on the kernel console is a problem in the log"

    k = kern.Kernel(series="6.12", abi="x", version="x", root="bookworm")
    monkeypatch.setattr(kern.Kernel, "vmlinuz", property(lambda self: tmp_path / "vmlinuz"))
    monkeypatch.setattr(kern.Kernel, "modules_dir", property(lambda self: tmp_path))
    (tmp_path / "modules.dep").write_text("")
    (tmp_path / "vmlinuz").write_text("")
    monkeypatch.setattr(vm, "require_tools", lambda: None)
    for started, timed_out, boots in [(False, False, 2), (True, False, 1), (False, True, 1)]:
        calls = []

        def fake_boot(cmd, rundir, timeout, echo, env=None, started=started,
                      timed_out=timed_out, calls=calls):
            calls.append(cmd)
            ok = started or len(calls) > 1
            return vm.VmResult(0 if ok else -1, "", "", rundir, 1.0,
                               guest_started=ok, timed_out=timed_out)
        monkeypatch.setattr(vm, "_boot", fake_boot)
        vm.run(k, "true", accel="tcg", rundir=tmp_path / f"run{boots}{started}")
        assert len(calls) == boots, (started, timed_out)


def test_per_second_ios_counts_a_stalled_logs_gap_as_a_second_without_io(tmp_path):
    """fio's iops log (1000 ms averages) skips entries while its job is
    stalled; pacing_writeback_cloud must not read a 3 s gap as moving."""
    from prism.guest.checks.helpers import per_second_ios
    log = tmp_path / "x_iops.1.log"
    log.write_text("1000, 14, 0, 0, 0\n2001, 3, 0, 0, 0\n5004, 1, 0, 0, 0\n"
                   "6003, 2, 0, 0, 0\n7004, 5, 0, 0, 0\n")
    # First and last entries dropped in both readings.
    assert per_second_ios(log) == [3, 1, 2]
    assert per_second_ios(log, gaps=True) == [3, 0, 1, 2]
    steady = tmp_path / "y_iops.1.log"
    steady.write_text("".join(f"{1000 * i + 40}, 7, 0, 0, 0\n" for i in range(1, 6)))
    assert per_second_ios(steady, gaps=True) == [7, 7, 7]
    # One completion in an interval of 1,002 ms: fio logs 0, which is 1.
    slow = tmp_path / "z_iops.1.log"
    slow.write_text("1000, 2, 0, 0, 0\n2002, 0, 0, 0, 0\n3003, 2, 0, 0, 0\n4003, 2, 0, 0, 0\n")
    assert per_second_ios(slow, gaps=True) == [1, 2]


def test_tuning_guide_documents_every_tunable_with_its_default():
    """Every tunable the guest's checks know (and so prism's sysfs offers:
    check_tunables compares the two) has a row in the tuning guide's
    reference table (docs/tuning.md), with the default the module shows,
    and a paragraph of its own there; and the README names no tunable
    that is not one (a removed v2 name in a recipe)."""
    from prism.guest import selftest
    readme = (REPO / "docs" / "tuning.md").read_text()
    rows = {}
    for line in readme.split("\n"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith("`") and cells[1].endswith("`"):
            for name in cells[1].split(","):      # a row may name several
                rows.setdefault(name.strip().strip("`"), cells[2])
    defaults = {name: str(spec[0]) for name, spec in selftest.TUNABLES.items()}
    defaults |= {name: spec[0] for name, spec in selftest.KEYWORD_TUNABLES.items()}
    missing = sorted(set(defaults) - set(rows))
    assert not missing, f"README has no tunable row for {missing}"
    wrong = {n: (rows[n], d) for n, d in defaults.items() if rows[n] != d}
    assert not wrong, f"docs/tuning.md's default differs from the module's: {wrong}"
    unexplained = [n for n in defaults if f"- **`{n}`**" not in readme]
    assert not unexplained, f"docs/tuning.md has no paragraph for {unexplained}"
    front = (REPO / "README.md").read_text()
    named = set(re.findall(r"`([a-z_]+)(?:=[^`]*)?`", front))
    v2_only = {"be_high_max", "be_low_min", "normal_rate_kbps", "front_merges", "latency_hist",
               "anticipate_us", "flow_idle_us", "fair_depth", "sort_mode", "quantum_us"}
    assert not named & v2_only, f"the README names removed tunables: {named & v2_only}"


def test_readme_stays_an_operators_page():
    """The README is read in ten minutes (issue 43: at most about 500
    lines); reference, design and results live under docs/, and every
    link it has resolves."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 500
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which is missing"


def _debugfs_names(show_body: str) -> set[str]:
    """The column and key names a debugfs show function writes: the words
    of a header it puts, each KEY of KEY=%..., and a line's leading label
    ("fq", "group", "learned")."""
    names: set[str] = set()
    for lit in re.findall(r'seq_(?:puts|printf)\(m,\s*"([^"]*)"', show_body):
        lit = lit.replace("\\n", " ")
        if "%" not in lit:
            names |= set(lit.split())
            continue
        names |= set(re.findall(r"(\w+)=%", lit))
        names |= {w for w in lit.split("%")[0].split() if "=" not in w}
    return names


def test_debugfs_guide_documents_every_file_and_column():
    """Every file prism puts under debugfs has its entry in docs/debugfs.md,
    and every column, key and line label the module writes into it (read
    from the show functions' format strings) is named there in backticks,
    so a format change that the guide misses fails here (issue 43)."""
    src = "\n".join((REPO / "module" / f).read_text()
                    for f in ("prism_debugfs.c", "prism_cgroup.c"))
    files = re.findall(r'\{"(\w+)", 0[0-7]+, (\w+)_guarded', src)
    assert len(files) >= 8, files
    doc = (REPO / "docs" / "debugfs.md").read_text()
    entries = {m[1]: m[2] for m in re.finditer(r"^- `(\w+)`:(.*?)(?=^- `|^#|\Z)", doc,
                                                 re.M | re.S)}
    missing = {}
    for name, show in files:
        assert name in entries, f"docs/debugfs.md has no entry for {name}"
        start = re.search(rf"^(?:static )?int {show}\(", src, re.M).start()
        body = src[start:src.index("\n}\n", start)]
        spans = re.findall(r"`([^`]+)`", entries[name])
        named = {w.strip(".,;:()=") for s in spans for w in s.split()}
        lost = sorted(_debugfs_names(body) - named)
        if lost:
            missing[name] = lost
    assert not missing, f"docs/debugfs.md does not name these columns or keys: {missing}"
