"""The benchmark runner: executes a plan (workloads x schedulers x
repetitions, interleaved) on one device and leaves fio's JSON and
per-second logs for each run. It runs inside the test VM for the device
profiles, or on the host for a real device the user named.

  python3 -m prism.guest.benchrun --plan plan.json --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from ..common import stats
from ..common.workloads import WORKLOADS
from . import pgbench
from . import system as g

# Device profiles made inside the VM. nullb-ssd: few slots and a long
# enough service time that the device, not TCG's CPU, is the bottleneck,
# with nr_requests 64 under a scheduler, as prism's udev rules set it: the
# kernel's default, twice the 4 slots, keeps share8's 32 requests waiting
# for 8 tags in tag allocation, where no scheduler sees them (one BE tier:
# 73% from the weights at 8 tags, 0.2% at 64); nullb-cpu: no delay at
# all, so the scheduler's CPU cost is what shows.
NULLB_PROFILES = {
    "nullb-ssd": {"depth": 4, "completion_us": 500, "nr_requests": 64},
    "nullb-cpu": {"depth": 64, "completion_us": 0},
}
NULLB_SIZE_MB = 4096
# The emulated drives (prism.drives, served from the host over NBD), and
# nr_requests under a scheduler: virtio's default is twice the device depth,
# 2 for a disk that takes one command at a time, which would leave nothing
# to sort; a SATA disk behind AHCI gets 64 (twice its 32 host tags), as
# does hdd-ncq (there by virtio's own default). cloud keeps virtio's 128.
MODEL_PROFILES = {"hdd": {"nr_requests": 64}, "hdd-ncq": {"nr_requests": 64},
                  "ssd-model": {}, "cloud": {}}
# A file-backed disk behind QEMU's NVMe controller: multi-queue (one
# hardware queue per guest CPU), multi-range discard, the shape of most
# real SSDs. Under TCG the emulated CPU, not this device, is the
# bottleneck: it compares schedulers' handling of a multi-queue device and
# their CPU cost there, not device scheduling.
FILE_PROFILES = {"virtio": g.VIRTIO_SERIAL, "nvme": g.NVME_SERIAL}
# Filesystems for the workloads that need one take this much of the device:
# a partition-sized ext4, quick to make on a 1 TB emulated disk too.
FS_SIZE = "4G"


def log(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


class Device:
    """The device under test; reset() gives each run a fresh start."""

    def __init__(self, profile: str, path: str | None):
        self.profile = profile
        self.path = path
        self.name = ""

    def reset(self, keep_data: bool = False) -> None:
        """@keep_data: the run needs what it writes back (a filesystem), so
        a null_blk device is made memory-backed."""
        if self.profile in NULLB_PROFILES:
            # A fresh null_blk per run: nothing left over from the last one.
            spec = NULLB_PROFILES[self.profile]
            g.nullb_configfs_remove("bench")
            self.name = g.nullb_configfs(
                "bench", depth=spec["depth"], completion_us=spec["completion_us"],
                size_mb=NULLB_SIZE_MB, memory_backed=keep_data)
        elif self.profile in FILE_PROFILES:
            self.name = g.disk_by_serial(FILE_PROFILES[self.profile])
        elif self.profile in MODEL_PROFILES:
            self.name = g.disk_by_serial(g.MODEL_SERIALS[self.profile])
        else:
            assert self.path, "a real device needs its path"
            self.name = Path(os.path.realpath(self.path)).name
        # Nothing of the device cached: its dirty pages written and its page
        # cache dropped (on the emulated drives this also empties the
        # drive's write cache, so the last run's writes are not written
        # back during this one). Only the device's: dropping every cache
        # (drop_caches) makes each run's fio and Python load themselves
        # again over the guest's 9p root, 5 s a run under TCG.
        g.sh(f"sync; blockdev --flushbufs /dev/{self.name}")

    @property
    def dev(self) -> str:
        return f"/dev/{self.name}"

    def stat(self) -> list[int]:
        return [int(x) for x in (g.SYS_BLOCK / self.name / "stat").read_text().split()]


def parse_scheduler(spec: str) -> tuple[str, dict]:
    """'bfq:low_latency=0,slice_idle=0' -> ('bfq', {...})."""
    name, _, rest = spec.partition(":")
    tunables = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        tunables[k] = v
    return name, tunables


def sched_nr_requests(profile: str) -> int | None:
    """nr_requests under a scheduler on device profile @profile; None: the
    kernel's default."""
    return {**NULLB_PROFILES, **MODEL_PROFILES}.get(profile, {}).get("nr_requests")


def apply_scheduler(dev: str, spec: str, profile: str = "",
                    latency_hist: bool = False) -> None:
    """Select @spec's scheduler on @dev with its tunables; with
    @latency_hist, prism's latency histograms on too (debugfs), and a
    twin's (v2's by its tunable latency_hist, 3.0.0's through debugfs as
    prism's), though those are not read: the two are compared run by
    run, and each then does the same bookkeeping."""
    name, tunables = parse_scheduler(spec)
    tw = g.twin_named(name)
    if tw and tw.latency_tunable and latency_hist:
        tunables = {"latency_hist": 1} | tunables
    available = g.offered_schedulers(dev, name)
    if name not in available:
        raise SystemExit(f"bench: scheduler {name!r} is not offered by this kernel "
                         f"for {dev} (offered: {', '.join(available)})")
    g.set_scheduler(dev, name)
    nr = sched_nr_requests(profile)
    if nr and name != "none":
        # Under none the device's own tags are all there is.
        (g.SYS_BLOCK / dev / "queue" / "nr_requests").write_text(f"{nr}\n")
    for key, val in tunables.items():
        if not g.tunable_path(dev, key).exists():
            raise SystemExit(f"bench: scheduler {name} has no tunable {key!r}")
        err = g.write_tunable(dev, key, val)
        if err:
            raise SystemExit(f"bench: {name}: {key}={val} refused ({os.strerror(err)})")
    if latency_hist and (name == "prism" or (tw and not tw.latency_tunable)):
        g.prism_latency_keep(dev)


MOUNTPOINT = Path("/tmp/prism-bench-fs")


def make_filesystem(device: Device) -> Path:
    """A fresh ext4 on the device, mounted: for workloads that fsync."""
    g.sh(f"mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 {device.dev} {FS_SIZE}")
    MOUNTPOINT.mkdir(parents=True, exist_ok=True)
    g.sh(f"mount -t ext4 {device.dev} {MOUNTPOINT}")
    return MOUNTPOINT


# Each scheduler's cgroup weight file; the others have none (v2 had none;
# 3.0.0's twin has its own, renamed: guest.system.Twin.weight_file).
WEIGHT_FILES = {"prism": "io.prism.weight", "bfq": "io.bfq.weight",
                **{t.scheduler: t.weight_file for t in g.TWINS.values() if t.weight_file}}


def make_cgroups(workload, scheduler: str, dev: str) -> dict:
    """The workload's cgroups (prism-bench-NAME, where its job file puts
    jobs) with their weights in @scheduler's weight file, and its io.max
    lines; the io and memory controllers enabled for them (cgroup
    writeback needs both). Returns what was set, for the run's meta."""
    if not workload.cgroups:
        return {}
    if g.cgroup_root() is None:
        raise SystemExit(f"bench: {workload.name} needs cgroup v2 at {g.CGROUP_ROOT}")
    wfile = WEIGHT_FILES.get(parse_scheduler(scheduler)[0])
    mm = (g.SYS_BLOCK / dev / "dev").read_text().strip()
    set_: dict = {"weight_file": wfile, "weights": {}, "io_max": {}}
    for name, weight in workload.cgroups:
        cg = g.CGROUP_ROOT / f"prism-bench-{name}"
        cg.mkdir(exist_ok=True)
        if wfile:
            (cg / wfile).write_text(f"{weight}\n")
            set_["weights"][name] = weight
    for name, spec in workload.io_max:
        (g.CGROUP_ROOT / f"prism-bench-{name}" / "io.max").write_text(f"{mm} {spec}\n")
        set_["io_max"][name] = spec
    return set_


def remove_cgroups(workload) -> None:
    for name, _ in workload.cgroups:
        with contextlib.suppress(OSError):
            (g.CGROUP_ROOT / f"prism-bench-{name}").rmdir()


def run_one(run: dict, device: Device, plan: dict, rundir: Path) -> dict:
    workload = WORKLOADS[run["workload"]]
    if workload.app == "pgbench":
        return run_pgbench(run, device, plan, rundir, workload)
    device.reset(keep_data=workload.filesystem)
    apply_scheduler(device.name, run["scheduler"], device.profile, workload.latency_hist)
    rundir.mkdir(parents=True, exist_ok=True)
    # LAST_CPU: the highest CPU, for a job file that gives each of two
    # jobs a CPU of its own (CPU 0 alone in a one-CPU guest).
    env = dict(os.environ, DEV=device.dev, RUNTIME=str(plan["runtime"]),
               RAMP=str(plan["ramp"]), LAST_CPU=str(max(0, (os.cpu_count() or 1) - 1)))
    if workload.filesystem:
        env["DIR"] = str(make_filesystem(device))
    try:
        cgroups = make_cgroups(workload, run["scheduler"], device.name)
        return _measure(run, device, plan, rundir, env, workload, cgroups)
    finally:
        if workload.filesystem:
            g.sh(f"umount {MOUNTPOINT}", check=False)
        remove_cgroups(workload)


class RunMarks:
    """What a run is measured against: the device's and the machine's
    counters and the drive trace's size at its start (start()), the same
    counters at its end (stop()), and the run's meta.json made of them
    (write_meta())."""

    def __init__(self, device: Device, plan: dict, run: dict):
        # prism's histograms count from the end of the ramp, as fio does.
        self.latency_reset = None
        self.stopped = threading.Event()
        self.flight_series: list[dict] = []
        self.sampler = None
        self.t0 = time.monotonic()
        self.latency_hist = WORKLOADS[run["workload"]].latency_hist
        name = parse_scheduler(run["scheduler"])[0]
        tw = g.twin_named(name)
        if self.latency_hist and (name == "prism" or (tw and not tw.latency_tunable)):
            self.latency_reset = threading.Timer(plan["ramp"], g.prism_latency_keep,
                                                 [device.name])
            self.latency_reset.start()
        # The twin's depth controller too (v2 and 3.0.0 wrote the same
        # keys), for a paired look at the two controllers; no report reads
        # it yet.
        if name == "prism" or tw:
            self.sampler = threading.Thread(target=self._sample_flight,
                                            args=(device.name, plan["ramp"]), daemon=True)
            self.sampler.start()
        self.before = device.stat()
        self.cpu_before = cpu_times()
        self.trace = Path(plan["trace"]) if plan.get("trace") else None
        self.trace_from = self.trace.stat().st_size if self.trace else 0
        self.wall = 0.0
        self.after: list[int] = []
        self.cpu: dict = {}

    def _sample_flight(self, dev: str, ramp: float) -> None:
        """The depth controller's state once a second from the end of the
        ramp: the limit on the lower tiers' requests in flight and their
        paced duty. The snapshot at the end of a run cannot show them:
        the limit is lifted once the tiers it protected go quiet."""
        if self.stopped.wait(ramp):
            return
        while not self.stopped.wait(1.0):
            try:
                f = g.prism_flight(dev)
            except (OSError, ValueError):
                return      # the scheduler was switched away: nothing to read
            self.flight_series.append({
                "t": round(time.monotonic() - self.t0, 1),
                **{k: f.get(k) for k in ("lower_limit", "lower_duty", "device_depth",
                                          "target_us", "lat_us", "solo_mean_us",
                                          "mixed_us", "cuts")}})

    def stop(self, device: Device) -> None:
        if self.latency_reset:
            self.latency_reset.cancel()
        self.stopped.set()
        if self.sampler:
            self.sampler.join(timeout=10)
        self.wall = time.monotonic() - self.t0
        self.after = device.stat()
        self.cpu = cpu_shares(self.cpu_before, cpu_times())

    def write_meta(self, run: dict, device: Device, rundir: Path, **extra) -> dict:
        # Field 10 of /sys/block/<dev>/stat: milliseconds the device was busy.
        busy_ms = self.after[9] - self.before[9]
        util = min(1.0, busy_ms / (self.wall * 1000)) if self.wall > 0 else 0.0
        meta = dict(run, device=device.dev, profile=device.profile,
                    wall_s=round(self.wall, 2), device_util=round(util, 4), cpu_all=self.cpu,
                    kernel=os.uname().release, **extra)
        if self.trace:
            # Where this run's lines are in the drive's trace (the host
            # cuts them out after the boot).
            meta["trace_bytes"] = [self.trace_from, self.trace.stat().st_size]
        if parse_scheduler(run["scheduler"])[0] == "prism":
            meta["prism_tiers"] = g.prism_tiers(device.name)
            meta["prism_flight"] = g.prism_flight(device.name)
            if self.latency_hist:
                meta["prism_latency"] = g.prism_latency(device.name)
            meta["prism_cost"] = g.prism_cost(device.name)
            meta["prism_flight_series"] = self.flight_series
        elif g.twin_named(parse_scheduler(run["scheduler"])[0]):
            # A twin's debugfs files share prism's names and formats (its
            # release wrote them first); a file it lacks, or one it
            # wrote otherwise, is left out.
            with contextlib.suppress(OSError, ValueError):
                meta["twin_flight"] = g.prism_flight(device.name)
            with contextlib.suppress(OSError, ValueError):
                meta["twin_tiers"] = g.prism_tiers(device.name)
            if self.latency_hist:
                with contextlib.suppress(OSError, ValueError):
                    meta["twin_latency"] = g.prism_latency(device.name)
            meta["twin_flight_series"] = self.flight_series
        (rundir / "meta.json").write_text(json.dumps(meta, indent=1))
        return meta


_database: pgbench.Database | None = None


def run_pgbench(run: dict, device: Device, plan: dict, rundir: Path, workload) -> dict:
    """pgbench for ramp + runtime seconds on the database the host built
    (plan "pgbench_image"), with its companion beside it; measured over
    the last runtime seconds, like fio's ramp_time."""
    global _database
    if _database is None:
        _database = pgbench.Database(plan["pgbench_image"])
    device.reset(keep_data=True)
    _database.write_image(device.dev)
    apply_scheduler(device.name, run["scheduler"], device.profile, workload.latency_hist)
    rundir.mkdir(parents=True, exist_ok=True)
    ramp, runtime = plan["ramp"], plan["runtime"]
    _database.start(device.dev)
    backup = fio = None
    try:
        marks = RunMarks(device, plan, run)
        t0 = time.time()        # epoch seconds, as pgbench's log has them
        if workload.companion == "basebackup":
            backup = pgbench.Backup(_database)
            backup.start()
        elif workload.companion == "fio":
            env = dict(os.environ, DEV=device.dev, RUNTIME=str(runtime), RAMP=str(ramp),
                       DIR=str(pgbench.MOUNT))
            # Its per-second logs: the bulk job's worst second says
            # whether it kept moving.
            fio = subprocess.Popen(["fio", "--output-format=json",
                                    f"--output={rundir / 'fio.json'}",
                                    *fio_second_logs(rundir), str(workload.jobfile)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
        bench = _database.pgbench(ramp + runtime, rundir / "pgbench")
        out, _ = bench.communicate(timeout=run_timeout(plan, ramp + runtime + 600))
        (rundir / "pgbench.txt").write_text(out)
        if backup:
            backup.stop()
        if fio:
            _, err = fio.communicate(timeout=run_timeout(plan, ramp + runtime + 300))
            if fio.returncode:
                raise SystemExit(f"bench: fio failed in run {rundir.name}: {err.strip()[-800:]}")
        marks.stop(device)
    finally:
        if backup and backup.is_alive():
            backup.stop()
        _database.stop()
    if bench.returncode:
        raise SystemExit(f"bench: pgbench failed in run {rundir.name}: {out.strip()[-800:]}")
    if backup and backup.error:
        raise SystemExit(f"bench: pg_basebackup failed in run {rundir.name}: {backup.error}")
    rows = pgbench.read_logs(rundir / "pgbench")
    # pgbench's -T counts from when its clients are connected, which under
    # TCG can be a second after it was started: measure from there.
    start = pgbench.first_start(rows, t0) + ramp
    jobs = [pgbench.pgbench_record(rows, start, start + runtime)]
    if backup:
        jobs.append(pgbench.backup_record(backup.received, start, start + runtime,
                                          walsenders=len(backup.reprioritised)))
    if fio:
        jobs += stats.run_records(json.loads((rundir / "fio.json").read_text()), rundir)
    (rundir / "jobs.json").write_text(json.dumps(jobs, indent=1))
    # The per-transaction logs are large; the records keep what the report needs.
    for log in rundir.glob("pgbench.*"):
        if log.name != "pgbench.txt":
            log.unlink()
    return marks.write_meta(run, device, rundir, transactions_logged=len(rows),
                            backups=backup.backups if backup else None,
                            backup_walsenders=len(backup.reprioritised) if backup else None)


def cpu_times() -> list[int]:
    """The machine's CPU time so far, in clock ticks, as /proc/stat's
    first line counts it: user nice system idle iowait irq softirq steal."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def cpu_shares(before: list[int], after: list[int]) -> dict:
    """Where all CPUs' time went between two cpu_times(), in percent of
    it: fio's own usr/sys figures miss the completion work done in
    interrupts and softirqs, which is where a scheduler's cost partly is."""
    d = [a - b for a, b in zip(after, before, strict=True)]
    total = sum(d) or 1

    def pct(*fields: int) -> float:
        return round(100.0 * sum(d[i] for i in fields) / total, 2)
    return {"busy": pct(0, 1, 2, 5, 6, 7), "user": pct(0, 1), "system": pct(2),
            "irq": pct(5, 6), "iowait": pct(4)}


def fio_second_logs(rundir: Path) -> list[str]:
    """fio options for its per-second latency and IOPS logs in @rundir,
    which stats.run_records() reads into each job's series and worst
    second."""
    return [f"--write_lat_log={rundir / 'log'}", f"--write_iops_log={rundir / 'log'}",
            "--log_avg_msec=1000"]


def run_timeout(plan: dict, seconds: float) -> float | None:
    """A timeout of @seconds in the guest's clock, or None where that clock
    counts instructions (--accel icount): it jumps ahead whenever the vCPU
    waits for the host, so a guest-side timeout could expire at once. The
    host's boot timeout bounds the run in real time then."""
    return None if plan.get("clock") == "instructions" else seconds


def _measure(run: dict, device: Device, plan: dict, rundir: Path, env: dict,
             workload, cgroups: dict | None = None) -> dict:
    marks = RunMarks(device, plan, run)
    cmd = ["fio", "--output-format=json", f"--output={rundir / 'fio.json'}",
           *fio_second_logs(rundir), f"--write_hist_log={rundir / 'log'}",
           "--log_hist_msec=1000", str(workload.jobfile)]
    r = subprocess.run(cmd, env=env, text=True, capture_output=True,
                       timeout=run_timeout(plan, plan["runtime"] + plan["ramp"] + 300))
    marks.stop(device)
    if r.returncode:
        raise SystemExit(f"bench: fio failed in run {rundir.name}: {r.stderr.strip()[-800:]}")
    stats.condense_hist_logs(json.loads((rundir / "fio.json").read_text()), rundir)
    extra = {"cgroups": cgroups} if cgroups else {}
    if cgroups and parse_scheduler(run["scheduler"])[0] == "prism":
        extra["prism_cgroups"] = g.prism_cgroups(device.name)
    return marks.write_meta(run, device, rundir, **extra)


def rep_range(plan: dict) -> tuple[int, int]:
    """The repetitions (from, to: 0-based, end excluded) that one boot
    runs: all of them, or its share under prism bench run --boots."""
    lo, hi = plan.get("rep_range", (0, plan["reps"]))
    return lo, hi


def schedule(plan: dict) -> list[dict]:
    """Interleaved order: every scheduler once per workload per repetition,
    so slow drift in the machine hits all schedulers alike."""
    runs = []
    for rep in range(*rep_range(plan)):
        for workload in plan["workloads"]:
            for sched in plan["schedulers"]:
                runs.append({"rep": rep, "workload": workload, "scheduler": sched})
    for i, run in enumerate(runs):
        run["index"] = i
        run["dir"] = f"{i:03d}-{run['workload']}-{run['scheduler'].replace(':', '_')}-r{run['rep']}"
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m prism.guest.benchrun")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    plan = json.loads(Path(args.plan).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not shutil.which("fio"):
        raise SystemExit("bench: fio not found (apt-get install fio)")
    if plan.get("ko") and not g.module_loaded():
        g.load_prism(plan["ko"])
    for name in dict.fromkeys(parse_scheduler(s)[0] for s in plan["schedulers"]):
        if g.twin_named(name):
            # Before the first run, so that a twin that will not load
            # stops the plan before anything is measured.
            g.load_twin(name, plan.get("twin_ko"))
    g.mount_debugfs()
    device = Device(plan["profile"], plan.get("device"))
    runs = schedule(plan)
    per_run = plan["runtime"] + plan["ramp"]
    started = time.monotonic()
    done: list[dict] = []
    for run in runs:
        elapsed = time.monotonic() - started
        avg = elapsed / len(done) if done else per_run + 3
        left = avg * (len(runs) - len(done))
        log(f"run {run['index'] + 1}/{len(runs)}: {run['workload']} on {run['scheduler']}, "
            f"rep {run['rep'] + 1}/{plan['reps']}; about {left / 60:.1f} min left")
        done.append(run_one(run, device, plan, out / run["dir"]))
        # After every run, not once at the end: if a later run fails, the
        # runs already measured stay readable (report.collect takes them).
        (out / "manifest.json").write_text(json.dumps({"plan": plan, "runs": done}, indent=1))
    log(f"{len(done)} runs in {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
