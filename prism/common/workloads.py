"""The benchmark workloads: fio job files in prism/common/jobs/, each with the
seed it comes from, which job is latency-sensitive and which is bulk, and
the workload that gives the latency-sensitive job's baseline alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import UsageError

WORKLOAD_DIR = Path(__file__).resolve().parent / "jobs"


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    seed: str
    description: str
    high_job: str | None = None      # latency-sensitive job (isolation ratio)
    low_job: str | None = None       # bulk job (starvation: its worst second)
    baseline: str | None = None      # workload running high_job alone
    share: bool = False              # jobs compete for proportional shares by BE level
                                     # (one level: equal shares, by process)
    filesystem: bool = False         # runs in a fresh ext4 on the device (job files use DIR)
    metric: str = "p99_us"           # the high job's figure the isolation ratio compares
    family: str | None = None        # workloads varying one parameter (token_*)
    # An application instead of fio: "pgbench" (prism.guest.pgbench); companion
    # is what runs beside it: "basebackup" (pg_basebackup, IDLE) or "fio"
    # (the workload's job file).
    app: str | None = None
    companion: str | None = None
    # prism runs with its latency histograms on (debugfs "latency", off
    # in prism at first), for the report; not where prism's CPU cost is
    # what is measured, which they would add to.
    latency_hist: bool = True
    # Cgroups the job file puts jobs in (fio's cgroup=prism-bench-NAME), with
    # their weights: (NAME, weight), written to io.prism.weight under prism
    # and io.bfq.weight under bfq before fio starts (issue 42).
    cgroups: tuple[tuple[str, int], ...] = ()
    # io.max lines for cgroups, under every scheduler: (NAME, "wbps=..."),
    # the operator's alternative to weights.
    io_max: tuple[tuple[str, str], ...] = ()
    # Another workload's job file, for a variant that differs only in
    # what prism bench sets around it (io_max).
    job: str | None = None

    @property
    def jobfile(self) -> Path:
        return WORKLOAD_DIR / f"{self.job or self.name}.fio"

    def low_region(self) -> tuple[int, int] | None:
        """The bytes [start, end) of the device the bulk job reads or
        writes, from its job file's offset and size (a job on the raw
        device), or None: what the drive's trace counts as bulk commands."""
        if not self.low_job or self.filesystem or self.app:
            return None
        section = job_options(self.jobfile).get(self.low_job, {})
        if "size" not in section:
            return None
        start = fio_bytes(section.get("offset", "0"))
        return start, start + fio_bytes(section["size"])


def fio_bytes(text: str) -> int:
    """A fio size (4k, 1G, 512): bytes, in fio's binary units."""
    text = text.strip()
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if text and text[-1].lower() in units:
        return int(float(text[:-1]) * units[text[-1].lower()])
    return int(text)


def job_options(path: Path) -> dict[str, dict[str, str]]:
    """A fio job file's sections, each {option: value} (comments and
    options without a value left out)."""
    out: dict[str, dict[str, str]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = out.setdefault(line[1:-1], {})
        elif section is not None and "=" in line:
            key, _, value = line.partition("=")
            section[key.strip()] = value.strip()
    return out


WORKLOADS = {w.name: w for w in [
    Workload("database_backup", "000",
             "4 KiB random reads at BE1 (database_sim) against 128 KiB "
             "sequential reads at BE7 (backup_sim)",
             high_job="database_sim", low_job="backup_sim",
             baseline="database_alone"),
    Workload("database_backup_fio_paced", "000",
             "database_backup with fio itself pacing the backup at 60 MiB/s (half "
             "of what the cloud volume gives it alone): what a smooth pacer of "
             "the bulk work could give the database, whatever the scheduler",
             high_job="database_sim", low_job="backup_sim",
             baseline="database_alone"),
    Workload("database_alone", "000",
             "database_sim alone: the baseline for database_backup"),
    Workload("cmdprio_mix", "000",
             "database_mixed: 4 KiB random reads, 20% of them RT and 80% BE4 within the "
             "one job (fio cmdprio), against backup_sim (BE7); each priority's "
             "percentiles apart", low_job="backup_sim"),
    Workload("cpq_standard", "001", "random 4 KiB, 70% reads / 30% writes, default priority"),
    Workload("cpq_idle", "001", "the standard mix in the IDLE class"),
    Workload("cpq_rt", "001", "the standard mix in the RT class"),
    Workload("cpq_mixed", "001",
             "random 4 KiB reads (active_reads) against 128 KiB sequential writes "
             "(backup_writes)", high_job="active_reads", low_job="backup_writes",
             baseline="cpq_mixed_alone"),
    Workload("cpq_mixed_alone", "001", "active_reads alone: the baseline for cpq_mixed"),
    Workload("cpq_app1", "001", "one thread, 4 KiB random reads, psync, depth 1"),
    Workload("cpq_app2", "001",
             "8 threads of 4 KiB random psync reads (app2) against 128 KiB sequential "
             "writes (background_writes)", high_job="app2", low_job="background_writes",
             baseline="cpq_app2_alone"),
    Workload("cpq_app2_alone", "001", "app2 alone: the baseline for cpq_app2"),
    Workload("flows_greedy", "001",
             "one greedy process (4 KiB random reads, iodepth 64) against four light "
             "ones (light1-4, iodepth 1), one priority: fairness by process",
             high_job="light1", low_job="greedy", baseline="flows_greedy_alone",
             share=True),
    Workload("flows_greedy_alone", "001",
             "flows_greedy's four light processes alone: its baseline"),
    Workload("share8", "002",
             "eight sequential 128 KiB readers at BE 0..7; ideal share (8 - level) / 36",
             share=True),
    Workload("fsync_isolation", "002",
             "appender (4 KiB + fsync each, BE0) against bulk_writer (1024 random "
             "4 KiB writes + fsync, BE7) on ext4", high_job="appender",
             low_job="bulk_writer", baseline="fsync_alone", filesystem=True,
             metric="fsync_p99_us"),
    Workload("fsync_alone", "002", "appender alone: the baseline for fsync_isolation",
             filesystem=True),
    Workload("commit_idle_reader", "002",
             "commit (4 KiB append + fsync each, default priority, ext4) against "
             "backup_reader (1 MiB direct reads of the raw device, IDLE class, iodepth 16)",
             high_job="commit", low_job="backup_reader", baseline="commit_alone",
             filesystem=True, metric="fsync_p99_us"),
    Workload("commit_idle_writer", "002",
             "commit against bulk_writer (1 MiB buffered writes, IDLE class: its "
             "writeback is the flusher's)", high_job="commit", low_job="bulk_writer",
             baseline="commit_alone", filesystem=True, metric="fsync_p99_us"),
    Workload("commit_alone", "002",
             "commit alone: the baseline for commit_idle_reader and commit_idle_writer",
             filesystem=True),
    *[Workload(f"token_b{size}", "002",
               f"sequential reader_a (BE2) against runs_b reading {size} runs at random "
               "(BE7)", high_job="reader_a", low_job="runs_b", family="token")
      for size in ("4k", "64k", "1m", "16m")],
    Workload("cpu_randread1", "001",
             "4 KiB random reads, io_uring, iodepth 32, default priority, one job: "
             "the scheduler's CPU cost on nullb-cpu", latency_hist=False),
    Workload("cpu_randread2", "001", "the same with two submitting jobs",
             latency_hist=False),
    Workload("pgbench_backup", "000",
             "PostgreSQL: pgbench (TPC-B-like, 4 clients, default priority) while "
             "pg_basebackup streams the database to nowhere, its server process in the "
             "IDLE class; pgbench's IOPS are transactions per second and its latency is "
             "per transaction", high_job="pgbench", low_job="backup",
             baseline="pgbench_alone", app="pgbench", companion="basebackup"),
    Workload("pgbench_fio", "000",
             "PostgreSQL: pgbench beside a 1 MiB sequential reader of the raw device at "
             "BE7 (backup_reader)", high_job="pgbench", low_job="backup_reader",
             baseline="pgbench_alone", app="pgbench", companion="fio"),
    Workload("pgbench_idle_reader", "000",
             "PostgreSQL: pgbench beside a 1 MiB sequential reader of the raw device in "
             "the IDLE class (backup_reader)", high_job="pgbench", low_job="backup_reader",
             baseline="pgbench_alone", app="pgbench", companion="fio"),
    Workload("pgbench_idle_writer", "000",
             "PostgreSQL: pgbench beside 1 MiB buffered writes in the IDLE class on the "
             "database's filesystem (bulk_writer; its writeback is the flusher's)",
             high_job="pgbench", low_job="bulk_writer", baseline="pgbench_alone",
             app="pgbench", companion="fio"),
    Workload("pgbench_alone", "000", "pgbench alone: the baseline for pgbench_backup, "
             "pgbench_fio and pgbench_idle_*", app="pgbench"),
    Workload("startup_readers", "003",
             "an application starting (startup: 256 dependent 4 KiB reads from a cold "
             "cache, bfq's comm_startup_lat) beside three buffered sequential readers at "
             "the default priority (reader1-3); its figure is the start-up time",
             high_job="startup", low_job="reader1", baseline="startup_alone",
             metric="runtime_ms"),
    Workload("startup_idle_readers", "003",
             "startup_readers with the three readers in the IDLE class",
             high_job="startup", low_job="reader1", baseline="startup_alone",
             metric="runtime_ms"),
    Workload("startup_alone", "003",
             "startup alone: the baseline for startup_readers and startup_idle_readers",
             metric="runtime_ms"),
    Workload("share8_cgroup", "002",
             "share8 by cgroup: eight sequential 128 KiB readers at the default priority, "
             "each in a cgroup weighted as BE 0..7 weigh (200, 175, ..., 25); ideal share "
             "its weight over the sum", share=True,
             cgroups=tuple((f"reader_cg{i}", (8 - i) * 25) for i in range(8))),
    Workload("cgroup_writeback", "002",
             "a buffered writer (1 MiB writes to a file on ext4, cgroup weight 100) "
             "against random 4 KiB reads of the raw device (cgroup weight 1000), both "
             "at the default priority: the writer's writeback is charged to its cgroup",
             high_job="reader", low_job="writer", baseline="cgroup_writeback_alone",
             filesystem=True, cgroups=(("reader", 1000), ("writer", 100))),
    Workload("cgroup_writeback_iomax", "002",
             "cgroup_writeback with the writer's cgroup capped at 20 MiB/s of writes "
             "by io.max (the operator's alternative to weights)",
             high_job="reader", low_job="writer", baseline="cgroup_writeback_alone",
             filesystem=True, cgroups=(("reader", 1000), ("writer", 100)),
             io_max=(("writer", "wbps=20971520"),)),
    Workload("cgroup_writeback_iomax4", "002",
             "cgroup_writeback_iomax with the cap at 4 MiB/s, a quarter of the small "
             "cloud volume's 16 (20 MiB/s would not bind there)",
             high_job="reader", low_job="writer", baseline="cgroup_writeback_alone",
             filesystem=True, cgroups=(("reader", 1000), ("writer", 100)),
             io_max=(("writer", "wbps=4194304"),), job="cgroup_writeback_iomax"),
    Workload("cgroup_writeback_alone", "002",
             "cgroup_writeback's reader alone: its baseline",
             cgroups=(("reader", 1000),)),
    Workload("tenants", "000",
             "two tenants in cgroups of equal weight, each a database (4 KiB random reads "
             "at BE1) beside its own backup (128 KiB sequential reads at BE7)",
             high_job="db_a", low_job="backup_a", baseline="tenants_alone",
             cgroups=(("tenant_a", 100), ("tenant_b", 100))),
    Workload("tenants_alone", "000", "tenant a of tenants alone, tenant b idle",
             cgroups=(("tenant_a", 100),)),
    Workload("cpu_randread1_cgroup", "001",
             "cpu_randread1 with its job in a cgroup (weight 100): the CPU cost of "
             "prism's cgroup flows on nullb-cpu", latency_hist=False,
             cgroups=(("cpu", 100),)),
    Workload("seqread_buffered", "003",
             "sequential buffered 1 MiB reads through the page cache (hdparm -t)"),
]}


def get(names: str) -> list[Workload]:
    """Workloads named in a comma list ("all": every one), each baseline
    added (once) before the workloads that need it."""
    out: list[Workload] = []
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if wanted == ["all"]:
        wanted = list(WORKLOADS)
    for name in wanted:
        if name not in WORKLOADS:
            raise UsageError(f"unknown workload {name!r}; known: "
                             + ", ".join(sorted(WORKLOADS)))
        w = WORKLOADS[name]
        for dep in (w.baseline, w.name):
            if dep and WORKLOADS[dep] not in out:
                out.append(WORKLOADS[dep])
    if not out:
        raise UsageError("no workload named")
    return out
