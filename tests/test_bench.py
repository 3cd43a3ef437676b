"""The benchmark toolkit on the host: parsing recorded fio output, the
statistics, the report, scheduler specs and the real-device refusals."""

import gzip
import json
import math
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
import recorded

from prism.bench import plan as bench
from prism.bench import report
from prism.common import stats, workloads
from prism.common.errors import PrismError, UsageError
from prism.common.workloads import WORKLOADS
from prism.guest import benchrun

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "fio-run"


@pytest.fixture(scope="module")
def fio_json():
    return json.loads((DATA / "fio.json").read_text())


def test_job_record_matches_fio(fio_json):
    recs = stats.run_records(fio_json, DATA)
    assert [r["job"] for r in recs] == ["database_sim", "backup_sim"]
    for rec, job in zip(recs, fio_json["jobs"], strict=True):
        rd = job["read"]
        assert rec["ios"] == rd["total_ios"] + job["write"]["total_ios"]
        # Throughput over the run's window (the longest job runtime): within
        # a few milliseconds of fio's own figure when no job was starved.
        window = max(j["read"]["runtime"] for j in fio_json["jobs"]) / 1000
        assert rec["iops"] == pytest.approx(rec["ios"] / window)
        assert rec["iops"] == pytest.approx(rd["iops"], rel=0.005)
        assert rec["bw_kib"] == pytest.approx(rd["bw"], rel=0.005)
        assert rec["late_s"] < 0.01
        assert rec["lat_source"] == "lat"  # lat_percentiles=1 in the job files
        assert rec["p99_us"] == pytest.approx(rd["lat_ns"]["percentile"]["99.000000"] / 1000)
        assert rec["p99_9_us"] == pytest.approx(rd["lat_ns"]["percentile"]["99.900000"] / 1000)
        assert rec["lat_mean_us"] == pytest.approx(rd["lat_ns"]["mean"] / 1000)
        assert rec["clat_mean_us"] == pytest.approx(rd["clat_ns"]["mean"] / 1000)
        assert rec["clat_p99_us"] == pytest.approx(
            rd["clat_ns"]["percentile"]["99.000000"] / 1000)
        assert rec["lat_max_us"] == pytest.approx(rd["lat_ns"]["max"] / 1000)
        assert rec["sys_cpu"] == job["sys_cpu"] and rec["errors"] == 0
        assert rec["prio"] == job["job options"]["prio"]


def test_series_from_logs(fio_json):
    recs = stats.run_records(fio_json, DATA)
    lines = (DATA / "log_iops.1.log").read_text().splitlines()
    expected = [(round(int(x.split(",")[0]) / 1000), float(x.split(",")[1])) for x in lines]
    assert recs[0]["iops_series"] == expected
    # The worst full second: the last, partial interval is not counted.
    assert recs[0]["min_iops_1s"] == min(v for _, v in expected[:-1])
    assert all(v > 0 for _, v in recs[0]["lat_series_us"])


def test_a_paced_jobs_seconds_from_fios_truncated_log(fio_json, tmp_path):
    """fio logs an interval only if it had a completion, in whole IOPS:
    one completion over 1,002 ms is logged as 0, and an interval without
    one is not logged. The first is a second with I/O, the second one
    without (the small cloud volume's paced reader read as starved in 4
    of 5 runs that had a completion every second)."""
    for name in ("log_iops.1.log", "log_lat.1.log"):
        shutil.copy(DATA / name, tmp_path / name)
    (tmp_path / "log_iops.2.log").write_text(
        "1000, 2, 0, 0, 0\n2002, 0, 0, 0, 0\n3003, 2, 0, 0, 0\n4004, 1, 0, 0, 0\n"
        "5005, 2, 0, 0, 0\n")
    low = stats.run_records(fio_json, tmp_path)[1]
    assert low["iops_series"] == [(1, 2.0), (2, 1.0), (3, 2.0), (4, 1.0), (5, 2.0)]
    assert low["min_iops_1s"] == 1.0
    # A second with no line at all had no completion.
    (tmp_path / "log_iops.2.log").write_text(
        "1000, 2, 0, 0, 0\n3003, 2, 0, 0, 0\n4004, 1, 0, 0, 0\n5005, 2, 0, 0, 0\n")
    low = stats.run_records(fio_json, tmp_path)[1]
    assert low["iops_series"][1] == (2, 0.0)
    assert low["min_iops_1s"] == 0.0


def test_a_starved_job_is_measured_over_the_common_window(fio_json, tmp_path):
    """A job starved past its ramp starts measuring at its first
    completion: fio's IOPS for it covers only the time it was served (the
    HDD run that found this had the backup at 174 MB/s in a window after
    the database's had ended). Its record takes the whole window."""
    doc = json.loads(json.dumps(fio_json))
    starved = doc["jobs"][1]
    starved["job_runtime"] = 1200            # measured from 1.8 s late
    rd = starved["read"]
    rd["runtime"] = 1200
    rd["total_ios"], rd["io_kbytes"] = 100, 12800
    rd["iops"], rd["bw"] = 100 / 1.2, 12800 / 1.2
    for name in ("log_iops.1.log", "log_lat.1.log"):
        shutil.copy(DATA / name, tmp_path / name)
    (tmp_path / "log_iops.2.log").write_text("1000, 90, 0, 0, 0\n1200, 10, 0, 0, 0\n")
    high, low = stats.run_records(doc, tmp_path)
    window = doc["jobs"][0]["read"]["runtime"] / 1000
    assert low["window_s"] == high["window_s"] == window
    assert low["late_s"] == pytest.approx(window - 1.2)
    assert low["iops"] == pytest.approx(100 / window) and low["bw_kib"] == pytest.approx(
        12800 / window)
    # A whole second of the window passed without a completion.
    assert low["min_iops_1s"] == 0.0
    assert high["min_iops_1s"] > 0 and high["late_s"] == 0
    # Told to start 1.8 s late (startdelay, as the start-up workloads'
    # application is): not late for that.
    starved["job options"] = {"startdelay": "1800ms"}
    high, low = stats.run_records(doc, tmp_path)
    assert low["startdelay_s"] == pytest.approx(1.8)
    assert low["late_s"] == pytest.approx(max(0.0, window - 1.2 - 1.8))


def test_fio_seconds():
    assert stats.fio_seconds("2") == 2.0 and stats.fio_seconds("2s") == 2.0
    assert stats.fio_seconds("500ms") == 0.5 and stats.fio_seconds("1m") == 60.0
    assert stats.fio_seconds(None) == 0.0 and stats.fio_seconds("${RAMP}") == 0.0


def test_report_says_which_job_was_starved():
    def summary(sched, job, late):
        return {"scheduler": sched, "job": job, "metrics": {
            "late_s": stats.summarize(late), "window_s": stats.summarize([10.0] * len(late))}}
    rows = [summary("none", "backup_sim", [0.0, 0.01]),
            summary("prism", "backup_sim", [9.9, 4.1])]
    lines = report.late_lines(rows)
    assert len(lines) == 2 and "backup_sim under prism" in lines[0]
    assert "first 7.0 s of the 10.0 s window (mean of 2 runs; longest 9.9 s)" in lines[0]
    assert report.late_lines(rows[:1]) == []
    assert lines[0].endswith("starved.")


def test_a_writer_waiting_in_fsync_is_not_called_starved():
    """A job that writes batches into the page cache and fsyncs them shows
    no completion while its fsync lasts: the report says so instead of
    calling it starved."""
    assert stats.fsync_batch({"fsync": "1024"}) == 1024
    assert stats.fsync_batch({"fsync": "1024", "direct": "1"}) is None
    assert stats.fsync_batch({"fsync": "1"}) is None and stats.fsync_batch({}) is None
    row = {"scheduler": "prism", "job": "bulk_writer", "metrics": {
        "late_s": stats.summarize([20.0]), "window_s": stats.summarize([20.0]),
        "fsync_batch": stats.summarize([1024])}}
    lines = report.late_lines([row])
    assert "starved." not in lines[0]
    assert any("waits in fsync" in line and "1024 blocks" in line for line in lines)


def test_summarize_known_values():
    s = stats.summarize([1, 2, 3, 4, 5])
    assert s["n"] == 5 and s["mean"] == 3 and s["how"] == "ci95"
    assert s["sd"] == pytest.approx(math.sqrt(2.5))
    half = stats.t95(4) * math.sqrt(2.5) / math.sqrt(5)
    # The t-interval, cut at zero: these values cannot have a mean below it.
    assert s["low"] == max(0.0, 3 - half) and s["high"] == pytest.approx(3 + half)
    one = stats.summarize([7.0])
    assert one["mean"] == 7.0 and one["sd"] == 0.0 and one["low"] is None
    assert stats.summarize([])["mean"] is None
    assert stats.summarize([1.0, float("nan"), 3.0])["n"] == 2


def test_summaries_never_reach_below_zero():
    # The ssd-model report's skewed repetitions (none's isolation, bfq's
    # backup): a t-interval on the values went to -9 and -53.
    for vals in ([2.1, 2.3, 3.0, 14.0, 29.3], [9.1, 10.4, 10.9, 226.0, 243.0]):
        for geo in (False, True):
            s = stats.summarize(vals, geometric=geo)
            assert s["how"] == "ci95" and 0 <= s["low"] <= s["mean"] <= s["high"]
            assert s["low"] > 0 or not geo
    geo = stats.summarize([2.1, 2.3, 3.0, 14.0, 29.3], geometric=True)
    assert geo["mean"] == pytest.approx(math.exp(statistics.fmean(
        math.log(v) for v in (2.1, 2.3, 3.0, 14.0, 29.3))))


def test_few_repetitions_give_the_range():
    s = stats.summarize([4.0, 1.0, 2.0])
    assert s["how"] == "range" and (s["low"], s["high"]) == (1.0, 4.0)
    g = stats.summarize([4.0, 1.0], geometric=True)
    assert g["mean"] == pytest.approx(2.0) and (g["low"], g["high"]) == (1.0, 4.0)
    r = stats.paired_ratio([(2.0, 1.0), (1.0, 1.0)])
    assert r["how"] == "range" and (r["low"], r["high"]) == (1.0, 2.0)
    assert report._fmt(s, 1, 1) == "2.3 (1.0-4.0)"


def test_t_quantiles():
    # Exact quantiles (tables): no step to 1.96 past df 30.
    for df, t in ((1, 12.706), (4, 2.776), (22, 2.074), (30, 2.042), (31, 2.040),
                  (100, 1.984), (10000, 1.960)):
        assert abs(stats.t95(df) - t) < 0.0015, (df, stats.t95(df))
    assert abs(stats.t_quantile(0.99, 10) - 3.169) < 0.0015
    assert math.isnan(stats.t95(0))


def test_paired_ratio_cancels_drift_between_repetitions():
    # Both schedulers drift together by +-40% between repetitions; a is
    # always 5% below b: the pairs say so tightly, the means could not.
    drift = [1.0, 1.4, 0.6, 1.2, 0.8]
    pairs = [(95.0 * d, 100.0 * d) for d in drift]
    r = stats.paired_ratio(pairs)
    assert r["n"] == 5 and r["ratio"] == pytest.approx(0.95)
    assert r["low"] == pytest.approx(0.95) and r["high"] == pytest.approx(0.95)
    noisy = stats.paired_ratio([(95.0, 100.0), (105.0, 100.0), (90.0, 100.0)])
    assert noisy["low"] < noisy["ratio"] < noisy["high"]
    assert noisy["low"] < 1.0 < noisy["high"]
    assert stats.paired_ratio([(0.0, 1.0), (None, 2.0)])["n"] == 0
    assert stats.paired_ratio([(2.0, 1.0)])["low"] is None
    # Five or more pairs: the t-interval of the logarithms.
    assert stats.paired_ratio(pairs)["how"] == "ci95"


def _fake_run(workload, sched, rep, p99s):
    return {"kernel": "6.12", "kernel_release": "6.12.x", "workload": workload,
            "scheduler": sched, "rep": rep, "device_util": 0.9, "wall_s": 1,
            "jobs": [{"job": j, "p99_us": v, "iops": 100.0} for j, v in p99s.items()]}


def test_paired_ratios_match_repetitions_and_jobs():
    runs = []
    for rep, drift in enumerate([1.0, 2.0, 0.5]):
        for sched, p99 in (("prism", 900 * drift), ("mq-deadline", 1000 * drift),
                           ("none", 450 * drift)):
            runs.append(_fake_run("w", sched, rep, {"a": p99}))
    recs = report.paired_ratios(runs, "6.12")
    p99 = {r["other"]: r for r in recs if r["figure"] == "P99"}
    assert p99["mq-deadline"]["ratio"] == pytest.approx(0.9) and p99["mq-deadline"]["n"] == 3
    assert p99["none"]["ratio"] == pytest.approx(2.0)
    iops = [r for r in recs if r["figure"] == "IOPS"]
    assert all(r["ratio"] == pytest.approx(1.0) for r in iops)
    table = "\n".join(report.paired_table(recs))
    assert "| w | a | P99 | 0.90 | 2.00 |" in table
    assert report.paired_ratios([r for r in runs if r["scheduler"] != "prism"], "6.12") == []


def test_isolation_ratio_against_same_scheduler_baseline():
    runs = [_fake_run("database_alone", "prism", 0, {"database_sim": 1000}),
            _fake_run("database_alone", "prism", 1, {"database_sim": 3000}),
            _fake_run("database_alone", "none", 0, {"database_sim": 500}),
            _fake_run("database_backup", "prism", 0, {"database_sim": 4000, "backup_sim": 9}),
            _fake_run("database_backup", "none", 0, {"database_sim": 4000, "backup_sim": 9})]
    base = report.add_isolation(runs)
    # Own baselines are geometric means: prism's sqrt(1000 * 3000).
    assert runs[3]["jobs"][0]["isolation_ratio"] == pytest.approx(4000 / math.sqrt(3e6))
    assert runs[4]["jobs"][0]["isolation_ratio"] == pytest.approx(8.0)   # 4000 / 500
    assert "isolation_ratio" not in runs[3]["jobs"][1]                   # not the high job
    # The common baseline is the best alone of any scheduler: none's 500,
    # so prism's own ratio of 2.3 is 8.0 on the common scale.
    assert runs[3]["jobs"][0]["common_ratio"] == pytest.approx(8.0)
    assert runs[4]["jobs"][0]["common_ratio"] == pytest.approx(8.0)
    assert base["6.12 database_backup database_sim"] == {
        "scheduler": "none", "value": pytest.approx(500.0), "metric": "p99_us"}


def test_flows_greedy_isolates_every_light_process_and_shares_equally():
    lights = {f"light{i}": 1000 * i for i in range(1, 5)}
    runs = [_fake_run("flows_greedy_alone", "prism", 0, lights),
            _fake_run("flows_greedy", "prism", 0,
                      {**{k: 2 * v for k, v in lights.items()}, "greedy": 50000})]
    for j in runs[1]["jobs"]:
        j["iops"] = 500.0 if j["job"] == "greedy" else 125.0
    report.add_isolation(runs)
    report.add_shares(runs)
    mix = {j["job"]: j for j in runs[1]["jobs"]}
    assert all(mix[k]["isolation_ratio"] == pytest.approx(2.0) for k in lights)
    assert "isolation_ratio" not in mix["greedy"]          # no baseline of its own
    assert all(j["share_ideal"] == pytest.approx(0.2) for j in mix.values())
    # Five processes at one level: 20% each. greedy 50% (+150%), each light
    # 12.5% (-37.5%): mean deviation 60%.
    assert mix["greedy"]["share_mean_dev"] == pytest.approx(0.6)


def test_report_from_recorded_run(tmp_path):
    # Two runs built from the recorded one: a baseline and the mix.
    raw = tmp_path / "raw"
    recorded.raw_runs(raw, {})
    runs = report.collect(raw, "6.12")
    plan = {"profile": "nullb-ssd", "reps": 1, "runtime": 3, "ramp": 1,
            "workloads": ["database_alone", "database_backup"], "schedulers": ["prism"],
            "source": "0123456789ab+changes"}
    out = tmp_path / "out"
    out.mkdir()
    summaries = report.write_all(out, "prism bench run test", plan, runs)
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == 2 and doc["command"] == "prism bench run test"
    # The per-second series are plotted, not kept in results.json.
    assert not any(k in j for r in doc["runs"] for j in r["jobs"] for k in report.SERIES_KEYS)
    assert any(k in j for r in runs for j in r["jobs"] for k in report.SERIES_KEYS)
    assert len(doc["runs"]) == 2 and doc["summaries"]
    mix = next(s for s in summaries if s["workload"] == "database_backup"
               and s["job"] == "database_sim")
    # The same recorded run as baseline and mix: isolation exactly 1.
    assert mix["metrics"]["isolation_ratio"]["mean"] == pytest.approx(1.0)
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 and rows[0].startswith("kernel,workload,scheduler")
    md = (out / "report.md").read_text()
    assert "prism bench run test" in md and "| prism | database_sim | BE1 |" in md
    assert "prism source: `0123456789ab+changes`" in md
    assert "## Overview (6.12)" in md
    assert "| database_backup | database_sim P99 / own alone | 1.00 |" in md
    assert "| database_backup | database_sim P99 / best alone (common) | 1.00 |" in md
    assert "## The yardstick: database_backup (6.12)" in md
    assert "database_alone |" not in md.split("## Overview")[1].split("##")[0]
    for png in ("6.12-database_backup-bars.png", "6.12-database_backup-latency.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_report_is_rebuilt_from_its_raw_runs(tmp_path):
    """prism bench report DIR writes the same report again from DIR/raw,
    with the command and plan results.json recorded; without results.json
    (a run that failed part way) the plan comes from the manifest."""
    out = tmp_path / "out"
    raw = out / "raw" / "6.12"
    plan = {"profile": "nullb-ssd", "reps": 1, "runtime": 3, "ramp": 1,
            "workloads": ["database_alone", "database_backup"], "schedulers": ["prism"]}
    recorded.raw_runs(raw, plan)
    report.write_all(out, "prism bench run original", plan, report.collect(raw, "6.12"))
    first = (out / "report.md").read_text()
    (out / "report.md").unlink()
    bench.rebuild(out)
    assert (out / "report.md").read_text() == first
    (out / "results.json").unlink()
    bench.rebuild(out)
    md = (out / "report.md").read_text()
    assert "rebuilt from the raw runs" in md and "| prism | database_sim | BE1 |" in md
    # Kept as one archive, the report is rebuilt the same from it.
    bench.archive_raw(out)
    assert not (out / "raw").exists() and (out / bench.RAW_ARCHIVE).exists()
    (out / "report.md").unlink()
    bench.rebuild(out)
    assert (out / "report.md").read_text() == md
    with pytest.raises(PrismError, match="no raw runs"):
        bench.rebuild(tmp_path / "empty")


def test_workloads_add_their_baseline():
    names = [w.name for w in workloads.get("database_backup")]
    assert names == ["database_alone", "database_backup"]
    for w in workloads.WORKLOADS.values():
        if w.app and w.companion != "fio":
            assert not w.jobfile.exists()       # nothing of fio's runs
            continue
        text = w.jobfile.read_text()
        assert f"Seed {w.seed}" in text
        if w.app:       # beside the database: its device or its filesystem
            assert "${DEV}" in text or "${DIR}" in text
        else:
            assert ("${DIR}" if w.filesystem else "${DEV}") in text
    with pytest.raises(PrismError, match="unknown workload"):
        workloads.get("nope")


def test_a_pgbench_plan_attaches_its_image_read_only(tmp_path):
    """The pgbench image reaches the guest as a read-only virtio disk
    (copied at virtio's speed, not through the 9p root), beside the
    profile's own device; a plan without pgbench attaches none."""
    import argparse

    from prism.guest.system import MODEL_SERIALS, PGIMAGE_SERIAL

    img = tmp_path / "pgdata.img"
    img.write_bytes(b"\0" * 4096)
    args = argparse.Namespace(device="hdd-ncq", disk_params=None)
    plan = {"profile": "hdd-ncq", "pgbench_image": str(img)}
    disks = bench.bench_disks(plan, args, tmp_path)
    assert [d.serial for d in disks] == [MODEL_SERIALS["hdd-ncq"], PGIMAGE_SERIAL]
    assert disks[1].readonly and disks[1].path == img
    assert "readonly=on" in disks[1].qemu_opts(1) and "readonly" not in disks[0].qemu_opts(0)
    assert plan["trace"] == "disk-trace.csv"
    assert [d.serial for d in bench.bench_disks({"profile": "nullb-ssd",
                                                 "pgbench_image": str(img)},
                                                args, tmp_path)] == [PGIMAGE_SERIAL]
    assert bench.bench_disks({"profile": "nullb-ssd"}, args, tmp_path) == []


def test_scheduler_specs():
    assert bench.parse_schedulers("none,bfq:low_latency=0,slice_idle=0,prism") == [
        "none", "bfq:low_latency=0,slice_idle=0", "prism"]
    assert bench.parse_schedulers("prism:prio_aging_expire=500") == [
        "prism:prio_aging_expire=500"]
    for bad, msg in [("noop", "unknown scheduler"), ("x=1,none", "before any scheduler"),
                     ("prism:fifo_batch", "NAME=VALUE"), ("none,none", "twice")]:
        with pytest.raises(PrismError, match=msg):
            bench.parse_schedulers(bad)


def test_scheduler_tags_where_a_device_has_few():
    """The kernel gives a scheduler twice the device's depth: 2 on the HDD, 8
    on nullb-ssd, too few for share8's 32 requests to reach the scheduler.
    The bench raises those to 64, as prism's udev rules do."""
    from prism.guest.benchrun import sched_nr_requests

    for profile in ("hdd", "hdd-ncq", "nullb-ssd"):
        assert sched_nr_requests(profile) == 64
    for profile in ("nullb-cpu", "cloud", "virtio", "nvme", "/dev/sdx"):
        assert sched_nr_requests(profile) is None


def test_device_users_sees_partitions_stacks_and_swap():
    mounts = ("/dev/sdb1 /data ext4 rw 0 0\n/dev/mapper/vg-lv /srv xfs rw 0 0\n"
              "proc /proc proc rw 0 0\n")
    swaps = "Filename Type Size Used Priority\n/dev/sdc2 partition 100 0 -2\n"
    assert bench.device_users("sdb", mounts, swaps, ["sdb1"]) == [
        "/dev/sdb1 mounted on /data"]
    assert bench.device_users("sdc", mounts, swaps, ["sdc2"]) == ["/dev/sdc2 is swap"]
    assert bench.device_users("sdd", mounts, swaps, []) == []


def test_refuses_what_is_not_a_block_device(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"\0" * 4096)
    with pytest.raises(PrismError, match="not a block device"):
        bench.check_real_device(str(f), force=True)
    with pytest.raises(PrismError, match="does not exist"):
        bench.check_real_device(str(tmp_path / "missing"), force=False)


def test_refuses_without_root(monkeypatch):
    monkeypatch.setattr(bench.os, "geteuid", lambda: 1000)
    with pytest.raises(PrismError, match="needs root"):
        bench.check_real_device("/dev/null", force=False)


@pytest.fixture
def loopdev(tmp_path):
    """A loop device over a file, if this machine can make one."""
    img = tmp_path / "disk.img"
    img.write_bytes(b"\0" * (16 << 20))
    r = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"no loop devices here: {r.stderr.strip()}")
    dev = r.stdout.strip()
    yield dev, img
    subprocess.run(["umount", str(tmp_path / "mnt")], capture_output=True)
    subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_real_device_refusals(loopdev, tmp_path, capsys):
    """Data is overwritten only with --force, and a mounted device is used
    only with --allow-mounted as well: each refusal names the flag that
    overrides it, and each override is said when it is used."""
    dev, img = loopdev
    bench.check_real_device(dev, force=False)          # blank: accepted
    subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True)
    with pytest.raises(PrismError, match=r"carries a type ext4 \(--force overwrites it\)"):
        bench.check_real_device(dev, force=False)
    bench.check_real_device(dev, force=True)           # told to: goes ahead
    assert "may be overwritten (--force)" in capsys.readouterr().err
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", dev, str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount here")
    with pytest.raises(PrismError, match=r"mounted on .*\(--allow-mounted runs on it all the "
                                         r"same\); .* \(--force overwrites it\)"):
        bench.check_real_device(dev, force=False)
    # --force alone does not cover a mount, nor --allow-mounted alone data.
    with pytest.raises(PrismError) as e:
        bench.check_real_device(dev, force=True)
    assert "--allow-mounted" in str(e.value) and "--force" not in str(e.value)
    with pytest.raises(PrismError) as e:
        bench.check_real_device(dev, force=False, allow_mounted=True)
    assert "--force" in str(e.value) and "--allow-mounted" not in str(e.value)
    bench.check_real_device(dev, force=True, allow_mounted=True)
    assert "running all the same (--allow-mounted)" in capsys.readouterr().err


def test_shares_against_the_ideal():
    jobs = [{"job": f"reader_be{i}", "prio": str(i), "iops": float(8 - i)} for i in range(8)]
    run = {"kernel": "6.12", "workload": "share8", "scheduler": "prism", "rep": 0,
           "jobs": jobs}
    report.add_shares([run])
    # IOPS exactly proportional to 8 - level: every share is ideal.
    assert all(j["share"] == pytest.approx(j["share_ideal"]) for j in jobs)
    assert jobs[0]["share_ideal"] == pytest.approx(8 / 36)
    assert jobs[0]["share_mean_dev"] == pytest.approx(0.0)
    equal = [{"job": f"reader_be{i}", "prio": str(i), "iops": 10.0} for i in range(8)]
    report.add_shares([dict(run, jobs=equal)])
    # Equal shares (1/8): BE0 gets 0.125 of an ideal 0.222 (44% short).
    assert equal[0]["share_dev"] == pytest.approx(abs(0.125 - 8 / 36) / (8 / 36))
    expected = sum(abs(0.125 - (8 - i) / 36) / ((8 - i) / 36) for i in range(8)) / 8
    assert equal[0]["share_mean_dev"] == pytest.approx(expected)


def test_all_workloads_have_job_files():
    names = [w.name for w in workloads.get("all")]
    assert set(names) == set(workloads.WORKLOADS)
    for w in workloads.WORKLOADS.values():
        if w.baseline:
            assert names.index(w.baseline) < names.index(w.name)
        if w.baseline and not w.app:
            base = w.baseline and workloads.WORKLOADS[w.baseline].jobfile.read_text()
            assert f"[{w.high_job}]" in base and f"[{w.high_job}]" in w.jobfile.read_text()


def test_boots_split_the_repetitions_and_each_interleaves():
    """--boots: every repetition runs in exactly one boot, the boots' shares
    differ by one at most, and a boot's schedule interleaves every scheduler
    in each of its repetitions, numbered as in one boot."""
    from prism.guest import benchrun
    plan = {"reps": 7, "boots": 3, "workloads": ["w"], "schedulers": ["a", "b"]}
    parts = bench.boot_parts(plan)
    assert parts == [(0, 2), (2, 4), (4, 7)]
    runs = [r for part in parts for r in benchrun.schedule(dict(plan, rep_range=part))]
    assert sorted((r["rep"], r["scheduler"]) for r in runs) == \
        [(rep, s) for rep in range(7) for s in "ab"]
    assert len({r["dir"] for r in runs}) == len(runs)
    assert bench.boot_parts({"reps": 5}) == [(0, 5)]
    assert len(benchrun.schedule(dict(plan, boots=1))) == 14


def test_boots_are_checked_before_anything_runs():
    import argparse
    for boots, device in ((0, "nullb-cpu"), (6, "nullb-cpu"), (2, "/dev/sda")):
        args = argparse.Namespace(reps=5, boots=boots, runtime=5, ramp=1, device=device)
        with pytest.raises(bench.UsageError, match="--boots"):
            bench.validate(args)


def test_every_job_file_parses(tmp_path):
    """fio itself parses every workload's job file with the variables the
    guest sets (benchrun: DEV, DIR, RUNTIME, RAMP, LAST_CPU): an unknown option or
    value fails here, on the host, in a second (the VM test below runs
    one workload of each kind, not every job file)."""
    if not shutil.which("fio"):
        pytest.skip("fio not installed (apt-get install fio; scripts/setup.sh does)")
    env = {"PATH": "/usr/bin:/bin", "DEV": "/dev/null", "DIR": str(tmp_path),
           "RUNTIME": "1", "RAMP": "0", "LAST_CPU": "0"}
    files = [w.jobfile for w in workloads.WORKLOADS.values() if w.jobfile.exists()]
    assert len(files) >= 25
    for f in files:
        r = subprocess.run(["fio", "--parse-only", str(f)], capture_output=True, text=True,
                           env=env)
        assert r.returncode == 0 and "dropped" not in r.stderr, (f.name, r.stderr[-2000:])
    bad = tmp_path / "bad.fio"
    bad.write_text("[x]\nrw=randred\nfilename=${DEV}\n")
    r = subprocess.run(["fio", "--parse-only", str(bad)], capture_output=True, text=True,
                       env=env)
    assert r.returncode != 0, "fio --parse-only accepted a bad value: the check above is void"


def test_jobs_that_run_together_stop_together():
    """Every workload of more than one job (or numjobs clones) sets
    exitall, so that all are measured over one window."""
    for w in workloads.WORKLOADS.values():
        if w.app and w.companion != "fio":
            assert not w.jobfile.exists()       # nothing of fio's runs
            continue
        text = w.jobfile.read_text()
        sections = [ln for ln in text.splitlines()
                    if ln.startswith("[") and ln != "[global]"]
        if len(sections) > 1 or "numjobs" in text:
            assert "\nexitall=1\n" in text, w.name


def test_grouped_jobs_take_their_clones_logs():
    """group_reporting folds numjobs clones into one JSON entry; its series
    must add up the clones' logs, and the next job's logs come after them."""
    group = DATA.parent / "fio-group"
    recs = stats.run_records(json.loads((group / "fio.json").read_text()), group)
    assert [r["job"] for r in recs] == ["app2", "background_writes"]
    clones = [stats.per_second(stats.read_log(group / f"log_iops.{i}.log"), "sum")
              for i in range(1, 9)]
    first_second = sum(c[0][1] for c in clones)
    assert recs[0]["iops_series"][0][1] == pytest.approx(first_second)
    assert recs[1]["iops_series"] == stats.per_second(
        stats.read_log(group / "log_iops.9.log"), "sum")


def test_a_grouped_job_is_measured_over_its_clones_window():
    """fio sums job_runtime over a group's clones (8 x 2 s here), so the
    window comes from the per-direction runtime, its longest clone's."""
    group = DATA.parent / "fio-group"
    doc = json.loads((group / "fio.json").read_text())
    app2, writer = stats.run_records(doc, group)
    assert doc["jobs"][0]["job_runtime"] > 15000            # the clones' sum
    assert app2["window_s"] == writer["window_s"] == pytest.approx(2.003)
    assert app2["iops"] == pytest.approx(doc["jobs"][0]["read"]["iops"], rel=0.005)
    assert app2["late_s"] == 0 and writer["late_s"] < 0.01


def test_fsync_latency_and_isolation_use_the_sync_figures(fio_json):
    job = json.loads(json.dumps(fio_json["jobs"][0]))
    job["sync"] = {"total_ios": 50, "lat_ns": {"N": 50, "mean": 4e6, "max": 9e6, "percentile": {
        "50.000000": 3e6, "95.000000": 6e6, "99.000000": 8e6, "99.900000": 9e6}}}
    rec = stats.job_record(job)
    assert rec["fsyncs"] == 50 and rec["fsync_p99_us"] == 8000 and rec["fsync_mean_us"] == 4000
    alone = _fake_run("fsync_alone", "prism", 0, {"appender": 1})
    alone["jobs"][0]["fsync_p99_us"] = 2000
    mix = _fake_run("fsync_isolation", "prism", 0, {"appender": 1, "bulk_writer": 1})
    mix["jobs"][0]["fsync_p99_us"] = 5000
    report.add_isolation([alone, mix])
    assert mix["jobs"][0]["isolation_ratio"] == pytest.approx(2.5)


def test_token_family_spread():
    def summary(workload, sched, mbps):
        return {"kernel": "6.12", "workload": workload, "scheduler": sched, "job": "reader_a",
                "metrics": {"bw_kib": stats.summarize([mbps * 1024])}}
    sums = [summary("token_b4k", "none", 200), summary("token_b64k", "none", 100),
            summary("token_b4k", "prism", 150), summary("token_b64k", "prism", 150)]
    text = "\n".join(report.family_tables(sums))
    assert "| none | 200.0 | 100.0 | 70.7 |" in text      # sd of 200 and 100
    assert "| prism | 150.0 | 150.0 | 0.0 |" in text


TRACE_LINES = [
    # arrival, start, end, op, sector, sectors, service_ms, cached, late_ms
    "0.0,0.0,0.010,read,1000,8,10.000,0,0.010",
    "0.011,0.011,0.012,write,5000,8,0.200,1,0.020",      # taken in by the cache
    "0.012,0.012,0.018,destage,5000,8,6.000,0,0",
    "0.020,0.020,0.021,read,5008,8,1.000,0,0.030",       # right after the write-back
    "0.030,0.030,0.031,flush,0,0,0.200,0,0.040",
]


def test_trace_summary_counts_what_the_media_did(tmp_path):
    path = tmp_path / stats.TRACE_NAME
    path.write_text("arrival_s,start_s,end_s,op,sector,sectors,service_ms,cached,late_ms\n"
                    + "\n".join(TRACE_LINES) + "\n")
    s = stats.trace_summary(path)
    assert s["commands"] == 4 and s["media_ops"] == 3
    assert s["cached_writes"] == 1 and s["flushes"] == 1
    assert s["service_ms_mean"] == pytest.approx((10 + 6 + 1) / 3)
    # From the first read's end (sector 1008) to 5000, then contiguous.
    assert s["jump_mb_mean"] == pytest.approx((3992 * 512 / 1e6 + 0) / 2)
    assert s["sequential_frac"] == pytest.approx(0.5)
    assert s["media_busy_frac"] == pytest.approx(0.017 / 0.021)
    assert s["late_ms_mean"] == pytest.approx(0.025)
    # Committed reports keep the traces gzip'd: the same summary.
    gz = tmp_path / "run"
    gz.mkdir()
    with gzip.open(gz / (stats.TRACE_NAME + ".gz"), "wt") as f:
        f.write(path.read_text())
    assert stats.trace_summary(stats.trace_file(gz)) == s
    assert stats.trace_file(tmp_path / "nothing") is None


def test_split_trace_gives_each_run_its_lines(tmp_path):
    header = "arrival_s,start_s,end_s,op,sector,sectors,service_ms,cached,late_ms\n"
    body = [line + "\n" for line in TRACE_LINES]
    trace = tmp_path / stats.TRACE_NAME
    trace.write_text(header + "".join(body))
    raw = tmp_path / "raw"
    cut1 = len(header) + len(body[0]) + len(body[1])
    # The second mark falls inside line 4: that line belongs to the run
    # in which it was finished, the second.
    cut2 = cut1 + len(body[2]) + 5
    for name, rng in (("000-a", [0, cut1]), ("001-b", [cut1, cut2]),
                      ("002-c", [cut2, len(header) + sum(map(len, body))])):
        (raw / name).mkdir(parents=True)
        (raw / name / "meta.json").write_text(json.dumps({"trace_bytes": rng}))
    stats.split_trace(trace, raw)
    got = {d: (raw / d / stats.TRACE_NAME).read_text().splitlines()
           for d in ("000-a", "001-b", "002-c")}
    assert all(lines[0] == header.strip() for lines in got.values())
    assert got["000-a"][1:] == TRACE_LINES[:2]
    assert got["001-b"][1:] == TRACE_LINES[2:4]
    assert got["002-c"][1:] == TRACE_LINES[4:]
    # Kept as each run's summary (what the report reads), not the lines.
    want = stats.trace_summary(raw / "001-b" / stats.TRACE_NAME)
    stats.condense_traces(raw)
    assert not list(raw.glob("*/" + stats.TRACE_NAME))
    assert json.loads((raw / "001-b" / stats.DRIVE_SUMMARY).read_text()) == want


def test_machine_cpu_shares_and_table():
    from prism.guest import benchrun
    # user nice system idle iowait irq softirq steal
    shares = benchrun.cpu_shares([100, 0, 50, 1000, 0, 0, 0, 0],
                                 [130, 10, 90, 1100, 10, 5, 5, 0])
    assert shares == {"busy": 45.0, "user": 20.0, "system": 20.0, "irq": 5.0, "iowait": 5.0}
    runs = [{"scheduler": "prism", "device_util": 0.9, "cpu_all": shares},
            {"scheduler": "prism", "device_util": 0.7, "cpu_all": shares}]
    table = report.machine_table(runs)
    assert "| prism | 80 (" in table[4] and "| 45.0 | 20.0 |" in table[4]
    assert report.machine_table([{"scheduler": "none"}]) == []


def test_source_revision_names_this_tree():
    rev = bench.source_revision()
    if rev is None:
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert rev.split("+")[0] == head


def test_manifest_keeps_the_runs_before_a_failure(tmp_path, monkeypatch):
    """A run that fails late in a long boot leaves the earlier runs in
    the manifest, readable by report.collect."""
    calls = []

    def fake_run_one(run, device, plan, rundir):
        if len(calls) == 2:
            raise SystemExit("bench: fio failed")
        calls.append(run)
        return dict(run)
    monkeypatch.setattr(benchrun, "run_one", fake_run_one)
    monkeypatch.setattr(benchrun.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(benchrun.g, "mount_debugfs", lambda: None)
    plan = {"profile": "virtio", "workloads": ["database_alone"],
            "schedulers": ["none", "prism"], "reps": 2, "runtime": 1, "ramp": 0}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(SystemExit):
        benchrun.main(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "raw")])
    manifest = json.loads((tmp_path / "raw" / "manifest.json").read_text())
    assert [r["scheduler"] for r in manifest["runs"]] == ["none", "prism"]


def test_report_says_when_the_drive_was_not_keeping_time():
    runs = [{"scheduler": "none", "wall_s": 10,
             "drive": {"media_ops": 100, "service_ms_mean": 10.0, "late_ms_mean": 0.2}},
            {"scheduler": "prism", "wall_s": 10,
             "drive": {"media_ops": 100, "service_ms_mean": 10.0, "late_ms_mean": 1.5}}]
    text = "\n".join(report.drive_table(runs))
    assert "Under prism the drive's replies were 1.500 ms late" in text
    assert "15% of its 10.00 ms" in text and "Under none" not in text
    assert "not purely device-bound" in text


def _dir(n, p50, p99, mean):
    return {"total_ios": n, "iops": n / 10, "bw": n * 0.4, "io_kbytes": n * 4, "runtime": 10000,
            "lat_ns": {"N": n, "mean": mean, "max": p99 * 2,
                       "percentile": {"50.000000": p50, "95.000000": p99, "99.000000": p99,
                                      "99.900000": p99}},
            "clat_ns": {"N": n, "mean": mean, "max": p99 * 2, "percentile": {}}}


def test_mixed_jobs_report_each_direction_and_both():
    job = {"jobname": "mix", "read": _dir(700, 100_000, 1_000_000, 200_000),
           "write": _dir(300, 3_000_000, 9_000_000, 4_000_000)}
    rec = stats.job_record(job)
    assert rec["read_p99_us"] == 1000 and rec["write_p99_us"] == 9000
    assert rec["read_p50_us"] == 100 and rec["write_p50_us"] == 3000
    # Without fio's "mixed" section: the larger direction's percentiles.
    assert rec["p99_us"] == 1000 and rec["ios"] == 1000
    job["mixed"] = _dir(1000, 150_000, 8_000_000, 1_340_000)
    rec = stats.job_record(job)
    assert rec["p99_us"] == 8000 and rec["lat_mean_us"] == 1340 and rec["ios"] == 1000
    # The mixed CPQ jobs ask fio for it.
    for name in ("cpq_standard", "cpq_idle", "cpq_rt"):
        assert "unified_rw_reporting=both" in workloads.WORKLOADS[name].jobfile.read_text()


def test_tradeoff_points_on_the_common_baseline():
    runs = []
    for rep, drift in enumerate([1.0, 1.5]):
        for sched, bw, p99, alone in (("none", 100.0, 3000.0, 1000.0),
                                      ("prism", 60.0, 1200.0, 1250.0)):
            backup = {"job": "backup_sim", "bw_kib": bw * drift * 1024}
            for w, jobs in (("database_alone", [{"job": "database_sim", "p99_us": alone}]),
                            ("database_backup", [{"job": "database_sim", "p99_us": p99},
                                                 backup])):
                runs.append({"kernel": "6.12", "kernel_release": "x", "workload": w,
                             "scheduler": sched, "rep": rep, "device_util": 1.0,
                             "wall_s": 1, "jobs": jobs})
    summaries, _ = report.analyse(runs)
    pts = {p["scheduler"]: p for p in report.tradeoff_points(runs, summaries, "6.12",
                                                             "database_backup")}
    # x over none's 1000 alone, the best: prism's own ratio would be 0.96.
    assert pts["none"]["x"] == pytest.approx(3.0) and pts["prism"]["x"] == pytest.approx(1.2)
    assert pts["none"]["y"] == pytest.approx(125.0) and pts["prism"]["y"] == pytest.approx(75.0)
    # Two repetitions: the range, not an interval.
    assert (pts["prism"]["y_low"], pts["prism"]["y_high"]) == (60.0, 90.0)
    assert pts["prism"]["xs"] == {0: pytest.approx(1.2), 1: pytest.approx(1.2)}


def pt(sched, x, y, xs=None, ys=None):
    return {"scheduler": sched, "x": x, "y": y, "x_low": x, "x_high": x,
            "y_low": y, "y_high": y, "xs": xs or {0: x}, "ys": ys or {0: y}}


def test_the_frontier_and_who_dominates_whom_both_ways():
    points = [pt("none", 3.0, 100.0), pt("bfq", 1.8, 70.0), pt("kyber", 1.1, 30.0),
              pt("prism:low_share=5", 1.2, 50.0), pt("prism", 1.4, 90.0),
              pt("prism:low_share=25", 2.0, 120.0), pt("prism:low_share=15", 1.6, 80.0),
              pt("mq-deadline", 1.3, 95.0)]
    # low_share=15 is beaten by the default (better on both): off the line.
    assert [p["scheduler"] for p in report.frontier(points)] == [
        "prism:low_share=5", "prism", "prism:low_share=25"]
    recs = {d["peer"]: d for d in report.dominance(points)}
    assert recs["none"]["frontier"] == "dominates" and recs["none"]["default"] == "neither"
    assert [p["scheduler"] for p in recs["none"]["dominated_by"]] == ["prism:low_share=25"]
    assert recs["bfq"]["default"] == "dominates"
    assert recs["kyber"]["frontier"] == "neither"
    # mq-deadline beats the default and low_share=15 on both axes: said so.
    assert recs["mq-deadline"]["default"] == "dominated"
    assert recs["mq-deadline"]["frontier"] == "neither"
    assert {p["scheduler"] for p in recs["mq-deadline"]["dominates"]} == {
        "prism", "prism:low_share=15"}
    lines = report.dominance_lines(points)
    assert lines[0].startswith("- none (3.00x, 100.0 MiB/s): prism's default: neither")
    assert "mq-deadline" in lines[3] and "prism's default: it dominates prism" in lines[3]
    assert report.dominance_lines([pt("none", 3.0, 1.0)]) == []
    # One peer that beats prism's only point: the frontier is dominated.
    solo = report.dominance([pt("prism", 2.0, 10.0), pt("bfq", 1.5, 50.0)])
    assert solo[0]["frontier"] == "dominated" and solo[0]["default"] == "dominated"


def test_dominance_beyond_the_paired_noise():
    # bfq beats prism in every repetition on both axes: beyond the noise.
    a = pt("bfq", 1.5, 50.0, {0: 1.4, 1: 1.5, 2: 1.6}, {0: 40.0, 1: 50.0, 2: 60.0})
    b = pt("prism", 2.0, 20.0, {0: 1.9, 1: 2.0, 2: 2.1}, {0: 18.0, 1: 20.0, 2: 22.0})
    assert report.beyond_noise(a, b) is True
    # On the means only: one repetition of the three goes the other way.
    c = pt("bfq", 1.5, 50.0, {0: 2.5, 1: 1.0, 2: 1.0}, {0: 10.0, 1: 70.0, 2: 70.0})
    assert report.dominates(c, b) and report.beyond_noise(c, b) is False


def test_the_emulated_ssd_on_the_common_baseline():
    """The ssd-model report of 3.0.0 (tests/data/reports/, cut from its
    results.json). On each scheduler's own alone figure,
    bfq's mean point (1.54x, 99.9 MiB/s) looked to dominate prism's
    (1.59x, 22.8). On the common baseline (mq-deadline's P99 alone, the
    best) bfq's tail is 1.75x and prism's 1.61x, geometric means: neither
    dominates the other, and the report says so rather than either."""
    data = json.loads((Path(__file__).parent / "data" / "reports" / "ssd-model-v3-6.12.json")
                      .read_text())
    runs = data["runs"]
    summaries, extra = report.analyse(runs)
    assert extra["baselines"]["6.12 database_backup database_sim"]["scheduler"] == "mq-deadline"
    points = {p["scheduler"]: p for p in report.tradeoff_points(runs, summaries, "6.12",
                                                                "database_backup")}
    assert points["bfq"]["x"] == pytest.approx(1.75, abs=0.01)
    assert points["prism"]["x"] == pytest.approx(1.61, abs=0.01)
    recs = {d["peer"]: d for d in report.dominance(list(points.values()))}
    assert recs["bfq"]["default"] == "neither" and not recs["bfq"]["dominates"]
    assert all(d["default"] == "neither" for d in recs.values())
    text = "\n".join(report.dominance_lines(list(points.values())))
    assert "- bfq (1.75x, 99.9 MiB/s): prism's default: neither dominates" in text
    # Work conservation: prism moved about a tenth of the best total.
    prism_work = [r["work_ratio"] for r in runs
                  if r["workload"] == "database_backup" and r["scheduler"] == "prism"]
    assert len(prism_work) == 5 and max(prism_work) < 0.2
    assert extra["best_totals"]["6.12 database_backup"]["scheduler"] == "kyber"


def test_a_repetition_that_did_no_work_counts():
    runs = []
    for rep in range(3):
        alone = {"job": "database_sim", "p99_us": 1000.0, "ios": 100}
        mix = [{"job": "database_sim", "p99_us": 2000.0, "ios": 100, "window_s": 20.0},
               {"job": "backup_sim", "bw_kib": 0.0 if rep == 1 else 1024.0,
                "ios": 0 if rep == 1 else 100, "p99_us": None if rep == 1 else 5000.0,
                "window_s": 20.0}]
        for w, jobs in (("database_alone", [alone]), ("database_backup", mix)):
            runs.append({"kernel": "6.12", "kernel_release": "x", "workload": w,
                         "scheduler": "prism", "rep": rep, "wall_s": 22, "jobs": jobs})
    summaries, _ = report.analyse(runs)
    backup = next(s for s in summaries if s["job"] == "backup_sim")
    assert backup["starved"] == 1 and backup["reps"] == 3
    # Counted: a mean of 2/3 MiB/s, and its latency at least the window.
    assert backup["metrics"]["bw_kib"]["n"] == 3
    assert backup["metrics"]["bw_kib"]["mean"] == pytest.approx(2048 / 3)
    assert backup["metrics"]["p99_us"]["max"] == 20e6
    assert report.starved_note(backup) == " (starved in 1 of 3)"
    # A record that counts bytes, not I/Os (pg_basebackup's), is starved
    # only when it moved none.
    copied = [{"job": "backup", "ios": None, "kib": 0.0, "bw_kib": 0.0},
              {"job": "backup", "ios": None, "kib": 512.0, "bw_kib": 25.6}]
    report.add_starved([{"jobs": copied, "wall_s": 22}])
    assert copied[0].get("starved") and not copied[1].get("starved")
    assert copied[1]["bw_kib"] == 25.6


def test_device_use_from_the_drives_trace():
    ssd = {"profile": "ssd-model", "disk_params": {"channels": 8}}
    # 0.35 channel-seconds a second of eight: 4% used, though io_ticks said 95%.
    assert report.device_use({"busy_s": 7.0, "span_s": 20.0}, ssd) == pytest.approx(0.04375)
    assert report.device_use({"busy_s": 19.0, "span_s": 20.0},
                             {"profile": "hdd"}) == pytest.approx(0.95)
    cloud = {"profile": "cloud", "disk_params": {"iops_limit": 3000, "bandwidth_mib": 125.0,
                                                 "iops_size_kib": 256}}
    # 35 MiB/s in 128 KiB commands: 28% of the bandwidth, 9% of the commands.
    use = report.device_use({"bytes": 35 * 2**20 * 20, "commands": 280 * 20,
                             "span_s": 20.0}, cloud)
    assert use == pytest.approx(0.28)
    assert report.device_use({"media_busy_frac": 0.9}, ssd) is None     # an old summary


def test_the_drive_trace_counts_bulk_commands_served_in_sequence(tmp_path):
    rows = ["op,sector,sectors,cached,start_s,end_s,service_ms,late_ms",
            # The backup (from 1 GiB) streams, pays a seek after the
            # database's read, then streams again: of the three bulk
            # commands after the first, two were served in sequence.
            "read,2097152,256,0,0.000,0.010,10,0",
            "read,2097408,256,0,0.010,0.020,10,0",
            "read,100,8,0,0.020,0.030,10,0",
            "read,2097664,256,0,0.030,0.040,10,0",
            "read,2097920,256,0,0.040,0.050,10,0"]
    trace = tmp_path / stats.TRACE_NAME
    trace.write_text("\n".join(rows) + "\n")
    region = WORKLOADS["database_backup"].low_region()
    assert region == (2**30, 3 * 2**30)
    d = stats.trace_summary(trace, region)
    assert d["bulk_media_ops"] == 3 and d["bulk_sequential_frac"] == pytest.approx(2 / 3)
    assert d["busy_s"] == pytest.approx(0.05) and d["span_s"] == pytest.approx(0.05)
    assert d["bytes"] == (4 * 256 + 8) * 512


def test_histogram_logs_become_per_second_p99(tmp_path):
    # fio bins: below 128 one per ns; bin 128 starts the group of width 2.
    assert stats.hist_bin_value(5) == 5 and stats.hist_bin_value(127) == 127
    assert stats.hist_bin_value(128) == 129.0 and stats.hist_bin_value(192) == 258.0
    bins = [0] * 1856
    bins[100] = 99
    bins[192] = 1
    assert stats.hist_percentile(bins, 50) == 100 and stats.hist_percentile(bins, 99) == 100
    assert stats.hist_percentile(bins, 99.5) == 258.0
    assert stats.hist_percentile([0] * 10, 99) is None
    line = lambda ms, b: f"{ms}, 0, 4096, " + ", ".join(map(str, b))   # noqa: E731
    slow = [0] * 1856
    slow[192] = 100
    # Two clones of one job: the second second is slow in one clone only.
    (tmp_path / "log_clat_hist.1.log").write_text(line(1000, bins) + "\n" + line(2000, bins))
    (tmp_path / "log_clat_hist.2.log").write_text(line(1000, bins) + "\n" + line(2000, slow))
    fio_json = {"jobs": [{"jobname": "j", "job options": {"numjobs": "2"}}]}
    stats.condense_hist_logs(fio_json, tmp_path)
    assert not list(tmp_path.glob("log_clat_hist.*"))
    series = json.loads((tmp_path / stats.P99_SERIES).read_text())["j"]
    assert series == [[1, 0.1], [2, 0.258]]


def test_priorities_within_a_job_are_reported_apart():
    job = {"jobname": "database_mixed", "read": _dir(1000, 150_000, 900_000, 200_000)}
    job["read"]["prios"] = [
        {"prioclass": 2, "prio": 4, "lat_ns": {"N": 800, "percentile": {
            "50.000000": 200_000, "99.000000": 1_000_000}}},
        {"prioclass": 1, "prio": 0, "lat_ns": {"N": 200, "percentile": {
            "50.000000": 90_000, "99.000000": 300_000}}}]
    rec = stats.job_record(job)
    assert rec["prio_RT0_p99_us"] == 300 and rec["prio_BE4_p99_us"] == 1000
    assert rec["prio_RT0_ios"] == 200 and rec["prio_BE4_p50_us"] == 200
    assert stats.prio_name(3, 0) == "IDLE" and stats.prio_name(0, 0) == "none"
    runs = [{"kernel": "6.12", "workload": "cmdprio_mix", "scheduler": "prism", "rep": 0,
             "jobs": [rec]}]
    text = "\n".join(report.prio_table(report.summarize(runs)))
    assert "| prism | database_mixed | RT0 | 200 | 0.09 | 0.30 |" in text
    assert "| prism | database_mixed | BE4 | 800 | 0.20 | 1.00 |" in text


def test_a_long_plan_gets_the_time_it_needs():
    plan = {"workloads": ["a", "b", "c"], "schedulers": ["x"] * 5, "reps": 5,
            "runtime": 20, "ramp": 2}
    # 75 runs of 22 s and their set-up: far beyond the VM's default 1800 s.
    assert bench.boot_budget(plan) == 75 * 42 + 600
    assert bench.boot_budget(dict(plan, pgbench_scale=200)) == 75 * 82 + 600


def test_flight_table_reads_prisms_decisions():
    """The report's in-flight table: means over the runs, in ms, "-" for
    what prism had not measured, holds for depth and those that waited
    for a paced gap, holds for a flow, LOW's part served by its share,
    holds waived because their tier could not get a tag."""
    flight = {"high": {"inflight": 0, "think_us": 0, "think_samples": 0},
              "normal": {"inflight": 0, "think_us": 2000, "think_samples": 8},
              "low": {"inflight": 0, "think_us": 0, "think_samples": 0},
              "window_us": 15000, "bulk_us": 15000, "bulk_samples": 8, "lower_limit": 1,
              "target_us": 1000, "held_window": 100, "held_depth": 50, "held_flow": 7,
              "tags_short": 3, "held_paced": 20}
    runs = [{"scheduler": "prism", "prism_flight": dict(flight, window_us=w),
             "prism_tiers": {"low": {"dispatched": 200, "shared": 100}}}
            for w in (14000, 16000)]
    runs.append({"scheduler": "none"})
    lines = report.flight_table(runs)
    row = next(line for line in lines if line.startswith("| prism |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "15.00 (14.00-16.00)"   # window, ms: two runs give the range
    assert cells[2] == "-" and cells[3] == "2.00"
    assert cells[4] == "15.00" and cells[8] == "50" and cells[9] == "20"
    assert cells[10] == "7" and cells[11] == "3"
    assert cells[12] == "50 %"
    assert not any(line.startswith("| none |") for line in lines)
    assert report.flight_table([{"scheduler": "none"}]) == []


def test_instruction_clock_is_refused_for_drives_in_host_time():
    import argparse
    args = argparse.Namespace(device="hdd", accel="icount", reps=1, runtime=1, ramp=0,
                              workload="cpu_randread1", disk_params=None,
                              schedulers="none", pgbench_scale=1, kernel="6.12")
    with pytest.raises(PrismError, match="instruction clock"):
        bench.validate(args)
    args.device = "nullb-cpu"
    bench.validate(args)
    assert bench.make_plan(args)["clock"] == "instructions"
    args.accel = "tcg"
    assert "clock" not in bench.make_plan(args)


def test_histogram_quantiles_interpolate_inside_buckets():
    bounds = [0, 1000, 2000, 4000]
    # 100 samples: 50 in [1000, 2000), 50 in [2000, 4000).
    h = {"1": 50, "2": 50}
    assert stats.hist_quantile(bounds, h, 0.25) == pytest.approx(1500)
    assert stats.hist_quantile(bounds, h, 0.5) == pytest.approx(2000)
    assert stats.hist_quantile(bounds, h, 0.99) == pytest.approx(2000 + 2000 * 49 / 50)
    # The open-ended last bucket gives its bound; nothing counted, nothing.
    assert stats.hist_quantile(bounds, {3: 5}, 0.99) == 4000
    assert stats.hist_quantile(bounds, {}, 0.5) is None


def test_latency_table_reads_prisms_histograms():
    bounds = [0, 1_000_000, 2_000_000, 4_000_000]
    runs = [{"scheduler": "prism", "prism_latency": {"bounds_ns": bounds, "hists": {
        "wait low read": {"1": 10}, "device low read": {"2": 10},
        "device high read": {"1": 4}}}} for _ in range(2)]
    lines = report.latency_table(runs)
    high = next(x for x in lines if "| HIGH | read |" in x)
    low = next(x for x in lines if "| LOW | read |" in x)
    assert lines.index(high) < lines.index(low)
    cells = [c.strip() for c in low.split("|")]
    assert cells[4] == "10"                              # requests, from device counts
    assert cells[5].startswith("1.50")                    # wait P50 in ms
    assert cells[7].startswith("3.00")                    # device P50
    assert report.latency_table([{"scheduler": "none"}]) == []


def test_guest_timeouts_are_dropped_when_the_clock_counts_instructions():
    from prism.guest import benchrun
    assert benchrun.run_timeout({"runtime": 10}, 310) == 310
    assert benchrun.run_timeout({"clock": "instructions"}, 310) is None


def test_flight_series_table_shows_the_controller_during_the_runs():
    """The depth controller once a second: each run's median and least
    limit and paced duty, and the part of the samples in which the lower
    tiers were held below the device's depth or paced, means over the
    runs; runs without samples (other schedulers, older raw output) are
    left out."""
    def series(limits, duties):
        return [{"t": i, "lower_limit": lim, "lower_duty": d, "device_depth": 64}
                for i, (lim, d) in enumerate(zip(limits, duties, strict=True))]
    runs = [{"scheduler": "prism",
             "prism_flight_series": series([64, 4, 2, 2], [100] * 4)},
            {"scheduler": "prism",
             "prism_flight_series": series([1, 1, 1, 64], [50, 50, 100, 100])},
            {"scheduler": "none"}]
    lines = report.flight_series_table(runs)
    row = next(line for line in lines if line.startswith("| prism |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "4"                             # samples
    assert cells[2] == "2.0 (1.0-3.0)"                 # medians 3 and 1
    assert cells[3].startswith("2 (")                  # least 2 and 1, mean 1.5 -> 2
    assert cells[4] == "88 (75-100)"                   # duty medians 100 and 75
    assert cells[5] == "75 %"                          # limited 3/4 and 3/4
    assert not any(line.startswith("| none |") for line in lines)
    assert report.flight_series_table([{"scheduler": "prism"}]) == []


def test_cost_table_shows_what_each_variant_charged():
    """The report's cost-model table: per scheduler variant, the media and
    learning state and the mean charge of the reference requests in us;
    runs without prism's cost (other schedulers) left out."""
    def cost(rand_ns: int, learning: str) -> dict:
        return {"model": {"model": "flash", "rbps": "0"},
                "cost_ns": {"read_4k_rand": str(rand_ns), "read_4k_seq": "20000",
                            "read_1m_seq": "2000000", "write_4k_rand": "25000"},
                "learning": {"learning": learning, "samples": "9"}}
    runs = [{"scheduler": "prism", "prism_cost": cost(20000, "off")},
            {"scheduler": "prism", "prism_cost": cost(20000, "off")},
            {"scheduler": "prism:cost_model=auto", "prism_cost": cost(4000000, "in_force")},
            {"scheduler": "prism:cost_model=auto", "prism_cost": cost(6000000, "in_force")},
            {"scheduler": "none"}]
    lines = report.cost_table(runs)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in lines if line.startswith("| prism")}
    assert set(rows) == {"prism", "prism:cost_model=auto"}
    assert rows["prism"][1:3] == ["flash", "off"]
    assert rows["prism"][3] == "20.0" and rows["prism"][5] == "2,000.0"
    assert rows["prism:cost_model=auto"][2] == "in_force"
    assert rows["prism:cost_model=auto"][3].startswith("5,000.0 (")
    assert report.cost_table([{"scheduler": "none"}]) == []


def test_cgroup_workloads_name_their_cgroups_in_the_job_file():
    """A workload's cgroups are the ones its job file puts jobs in (fio's
    cgroup=prism-bench-NAME), which prism bench makes with their weights
    before fio starts and fio must not remove (cgroup_nodelete); and no
    other job file uses a cgroup."""
    for w in workloads.WORKLOADS.values():
        if not w.jobfile.exists():
            continue
        text = w.jobfile.read_text()
        used = set(re.findall(r"^cgroup=prism-bench-(\S+)$", text, re.M))
        assert used == {name for name, _ in w.cgroups}, w.name
        if used:
            assert re.search(r"^cgroup_nodelete=1$", text, re.M), w.name
            assert all(1 <= weight <= 1000 for _, weight in w.cgroups), w.name  # bfq's range
        assert {name for name, _ in w.io_max} <= used, w.name


def test_only_committed_source_is_measured_into_docs_results(tmp_path, monkeypatch):
    import argparse
    args = argparse.Namespace(device="hdd", accel="tcg", reps=1, runtime=1, ramp=0,
                              workload="database_backup", disk_params=None,
                              schedulers="none,prism", pgbench_scale=1, kernel="6.12",
                              out=str(bench.RESULTS_DIR / "hdd-try"))
    monkeypatch.setattr(bench, "source_revision", lambda: "0123456789ab+changes")
    with pytest.raises(UsageError, match="committed source only"):
        bench.validate(args)
    # Relative paths and paths through .. are the same place.
    bench.check_committed(str(tmp_path), "0123456789ab+changes")
    with pytest.raises(UsageError):
        bench.check_committed(str(bench.RESULTS_DIR / ".." / "results" / "x"), None)
    args.out = str(tmp_path / "experiment")
    bench.validate(args)
    monkeypatch.setattr(bench, "source_revision", lambda: "0123456789ab")
    args.out = str(bench.RESULTS_DIR / "hdd-try")
    bench.validate(args)


def test_a_report_of_uncommitted_source_is_not_rebuilt_into_docs_results(tmp_path):
    from prism import cli
    src = tmp_path / "exp"
    src.mkdir()
    (src / "results.json").write_text(json.dumps({"plan": {"source": "abc+changes"},
                                                  "runs": []}))
    assert cli.main(["bench", "report", str(src), "--out",
                     str(bench.RESULTS_DIR / "exp")]) == 2
    assert not (bench.RESULTS_DIR / "exp").exists()
