"""prism status on a fake /sys and debugfs, in the formats the module
writes (module/prism_debugfs.c): what it reads, what it says."""

import json

import pytest

from prism import cli
from prism.guest import status
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
    monkeypatch.setattr(status, "SYS_BLOCK", sysb)
    monkeypatch.setattr(status, "DEBUGFS", dbg)
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
    # Cgroup flows, the most served first, a path with a space whole.
    db = sda["cgroups"]["/system.slice/my db.service"]
    assert db["weight"] == 300 and db["cgroup"] == 4242 and db["owned"] == 5
    rows = [ln for ln in text.splitlines() if ln.strip().startswith(("4242", "77 "))]
    assert rows[0].endswith("/system.slice/my db.service") and "1,500" in rows[0]
    assert rows[1].split()[:2] == ["77", "100"]


def test_status_without_debugfs_says_how_to_get_it(fake):
    for f in fake.iterdir():
        f.unlink()
    fake.rmdir()
    text = status.format_status(status.status(["sda"]))
    assert "not readable: as root, with debugfs mounted" in text
    assert "mount -t debugfs" in text


def test_status_latency_off_and_json(fake, capsys):
    (fake / "latency").write_text("bucket_ns 0 1000000\ndevice high read 0 0\n")
    assert "latency histograms off (echo 1 >" in status.format_status(status.status(["sda"]))
    assert cli.main(["status", "--json", "sda"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert recs[0]["dev"] == "sda" and recs[0]["latency"] == {}


def test_status_refuses_an_unknown_disk(fake, capsys):
    assert cli.main(["status", "sdz"]) == 2
    assert "sdz: no such disk" in capsys.readouterr().err
