"""Every request's way through prism, data checked: verified writes while
the sort order flips, tiers remapped under merging writes, discards,
NVMe passthrough and driver requeues; the books balance after each."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .. import system as g
from .helpers import (
    COST_DEFAULT,
    SCHED_TAGS,
    conservation,
    job,
    repeating,
    rotational,
    run_verify,
    running_6_1,
)
from .registry import check


def queue_write_rc(dev: str, name: str, value) -> int:
    """Write a queue attribute; 0 or the errno (for repeating())."""
    return g.write_rc(g.SYS_BLOCK / dev / "queue" / name, f"{value}\n")


# Tunables away from their defaults, for the verify checks: data must
# survive whatever they are set to.
VERIFY_TUNABLES: dict[str, dict[str, int | str]] = {
    "virtio": {"cost_model": COST_DEFAULT.replace("fixed", "auto")},
    "nvme": {"cost_model": "fixed rbps=102400000 rseqiops=0 rrandiops=200 wbps=92160000 "
                           "wseqiops=0 wrandiops=150",
             "low_rate_kbps": 102400, "slice_idle_us": 1000,
             "writeback_low": 0, "bulk_merge_kb": 64},
}


def check_verify(ctx, devkey: str) -> dict:
    """Data written under prism reads back intact (fio crc32c) from jobs
    at every class, while the queue's rotational flag flips (and with it
    sector order: the sort trees are rebuilt), with some devices'
    tunables away from their defaults; every request leaves the books."""
    dev = ctx[devkey]
    tunables = VERIFY_TUNABLES.get(devkey, {})
    g.set_scheduler(dev, "prism", tunables)
    g.prism_latency_keep(dev)           # their path under verification too
    set_ok = all(g.read_tunable(dev, k) == str(v) for k, v in tunables.items())
    # The order switch (tree rebuild) while I/O runs: sorted, not, sorted...
    with rotational(dev, 1):
        with repeating(0.5, lambda tick: [queue_write_rc(dev, "rotational",
                                                         tick % 2)]) as flips:
            res = run_verify(dev, ctx["size_mb"][devkey], devkey)
    books = conservation(dev)
    tiers = books["tiers"]
    classified = all(tiers[t]["inserted"] > 0 for t in ("high", "normal", "low"))
    ok = (res["errors"] == 0 and books["balanced"] and classified and set_ok
          and all(f == 0 for f in flips) and len(flips) > 0)
    return {"ok": ok, "device": dev, "tunables": tunables, "order_flips": len(flips),
            "every_tier_used": classified, **res, **books}


@check("verify_virtio")
def check_verify_virtio(ctx) -> dict:
    """Protects against corrupted data on virtio as sort order flips, cost_model=auto."""
    return check_verify(ctx, "virtio")


@check("verify_nullb")
def check_verify_nullb(ctx) -> dict:
    """Protects against corrupted data on null_blk as sort order flips (check_verify)."""
    return check_verify(ctx, "nullb_verify")


@check("verify_nvme")
def check_verify_nvme(ctx) -> dict:
    """Protects against corrupted data on NVMe as sort order flips, five tunables changed."""
    return check_verify(ctx, "nvme")


def discard_jobfile(dev: str, size_mb: int, verify: bool = True) -> str:
    """Discards of every kind (random trims, trim-then-write, sequential
    trims) at all three priority classes, batched so that several form in
    one plug and merge at insert, beside verified writes and reads, each
    job in its own region."""
    region = size_mb // 4
    text = (f"[global]\nfilename=/dev/{dev}\ndirect=1\nioengine=libaio\n"
            f"size={region - 4}M\nruntime=6\ntime_based=1\nrandrepeat=0\n"
            "iodepth_batch_submit=8\niodepth_batch_complete_min=1\n")
    jobs = [
        ("randtrim_rt", "prioclass=1\nrw=randtrim\nbsrange=4k-128k\niodepth=32\n"),
        ("trimwrite_be", "prioclass=2\nprio=4\nrw=trimwrite\nbs=64k\niodepth=16\n"),
        ("verify_idle", "prioclass=3\nrw=randwrite\nbs=16k\niodepth=8\n"
                        + ("verify=crc32c\nverify_fatal=1\nverify_backlog=32\n"
                           "time_based=0\nruntime=0\nsize=24M\n" if verify else "")),
        ("seqtrim_be7", "prioclass=2\nprio=7\nrw=trim\nbs=32k\niodepth=32\n"),
    ]
    for i, (name, body) in enumerate(jobs):
        text += f"\n[{name}]\noffset={i * region}M\n{body}"
    return text


def disk_stat(dev: str) -> dict:
    """The kernel's per-disk counters (Documentation/block/stat.rst)."""
    f = [int(x) for x in (g.SYS_BLOCK / dev / "stat").read_text().split()]
    return {"reads": f[0], "writes": f[4], "discards": f[11] if len(f) > 11 else 0,
            "discard_merges": f[12] if len(f) > 12 else 0}


def nvme_generic(dev: str) -> Path | None:
    """The generic char device of block namespace @dev: ng<controller>n<ns>,
    where the block name is nvme<subsystem>n<ns> (the two numbers differ
    once there are two controllers, as here)."""
    ctrl = (g.SYS_BLOCK / dev / "device").resolve()
    ns = dev.rsplit("n", 1)[1]
    for ng in sorted(Path("/sys/class/nvme-generic").glob(f"ng*n{ns}")):
        if (ng / "device").resolve() == ctrl:
            return Path("/dev") / ng.name
    return None


@check("passthrough_nvme")
def check_passthrough_nvme(ctx) -> dict:
    """Protects against plugged NVMe passthrough left in a tier's FIFO behind a hold or cap.

    NVMe passthrough (fio's io_uring_cmd engine on the namespace's
    character device), submitted eight at a time so that io_uring plugs:
    6.1's blk_execute_rq_nowait() then puts each request on the plug, and
    the plug's flush hands it to insert_requests() prepared, like file
    system I/O, where the core sends other passthrough straight to the
    dispatch list. prism serves those at head, never from a tier's FIFO
    where a hold or a cap could keep them (found in review): on 6.1 its
    tiers count them (passthrough == inserted over the run, and some
    were). 6.12 keeps passthrough away from the elevator: nothing is
    inserted. The books balance either way.

    Some commands fail with EFAULT ("Bad address") on both kernels and
    under every scheduler, none included (seen 2026-11-28 in this boot,
    never in a boot with one NVMe disk; more when fio waits for eight
    completions before submitting again): not prism's, cause not found
    (fio 3.33's io_uring_cmd, io_uring or QEMU's NVMe). fio goes on past
    them (continue_on_error=all) and the result counts them."""
    dev = ctx["nvme"]
    chardev = nvme_generic(dev)
    if chardev is None:
        return {"ok": False, "error": f"no NVMe generic char device (/dev/ng*) for {dev}"}
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism")
    before = g.prism_tiers(dev)
    r = subprocess.run(["fio", "--output-format=json", "--name=pt", f"--filename={chardev}",
                        "--ioengine=io_uring_cmd", "--cmd_type=nvme", "--rw=randread",
                        "--bs=4k", "--iodepth=16", "--iodepth_batch_submit=8",
                        "--iodepth_batch_complete_min=1", "--size=32M", "--runtime=3",
                        "--time_based", "--continue_on_error=all"],
                       text=True, capture_output=True, timeout=120)
    rep = g.parse_fio_json(r.stdout)
    failed = r.stderr.count("io_u error")
    books = conservation(dev)
    after = books["tiers"]
    inserted = sum(after[t]["inserted"] - before[t]["inserted"] for t in after)
    passthrough = sum(after[t]["passthrough"] - before[t]["passthrough"] for t in after)
    ios = job(rep, "pt")["ios"]
    on_61 = running_6_1()
    if on_61:
        served = 0 < passthrough == inserted
    else:
        served = inserted == 0 and passthrough == 0
    return {"ok": ios > 0 and served and books["balanced"], "kernel_6_1": on_61,
            "ios": ios, "failed_in_io_uring": failed, "fio_rc": r.returncode,
            "inserted": inserted, "passthrough_at_head": passthrough}


@check("discard")
def check_discard(ctx) -> dict:
    """Protects against discards (multi-range, merged at insert) unbalancing the books.

    Discards under prism on devices with multi-range discard (QEMU's
    NVMe, 256 segments, too fast under TCG for much to queue; prism's
    test disk, 64 segments and 4 slots, where discards queue and merge at
    insert) and on null_blk with discard=1: fio trims mixed
    with verified writes, then blkdiscard in small steps from two processes
    at once; the books balance, and switching away (exit_sched checks the
    books again, a WARN in the kernel log otherwise) is clean."""
    out = {}
    for key in ("nvme", "nullb_discard", "testblk"):
        dev = ctx[key]
        q = g.SYS_BLOCK / dev / "queue"
        g.set_scheduler(dev, "prism")
        before = disk_stat(dev)
        path = Path(os.environ.get("PRISM_RUNDIR", "/tmp")) / f"discard-{key}.fio"
        # The test disk keeps no data: nothing to verify there.
        path.write_text(discard_jobfile(dev, ctx["size_mb"][key], verify=key != "testblk"))
        rep = g.fio(str(path), timeout=600)
        errors = sum(j["error"] for j in rep["jobs"])
        trims = sum(j.get("trim", {}).get("total_ios", 0) for j in rep["jobs"])
        # blkdiscard (it opens the disk exclusively: one at a time) in
        # 64 KiB steps, then a whole region at once, under a fresh
        # instance (switching away checks fio's books): its flows are
        # blkdiscard's alone.
        g.set_scheduler(dev, "none")
        g.set_scheduler(dev, "prism")
        blk = [g.sh(f"blkdiscard -o 0 -l 16M -p 65536 /dev/{dev}", check=False),
               g.sh(f"blkdiscard -o 16M -l 32M /dev/{dev}", check=False)]
        blk_ok = all(r.returncode == 0 for r in blk)
        after = disk_stat(dev)
        books = conservation(dev)
        # A discard moves no data: it costs a command, not its length
        # (charged by length, the 32 MiB one cost 84 ms of the flash
        # model's time, and a capped tier waited that long for it).
        flows = [f for f in g.prism_flows(dev) if f["dispatched"]]
        cost_per_discard_us = max((f["cost_us"] / f["dispatched"] for f in flows), default=0)
        g.set_scheduler(dev, "none")
        out[key] = {"device": dev, "errors": errors, "fio_trims": trims,
                    "blkdiscard_ok": blk_ok,
                    "blkdiscard_stderr": [r.stderr.strip() for r in blk if r.returncode],
                    "max_discard_segments": int(q.joinpath("max_discard_segments")
                                                .read_text()),
                    "discards": after["discards"] - before["discards"],
                    "discard_merges": after["discard_merges"] - before["discard_merges"],
                    "cost_per_discard_us": cost_per_discard_us, **books}
    ok = all(o["errors"] == 0 and o["fio_trims"] > 0 and o["blkdiscard_ok"]
             and o["discards"] > 0 and o["balanced"] for o in out.values())
    # Requests merged away at insert (inserted, never dispatched), with or
    # without requests_merged(): recorded, not asserted. fio and blkdiscard
    # issue discards one ioctl at a time per thread, and no device here
    # both takes multi-range discards and is slow enough for them to
    # queue, so few if any merge in the scheduler.
    for o in out.values():
        o["merged_at_insert"] = sum(t["inserted"] - t["dispatched"] for t in o["tiers"].values())
    ok = (ok and out["nvme"]["max_discard_segments"] > 1
          and 0 < out["nullb_discard"]["cost_per_discard_us"] <= 1000)
    return {"ok": ok, **out}


@check("mapping_flips")
def check_mapping_flips(ctx) -> dict:
    """Protects against a merge moving a request onto another tier's FIFO as be_tiers flips.

    be_tiers flips between 3 and 1 every 10 ms, moving every job between
    tiers, while jobs at the BE levels on either side of the three tiers'
    cut-offs write small random blocks into small regions, so requests
    merge at insert and by bio, often with a neighbour classified under
    the other mapping. A merge must never move
    a request onto another tier's FIFO: the books balance and dispatch
    never finds a tier's count and list disagreeing (a WARN)."""
    dev = ctx["nullb"]
    # Sector order (the device flagged rotational): merges find their
    # neighbours through the sort trees too.
    with rotational(dev, 1):
        g.set_scheduler(dev, "prism")
        g.write_queue(dev, "nr_requests", SCHED_TAGS)

        def flip(tick):
            return [g.write_tunable(dev, "be_tiers", 3 if tick % 2 else 1)]
        args = ["--direct=1", "--ioengine=libaio", "--runtime=8", "--time_based=1",
                "--group_reporting=0", f"--filename=/dev/{dev}", "--rw=randwrite",
                "--bs=4k", "--size=256k", "--norandommap=1", "--iodepth=32",
                "--iodepth_batch_submit=16", "--randrepeat=0"]
        for i, level in enumerate((1, 2, 6, 7)):
            args += [f"--name=be{level}", "--prioclass=2", f"--prio={level}",
                     f"--offset={i * 64}M"]
        with repeating(0.01, flip) as flips:
            rep = g.fio(args=args, timeout=300)
        books = conservation(dev)
        tiers = books["tiers"]
        merged = sum(tt["merged"] for tt in tiers.values())
        g.set_scheduler(dev, "prism")       # defaults again for the checks after
    # Enough merges to have crossed the mappings many times: 67-78 on 6.1
    # and 6.12 (2026-12-04) with be_tiers flipping, where every job changes
    # tier at each flip and, with all four in one tier, the disk idles for
    # each process in turn (v2's flips moved two jobs: 130-185 merges).
    ok = (books["balanced"] and all(f == 0 for f in flips) and len(flips) > 100
          and merged > 40 and all(j["error"] == 0 for j in rep["jobs"]))
    return {"ok": ok, "flips": len(flips), "merged": merged,
            "writes": sum(j["write"]["total_ios"] for j in rep["jobs"]), **books}


@check("requeue")
def check_requeue(ctx) -> dict:
    """Protects against driver requeues with stale elevator data corrupting prism's state.

    Driver requeues come back through prism's insert: prism's test disk
    (tests/kmod/prism_testblk.c) requeues every 7th request after writing
    garbage where rq->rb_node lives (a union with the driver's
    special_vec), with sort trees on; O_DSYNC writes carry FUA, which 6.1
    never prepares, so there its requeues arrive with stale elevator data
    ("foreign"). Reads, writes, FUA writes and discards at all classes;
    the books balance and the kernel log stays clean."""
    dev = ctx["testblk"]
    every = Path("/sys/module/prism_testblk/parameters/requeue_every")
    before = int((g.SYS_BLOCK / dev / "requeued").read_text())
    every.write_text("7\n")
    try:
        # Sorted (the device flagged rotational), so that requests sit in
        # the sort trees whose node the driver's union overwrites.
        with rotational(dev, 1):
            g.set_scheduler(dev, "prism")
            g.write_queue(dev, "nr_requests", 32)
            common = ["--direct=1", "--ioengine=libaio", "--runtime=5", "--time_based=1",
                      f"--filename=/dev/{dev}", "--group_reporting=0", "--size=32M"]
            jobs = [["--name=rt_read", "--rw=randread", "--bs=4k", "--iodepth=16",
                     "--prioclass=1"],
                    ["--name=be_write", "--rw=randwrite", "--bsrange=4k-64k", "--iodepth=16",
                     "--prioclass=2", "--prio=4", "--offset=64M"],
                    ["--name=idle_fua", "--rw=write", "--bs=8k", "--iodepth=8", "--sync=dsync",
                     "--prioclass=3", "--offset=128M"],
                    ["--name=be7_trim", "--rw=randtrim", "--bs=16k", "--iodepth=8",
                     "--prioclass=2", "--prio=7", "--offset=192M"]]
            rep = g.fio(args=common + [a for j in jobs for a in j], timeout=300)
            books = conservation(dev)
            tiers = books["tiers"]
            driver_requeues = int((g.SYS_BLOCK / dev / "requeued").read_text()) - before
            g.set_scheduler(dev, "none")
    finally:
        every.write_text("0\n")
    requeued = sum(t["requeued"] for t in tiers.values())
    foreign = sum(t["foreign"] for t in tiers.values())
    on_61 = running_6_1()
    ok = (books["balanced"] and driver_requeues > 0 and requeued > 0
          and all(j["error"] == 0 for j in rep["jobs"])
          and (foreign > 0 if on_61 else foreign == 0))
    return {"ok": ok, "driver_requeues": driver_requeues, "prism_requeued": requeued,
            "foreign": foreign, "kernel_6_1": on_61,
            "ios": {j["jobname"]: j["read"]["total_ios"] + j["write"]["total_ios"]
                    + j.get("trim", {}).get("total_ios", 0) for j in rep["jobs"]},
            **books}
