"""What more than one area's checks use: the tunables' table, prism's
books on an idle queue, fio job files and reports, the queue flags a
check flips for the length of a block."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

from ...common import stats
from .. import system as g

SCHEDULERS = ["none", "mq-deadline", "kyber", "bfq", "prism"]


# Tunable: (default as shown, a good value to round-trip, min, max)
TUNABLES = {
    "read_expire": (500, 1000, 0, 3600000),
    "write_expire": (5000, 2000, 0, 3600000),
    "writes_starved": (2, 4, 0, 2**31 - 1),
    "fifo_batch": (16, 8, 0, 2**31 - 1),
    "prio_aging_expire": (10000, 2000, 0, 3600000),
    "be_tiers": (3, 1, 1, 3),     # 2 refused (TUNABLE_GAPS)
    "normal_share": (25, 30, 0, 50),
    "low_share": (10, 20, 0, 50),
    "slice_idle_us": (-1, 2000, -1, 100000),
    "target_latency_us": (0, 5000, 0, 10000000),
    "low_rate_kbps": (0, 20480, 0, 2**31 - 1),
    "writeback_low": (1, 0, 0, 1),
    "bulk_merge_kb": (0, 128, 0, 1 << 20),
}


# Values inside a tunable's range that it refuses: the BE levels span one
# tier or three.
TUNABLE_GAPS = {"be_tiers": (2,)}


# cost_model: "fixed" or "auto" and six coefficients, as it reads.
COST_DEFAULT = "fixed rbps=0 rseqiops=0 rrandiops=0 wbps=0 wseqiops=0 wrandiops=0"


# Tunables that take words: (default as shown, {a write, in this order:
# what reads back after it}, writes that must be refused).
KEYWORD_TUNABLES = {
    "cost_model": (COST_DEFAULT, {
        "auto": COST_DEFAULT.replace("fixed", "auto"),
        "rrandiops=200 wbps=92160000":
            "auto rbps=0 rseqiops=0 rrandiops=200 wbps=92160000 wseqiops=0 wrandiops=0",
        "fixed rbps=2199023254528 wseqiops=10000000":
            "fixed rbps=2199023254528 rseqiops=0 rrandiops=200 wbps=92160000 "
            "wseqiops=10000000 wrandiops=0",
        COST_DEFAULT: COST_DEFAULT,
    }, ("abc", "\n", "1", "autox", "auto fixed", "rbps", "rbps=", "rbps=x", "rbps=-1",
        "rbps=0x10", "rbps=2199023254529", "rrandiops=10000001", "foo=1", "rbps=1 rbps=2",
        "auto rbps=1 bogus")),
}


EINVAL = 22


def books_balanced(tiers: dict) -> bool:
    """Each request that entered prism left it exactly once: on an idle
    queue nothing is queued or in flight, and every request inserted was
    completed (finish_request, which the core runs for dispatched and
    merged-away requests alike)."""
    return all(t["queued"] == 0 and t["inflight"] == 0 and t["owned"] == 0
               and t["inserted"] == t["completed"] for t in tiers.values())


def running_6_1() -> bool:
    """Whether the guest runs 6.1, whose core hands the elevator what 6.12's
    keeps to itself (requeues of requests it never prepared, plugged
    passthrough): the checks of those paths expect the kernel's own way."""
    return os.uname().release.startswith("6.1.")


def conservation(dev: str) -> dict:
    """prism's books on an idle queue (see books_balanced). A request's
    bios complete a moment before the core finishes the request, and a
    test that wrote the whole disk leaves udev probing it (random data can
    look like a partition table, and on the emulated HDD each probe read
    costs a seek): settle udev, then retry an unbalanced read for up to
    ten seconds, which is still far below any hang."""
    g.sh("udevadm settle --timeout=10", check=False)
    for _ in range(200):
        tiers = g.prism_tiers(dev)
        if books_balanced(tiers):
            break
        time.sleep(0.05)
    return {"balanced": books_balanced(tiers), "tiers": tiers}


def verify_jobfile(dev: str, size_mb: int, runtime: int | None = None) -> str:
    """Mixed reads and writes at every priority class, each job in its own
    region, every written block checked with crc32c."""
    region = size_mb // 4
    common = (f"[global]\nfilename=/dev/{dev}\ndirect=1\nioengine=libaio\n"
              f"size={region - 4}M\nverify=crc32c\nverify_fatal=1\nverify_backlog=32\n"
              "do_verify=1\nrandrepeat=0\n")
    if runtime:
        common += f"time_based=1\nruntime={runtime}\n"
    jobs = [
        ("rt_randwrite", "prioclass=1\nprio=0\nrw=randwrite\nbs=4k\niodepth=4\n"),
        ("be_mixed", "prioclass=2\nprio=4\nrw=randwrite\nbsrange=4k-64k\niodepth=8\n"),
        ("idle_seqwrite", "prioclass=3\nrw=write\nbs=128k\niodepth=4\n"),
        ("be7_randread", "prioclass=2\nprio=7\nrw=randread\nbs=16k\niodepth=8\nverify=0\n"),
    ]
    text = common
    for i, (name, body) in enumerate(jobs):
        text += f"\n[{name}]\noffset={i * region}M\n{body}"
    return text


def run_verify(dev: str, size_mb: int, tag: str, runtime: int | None = None) -> dict:
    path = Path(os.environ.get("PRISM_RUNDIR", "/tmp")) / f"verify-{tag}.fio"
    path.write_text(verify_jobfile(dev, size_mb, runtime))
    report = g.fio(str(path), timeout=900)
    jobs = {j["jobname"]: {"error": j["error"],
                           "read_ios": j["read"]["total_ios"],
                           "write_ios": j["write"]["total_ios"]}
            for j in report["jobs"]}
    return {"jobs": jobs, "errors": sum(j["error"] for j in jobs.values())}


@contextlib.contextmanager
def repeating(period: float, action):
    """Run action(tick) (tick = 1, 2, ...) every @period seconds in a
    thread while the with-block runs; yields the list the results (each
    call returns a list) are gathered into. The thread has stopped when
    the block is left."""
    stop = threading.Event()
    results: list = []

    def loop():
        tick = 0
        while not stop.wait(period):
            tick += 1
            results.extend(action(tick))
    t = threading.Thread(target=loop)
    t.start()
    try:
        yield results
    finally:
        stop.set()
        t.join()


@contextlib.contextmanager
def rotational(dev: str, value: int):
    """@dev's queue flagged rotational (1) or not (0) in the block, which
    sets prism's order (sector order on rotational media, arrival order
    on flash: v3 has no sort_mode); yields the flag as it was, and puts
    it back on the way out."""
    path = g.SYS_BLOCK / dev / "queue" / "rotational"
    before = int(path.read_text())
    g.write_queue(dev, "rotational", value)
    try:
        yield before
    finally:
        g.write_queue(dev, "rotational", before)


def per_second_ios(log: Path, gaps: bool = False) -> list[int]:
    """Completions in each whole second from a fio iops log averaged over
    1000 ms (time ms, IOPS, direction, ...). The first and last entries are
    left out: the last second is partial, and the first covers fio's
    start-up (on 6.1 it once read 0 while the drive's trace showed 14 of
    the job's reads served in that second). With @gaps, an entry more than
    2 s after the one before (fio logs late while its job is stalled: 3 s
    apart when the IDLE reader of pacing_writeback_cloud starved; 1.0 s
    otherwise) counts as a second without I/O too. A logged 0 is one
    completion at least (stats.iops_per_second(): fio logs only intervals
    with completions, in whole IOPS, so one over 1,001 ms reads 0)."""
    secs = []
    last = None
    for line in log.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2 and f[0].isdigit():
            if gaps and last is not None and int(f[0]) - last > 2000:
                secs.append(0)
            last = int(f[0])
            secs.append(max(int(f[1]), 1))
    return secs[1:-1]


@contextlib.contextmanager
def fresh_ext4(dev: str, name: str, size: str):
    """A fresh ext4 of @size on /dev/@dev, mounted on ./@name (made under
    none, so no scheduler's tunables shape mkfs), unmounted afterwards
    however the block ends. Yields the mount point."""
    mnt = Path(name).resolve()
    mnt.mkdir(exist_ok=True)
    g.set_scheduler(dev, "none")
    g.sh(f"mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/{dev} {size}")
    g.sh(f"mount -t ext4 /dev/{dev} {mnt}")
    try:
        yield mnt
    finally:
        g.sh(f"umount {mnt}", check=False)


@contextlib.contextmanager
def dirty_background(nbytes: int):
    """The flusher's background threshold at @nbytes for the block, the
    kernel's own setting (a ratio, or bytes) back afterwards."""
    vm = Path("/proc/sys/vm")
    ratio = (vm / "dirty_background_ratio").read_text()
    old = (vm / "dirty_background_bytes").read_text()
    (vm / "dirty_background_bytes").write_text(f"{nbytes}\n")
    try:
        yield
    finally:
        if int(old):
            (vm / "dirty_background_bytes").write_text(old)
        else:
            (vm / "dirty_background_ratio").write_text(ratio)


def job(report: dict, name: str) -> dict:
    """One job's figures from a fio report (see stats.job_record). A job
    that completed no I/O (LOW starving, as the aging control expects)
    has no latency; the checks count that as 0."""
    rec = next(stats.job_record(j) for j in report["jobs"] if j["jobname"] == name)
    return {k: (0.0 if v is None and k.endswith("_us") else v) for k, v in rec.items()}


def contention_jobs(dev: str, high: str, low: str | None, runtime: int) -> list[str]:
    # exitall: when the first job ends the other is stopped, so a starved
    # job cannot run on alone afterwards and have its numbers look fine.
    # Without @low, the high job alone (its baseline).
    return ["--direct=1", "--ioengine=libaio", f"--runtime={runtime}", "--exitall",
            "--time_based=1", "--ramp_time=1", "--group_reporting=0",
            f"--filename=/dev/{dev}",
            "--name=high"] + high.split() + (["--name=low"] + low.split() if low else [])


# Scheduler tags for the contention checks. The kernel's default is twice
# the device depth (8 here), so most of a deep job's requests would wait
# in tag allocation, where no scheduler sees them; with more tags both jobs
# really queue in the scheduler, which is what these checks are about.
SCHED_TAGS = 64


def runs_mean(runs: list[dict], sched: str, job: str, key: str) -> float:
    """The mean of one job's figure over a contention check's runs under
    @sched (records {"sched", job name: job record})."""
    vals = [r[job][key] for r in runs if r["sched"] == sched]
    return sum(vals) / len(vals)


def wait_rc(p: subprocess.Popen, timeout: float) -> int:
    """@p's exit code, or -1 (and @p killed) if it has not exited within
    @timeout seconds."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return -1


def debugfs_kv(path: Path) -> dict[str, str]:
    """The key=value words of a blk-mq debugfs file such as hctx0/tags."""
    return dict(w.split("=", 1) for w in path.read_text().split() if "=" in w)
