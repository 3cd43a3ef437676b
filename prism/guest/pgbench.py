"""PostgreSQL under pgbench as a benchmark workload: a real database on the
device under test, TPC-B-like transactions at the default I/O priority,
beside a real backup (pg_basebackup, whose server process is put in the
IDLE class) or a plain sequential reader at BE7.

- Database: the image the host built (prism.host.pgimage) is written onto
  the device once per boot; each run mounts it, drops the page cache,
  starts the server, and stops it afterwards. PostgreSQL refuses to run
  as root, so it runs as the unprivileged user nobody (setpriv): no
  account is created on the host or in the guest.
- records: pgbench's per-transaction log and the backup's byte count
  become job records with the fields of stats.job_record, so the report
  treats them like fio's jobs (IOPS is then transactions per second and
  latency is per transaction).
"""

from __future__ import annotations

import glob
import math
import os
import subprocess
import threading
import time
from pathlib import Path

from ..common.errors import PrismError
from .system import PGIMAGE_SERIAL, disk_by_serial

CLIENTS = 4
THREADS = 2
USER = "nobody"
GROUP = "nogroup"
PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p99_9": 99.9}


def bindir() -> Path:
    """The newest installed PostgreSQL's server binaries."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    if not found:
        raise PrismError("PostgreSQL not found (apt-get install postgresql-15)")
    return Path(found[-1]).parent


def as_user(cmd: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--clear-groups",
            "--reset-env", *cmd]


def run_checked(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if r.returncode:
        raise PrismError(f"{what} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-600:]}")
    return r


# -- guest: the database on the device under test -----------------------------

MOUNT = Path("/tmp/prism-pg")


class Database:
    """The image on a block device, and a server on it."""

    def __init__(self, image_path: str):
        self.image = image_path
        self.pg = bindir()
        self.written: str | None = None     # the device holding the image

    @property
    def sock(self) -> str:
        return str(MOUNT / "run")

    def write_image(self, dev: str) -> None:
        """Copy the image onto @dev (once per device per boot; a null_blk
        device made afresh must be given it again)."""
        if self.written == dev:
            return
        # Only the blocks the filesystem uses (e2image -ra): most of the
        # image is room for the runs' WAL, and on an emulated disk every
        # byte copied costs its transfer time (10 minutes for the whole
        # image at scale 200 on the hdd-ncq drive). What the free blocks
        # held before does not matter to ext4.
        run_checked(["e2image", "-ra", self.source(), dev],
                    f"writing the database image to {dev}", timeout=1800)
        run_checked(["blockdev", "--flushbufs", dev], f"flushing {dev}")
        self.written = dev

    def source(self) -> str:
        """Where the image is read from: the read-only disk the host
        attached to a benchmark boot (prism.bench.plan.bench_disks), or
        the file itself (a run on a real device, without a VM)."""
        try:
            return f"/dev/{disk_by_serial(PGIMAGE_SERIAL)}"
        except (RuntimeError, OSError):
            return self.image

    def forget(self) -> None:
        self.written = None

    def start(self, dev: str) -> None:
        MOUNT.mkdir(parents=True, exist_ok=True)
        # Every run starts with nothing of the database cached: the device's
        # page cache (ext4's metadata) dropped, and its files have none
        # while it is not mounted. Not every cache (drop_caches): the
        # PostgreSQL binaries would load again over the guest's 9p root.
        run_checked(["blockdev", "--flushbufs", dev], f"flushing {dev}")
        run_checked(["mount", "-t", "ext4", dev, str(MOUNT)], f"mounting {dev}")
        run_checked(as_user([str(self.pg / "pg_ctl"), "-D", str(MOUNT / "pgdata"), "-w",
                      "-t", "300", "-l", str(MOUNT / "run" / "server.log"), "-o",
                      f"-k {self.sock} -c listen_addresses='' -c max_connections=20 "
                      "-c dynamic_shared_memory_type=mmap", "start"]),
             "starting PostgreSQL", timeout=360)

    def stop(self) -> None:
        subprocess.run(as_user([str(self.pg / "pg_ctl"), "-D", str(MOUNT / "pgdata"), "-w",
                                "-t", "300", "-m", "fast", "stop"]),
                       capture_output=True, timeout=360)
        subprocess.run(["umount", str(MOUNT)], capture_output=True)

    def pgbench(self, seconds: int, log_prefix: Path) -> subprocess.Popen:
        """TPC-B-like transactions for @seconds, each logged."""
        return subprocess.Popen(
            [str(self.pg / "pgbench"), "-h", self.sock, "-U", "postgres", "-n",
             "-c", str(CLIENTS), "-j", str(THREADS), "-T", str(seconds), "-l",
             f"--log-prefix={log_prefix}", "postgres"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class Backup(threading.Thread):
    """pg_basebackup to nowhere, started again whenever it finishes, until
    stopped; the server process that reads the files for it (the
    walsender) is put in the IDLE I/O class as soon as it appears, since
    the client's own priority does not reach the reads. Counts the bytes
    received per second."""

    def __init__(self, db: Database, ioprio_class: int = 3):
        super().__init__(daemon=True)
        self.db = db
        self.ioprio_class = ioprio_class
        self.halt = threading.Event()
        self.received: list[tuple[float, int]] = []     # (time, bytes) per read
        self.backups = 0
        self.reprioritised: set[int] = set()
        self.error = ""

    def _walsenders(self) -> list[int]:
        pids = []
        for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                text = Path(cmdline).read_bytes()
            except OSError:
                continue
            if text.startswith(b"postgres: walsender"):
                pids.append(int(cmdline.split("/")[2]))
        return pids

    def _reprioritise_new_walsender(self, timeout: float = 10.0) -> None:
        """Wait for this backup's walsender (it appears when the client
        connects, before the checkpoint the backup starts with) and put it
        in the backup's class. Scanning /proc is costly under TCG, so it
        is done here, once per backup, and not while data flows."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.halt.is_set():
            new = [pid for pid in self._walsenders() if pid not in self.reprioritised]
            if new:
                for pid in new:
                    subprocess.run(["ionice", "-c", str(self.ioprio_class), "-p", str(pid)],
                                   capture_output=True)
                    self.reprioritised.add(pid)
                return
            time.sleep(0.02)

    def run(self) -> None:
        buf = bytearray(1 << 20)
        while not self.halt.is_set():
            p = subprocess.Popen([str(self.db.pg / "pg_basebackup"), "-h", self.db.sock,
                                  "-U", "postgres", "-D", "-", "-Ft", "-X", "none",
                                  "-c", "fast"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert p.stdout is not None and p.stderr is not None
            fd = p.stdout.fileno()
            self._reprioritise_new_walsender()
            while not self.halt.is_set():
                n = os.readv(fd, [buf])
                if n == 0:
                    break
                self.received.append((time.time(), n))
            if self.halt.is_set():
                p.terminate()
            p.stdout.close()
            rc = p.wait()
            err = p.stderr.read().decode(errors="replace")
            p.stderr.close()
            if rc and not self.halt.is_set():
                self.error = err.strip()[-400:]
                return
            self.backups += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=60)


# -- records -------------------------------------------------------------------

def parse_log(lines) -> list[tuple[float, float]]:
    """(completion time in epoch seconds, latency in us) per transaction
    of a pgbench per-transaction log (-l): client_id transaction_no time
    script_no time_epoch time_us [schedule_lag [retries]]. Failed or
    skipped transactions (time "failed"/"skipped") are left out."""
    out = []
    for line in lines:
        f = line.split()
        if len(f) < 6 or not f[2].isdigit():
            continue
        out.append((int(f[4]) + int(f[5]) / 1e6, float(f[2])))
    return out


def first_start(rows: list[tuple[float, float]], default: float) -> float:
    """When the first logged transaction began (its completion less its
    latency): where pgbench's own -T starts counting; @default if none."""
    return min((t - lat / 1e6 for t, lat in rows), default=default)


def read_logs(prefix: Path) -> list[tuple[float, float]]:
    """All of a run's logs: pgbench writes PREFIX.PID and, with several
    threads, PREFIX.PID.N."""
    rows: list[tuple[float, float]] = []
    for path in sorted(prefix.parent.glob(prefix.name + ".*")):
        with open(path) as f:
            rows += parse_log(f)
    return rows


def percentile(sorted_vals: list[float], pct: float) -> float:
    """Nearest-rank percentile, as fio reports its own."""
    k = max(0, min(len(sorted_vals) - 1, int(math.ceil(pct / 100 * len(sorted_vals))) - 1))
    return sorted_vals[k]


def pgbench_record(rows: list[tuple[float, float]], start: float, end: float,
                   failed: int = 0) -> dict:
    """The job record of the transactions that completed in [start, end)."""
    window = end - start
    lats = sorted(lat for t, lat in rows if start <= t < end)
    rec = {"job": "pgbench", "ios": len(lats), "iops": len(lats) / window if window else 0.0,
           "bw_kib": None, "kib": None, "runtime_ms": int(window * 1000), "errors": failed,
           "usr_cpu": None, "sys_cpu": None, "prio": None, "prioclass": None,
           "lat_source": "pgbench", "clat_mean_us": None, "clat_p99_us": None,
           "window_s": window, "late_s": 0.0}
    rec["lat_mean_us"] = sum(lats) / len(lats) if lats else None
    rec["lat_max_us"] = lats[-1] if lats else None
    for name, pct in PERCENTILES.items():
        rec[f"{name}_us"] = percentile(lats, pct) if lats else None
    seconds = int(window)
    counts = [0] * seconds
    sums = [0.0] * seconds
    for t, lat in rows:
        i = int(t - start)
        if start <= t and i < seconds:
            counts[i] += 1
            sums[i] += lat
    rec["iops_series"] = [(i + 1, float(c)) for i, c in enumerate(counts)]
    rec["lat_series_us"] = [(i + 1, sums[i] / counts[i]) for i in range(seconds) if counts[i]]
    rec["min_iops_1s"] = float(min(counts)) if counts else None
    return rec


def backup_record(received: list[tuple[float, int]], start: float, end: float,
                  ioprio_class: int = 3, walsenders: int = 0) -> dict:
    """The backup's job record: bytes received in [start, end); walsenders:
    how many server processes were put in @ioprio_class."""
    window = end - start
    total = sum(n for t, n in received if start <= t < end)
    seconds = int(window)
    per = [0] * seconds
    for t, n in received:
        i = int(t - start)
        if start <= t and i < seconds:
            per[i] += n
    return {"job": "backup", "ios": None, "iops": None, "kib": total / 1024,
            "bw_kib": total / 1024 / window if window else 0.0,
            "runtime_ms": int(window * 1000), "errors": 0, "usr_cpu": None,
            "sys_cpu": None, "prio": None, "prioclass": str(ioprio_class),
            "lat_source": None, "lat_mean_us": None, "clat_mean_us": None,
            "lat_max_us": None, "clat_p99_us": None,
            **{f"{name}_us": None for name in PERCENTILES},
            "bw_series_kib": [(i + 1, b / 1024) for i, b in enumerate(per)],
            "min_bw_kib_1s": min(per) / 1024 if per else None,
            "walsenders": walsenders, "window_s": window, "late_s": 0.0}
