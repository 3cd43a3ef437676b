"""Priority between tiers: HIGH before LOW, aging, LOW's share and its
sweep in sector order, bulk merges capped under a higher tier, and
the latency histograms that count it all."""

from __future__ import annotations

import math

from ...common import stats
from .. import system as g
from .helpers import (
    SCHED_TAGS,
    conservation,
    contention_jobs,
    job,
    rotational,
    runs_mean,
)
from .registry import check


@check("bulk_merge")
def check_bulk_merge(ctx) -> dict:
    """Protects against a lower tier's merged requests growing past bulk_merge_kb under load.

    bulk_merge_kb keeps a lower tier's requests small while a tier
    above it is active, on flash: an IDLE sequential reader (128 KiB,
    iodepth 16) beside an RT random reader (4 KiB, iodepth 2) on a
    null_blk taking 4 commands of 1 ms, up to 1 MiB each (its default
    max_sectors splits 128 KiB reads). Uncapped its queued reads merge
    (bytes per dispatch from the flows file at least 1.5x 128 KiB: how
    many reads wait together depends on the guest's timing, 1.8x to over
    2x here, with nr_requests 8); capped at 128 KiB they stay within it,
    save plug merges, which do not ask the scheduler (at most 1.25x).
    Both readers complete I/O and the books balance."""
    runs = {}
    args = ["--direct=1", "--ioengine=libaio", "--runtime=4", "--time_based=1",
            "--group_reporting=0", "--randrepeat=0",
            "--name=rt", "--prioclass=1", "--prio=0", "--rw=randread", "--bs=4k",
            "--iodepth=2", "--offset=0", "--size=128M",
            "--name=bulk", "--prioclass=3", "--rw=read", "--bs=128k", "--iodepth=16",
            "--offset=128M", "--size=128M"]
    with g.temporary_nullb("bulkmerge", depth=4, completion_us=1000, size_mb=256,
                           extra={"max_sectors": 2048}) as dev:
        for cap in (0, 128):
            g.set_scheduler(dev, "none")
            g.set_scheduler(dev, "prism", {"bulk_merge_kb": cap})
            rep = g.fio(args=[f"--filename=/dev/{dev}"] + args, timeout=120)
            low = [f for f in g.prism_flows(dev) if f["tier"] == "low"]
            dispatched = sum(f["dispatched"] for f in low)
            runs[cap] = {"bytes_per_dispatch": sum(f["bytes"] for f in low) // max(dispatched, 1),
                         "dispatched": dispatched,
                         "ios": {j: job(rep, j)["ios"] for j in ("rt", "bulk")},
                         "balanced": conservation(dev)["balanced"]}
        g.set_scheduler(dev, "none")
    free, capped = runs[0], runs[128]
    ok = (free["bytes_per_dispatch"] >= 1.5 * 128 * 1024
          and 0 < capped["bytes_per_dispatch"] <= 1.25 * 128 * 1024
          and all(r["ios"]["rt"] > 0 and r["ios"]["bulk"] > 0 and r["balanced"]
                  for r in runs.values()))
    return {"ok": ok, "runs": runs}


@check("priority_latency")
def check_priority_latency(ctx, devkey: str = "nullb") -> dict:
    """Protects against HIGH not served before LOW on a depth-limited null_blk.

    HIGH is served before LOW when both queue on a depth-limited
    device: the high-priority job's mean latency under prism against
    none, same boot, interleaved, twice each. On null_blk (2 slots of
    5 ms) and on the metered NVMe disk (400 IOPS, one tag per queue, two
    hardware queues)."""
    dev = ctx[devkey]
    high = "--rw=randread --bs=4k --iodepth=4 --prioclass=2 --prio=1"
    low = "--rw=read --bs=128k --iodepth=16 --prioclass=2 --prio=7 --offset=1G"
    runs: list[dict] = []
    for rep in range(2):
        for sched in ("none", "prism"):
            g.set_scheduler(dev, sched)
            if sched != "none":
                g.write_queue(dev, "nr_requests", SCHED_TAGS)
            rep_out = g.fio(args=contention_jobs(dev, high, low, 4), timeout=300)
            hi = job(rep_out, "high")
            lo = job(rep_out, "low")
            rec = {"sched": sched, "rep": rep, "high": hi, "low": lo}
            if sched == "prism":
                rec["books"] = conservation(dev)
            runs.append(rec)

    def mean(sched, key, job="high"):
        return runs_mean(runs, sched, job, key)
    none_lat = mean("none", "lat_mean_us")
    prism_lat = mean("prism", "lat_mean_us")
    ratio = prism_lat / none_lat if none_lat else float("inf")
    balanced = all(r["books"]["balanced"] for r in runs if "books" in r)
    return {"ok": ratio < 0.8 and balanced,
            "high_lat_mean_us": {"none": none_lat, "prism": prism_lat},
            "high_clat_mean_us": {"none": mean("none", "clat_mean_us"),
                                  "prism": mean("prism", "clat_mean_us")},
            "high_p99_us": {"none": mean("none", "clat_p99_us"),
                            "prism": mean("prism", "clat_p99_us")},
            "low_iops": {"none": mean("none", "iops", "low"),
                         "prism": mean("prism", "iops", "low")},
            "ratio": ratio, "runs": runs}


@check("priority_latency_nvme")
def check_priority_latency_nvme(ctx) -> dict:
    """Protects against HIGH not served before LOW on the metered NVMe disk."""
    return check_priority_latency(ctx, "nvme_slow")


@check("aging")
def check_aging(ctx) -> dict:
    """Protects against LOW starving while HIGH saturates the device (prio_aging_expire).

    A LOW job keeps completing I/O while HIGH saturates the device: with
    prio_aging_expire at 250 ms every LOW request is served by aging
    within a bounded wait; with aging off (the control) it starves."""
    dev = ctx["nullb"]
    high = "--rw=randread --bs=4k --iodepth=32 --prioclass=1 --prio=0"
    low = "--rw=randread --bs=4k --iodepth=1 --prioclass=3 --offset=1G"
    out = {}
    for aging_ms in (250, 0):
        g.set_scheduler(dev, "none")    # a fresh prism instance, fresh counters
        # Aging alone: LOW's share would serve it sooner (check_share).
        g.set_scheduler(dev, "prism", {"prio_aging_expire": aging_ms, "low_share": 0})
        g.write_queue(dev, "nr_requests", SCHED_TAGS)
        rep = g.fio(args=contention_jobs(dev, high, low, 6), timeout=300)
        tiers = g.prism_tiers(dev)
        low_stats = job(rep, "low")
        out[aging_ms] = {"low_ios": low_stats["ios"],
                         "low_lat_max_ms": low_stats["lat_max_us"] / 1000,
                         "high_ios": job(rep, "high")["ios"],
                         "low_aged": tiers["low"]["aged"],
                         "tiers": tiers,
                         "balanced": conservation(dev)["balanced"]}
    g.write_tunable(dev, "prio_aging_expire", 10000)
    on, off = out[250], out[0]
    # 6 s of 250 ms waits: about 24 LOW requests, each waiting at most the
    # aging time plus a few device services (5 ms each) and TCG slack.
    ok = (on["low_ios"] >= 5 and on["low_aged"] >= on["low_ios"] // 2
          and on["low_lat_max_ms"] < 1000 and off["low_aged"] == 0
          and on["low_ios"] > 2 * off["low_ios"]
          and on["balanced"] and off["balanced"])
    return {"ok": ok, "aging_250ms": on, "aging_off": off}


@check("share")
def check_share(ctx) -> dict:
    """Protects against a waiting LOW tier getting other than low_share of the device's time.

    A waiting LOW tier gets its share of the device's time while HIGH
    saturates it: with aging off, LOW's part of the cost prism dispatched
    (estimated device time, from prism's own flows, so no timing) is
    low_share percent, and with low_share 0 LOW gets only what HIGH's
    empty queue leaves at fio's start and end. Counted in
    cost, LOW's 128 KiB reads get far fewer than low_share percent of the
    dispatches beside HIGH's 4 KiB ones."""
    dev = ctx["nullb"]
    high = "--rw=randread --bs=4k --iodepth=32 --prioclass=1 --prio=0"
    low = "--rw=read --bs=128k --iodepth=8 --prioclass=2 --prio=7 --offset=1G"
    out = {}
    for share in (10, 30, 0):
        g.set_scheduler(dev, "none")    # a fresh prism instance, fresh counters
        g.set_scheduler(dev, "prism", {"prio_aging_expire": 0, "low_share": share})
        g.write_queue(dev, "nr_requests", SCHED_TAGS)
        rep = g.fio(args=contention_jobs(dev, high, low, 5), timeout=300)
        tiers = g.prism_tiers(dev)
        hi, lo = tiers["high"]["dispatched"], tiers["low"]["dispatched"]
        flows = g.prism_flows(dev)
        cost = {t: sum(f["cost_us"] for f in flows if f["tier"] == t)
                for t in ("high", "low")}
        low_bytes = sum(f["bytes"] for f in flows if f["tier"] == "low")
        total = cost["high"] + cost["low"]
        low_part = cost["low"] / total if total else 0.0
        out[share] = {"low_part": low_part,
                      # The part its share dispatches took (LOW's requests
                      # are alike), without those made while HIGH's queue
                      # was empty at fio's start and end.
                      "low_shared_part": low_part * tiers["low"]["shared"]
                      / max(lo, 1),
                      "low_dispatch_part": lo / (hi + lo) if hi + lo else 0.0,
                      "cost_us": cost,
                      "low_request_kib": low_bytes / 1024 / max(lo, 1),
                      "low_shared": tiers["low"]["shared"], "low_dispatched": lo,
                      "high_dispatched": hi, "low_ios": job(rep, "low")["ios"],
                      "high_ios": job(rep, "high")["ios"], "tiers": tiers,
                      "balanced": conservation(dev)["balanced"]}
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism")       # defaults again for the checks after
    # HIGH keeps about 30 requests queued on a 2-slot device, so LOW is
    # served only by its share, except for what it dispatches while HIGH's
    # queue is empty at fio's start and end: at most its depth (8 reads of
    # 128 KiB) each time, in as many requests as the device's size limit
    # splits them into (LOW's mean request size, from prism's flows), and
    # a deadline expiry or two. Each of those weighs many of HIGH's in
    # cost, so they are left out of the part (low_shared_part) and bounded
    # by count instead.
    def unshared_max(o):
        return math.ceil(2 * 8 * 128 / max(o["low_request_kib"], 4)) + 2

    def unshared(o):
        return o["low_dispatched"] - o["low_shared"]
    ok = (all(abs(out[s]["low_shared_part"] - s / 100) < 0.03 and out[s]["low_ios"] > 0
              and unshared(out[s]) <= unshared_max(out[s]) for s in (10, 30))
          and out[0]["low_shared"] == 0 and unshared(out[0]) <= unshared_max(out[0])
          and all(o["balanced"] for o in out.values()))
    return {"ok": ok, **{f"low_share_{s}": o for s, o in out.items()}}


@check("latency_hist")
def check_latency_hist(ctx) -> dict:
    """Protects against latency histograms that miscount, accept bad writes or count when off.

    prism's latency histograms (debugfs "latency") on null_blk with 2
    slots of 5 ms: a BE7 random reader at iodepth 8 beside an RT random
    writer at iodepth 1. Every request prism dispatched is in a wait
    bucket and every one that completed in a device bucket, per tier
    (against the tiers' own counters); device times sit at the device's
    5 ms; the RT writes wait less than the BE7 reads, which queue behind
    them. Writing anything but 0 or 1 is refused and changes nothing; 1
    empties them and keeps counting, 0 empties them and stops: a run after
    it counts nothing. Off at first, they count nothing: a first run of
    the same jobs, for 1 s, leaves them empty."""
    dev = ctx["nullb"]
    g.set_scheduler(dev, "prism")

    def jobs(seconds: int) -> None:
        common = [f"--filename=/dev/{dev}", "--direct=1", "--ioengine=libaio", "--bs=4k",
                  f"--runtime={seconds}", "--time_based"]
        g.fio(args=["--name=low", "--rw=randread", "--iodepth=8", "--prioclass=2",
                    "--prio=7", *common, "--name=high", "--rw=randwrite", "--iodepth=1",
                    "--prioclass=1", "--prio=4", *common], timeout=120)
    jobs(1)
    off = g.prism_tiers(dev)
    off_dispatched = sum(t["dispatched"] for t in off.values())
    off_empty = not g.prism_latency(dev)["hists"] and off_dispatched > 0
    g.prism_latency_keep(dev)
    jobs(4)
    lat = g.prism_latency(dev)
    # What the tiers counted since the histograms were turned on.
    tiers = {t: {k: v - off[t][k] for k, v in c.items() if k in ("dispatched", "completed")}
             for t, c in g.prism_tiers(dev).items()}

    def count(kind: str, tier: str) -> int:
        return sum(sum(h.values()) for k, h in lat["hists"].items()
                   if k.startswith(f"{kind} {tier} "))

    def p50(kind: str, key: str) -> float | None:
        q = stats.hist_quantile(lat["bounds_ns"], lat["hists"].get(f"{kind} {key}", {}), 0.5)
        return None if q is None else q / 1e6
    books = {t: {"dispatched": tiers[t]["dispatched"], "waits": count("wait", t),
                 "completed": tiers[t]["completed"], "device_times": count("device", t)}
             for t in ("high", "normal", "low")}
    ms = {"low_read_wait": p50("wait", "low read"), "high_write_wait": p50("wait", "high write"),
          "low_read_device": p50("device", "low read"),
          "high_write_device": p50("device", "high write")}
    # prism status reads the same files as an operator's tool: it must
    # parse what the module writes.
    from ..common import status
    st = status.disk_status(dev)
    status_ok = (st["scheduler"] == "prism" and sorted(st.get("tiers", {})) ==
                 ["high", "low", "normal"] and "device_depth" in st.get("flight", {})
                 and bool(st.get("latency")) and "prism" in status.format_status([st]))
    path = g.prism_latency_path(dev)
    try:
        path.write_text("x\n")
        refused = False
    except OSError:
        refused = True
    kept = g.prism_latency(dev)["hists"] == lat["hists"]
    g.prism_latency_keep(dev, on=False)
    emptied = not g.prism_latency(dev)["hists"]
    jobs(1)
    stopped = not g.prism_latency(dev)["hists"]
    counted = all(b["waits"] == b["dispatched"] and b["device_times"] == b["completed"]
                  for b in books.values()) and books["low"]["completed"] > 0
    low_dev, high_dev = ms["low_read_device"], ms["high_write_device"]
    low_wait, high_wait = ms["low_read_wait"], ms["high_write_wait"]
    timed = (low_dev is not None and high_dev is not None and low_wait is not None
             and high_wait is not None and 4 <= low_dev <= 12 and 4 <= high_dev <= 12
             and low_wait > high_wait)
    balanced = conservation(dev)["balanced"]
    return {"ok": (off_empty and counted and timed and refused and kept and emptied
                   and stopped and balanced and status_ok), "status_ok": status_ok,
            "off_empty": off_empty, "off_dispatched": off_dispatched,
            "books": books, "p50_ms": ms, "bad_write_refused": refused, "kept": kept,
            "emptied": emptied, "stopped": stopped, "balanced": balanced}


@check("share_sweep")
def check_share_sweep(ctx) -> dict:
    """Protects against one stream taking all of a tier's share in sector order.

    In sector order a tier served by its share sweeps its own streams
    in turn: three BE7 sequential readers at 1, 2 and 3 GiB under an RT
    reader that saturates the device each get a fair part of LOW's
    dispatches. (Sweeping from wherever the last HIGH dispatch left the
    head gave the lowest reader nearly all of them.)"""
    dev = ctx["nullb"]
    # Sector order: the device flagged rotational.
    with rotational(dev, 1):
        g.set_scheduler(dev, "prism", {"prio_aging_expire": 0, "low_share": 30})
        g.write_queue(dev, "nr_requests", SCHED_TAGS)
        args = ["--direct=1", "--ioengine=libaio", "--runtime=6", "--exitall",
                "--time_based=1", "--ramp_time=1", "--group_reporting=0",
                f"--filename=/dev/{dev}", "--name=high", "--rw=randread", "--bs=4k",
                "--iodepth=16", "--prioclass=1", "--prio=0", "--size=1G"]
        lows = [f"low{gib}" for gib in (1, 2, 3)]
        for gib in (1, 2, 3):
            args += [f"--name=low{gib}", "--rw=read", "--bs=128k", "--iodepth=4",
                     "--prioclass=2", "--prio=7", f"--offset={gib}G", "--size=512M"]
        rep = g.fio(args=args, timeout=300)
        ios = {name: job(rep, name)["ios"] for name in lows}
        tiers = g.prism_tiers(dev)
        books = conservation(dev)
        g.set_scheduler(dev, "prism")       # defaults again for the checks after
    fair = min(ios.values()) >= 0.5 * max(ios.values()) > 0
    return {"ok": fair and tiers["low"]["shared"] > 0 and books["balanced"],
            "low_ios": ios, "tiers": tiers}
