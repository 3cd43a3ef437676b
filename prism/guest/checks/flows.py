"""Fair queuing by flow inside a tier: shares by weight, idling for a
flow (HDD, queueing disk, flash), greedy processes, weight raising."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import system as g
from .helpers import (
    SCHED_TAGS,
    conservation,
    job,
    repeating,
    wait_rc,
)
from .registry import check


def be_weight(level: int) -> int:
    """prism's weight of BE @level (prism_weight() in prism_policy.h), on
    cgroup v2's scale: BE4, the default, weighs 100 as a cgroup does."""
    return (8 - level) * 25


# A raised flow's weight is PRISM_RAISE_COEFF times its own, which is at
# most PRISM_WEIGHT_MAX (prism_wf2q.h, prism_policy.h).
RAISE_COEFF = 30


WEIGHT_MAX = 400


def own_weight(weight: int) -> int:
    """A flow's weight as debugfs shows it, without its raise."""
    return weight // RAISE_COEFF if weight > WEIGHT_MAX else weight


@check("flow_shares")
def check_flow_shares(ctx) -> dict:
    """Protects against flows in one tier not sharing the device by their weights.

    Eight readers at BE 0..7 in one tier (be_tiers=1)
    share the metered NVMe disk (400 IOPS: the disk, not TCG, is the
    bottleneck; on the emulated HDD under TCG the guest could not keep
    eight readers backlogged) by weight: each flow's cost served, from
    prism's own flows, over the eight flows' total, within 15% of its
    weight's part ((8 - level) / 36). A ratio of prism's counters, not a
    time."""
    dev = ctx["nvme_slow"]
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism")      # a fresh instance: fresh flows
    g.write_queue(dev, "nr_requests", SCHED_TAGS)
    g.write_tunable(dev, "be_tiers", 1)
    args = ["--direct=1", "--ioengine=libaio", "--runtime=10", "--time_based=1",
            "--exitall", "--group_reporting=0", f"--filename=/dev/{dev}"]
    for level in range(8):
        args += [f"--name=be{level}", "--rw=randread", "--bs=4k", "--iodepth=4",
                 "--prioclass=2", f"--prio={level}", f"--offset={level * 64}M",
                 "--size=64M"]
    try:
        g.fio(args=args, timeout=300)
        flows = g.prism_flows(dev)
        books = conservation(dev)
    finally:
        g.write_tunable(dev, "be_tiers", 3)
    by_weight: dict[int, int] = {}
    for f in flows:
        if f["pid"] and f["dispatched"]:
            w = own_weight(f["weight"])
            by_weight[w] = by_weight.get(w, 0) + f["cost_us"]
    weights = [be_weight(level) for level in range(8)]
    total = sum(by_weight.get(w, 0) for w in weights)
    shares = {w: by_weight.get(w, 0) / max(total, 1) for w in weights}
    deviation = {w: shares[w] / (w / sum(weights)) - 1 for w in weights}
    worst = max(abs(d) for d in deviation.values())
    return {"ok": worst <= 0.15 and books["balanced"], "worst_deviation": worst,
            "shares": shares, "deviation": deviation, "flows": flows, **books}


FLOW_IDLE_LEVELS = (0, 4, 7)          # weights 200, 100, 25


FLOW_IDLE_AUTO = -1


def timed_look(read: Callable[[], Any], t0: float) -> list[tuple[float, Any]]:
    """(seconds since @t0, read()) now, for repeating(): nothing while
    prism's debugfs file is away (a scheduler switch)."""
    try:
        return [(time.monotonic() - t0, read())]
    except (OSError, KeyError, ValueError):
        return []


def flows_sample(dev: str, t0: float) -> list[tuple[float, list[dict]]]:
    """(seconds since @t0, prism's flows) now, or nothing."""
    return timed_look(lambda: g.prism_flows(dev), t0)


def flow_idle_run(dev: str, flow_idle_us: int) -> dict:
    """Three sequential 128 KiB readers at BE 0, 4 and 7 in one tier on
    the HDD, iodepth 2, for 10 s: each flow's part of the cost prism
    served (from its own flows) once every raise is over, and the bytes
    read in all. The readers start raised (weight raising, 30x each, so
    in their ratio) and lose their raises one by one as each is served
    its sectors, the heaviest first, or PRISM_RAISE_MS (4 s) after its
    flow began: shares hold from 4 s after the last flow appeared. (From
    4.5 s after fio was started, as before 2026-12-05, a run whose fio
    came up slowly still measured a raised reader: +40% for the lightest,
    2 of 7 boots.)"""
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism", {"be_tiers": 1, "slice_idle_us": flow_idle_us})
    # As prism's udev rules set it: at the kernel's default of 2 the other
    # flows' queued requests hold every tag, and no flow is waited for.
    g.write_queue(dev, "nr_requests", 64)
    args = ["--direct=1", "--ioengine=libaio", "--runtime=10", "--time_based=1",
            "--exitall", "--group_reporting=0", f"--filename=/dev/{dev}"]
    for i, level in enumerate(FLOW_IDLE_LEVELS):
        args += [f"--name=be{level}", "--rw=read", "--bs=128k", "--iodepth=2",
                 "--prioclass=2", f"--prio={level}", f"--offset={1 + 10 * i}G",
                 "--size=8G"]
    t0 = time.monotonic()
    with repeating(0.5, lambda tick: flows_sample(dev, t0)) as samples:
        out = g.fio(args=args, timeout=300)
    flows = g.prism_flows(dev)
    flight = g.prism_flight(dev)
    books = conservation(dev)
    # The flows begin at their first request: a flow first seen in a
    # sample began within the half second before it.
    present = next((t for t, fl in samples
                    if len([f for f in fl if f["pid"] and f["dispatched"]])
                    >= len(FLOW_IDLE_LEVELS)), None)
    start: list[dict] = next((fl for t, fl in samples
                              if present is not None and t >= present + 4.0), [])
    before = {f["pid"]: f["cost_us"] for f in start}
    cost = {own_weight(f["weight"]): f["cost_us"] - before.get(f["pid"], 0)
            for f in flows if f["pid"] and f["dispatched"]}
    weights = [be_weight(level) for level in FLOW_IDLE_LEVELS]
    total = sum(cost.get(w, 0) for w in weights)
    deviation = {w: cost.get(w, 0) / max(total, 1) / (w / sum(weights)) - 1 for w in weights}
    return {"flow_idle_us": flow_idle_us, "deviation": deviation, "flows_seen_s": present,
            "worst": max(abs(d) for d in deviation.values()) if start else 1.0,
            "mib_read": sum(job(out, f"be{level}")["kib"] for level in FLOW_IDLE_LEVELS)
            / 1024,
            "held_flow": flight.get("held_flow"), "flow_window_us": flight.get("flow_window_us"),
            "balanced": books["balanced"],
            "flows": [{k: f[k] for k in ("weight", "cost_us", "dispatched", "vt_lead",
                                         "think_us")}
                      for f in flows if f["pid"] and f["dispatched"]]}


@check("flow_idle_hdd")
def check_flow_idle_hdd(ctx) -> dict:
    """Protects against sequential HDD readers losing their turn (and weights) at each gap.

    Idling for flows on the HDD: three sequential readers at weights
    80, 40 and 10 in one tier, each with at most two requests out, run out
    of queued requests between turns; without idling (slice_idle_us=0) each
    drops out of the fair queue at every gap and flows are served nearly
    alike; with the automatic window a stream keeps its turn and its place
    and the cost prism served follows the weights: every flow within 25%
    of its part, closer than without, with holds for flows counted. A
    ratio of prism's own counters, interleaved, not a time; the bytes read
    are reported (the stream stays on the disk: fewer seeks)."""
    dev = ctx["hdd"]
    runs = []
    try:
        for _ in range(2):
            for us in (FLOW_IDLE_AUTO, 0):
                runs.append(flow_idle_run(dev, us))
    finally:
        g.set_scheduler(dev, "none")
    idle = [r for r in runs if r["flow_idle_us"] == FLOW_IDLE_AUTO]
    plain = [r for r in runs if r["flow_idle_us"] == 0]
    worst_idle = max(r["worst"] for r in idle)
    worst_plain = min(r["worst"] for r in plain)
    ok = (worst_idle <= 0.25 and worst_idle < worst_plain
          and all(r["held_flow"] for r in idle) and not any(r["held_flow"] for r in plain)
          and all(r["balanced"] for r in runs))
    return {"ok": ok, "worst_with_idling": worst_idle, "best_without": worst_plain,
            "runs": runs}


@check("flow_wait_own_tag")
def check_flow_wait_own_tag(ctx) -> dict:
    """Protects against a flow's own in-flight request counted against it when held for.

    A flow waited for while its own request is in the device may be
    held for, though the other flows' requests fill every other tag: its
    completion frees the tag its next request needs. On the HDD at the
    kernel's default nr_requests of 2 (a depth-1 disk without prism's
    udev rule), a start-up (100 dependent 4 KiB reads) beside three
    buffered sequential readers: the start-up's turn waits for it
    (held_flow at least half its reads), where until 2026-12-05 a test
    that counted its in-flight request's tag as another's left it waiting
    out a reader's 1 MiB request after each read (held_flow 1-4 in 256
    reads). prism's counters, not a time; the books balance."""
    dev = ctx["hdd"]
    reads = 100
    try:
        g.set_scheduler(dev, "none")
        g.set_scheduler(dev, "prism")
        g.write_queue(dev, "nr_requests", 2)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        before = g.prism_flight(dev).get("held_flow", 0)
        args = ["--exitall", "--group_reporting=0", f"--filename=/dev/{dev}",
                "--name=startup", "--rw=randread", "--bs=4k", "--direct=1",
                "--ioengine=psync", "--randrepeat=0", "--size=1G", f"--number_ios={reads}",
                "--startdelay=2"]
        for i in range(3):
            args += [f"--name=reader{i}", "--rw=read", "--bs=1M", "--direct=0",
                     "--ioengine=psync", "--time_based=1", "--runtime=30",
                     f"--offset={i + 1}G", "--size=1G"]
        out = g.fio(args=args, timeout=300)
        held = g.prism_flight(dev).get("held_flow", 0) - before
        books = conservation(dev)
    finally:
        g.set_scheduler(dev, "none")
    done = job(out, "startup")["ios"]
    ok = done == reads and held >= reads // 2 and books["balanced"]
    return {"ok": ok, "startup_reads": done, "held_flow": held,
            "startup_lat_mean_us": job(out, "startup")["lat_mean_us"],
            "balanced": books["balanced"]}


def run_two_readers(dev: str, tunables: dict | None, levels: Sequence[int],
                    job_args: list[str], runtime: int,
                    exitall: bool = True) -> tuple[list[int], dict, bool]:
    """On a fresh prism instance (@tunables set), two fio readers at BE
    @levels, 1 GiB apart, each with @job_args, for @runtime seconds: each
    one's I/Os, prism's in-flight counters (debugfs flight), and whether
    its books balance afterwards."""
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism", tunables)
    args = ["--direct=1", "--ioengine=libaio", f"--runtime={runtime}", "--time_based=1",
            *(["--exitall"] if exitall else []), "--group_reporting=0",
            f"--filename=/dev/{dev}"]
    for i, level in enumerate(levels):
        args += [f"--name=r{i}", *job_args, "--prioclass=2", f"--prio={level}",
                 f"--offset={i}G", "--size=1G"]
    out = g.fio(args=args, timeout=120)
    ios = [job(out, f"r{i}")["ios"] for i in range(len(levels))]
    return ios, g.prism_flight(dev), conservation(dev)["balanced"]


@check("flow_idle_queueing")
def check_flow_idle_queueing(ctx) -> dict:
    """Protects against idling on a queueing disk where it only costs, or not where needed.

    Idling for flows on a queueing disk (a null_blk taking 8 commands
    of 2 ms, flagged rotational, as a disk with NCQ): two processes
    reading at iodepth 1 in one tier, for 3 s each way. Two random readers
    at one weight are not waited for (the drive orders what it holds; a
    wait only makes the other wait out each request), two sequential ones
    are, and so are two random readers of different weights (BE 3 and 5,
    both in the default NORMAL tier: only the wait keeps their ratio).
    prism's holds for a flow, counted per run; the books balance after
    each."""
    runs = {}
    with g.temporary_nullb("ncq", depth=8, completion_us=2000, size_mb=2048,
                           memory_backed=False) as dev:
        g.write_queue(dev, "rotational", 1)
        for name, rw, levels in (("random_equal", "randread", (4, 4)),
                                 ("sequential_equal", "read", (4, 4)),
                                 ("random_weighted", "randread", (3, 5))):
            ios, flight, balanced = run_two_readers(
                dev, None, levels, [f"--rw={rw}", "--bs=4k", "--iodepth=1"], 3,
                exitall=False)
            runs[name] = {"held_flow": flight["held_flow"], "ios": ios, "balanced": balanced}
        g.set_scheduler(dev, "none")
    ok = (runs["random_equal"]["held_flow"] == 0 and runs["sequential_equal"]["held_flow"] > 0
          and runs["random_weighted"]["held_flow"] > 0
          and all(r["balanced"] and min(r["ios"]) > 0 for r in runs.values()))
    return {"ok": ok, "runs": runs}


def flight_sample(dev: str, t0: float) -> list[tuple[float, int, int]]:
    """(seconds since @t0, held_flow, flow_window_us) from debugfs flight
    now, or nothing."""
    def read() -> tuple[int, int]:
        f = g.prism_flight(dev)
        return f["held_flow"], f["flow_window_us"]
    return [(t, *v) for t, v in timed_look(read, t0)]


@check("flow_idle_flash")
def check_flow_idle_flash(ctx) -> dict:
    """Protects against idling on flash between flows of equal weight, or not when they differ.

    Idling for flows on flash only while weights differ (a null_blk
    taking 32 commands of 4 ms, not rotational): two processes reading at
    iodepth 1 in one tier (every BE level in NORMAL). At one weight (BE 4
    and 4) prism never waits for either once their start is over (no hold
    for a flow, the window shown as 0, from 7.5 s on: both start raised
    when fio has started them, their raises end 4 s later, not quite
    together, and weights that differed are remembered for a second); at
    BE 0 and 7 (4 s) it waits
    for the heavier one's next request, up to bfq's slice_idle (8 ms),
    which gets at least 4x the other's I/Os (weights 8 to 1, but the time
    it is waited for is charged to it: with think times of 0.2-0.8 ms
    under emulation on 4 ms requests, 5.2-10.6 measured over 11 runs in
    two boots), against about equal I/Os with slice_idle_us=0 (each has
    its one request in the device at a time, which serves them in
    parallel). Books balance."""
    runs = {}
    with g.temporary_nullb("flash", depth=32, completion_us=4000, size_mb=2048,
                           memory_backed=False) as dev:
        for name, levels, idle, runtime in (("equal", (4, 4), -1, 10),
                                            ("weighted", (0, 7), -1, 4),
                                            ("weighted_no_idle", (0, 7), 0, 4)):
            # The window as the readers run: it lapses a second after
            # weights were last seen to differ, and fio may take longer
            # than that to exit under TCG (seen 2026-12-03).
            t0 = time.monotonic()
            with repeating(0.5, lambda tick, t0=t0: flight_sample(dev, t0)) as samples:
                ios, flight, balanced = run_two_readers(
                    dev, {"be_tiers": 1, "slice_idle_us": idle}, levels,
                    ["--rw=randread", "--bs=4k", "--iodepth=1", "--randrepeat=0"],
                    runtime)
            late = [x for x in samples if x[0] >= 7.5]
            runs[name] = {"ios": ios, "ratio": round(ios[0] / max(ios[1], 1), 2),
                          "held_flow": flight["held_flow"],
                          "flow_window_us": max([x[2] for x in samples]
                                                + [flight["flow_window_us"]]),
                          "held_flow_late": (late[-1][1] - late[0][1]) if late else None,
                          "flow_window_us_late": max((x[2] for x in late), default=None),
                          "balanced": balanced}
        g.set_scheduler(dev, "none")
    eq = runs["equal"]
    ok = (eq["held_flow_late"] == 0 and eq["flow_window_us_late"] == 0
          and runs["weighted"]["held_flow"] > 0 and runs["weighted"]["ratio"] >= 4
          and runs["weighted"]["flow_window_us"] >= 8000
          and runs["weighted_no_idle"]["ratio"] <= 1.5
          and all(r["balanced"] and min(r["ios"]) > 0 for r in runs.values()))
    return {"ok": ok, "runs": runs}


@check("flows_greedy")
def check_flows_greedy(ctx) -> dict:
    """Protects against a greedy process starving light ones at the same priority.

    One greedy process (4 KiB random reads, iodepth 64) against four
    light ones (iodepth 1) at one priority on the metered NVMe disk, under
    none and prism in the same boot: under prism every light process
    keeps at least half of an even fifth of the I/Os (fair queuing by
    process), the greedy one hits its tag limit (prism's counters), and
    the books balance."""
    dev = ctx["nvme_slow"]
    runs = []
    for sched in ("none", "prism"):
        g.set_scheduler(dev, "none")
        g.set_scheduler(dev, sched)
        if sched != "none":
            g.write_queue(dev, "nr_requests", SCHED_TAGS)
        args = ["--direct=1", "--ioengine=libaio", "--runtime=10", "--time_based=1",
                "--exitall", "--group_reporting=0", f"--filename=/dev/{dev}",
                "--rw=randread", "--bs=4k", "--randrepeat=0",
                "--name=greedy", "--iodepth=64", "--offset=0", "--size=64M"]
        for i in range(4):
            args += [f"--name=light{i}", "--iodepth=1", f"--offset={(i + 1) * 64}M",
                     "--size=64M"]
        rep = g.fio(args=args, timeout=300)
        rec = {"sched": sched, "greedy": job(rep, "greedy")["iops"],
               "light": [job(rep, f"light{i}")["iops"] for i in range(4)]}
        if sched == "prism":
            rec["flows"] = g.prism_flows(dev)
            rec["books"] = conservation(dev)
        runs.append(rec)
    p = runs[1]
    total = p["greedy"] + sum(p["light"])
    light_ok = min(p["light"]) >= 0.5 * total / 5
    greedy_flow = max(p["flows"], key=lambda f: f["dispatched"])
    throttled = greedy_flow["throttled"] > 0
    ratio = min(p["light"]) / max(min(runs[0]["light"]), 0.01)
    return {"ok": light_ok and throttled and p["books"]["balanced"],
            "light_min_over_even_fifth": min(p["light"]) / (total / 5),
            "light_min_prism_over_none": ratio,
            "greedy_throttled": greedy_flow["throttled"], "runs": runs}


def raise_counts(dev: str) -> dict:
    """debugfs flows' flow_starts= and raised= counts."""
    g.mount_debugfs()
    text = (g.DEBUGFS / "block" / dev / "sched" / "flows").read_text()
    return {k: int(v) for k, v in (line.split("=", 1) for line in text.splitlines()
                                   if line.startswith(("flow_starts=", "raised=")))}


def raise_run(dev: str, tunables: dict | None) -> dict:
    """Three greedy random readers (iodepth 8) for 5 s, then a start-up:
    100 dependent 4 KiB reads (psync), on a fresh prism with @tunables;
    all stop when it is done. Its mean latency and prism's raise counts."""
    g.set_scheduler(dev, "none")
    g.set_scheduler(dev, "prism", tunables)
    g.write_queue(dev, "nr_requests", SCHED_TAGS)
    before = raise_counts(dev)
    args = ["--direct=1", "--exitall", "--group_reporting=0", f"--filename=/dev/{dev}",
            "--rw=randread", "--bs=4k", "--randrepeat=0", "--size=64M"]
    for i in range(3):
        args += [f"--name=greedy{i}", "--ioengine=libaio", "--iodepth=8",
                 "--time_based=1", "--runtime=30", f"--offset={i * 64}M"]
    args += ["--name=startup", "--ioengine=psync", "--iodepth=1", "--startdelay=5",
             "--number_ios=100", "--offset=192M"]
    rep = g.fio(args=args, timeout=300)
    after = raise_counts(dev)
    return {"tunables": tunables, "startup_lat_us": job(rep, "startup")["lat_mean_us"],
            "raised": after["raised"] - before["raised"],
            "starts": after["flow_starts"] - before["flow_starts"],
            "balanced": conservation(dev)["balanced"]}


@check("weight_raise")
def check_weight_raise(ctx) -> dict:
    """Protects against a starting process not raised, or a burst all keeping raised weights.

    Weight raising on null_blk (2 slots of 5 ms): a process that starts
    100 dependent reads beside three greedy readers of its priority, the
    readers' own raises over (5 s), is raised (debugfs raised=) and its
    reads take under 0.6x their mean latency without raising
    (slice_idle_us=0, which turns raising off with idling: then nothing
    is raised), interleaved twice. Then eight readers starting together
    are a burst: fewer than eight raised, and none keeps a raised weight
    once all eight are at work (the burst's first seven lose it; the last
    look of prism's flows, twice a second, that finds all eight with
    requests)."""
    dev = ctx["nullb"]
    runs = []
    try:
        for _ in range(2):
            for tun in (None, {"slice_idle_us": 0}):
                runs.append(raise_run(dev, tun))
        g.set_scheduler(dev, "none")
        g.set_scheduler(dev, "prism")
        # The kernel's 4 tags for this 2-slot disk would keep most of the
        # eight readers waiting in tag allocation, where prism sees none.
        g.write_queue(dev, "nr_requests", SCHED_TAGS)
        before = raise_counts(dev)
        args = ["--direct=1", "--ioengine=libaio", "--iodepth=2", "--rw=randread",
                "--bs=4k", "--randrepeat=0", "--size=16M", "--time_based=1",
                "--runtime=4", "--group_reporting=0", f"--filename=/dev/{dev}"]
        for i in range(8):
            args += [f"--name=b{i}", f"--offset={i * 16}M"]
        t0 = time.monotonic()
        with repeating(0.5, lambda tick: flows_sample(dev, t0)) as samples:
            proc = subprocess.Popen(["fio", "--output-format=json", *args],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            rc = wait_rc(proc, 300)
        if rc:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"fio failed: {err[-1500:]}")
        after = raise_counts(dev)
        # The last look with all eight flows at work (a flow's weight is
        # the one of its latest activation, and each activates anew at
        # once): none raised.
        full = [[f["weight"] for f in fl if f["pid"] and (f["queued"] or f["owned"])]
                for _, fl in samples]
        full = [w for w in full if len(w) >= 8]
        weights = full[-1] if full else []
        burst = {"starts": after["flow_starts"] - before["flow_starts"],
                 "raised": after["raised"] - before["raised"], "weights_all_busy": weights,
                 "looks_all_busy": len(full), "balanced": conservation(dev)["balanced"]}
    finally:
        g.set_scheduler(dev, "none")
    on = [r for r in runs if r["tunables"] is None]
    off = [r for r in runs if r["tunables"]]
    ratio = max(r["startup_lat_us"] for r in on) / max(min(r["startup_lat_us"] for r in off), 1)
    ok = (ratio < 0.6 and all(r["raised"] >= 1 for r in on)
          and not any(r["raised"] for r in off)
          and burst["starts"] >= 8 and burst["raised"] < 8
          and bool(weights) and max(weights) <= WEIGHT_MAX
          and all(r["balanced"] for r in runs) and burst["balanced"])
    return {"ok": ok, "raised_over_unraised_latency": ratio, "runs": runs, "burst": burst}
