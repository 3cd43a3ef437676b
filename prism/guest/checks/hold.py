"""Holds: anticipation of a commit chain, the direct lane, a hold that
parks the queue instead of polling, no hold while the protected tier
is short of tags, shared driver tags, and the NCQ disk's overdue hold."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from .. import system as g
from .helpers import (
    conservation,
    contention_jobs,
    fresh_ext4,
    job,
    per_second_ios,
)
from .registry import check


@check("anticipation_hdd")
def check_anticipation_hdd(ctx) -> dict:
    """Protects against an fsync chain stalled behind an IDLE reader on the HDD.

    A commit chain keeps its pace beside an IDLE reader on the HDD: a
    process appending 4 KiB with an fsync each (ext4, default priority)
    against a 1 MiB direct reader of the raw disk in the IDLE class
    (iodepth 16), at the kernel's default nr_requests. Between two links
    of a commit the database has nothing queued; without anticipation the
    next link waits behind a read. prism must complete at least twice as
    many fsyncs as none in the same boot (interleaved, twice each), the
    reader must complete I/O in every second under prism, and prism's
    books balance with nothing left in flight."""
    dev = ctx["hdd"]
    runs = []
    with fresh_ext4(dev, "hdd-fs", "256M") as mnt:
        for rep in range(2):
            for sched in ("none", "prism"):
                g.set_scheduler(dev, sched)
                log = Path(f"anticip-{sched}-{rep}")
                args = ["--exitall", "--time_based=1", "--runtime=5",
                        "--group_reporting=0",
                        "--name=commit", f"--directory={mnt}", "--rw=write",
                        "--bs=4k", "--size=16M", "--fsync=1", "--ioengine=psync",
                        "--name=reader", f"--filename=/dev/{dev}", "--direct=1",
                        "--rw=read", "--bs=1M", "--iodepth=16", "--ioengine=libaio",
                        "--prioclass=3", "--offset=100G", "--size=100G",
                        f"--write_iops_log={log}", "--log_avg_msec=1000"]
                rep_out = g.fio(args=args, timeout=300)
                commit = next(j for j in rep_out["jobs"] if j["jobname"] == "commit")
                rec = {"sched": sched, "rep": rep,
                       "fsyncs": commit["sync"]["total_ios"] if "sync" in commit
                       else commit["write"]["total_ios"],
                       "commit_write_ios": commit["write"]["total_ios"],
                       "reader_ios": job(rep_out, "reader")["ios"],
                       "reader_per_second": per_second_ios(
                           next(Path().glob(f"{log}_iops.*.log")))}
                if sched == "prism":
                    rec["books"] = conservation(dev)     # waits for the queue to drain
                    rec["flight"] = g.prism_flight(dev)
                runs.append(rec)

    def total(sched, key):
        return sum(r[key] for r in runs if r["sched"] == sched)
    ratio = total("prism", "fsyncs") / max(total("none", "fsyncs"), 1)
    prism_runs = [r for r in runs if r["sched"] == "prism"]
    reader_moves = all(r["reader_per_second"] and min(r["reader_per_second"]) > 0
                       for r in prism_runs)
    settled = all(r["books"]["balanced"] and r["flight"]["high"]["inflight"] == 0
                  and r["flight"]["normal"]["inflight"] == 0
                  and r["flight"]["low"]["inflight"] == 0 for r in prism_runs)
    return {"ok": ratio >= 2 and reader_moves and settled, "fsync_ratio": ratio,
            "fsyncs": {s: total(s, "fsyncs") for s in ("none", "prism")},
            "reader_ios": {s: total(s, "reader_ios") for s in ("none", "prism")},
            "reader_moves_every_second": reader_moves, "settled": settled, "runs": runs}


@check("direct_lane")
def check_direct_lane(ctx) -> dict:
    """Protects against the direct lane unused when alone or jumping ahead of a higher tier.

    The direct lane (requests queued while nothing else is go straight
    to dispatch, past the fair queue) on a null_blk taking 8 commands of
    0.1 ms: one reader at iodepth 4 alone has most of its dispatches from
    the lane; an IDLE reader (iodepth 4) beside an RT one (iodepth 1)
    almost none of its (the RT tier is in flight or anticipated whenever
    the IDLE request arrives), and it still completes I/O. Alone, the
    depth controller never cuts (nothing below the reader to limit: a cut
    there closed the lane on a slow host). Books balance after each
    run."""
    runs = {}
    base = ["--direct=1", "--ioengine=libaio", "--runtime=3", "--time_based=1",
            "--group_reporting=0", "--rw=randread", "--bs=4k", "--randrepeat=0"]
    with g.temporary_nullb("lane", depth=8, completion_us=100, size_mb=256) as dev:
        for name, jobs in (("alone", [("reader", 2, 4)]),
                           ("guarded", [("rt", 1, 1), ("idle", 3, 4)])):
            g.set_scheduler(dev, "prism")
            args = base + [f"--filename=/dev/{dev}"]
            for i, (job_name, cls, depth) in enumerate(jobs):
                # BE4 (NORMAL), RT0 (HIGH), IDLE (LOW)
                args += [f"--name={job_name}", f"--prioclass={cls}", "--prio=4" if cls == 2
                         else "--prio=0", f"--iodepth={depth}", f"--offset={i * 128}M",
                         "--size=128M"]
            rep = g.fio(args=args, timeout=120)
            books = conservation(dev)
            tiers = books["tiers"]
            runs[name] = {"ios": {j[0]: job(rep, j[0])["ios"] for j in jobs},
                          "direct": {t: v["direct"] for t, v in tiers.items()},
                          "dispatched": {t: v["dispatched"] for t, v in tiers.items()},
                          "batch": g.prism_batch(dev), "balanced": books["balanced"],
                          "controller": {k: v for k, v in g.prism_flight(dev).items()
                                         if not isinstance(v, dict)}}
        g.set_scheduler(dev, "none")
    alone, guarded = runs["alone"], runs["guarded"]
    alone_share = alone["direct"]["normal"] / max(alone["dispatched"]["normal"], 1)
    idle_share = guarded["direct"]["low"] / max(guarded["dispatched"]["low"], 1)
    alone_cuts = alone["controller"]["cuts"]
    ok = (alone_share >= 0.5 and idle_share <= 0.05 and guarded["ios"]["idle"] > 0
          and alone_cuts == 0 and all(r["balanced"] for r in runs.values()))
    return {"ok": ok, "alone_direct_share": round(alone_share, 3), "alone_cuts": alone_cuts,
            "idle_direct_share": round(idle_share, 3), "runs": runs}


@check("overdue_ncq")
def check_overdue_ncq(ctx) -> dict:
    """Protects against an NCQ disk starving a far read while an IDLE stream stays near the head.

    On a disk with NCQ (the emulated one: shortest positioning time first
    among its 32 oldest commands, no aging), a sparse reader at the default
    priority (4 KiB random reads, one at a time, 200 ms apart) beside an
    IDLE sequential reader (1 MiB, iodepth 32) whose stream keeps the head
    near it: a far read waits in the drive for as long as the stream offers
    nearer commands (8.6 s in a pgbench run). prism must hold the IDLE
    reader out while a request of a tier above is overdue in the device
    (prism_tier_stalled(): 100 ms), so the sparse reader completes its
    reads with the worst under a second, the IDLE reader moves,
    held_stalled counts and the books balance. none, in the same boot, for
    reference. Without the hold (measured on 6.12): no read of the sparse
    reader completed in 8 s, the stream at 174 MiB/s; with it 23, the
    worst in 317 ms, the stream at 153 MiB/s."""
    dev = ctx["hdd_ncq"]
    high = ("--rw=randread --bs=4k --iodepth=1 --prioclass=2 --prio=4 "
            "--thinktime=200000 --size=64G --offset=256G")
    low = "--rw=read --bs=1M --iodepth=32 --prioclass=3 --size=64G"
    runs = []
    for sched in ("none", "prism"):
        g.set_scheduler(dev, sched)
        out = g.fio(args=contention_jobs(dev, high, low, 8), timeout=300)
        rec: dict = {"sched": sched, "high": job(out, "high"), "low": job(out, "low")}
        if sched == "prism":
            rec["books"] = conservation(dev)
            rec["flight"] = g.prism_flight(dev)
        runs.append(rec)
    none, prism = runs
    worst_ms = prism["high"]["lat_max_us"] / 1000
    stalled = prism["flight"].get("held_stalled", 0)
    # A read that never completes has no latency: the reads must complete
    # too (one every 200 ms plus at most a second: at least 6 in 8 s).
    ok = (worst_ms < 1000 and prism["high"]["ios"] >= 6 and prism["low"]["ios"] > 0
          and stalled > 0 and prism["books"]["balanced"])
    return {"ok": ok, "worst_ms": {"none": none["high"]["lat_max_us"] / 1000,
                                   "prism": worst_ms},
            "high_ios": {"none": none["high"]["ios"], "prism": prism["high"]["ios"]},
            "low_mib_s": {r["sched"]: r["low"]["bw_kib"] / 1024 for r in runs},
            "held_stalled": stalled, "books": prism["books"]}


def scsi_debug_disks() -> list[str]:
    """The scsi_debug disks, by LUN."""
    disks = []
    for dev in sorted(g.SYS_BLOCK.glob("sd*")):
        model = dev / "device" / "model"
        if model.exists() and model.read_text().strip() == "scsi_debug":
            lun = int(os.path.realpath(dev / "device").rsplit(":", 1)[1])
            disks.append((lun, dev.name))
    return [name for _, name in sorted(disks)]


# The IDLE reader's pace in check_shared_tags: it submits on a clock,
# whatever completes, so its inserts keep running prism's dispatch.
SHARED_IDLE_IOPS = 200


@check("shared_tags")
def check_shared_tags(ctx) -> dict:
    """Protects against another disk's requests on shared driver tags restarting holds.

    Driver tags shared between disks are not flushes: two LUNs of one
    scsi_debug host (8 host tags of 0.5 ms, shared by both queues: the
    kernel flags them TAG_QUEUE_SHARED). On LUN 0 under prism (window
    20 ms), an RT chain (iodepth 1) for 3 s beside an IDLE reader
    submitting 200 reads a second, which runs on for 5 s more; LUN 1 is
    kept busy throughout. prism counts requests in the device it did not
    dispatch (flushes) from the driver tags in use, and a dispatch that
    sees one restarts the anticipation window of the chain it ends; with
    shared tags those would be LUN 1's requests, and each of the reader's
    inserts would restart RT's window, holding the reader until aging
    (10 s). The reader must keep at least half its pace in every whole
    second after RT stops, and the books balance."""
    g.sh("modprobe scsi_debug add_host=1 num_tgts=1 max_luns=2 dev_size_mb=256 "
         "ndelay=500000 max_queue=8")
    try:
        for _ in range(100):
            disks = scsi_debug_disks()
            if len(disks) == 2:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"scsi_debug gave disks {scsi_debug_disks()}, not 2")
        dev, other = disks
        g.sh("udevadm settle --timeout=10", check=False)
        g.set_scheduler(other, "none")
        g.set_scheduler(dev, "prism", {"slice_idle_us": 20000})
        busy = subprocess.Popen(
            ["fio", "--name=other", f"--filename=/dev/{other}", "--direct=1",
             "--rw=randread", "--bs=4k", "--iodepth=16", "--ioengine=libaio",
             "--time_based=1", "--runtime=12", "--output-format=json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        flags = (g.DEBUGFS / "block" / dev / "hctx0" / "flags").read_text()
        held_before = g.prism_flight(dev)["held_window"]
        log = Path("shared-idle")
        rep = g.fio(args=["--group_reporting=0", f"--filename=/dev/{dev}", "--direct=1",
                          "--ioengine=libaio", "--time_based=1",
                          "--name=rt", "--rw=randread", "--bs=4k", "--iodepth=1",
                          "--prioclass=1", "--runtime=3",
                          "--name=idle", "--rw=randread", "--bs=4k", "--iodepth=32",
                          f"--rate_iops={SHARED_IDLE_IOPS}", "--prioclass=3",
                          "--runtime=8", "--offset=128M",
                          f"--write_iops_log={log}", "--log_avg_msec=1000"],
                    timeout=120)
        busy.communicate(timeout=60)
        flight = g.prism_flight(dev)
        books = conservation(dev)
        g.set_scheduler(dev, "none")
        per_second = per_second_ios(next(Path().glob(f"{log}_iops.*.log")))
    finally:
        g.sh("rmmod scsi_debug", check=False)
    # per_second_ios() drops the first and the last second: index 3 is
    # the 5th second, the first whole one after RT's 3 s (and the window).
    after_rt = per_second[3:]
    shared = "TAG_QUEUE_SHARED" in flags
    ok = (shared and len(after_rt) >= 2 and min(after_rt) >= SHARED_IDLE_IOPS / 2
          and job(rep, "rt")["ios"] > 0 and books["balanced"])
    return {"ok": ok, "disks": disks, "hctx_flags": flags.strip(),
            "tags_shared": shared, "idle_per_second": per_second,
            "rt_ios": job(rep, "rt")["ios"], "idle_ios": job(rep, "idle")["ios"],
            "held_window": flight["held_window"] - held_before, **books}


# hold_parks: what "a hold polls" means in numbers. While prism holds
# every queued request back, blk-mq re-runs a queue whose dispatch
# returned nothing every 3 ms (BLK_MQ_BUDGET_DELAY): about 333 empty
# dispatches a second. Parked, a hold costs one or two a wake-up: here
# the RT reader's completion and its next read, 2 a second each.
PARK_EMPTY_PER_S_MAX = 10


PARK_WINDOW_S = 4


PARK_COMPLETION_US = 500000


def hctx_runs(dev: str) -> int | None:
    """blk-mq's count of queue runs over @dev's hardware queues (6.1's
    debugfs "run"; 6.12 has none: None)."""
    files = list((g.DEBUGFS / "block" / dev).glob("hctx*/run"))
    return sum(int(f.read_text()) for f in files) if files else None


@check("hold_parks")
def check_hold_parks(ctx) -> dict:
    """Protects against a hold that polls the queue with empty dispatches instead of parking.

    A hold parks the queue instead of polling it: on a null_blk of one
    slot that takes PARK_COMPLETION_US a request, an RT reader at iodepth
    1 keeps the device busy and an IDLE reader at iodepth 8 waits beside
    it (low_share 0: no share of LOW's wakes the queue), held for depth
    while the RT read is in the device and for the window after it.
    Over PARK_WINDOW_S, prism holds (debugfs flight's held_depth and
    held_window) and fewer than PARK_EMPTY_PER_S_MAX dispatches a second
    return nothing while requests are queued (empty_dispatches); the
    books balance once the readers end. blk-mq's queue runs a second are
    recorded where the kernel counts them (6.1), for comparison with
    kernels whose prism has no empty_dispatches."""
    with g.temporary_nullb("park", depth=1, completion_us=PARK_COMPLETION_US,
                           size_mb=1024, memory_backed=False) as dev:
        g.set_scheduler(dev, "prism", {"low_share": 0})
        g.write_queue(dev, "nr_requests", 64)
        rundir = Path(os.environ.get("PRISM_RUNDIR", "/tmp"))
        jobfile = rundir / "hold-parks.fio"
        jobfile.write_text(
            f"[global]\nfilename=/dev/{dev}\ndirect=1\nioengine=libaio\nrw=randread\n"
            f"bs=4k\ntime_based=1\nruntime={PARK_WINDOW_S + 4}\n\n"
            "[rt]\nprioclass=1\niodepth=1\n\n"
            "[idle]\nprioclass=3\niodepth=8\nstartdelay=1\n")
        fio = subprocess.Popen(["fio", "--output-format=json", str(jobfile)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        before, runs_before, t0 = g.prism_flight(dev), hctx_runs(dev), time.monotonic()
        low_queued = []
        while time.monotonic() - t0 < PARK_WINDOW_S:
            time.sleep(0.5)
            low_queued.append(g.prism_tiers(dev)["low"]["queued"])
        after, runs_after = g.prism_flight(dev), hctx_runs(dev)
        seconds = time.monotonic() - t0
        out, err = fio.communicate(timeout=120)
        books = conservation(dev)
        g.set_scheduler(dev, "none")
    rep = json.loads(out) if fio.returncode == 0 else {"jobs": []}
    ios = {j["jobname"]: j["read"]["total_ios"] for j in rep["jobs"]}
    delta = {k: after[k] - before[k] for k in ("empty_dispatches", "held_window",
                                             "held_depth", "window_runs")
             if k in after and k in before}
    empty_per_s = delta["empty_dispatches"] / seconds if "empty_dispatches" in delta else None
    runs_per_s = ((runs_after - runs_before) / seconds
                  if runs_before is not None and runs_after is not None else None)
    held = delta.get("held_depth", 0) + delta.get("held_window", 0)
    ok = (fio.returncode == 0 and held > 0 and max(low_queued) > 0
          and empty_per_s is not None and empty_per_s < PARK_EMPTY_PER_S_MAX
          and ios.get("rt", 0) > 0 and books["balanced"])
    return {"ok": ok, "empty_per_s": empty_per_s and round(empty_per_s, 1),
            "bound_per_s": PARK_EMPTY_PER_S_MAX,
            "runs_per_s": runs_per_s and round(runs_per_s, 1), "held": delta,
            "low_queued": low_queued, "window_s": round(seconds, 2), "ios": ios,
            "fio_error": err[-500:] if err else "", **books}


# The scenario of issue 40's defect 2: a null_blk of 64 slots of 5 ms,
# nr_requests 8, an RT reader that thinks 60 ms after every 50 reads and a
# BE7 reader at iodepth 64, the depth controller aiming at 1 ms.
TAGS_SHORT_THINK_US = 60000


# Pairs of runs, each alone then beside; the median pair's ratio is
# judged: one TCG stall in a run (7.3, 2026-12-03: the RT reader 31 ms in
# io_submit() while BE7 owned 4 of 8 tags) moved a mean of two to 2.95.
TAGS_SHORT_PAIRS = 3


TAGS_SHORT_P99_MAX = 2.0


def tags_short_run(dev: str, deep: bool) -> dict:
    """One run for check_tags_short: the RT reader alone or beside the
    deep BE7 one, on a fresh prism."""
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism", {"target_latency_us": 1000})
    g.write_queue(dev, "nr_requests", 8)
    args = ["--direct=1", "--ioengine=libaio", "--runtime=6", "--time_based=1",
            "--group_reporting=0", f"--filename=/dev/{dev}", "--rw=randread", "--bs=4k",
            "--lat_percentiles=1", "--exitall", "--name=rt", "--iodepth=1",
            "--prioclass=1", "--prio=0", f"--thinktime={TAGS_SHORT_THINK_US}",
            "--thinktime_blocks=50"]
    if deep:
        # A second after the RT reader: what is checked is its return
        # from thinking, not which of two new readers fio starts first.
        args += ["--name=be7", "--iodepth=64", "--prioclass=2", "--prio=7",
                 "--offset=512M", "--startdelay=1"]
    before = g.prism_flight(dev)
    rep = g.fio(args=args, timeout=120)
    after = g.prism_flight(dev)
    rt = job(rep, "rt")
    slat = next(j for j in rep["jobs"] if j["jobname"] == "rt")["read"]["slat_ns"]
    # Submission included (lat, not clat): a reader short of a tag waits
    # in io_submit(), in tag allocation (slat).
    out = {"rt_p99_us": rt["p99_us"], "rt_ios": rt["ios"],
           "rt_slat_mean_us": round(slat["mean"] / 1000, 1),
           "rt_slat_max_us": round(slat["max"] / 1000, 1),
           "low_max_owned": g.prism_tiers(dev)["low"]["max_owned"],
           "balanced": conservation(dev)["balanced"]}
    for k in ("held_window", "held_depth", "held_paced", "tags_short"):
        if k in after:
            out[k] = after[k] - before.get(k, 0)
    if deep:
        out["be7_ios"] = job(rep, "be7")["ios"]
    return out


@check("tags_short")
def check_tags_short(ctx) -> dict:
    """Protects against a hold for a tier that cannot get a scheduler tag anyway.

    No hold while the tier it protects cannot get a scheduler tag
    (issue 40, defect 2). In the scenario above the RT reader's think time
    let the BE7 reader take every scheduler tag (the reserve lapsed at 50
    ms, the holds at 100); a hold for RT then kept BE7's requests, and so
    the tags RT waits for, out of the device. With the reserve on the
    holds' activity clock BE7 keeps to its part of the tags, and a hold is
    waived while RT cannot allocate (debugfs flight's tags_short counts
    the waivers); the RT reader's P99 beside BE7 stays within
    TAGS_SHORT_P99_MAX of its P99 alone (the median of three pairs, in
    one boot, runs interleaved); BE7 keeps moving."""
    dev = ctx["nullb_tags"]
    runs = []
    for _ in range(TAGS_SHORT_PAIRS):
        runs.append({"deep": False, **tags_short_run(dev, False)})
        runs.append({"deep": True, **tags_short_run(dev, True)})
    g.set_scheduler(dev, "none")
    alone = [r["rt_p99_us"] for r in runs if not r["deep"]]
    beside = [r["rt_p99_us"] for r in runs if r["deep"]]
    ratios = sorted(b / max(1.0, a) for a, b in zip(alone, beside, strict=True))
    ratio = ratios[len(ratios) // 2]
    # The tag reserve covers the RT reader's think time (the holds' clock):
    # BE7 never owns more than low_depth (50%) of the 8 tags, one of slack
    # for the allocation that raced the RT reader's return.
    owned_max = max(r["low_max_owned"] for r in runs if r["deep"])
    ok = (ratio <= TAGS_SHORT_P99_MAX and owned_max <= 8 * 50 // 100 + 1
          and all(r["balanced"] and r["rt_ios"] > 0 for r in runs)
          and all(r["be7_ios"] > 0 for r in runs if r["deep"]))
    return {"ok": ok, "p99_ratio": round(ratio, 2), "pair_ratios": [round(r, 2) for r in ratios],
            "bound": TAGS_SHORT_P99_MAX, "low_max_owned": owned_max, "runs": runs}
