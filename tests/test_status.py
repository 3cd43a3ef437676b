"""prism status on a fake /sys and debugfs, in the formats the module
writes (module/prism_debugfs.c): what it reads, what it says; and that
it stands alone, as the package ships it."""

import ast
import io
import json
import subprocess
import sys

import pytest

from prism import cli
from prism.common import status
from prism.guest.selftest import KEYWORD_TUNABLES, TUNABLES

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
         "fq high vtime=0 wsum=0 backlogged=0\n"
         "group 4242 normal weight=300 backlogged=1 flows=1 vtime=0 wsum=100\n"
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
    return sched


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
    import nothing but the standard library, and runs as a script."""
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
    r = subprocess.run([sys.executable, "-I", status.__file__, "--help"], cwd="/",
                       capture_output=True, text=True)
    assert r.returncode == 0 and "prism-status" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-I", status.__file__, "no-such-disk"], cwd="/",
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


def test_status_says_when_prism_is_not_loaded():
    rec = {"dev": "nvme0n1", "scheduler": "none", "rotational": False, "nr_requests": 1023,
           "offered": ["none", "mq-deadline"]}
    text = status.format_status([rec])
    assert "prism is not active here, nor loaded (modprobe prism-iosched)" in text
