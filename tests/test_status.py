"""prism status on a fake /sys and debugfs, in the formats the module
writes (module/prism_debugfs.c): what it reads, what it says; and that
it stands alone, as the package and make install ship it
(tools/prism-status, which prism/common/status.py links to)."""

import ast
import io
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prism import cli
from prism.common import status
from prism.guest.selftest import KEYWORD_TUNABLES, TUNABLES

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "prism-status"

TIERS = ("tier queued inserted requeued dispatched merged aged shared expired completed "
         "inflight owned max_owned foreign throttled direct passthrough\n"
         "high 0 1200 0 1200 0 0 0 0 1199 1 1 4 0 0 10 0\n"
         "normal 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
         "low 7 400 0 393 0 2 40 0 393 0 7 32 0 0 0 0\n")
FLIGHT = ("tier inflight think_us think_samples chain_us chain_samples chain_quick_pct\n"
          "high 1 900 64 0 0 0\nnormal 0 0 0 0 0 0\nlow 0 0 0 0 0 0\n"
          "device_depth=32 lower_limit=2 window_us=8000 target_us=2000 bulk_us=9000 "
          "bulk_samples=40 solo_us=1000 solo_samples=30 floor_us=900 floor_samples=50 "
          "lat_us=1500 cuts=3 held_window=120 held_depth=45 window_runs=100 "
          "flow_window_us=0 held_flow=0 lower_duty=100 held_paced=0 empty_dispatches=7 "
          "parked=0 tags_short=1\n")
CGROUPS = ("cgroup weight cost_us bytes dispatched queued owned path\n"
           "4242 300 1500000 104857600 800 3 5 /system.slice/my db.service\n"
           "77 100 500000 1048576 20 0 0 /backup.slice\n")
FLOWS = ("slot pid comm tier weight backlogged vt_lead cost_us bytes dispatched queued owned "
         "throttled think_us cgroup\n"
         "0 311 pg\\040worker\\134 normal 100 1 0 900000 10485760 500 2 3 0 150 4242\n"
         "1 88 tar low 25 1 0 2000000 524288000 4000 9 16 0 0 0\n"
         "2 12 kworker/u4:1 normal 100 0 0 1000 4096 1 0 0 0 0 5\n"
         "fq high vtime=0 vmin=0 wsum=0 backlogged=0\n"
         "group 4242 normal weight=300 backlogged=1 flows=1 vtime=0 vmin=0 wsum=100\n"
         "group_overflows=0\noverflows=0\n")
# Buckets 0..3 of lower bounds 0, 1 ms, 2 ms, 4 ms (the module has 66).
LATENCY = ("bucket_ns 0 1000000 2000000 4000000\n"
           "wait high read 0 0 0 0\n"
           "device high read 0 90 10 0\n")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    sysb, dbg = tmp_path / "sys" / "block", tmp_path / "debug"
    for dev, sched in (("sda", "none mq-deadline [prism]"), ("vda", "[mq-deadline] prism"),
                       ("loop0", "[none]")):
        q = sysb / dev / "queue"
        q.mkdir(parents=True)
        (q / "scheduler").write_text(sched + "\n")
        (q / "rotational").write_text("1\n")
        (q / "nr_requests").write_text("64\n")
    io = sysb / "sda" / "queue" / "iosched"
    io.mkdir()
    for name, spec in (TUNABLES | KEYWORD_TUNABLES).items():
        (io / name).write_text(f"{spec[0]}\n")
    (io / "low_share").write_text("5\n")
    sched = dbg / "block" / "sda" / "sched"
    sched.mkdir(parents=True)
    (sched / "tiers").write_text(TIERS)
    (sched / "flight").write_text(FLIGHT)
    (sched / "latency").write_text(LATENCY)
    (sched / "cgroups").write_text(CGROUPS)
    (sched / "flows").write_text(FLOWS)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"sysfs /sys sysfs rw 0 0\ndebugfs {dbg} debugfs rw 0 0\n")
    monkeypatch.setattr(status, "SYS_BLOCK", sysb)
    monkeypatch.setattr(status, "DEBUGFS", dbg)
    monkeypatch.setattr(status, "MOUNTS", mounts)
    monkeypatch.setattr(status, "LOCKDOWN", tmp_path / "no-lockdown")
    # Loaded (sda offers prism), from no module tree modprobe knows.
    sysmod = tmp_path / "sys" / "module" / "prism_iosched"
    sysmod.mkdir(parents=True)
    (sysmod / "version").write_text("3.0.0\n")
    monkeypatch.setattr(status, "SYS_MODULE", sysmod)
    monkeypatch.setattr(status, "LIB_MODULES", tmp_path / "lib" / "modules")
    return sched


def unload(tmp_path, installed: str | None = None) -> None:
    """The fake machine without prism loaded (no disk offers it), and with
    @installed (a file name under updates/dkms) in the running kernel's
    modules.dep, a module whose modinfo says version 3.0.0."""
    for q in (tmp_path / "sys" / "block").glob("*/queue"):
        words = (q / "scheduler").read_text().replace("[prism]", "[none]").split()
        (q / "scheduler").write_text(" ".join(w for w in words if w != "prism") + "\n")
    (status.SYS_MODULE / "version").unlink()
    status.SYS_MODULE.rmdir()
    tree = status.LIB_MODULES / os.uname().release
    tree.mkdir(parents=True)
    dep = "kernel/block/kyber-iosched.ko.xz:\n"
    if installed:
        ko = tree / "updates" / "dkms" / installed
        ko.parent.mkdir(parents=True)
        info = b"\x7fELF...\0srcversion=ABCDEF\0version=3.0.0\0license=GPL\0"
        ko.write_bytes(lzma.compress(info) if installed.endswith(".xz") else info)
        dep += f"updates/dkms/{installed}:\n"
    (tree / "modules.dep").write_text(dep)


def test_status_reads_prism_and_names_what_changed(fake):
    recs = {r["dev"]: r for r in status.status()}
    assert sorted(recs) == ["sda", "vda"]            # loop devices left out
    assert recs["vda"]["scheduler"] == "mq-deadline" and "tiers" not in recs["vda"]
    sda = recs["sda"]
    assert sda["changed"] == {"low_share": "5"}
    assert sda["tiers"]["low"]["queued"] == 7 and sda["tiers"]["high"]["inflight"] == 1
    assert sda["flight"]["lower_limit"] == 2 and sda["flight"]["tags_short"] == 1
    lat = sda["latency"]["device high read"]
    assert lat["n"] == 100 and 1.0 <= lat["p50_ms"] <= 2.0 and 2.0 <= lat["p99_ms"] <= 4.0
    assert "wait high read" not in sda["latency"]    # counted nothing
    text = status.format_status(list(recs.values()))
    assert "sda: prism (rotational, nr_requests 64" in text
    assert "tunables away from the defaults: low_share=5" in text
    assert "at most 2 of 32" in text and "held: 120 for a window, 45 for depth" in text
    assert "device high read" in text and "vda: mq-deadline" in text
    assert "prism is not active here" in text.split("vda: mq-deadline")[1]
    # Cgroup flows, the most served first, a path with a space whole.
    db = sda["cgroups"]["/system.slice/my db.service"]
    assert db["weight"] == 300 and db["cgroup"] == 4242 and db["owned"] == 5
    rows = [ln for ln in text.splitlines() if ln.strip().startswith(("4242", "77 "))]
    assert rows[0].endswith("/system.slice/my db.service") and "1,500" in rows[0]
    assert rows[1].split()[:2] == ["77", "100"]


def test_status_shows_the_busiest_processes_with_their_cgroups(fake):
    sda = status.disk_status("sda")
    flows = sda["flows"]
    # The most served first; a command with a space and a backslash whole.
    assert [f["pid"] for f in flows] == [88, 311, 12]
    assert flows[1]["comm"] == "pg worker\\"
    assert flows[1]["cgroup"] == "/system.slice/my db.service" and flows[0]["cgroup"] == "/"
    assert flows[2]["cgroup"] == "5"         # a cgroup the cgroups file no longer lists
    text = status.format_status([sda])
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("311"))
    assert "pg worker\\" in row and row.endswith("/system.slice/my db.service")
    assert "900" in row and row.split()[-4:-2] == ["2", "3"]


def test_status_without_debugfs_says_how_to_get_it(fake, monkeypatch, tmp_path):
    for f in fake.iterdir():
        f.unlink()
    fake.rmdir()
    monkeypatch.setattr(status.os, "geteuid", lambda: 1000)
    assert "run as root" in status.format_status(status.status(["sda"]))
    (tmp_path / "lockdown").write_text("none integrity [confidentiality]\n")
    monkeypatch.setattr(status, "LOCKDOWN", tmp_path / "lockdown")
    assert "kernel lockdown (confidentiality) hides debugfs" in \
        status.format_status(status.status(["sda"]))
    status.MOUNTS.write_text("sysfs /sys sysfs rw 0 0\n")
    text = status.format_status(status.status(["sda"]))
    assert "debugfs is not mounted" in text and "mount -t debugfs" in text
    # The scheduler and tunables are still shown.
    assert "tunables away from the defaults: low_share=5" in text


def test_status_says_when_lockdown_hides_the_latency_file(fake, monkeypatch, tmp_path):
    """Lockdown in integrity mode (Secure Boot on Debian) refuses debugfs
    files that can be written, prism's latency; the rest still reads."""
    (tmp_path / "lockdown").write_text("none [integrity] confidentiality\n")
    monkeypatch.setattr(status, "LOCKDOWN", tmp_path / "lockdown")
    real = status._read

    def refuse_latency(path):
        if path.name == "latency":
            raise status.Unreadable(f"[Errno 1] Operation not permitted: '{path}'")
        return real(path)
    monkeypatch.setattr(status, "_read", refuse_latency)
    sda = status.disk_status("sda")
    assert sda["tiers"]["low"]["queued"] == 7 and sda["latency"] == {}
    assert "kernel lockdown (integrity) hides the latency histograms" in \
        status.format_status([sda])


def test_status_watch_refreshes_until_interrupted(fake, monkeypatch):
    sleeps = []

    def sleep(secs):
        sleeps.append(secs)
        if len(sleeps) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(status.time, "sleep", sleep)
    out = io.StringIO()
    assert status.run(["sda"], as_json=True, watch=0.5, out=out) == 0
    lines = out.getvalue().splitlines()
    assert sleeps == [0.5, 0.5] and len(lines) == 2
    assert json.loads(lines[1])[0]["tiers"]["low"]["queued"] == 7


def test_status_stands_alone_on_the_standard_library():
    """The package installs the file as /usr/sbin/prism-status: it may
    import nothing but the standard library, and runs as a script, its
    own file, run as itself (#!/usr/bin/python3)."""
    tree = ast.parse(open(status.__file__).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import"
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top == "__future__", name
    r = subprocess.run([str(TOOL), "--help"], cwd="/",
                       capture_output=True, text=True)
    assert r.returncode == 0 and "prism-status" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-I", str(TOOL), "no-such-disk"], cwd="/",
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no-such-disk: no such disk" in r.stderr


def test_status_defaults_are_the_modules():
    assert status.DEFAULTS == {n: str(spec[0]) for n, spec in
                               (TUNABLES | KEYWORD_TUNABLES).items()}


def test_status_latency_off_and_json(fake, capsys):
    (fake / "latency").write_text("bucket_ns 0 1000000\ndevice high read 0 0\n")
    assert "latency histograms off (echo 1 >" in status.format_status(status.status(["sda"]))
    assert cli.main(["status", "--json", "sda"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert recs[0]["dev"] == "sda" and recs[0]["latency"] == {}


def test_status_refuses_an_unknown_disk(fake, capsys):
    assert cli.main(["status", "sdz"]) == 2
    assert "sdz: no such disk" in capsys.readouterr().err


def test_status_refuses_a_watch_of_no_time(fake, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["status", "--watch", "0"])
    assert e.value.code == 2 and "not a number of seconds above 0" in capsys.readouterr().err


def test_status_says_when_prism_is_not_loaded(fake, tmp_path):
    unload(tmp_path, installed="prism-iosched.ko.xz")
    text = status.format_status(status.status(["vda"]))
    assert "prism is not active here, nor loaded (modprobe prism-iosched)" in text


def test_status_says_when_prism_is_not_installed(fake, tmp_path, capsys):
    """No modprobe to suggest when modprobe cannot find the module; the
    same words in --json."""
    unload(tmp_path)
    text = status.format_status(status.status(["sda", "vda"]))
    assert "modprobe" not in text
    assert text.count("prism-iosched is not installed for this kernel "
                      f"({os.uname().release})") == 2
    assert cli.main(["status", "--json", "vda"]) == 0
    rec = json.loads(capsys.readouterr().out)[0]
    assert "not installed for this kernel" in rec["hint"] and "tiers" not in rec


def test_status_version_of_the_loaded_or_installed_module(fake, tmp_path, capsys):
    out = io.StringIO()
    assert status.run([], version=True, out=out) == 0
    assert out.getvalue() == "prism-iosched 3.0.0, loaded\n"
    # Not loaded: the version is read from the file modprobe would load.
    unload(tmp_path, installed="prism-iosched.ko.xz")
    assert cli.main(["status", "--version"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("prism-iosched 3.0.0, installed for ") and "not loaded" in text
    assert "updates/dkms/prism-iosched.ko.xz" in text


def test_status_version_when_nothing_is_installed(fake, tmp_path, capsys):
    unload(tmp_path)
    assert status.main(["--version"]) == 1
    assert capsys.readouterr().out == \
        f"prism-iosched is not installed for this kernel ({os.uname().release})\n"
    assert status.main(["--version", "--json"]) == 1
    info = json.loads(capsys.readouterr().out)
    assert info == {"kernel": os.uname().release, "loaded": False, "installed": None,
                    "version": None}


def test_one_copy_of_prism_status():
    """The harness imports the file the package and make install ship."""
    assert Path(status.__file__).resolve() == TOOL
    assert os.access(TOOL, os.X_OK)
    rules = (REPO / "packaging" / "debian" / "rules").read_text()
    assert "install -D -m 755 tools/prism-status" in rules


def test_make_install_tools_installs_and_uninstalls_them(tmp_path):
    """make install's tools part, which builds nothing: prism-status and
    prism-cgroup-weight in PREFIX/sbin, and gone after make uninstall's."""
    dest = tmp_path / "root"
    r = subprocess.run(["make", "-s", "-C", str(REPO / "module"), "install-tools",
                        f"DESTDIR={dest}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sbin = dest / "usr" / "local" / "sbin"
    assert sorted(p.name for p in sbin.iterdir()) == ["prism-cgroup-weight", "prism-status"]
    assert (sbin / "prism-status").read_bytes() == TOOL.read_bytes()
    assert os.access(sbin / "prism-status", os.X_OK)
    r = subprocess.run(["make", "-s", "-C", str(REPO / "module"), "uninstall-tools",
                        f"DESTDIR={dest}"], capture_output=True, text=True)
    assert r.returncode == 0 and not list(sbin.iterdir()), r.stderr
    makefile = (REPO / "module" / "Makefile").read_text()
    assert "install: all install-tools" in makefile and "uninstall: uninstall-tools" in makefile
