"""pgbench's per-transaction logs and the backup's byte counts as job
records (prism.guest.pgbench), on logs recorded from PostgreSQL 15's pgbench
(-c 4 -j 2 -l: one file per thread)."""

from pathlib import Path

import pytest

from prism.guest import pgbench

DATA = Path(__file__).parent / "data" / "pgbench"


def test_parse_log_reads_completion_time_and_latency():
    rows = pgbench.parse_log(["0 1 4285 0 1795452707 720473",
                              "1 2 1382 0 1795452707 722153 0",
                              "1 99 failed 0 1795452708 100000",
                              "garbage"])
    assert rows == [(pytest.approx(1795452707.720473), 4285.0),
                    (pytest.approx(1795452707.722153), 1382.0)]


def test_recorded_logs_of_both_threads_are_read():
    rows = pgbench.read_logs(DATA / "pgbench")
    assert len(rows) == 120                       # the failed line is left out
    assert all(lat > 0 for _, lat in rows)
    assert min(t for t, _ in rows) == pytest.approx(1795452707.720473)


def test_pgbench_record_counts_the_window_only():
    # 10 transactions per second for 5 s, latency = 1000 us x second index.
    rows = [(100.0 + s + i / 10, 1000.0 * (s + 1)) for s in range(5) for i in range(10)]
    rec = pgbench.pgbench_record(rows, 101.0, 104.0)
    assert rec["ios"] == 30 and rec["iops"] == pytest.approx(10.0)
    assert rec["window_s"] == 3.0 and rec["runtime_ms"] == 3000
    assert rec["lat_mean_us"] == pytest.approx(3000.0)
    assert rec["p50_us"] == 3000.0 and rec["p99_us"] == 4000.0
    assert rec["lat_max_us"] == 4000.0
    assert rec["iops_series"] == [(1, 10.0), (2, 10.0), (3, 10.0)]
    assert rec["lat_series_us"] == [(1, 2000.0), (2, 3000.0), (3, 4000.0)]
    assert rec["min_iops_1s"] == 10.0
    empty = pgbench.pgbench_record([], 0.0, 2.0)
    assert empty["ios"] == 0 and empty["p99_us"] is None and empty["min_iops_1s"] == 0.0


def test_nearest_rank_percentiles():
    vals = list(range(1, 101))
    assert pgbench.percentile(vals, 50) == 50
    assert pgbench.percentile(vals, 99) == 99
    assert pgbench.percentile(vals, 99.9) == 100
    assert pgbench.percentile([7], 99) == 7


def test_backup_record_is_bandwidth_in_the_window():
    mib = 1 << 20
    received = [(10.5, mib), (11.2, mib), (11.9, 2 * mib), (13.5, mib), (14.0, 5 * mib)]
    rec = pgbench.backup_record(received, 11.0, 14.0)
    assert rec["kib"] == 4 * 1024 and rec["bw_kib"] == pytest.approx(4 * 1024 / 3)
    assert rec["bw_series_kib"] == [(1, 3072.0), (2, 0.0), (3, 1024.0)]
    assert rec["min_bw_kib_1s"] == 0.0 and rec["prioclass"] == "3"
    assert rec["iops"] is None


def test_a_missing_postgresql_names_its_package(monkeypatch):
    monkeypatch.setattr(pgbench.glob, "glob", lambda pattern: [])
    with pytest.raises(pgbench.PrismError, match="apt-get install postgresql"):
        pgbench.bindir()


def test_report_of_pgbench_runs(tmp_path):
    """The records go through the report like fio's: isolation against
    pgbench_alone, the transaction table and the backup's bandwidth."""
    from prism.bench import report
    runs = []
    for rep in range(2):
        for sched in ("none", "prism"):
            for w, slow in (("pgbench_alone", 1.0), ("pgbench_backup", 2.0)):
                rows = [(100.0 + i / 10, 1000.0 * slow + i) for i in range(300)]
                jobs = [pgbench.pgbench_record(rows, 101.0, 121.0)]
                if w == "pgbench_backup":
                    jobs.append(pgbench.backup_record(
                        [(101.0 + i / 5, 1 << 20) for i in range(100)], 101.0, 121.0))
                runs.append({"kernel": "6.12", "kernel_release": "6.12.x", "workload": w,
                             "scheduler": sched, "rep": rep, "device_util": 0.9,
                             "wall_s": 22, "jobs": jobs})
    plan = {"profile": "cloud", "reps": 2, "runtime": 20, "ramp": 1,
            "workloads": ["pgbench_alone", "pgbench_backup"], "schedulers": ["none", "prism"]}
    report.write_all(tmp_path, "test", plan, runs)
    md = (tmp_path / "report.md").read_text()
    assert "| scheduler | TPS | P50 | P95 | P99 | P99 / alone | backup MiB/s |" in md
    # 10 TPS; P99 twice alone's (2000 + i vs 1000 + i us); 100 MiB in 20 s.
    assert "| prism | 10.0 |" in md and "| 5.0 |" in md
    iso = [line for line in md.splitlines()
           if line.startswith("| pgbench_backup | pgbench P99 / own alone")]
    # P99 of the 200 in the window: 1000 + 10 + 197 us alone, 2207 us beside.
    assert iso and "| 1.83 |" in iso[0], iso
    assert (tmp_path / "6.12-pgbench_backup-bars.png").exists()


def test_the_window_starts_with_the_first_transaction():
    rows = [(10.5, 200_000.0), (10.6, 100_000.0), (11.0, 50_000.0)]
    assert pgbench.first_start(rows, 5.0) == pytest.approx(10.3)
    assert pgbench.first_start([], 5.0) == 5.0
