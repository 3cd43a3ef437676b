"""Turn a benchmark's raw runs into results.json, results.csv, PNG plots
and report.md.

results.json schema (version 1):
  {"schema": 1, "command": str, "created": ISO time,
   "plan": {... (bench/plan.py make_plan), "twin"? (one of prism's twins
            ran, an older release under its own name, prism-v2 or prism-v3:
            {"scheduler", "module", "rev", "commit", "version"? (its
            module/VERSION; since 2026-12-07)})},
   "runs": [{"kernel", "workload", "scheduler", "rep", "device",
             "device_util", "wall_s", "prism_tiers"?, "prism_flight"? (the
             in-flight control from debugfs at the run's end),
             "prism_flight_series"? ([{"t", "lower_limit", "lower_duty",
                                      "device_depth", "target_us", "lat_us",
                                      "solo_mean_us", "mixed_us", "cuts"}]:
                                      the same once a second from the end of
                                      the ramp; the last five since
                                      2026-12-05),
             "twin_flight"?, "twin_flight_series"?, "twin_tiers"?,
             "twin_latency"? (the same of the twin, plan "twin"),
             "prism_cost"? (its cost model at the run's end, debugfs "cost"
                            by line: "model", "cost_ns", "learning",
                            "learned"?, each {key: value as text}),
             "prism_latency"? (its latency histograms: "bounds_ns", and
                               "hists" {"wait|device TIER DIR": {bucket:
                               count}}, counted from the end of the ramp),
             "cpu_all"? (the whole machine's CPU time during the run, in
                         percent: busy, user, system, irq (hard+soft), iowait),
             "drive"? (emulated drives: stats.trace_summary of its trace),
             "jobs": [job record, see stats.job_record; iops and bw_kib
                      over the run's common window "window_s", "late_s" how
                      long into it the job's first I/O completed
                      (stats.common_window); plus "isolation_ratio" for a
                      workload's high job]}],
   "summaries": [{"kernel", "workload", "scheduler", "job",
                  "metrics": {name: {"n", "mean", "sd", "ci95", "min", "max"}}}],
   "paired": [{"kernel", "workload", "job", "figure", "other", "n", "ratio",
               "low", "high"}: prism over another scheduler, paired by
              repetition (report.paired_ratios)]}
Times are in microseconds, throughput in IOPS and KiB/s, CPU in percent
of one CPU as fio reports it, device_util as a fraction of wall time.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import statistics
from pathlib import Path

from ..common import stats
from ..common.workloads import WORKLOADS

SUMMARY_METRICS = ("iops", "bw_kib", "common_ratio", "work_ratio", "lat_mean_us",
                   "clat_mean_us", "p50_us",
                   "p95_us", "p99_us", "p99_9_us", "lat_max_us", "usr_cpu",
                   "sys_cpu", "min_iops_1s", "isolation_ratio", "share",
                   "share_dev", "share_mean_dev", "fsync_mean_us", "fsync_p50_us",
                   "fsync_p99_us", "fsync_p99_9_us", "late_s", "window_s",
                   "read_p50_us", "read_p99_us", "write_p50_us", "write_p99_us",
                   "runtime_ms", "fsync_batch")


def metric_label(metric: str) -> str:
    """How a workload's figure (Workload.metric) reads in a table or axis."""
    return {"fsync_p99_us": "fsync P99", "runtime_ms": "time"}.get(metric, "P99")


def collect(raw: Path, kernel: str) -> list[dict]:
    """Runs under @raw (one benchrun output directory) as records."""
    manifest = json.loads((raw / "manifest.json").read_text())
    runs = []
    for meta in manifest["runs"]:
        rundir = raw / meta["dir"]
        run = {k: meta[k] for k in ("workload", "scheduler", "rep", "device",
                                    "device_util", "cpu_all", "wall_s") if k in meta}
        run["kernel"] = kernel
        run["kernel_release"] = meta.get("kernel")
        if "prism_tiers" in meta:
            run["prism_tiers"] = meta["prism_tiers"]
        if "prism_flight" in meta:
            run["prism_flight"] = meta["prism_flight"]
        if "prism_latency" in meta:
            run["prism_latency"] = meta["prism_latency"]
        if "prism_cost" in meta:
            run["prism_cost"] = meta["prism_cost"]
        if meta.get("prism_flight_series"):
            run["prism_flight_series"] = meta["prism_flight_series"]
        # The twin's controller, for a paired look (no table reads it yet).
        for key in ("twin_flight", "twin_flight_series", "twin_tiers", "twin_latency"):
            if meta.get(key):
                run[key] = meta[key]
        if (rundir / "jobs.json").exists():
            # An application's run (prism.guest.pgbench): its records are made in the guest.
            run["jobs"] = json.loads((rundir / "jobs.json").read_text())
            if (rundir / "fio.json").exists():
                # Its fio companion's records again, from the logs, as the
                # report code reads them now (a rebuild after a fix).
                fresh = stats.run_records(json.loads((rundir / "fio.json").read_text()),
                                          rundir)
                names = {r["job"] for r in fresh}
                run["jobs"] = [j for j in run["jobs"] if j.get("job") not in names] + fresh
        else:
            run["jobs"] = stats.run_records(json.loads((rundir / "fio.json").read_text()),
                                            rundir)
        trace = stats.trace_file(rundir)
        if trace:
            w = WORKLOADS.get(run["workload"])
            run["drive"] = stats.trace_summary(trace, w.low_region() if w else None)
        elif (rundir / stats.DRIVE_SUMMARY).exists():
            run["drive"] = json.loads((rundir / stats.DRIVE_SUMMARY).read_text())
        runs.append(run)
    return runs


def add_starved(runs: list[dict]) -> None:
    """A job that completed nothing in a run is starved there: a result,
    not a missing value. Its throughput is zero and its latency figures
    become the measurement window, the least it waited (a lower bound),
    so that the repetition counts in every summary and ratio; "starved"
    marks it."""
    for r in runs:
        for j in r["jobs"]:
            # I/Os completed, or for a record that counts none (pgbench's
            # backup: bytes copied) the KiB it moved.
            work = j.get("ios") if j.get("ios") is not None else j.get("kib")
            if work is None or work > 0 or j.get("startdelay_s"):
                continue
            j["starved"] = True
            j["iops"] = j["bw_kib"] = 0.0
            window = j.get("window_s") or (j.get("runtime_ms") or 0) / 1000 or r.get("wall_s")
            for key in LATENCY_FIGURES:
                if window:
                    j[key] = window * 1e6


# The latency figures a starved job is given its window for.
LATENCY_FIGURES = ("p50_us", "p95_us", "p99_us", "p99_9_us", "lat_mean_us", "clat_mean_us",
                   "fsync_p99_us")


def _alone(runs: list[dict], kernel: str, baseline: str, metric: str) -> dict:
    """{(scheduler, job): geometric mean of the figure over the
    repetitions} of a baseline workload."""
    out: dict[tuple[str, str], list[float]] = {}
    for b in runs:
        if (b["kernel"], b["workload"]) != (kernel, baseline):
            continue
        for j in b["jobs"]:
            if j.get(metric) is not None:
                out.setdefault((b["scheduler"], j["job"]), []).append(j[metric])
    means = {k: stats.summarize(v, geometric=True)["mean"] for k, v in out.items()}
    return {k: m for k, m in means.items() if m}


def add_isolation(runs: list[dict]) -> dict:
    """For each job that also runs in its workload's baseline (the high
    job, and in flows_greedy each light process), two ratios of its
    figure (P99, or the workload's own metric such as fsync P99) in this
    run: "isolation_ratio" over the same figure alone under the same
    scheduler, and "common_ratio" over the best figure alone of any
    scheduler in the report (the same boots): one common baseline, so
    that a scheduler whose own alone figure is worse is not flattered.
    Baselines are geometric means over the repetitions. Returns the
    common baselines, {"kernel workload job": {"scheduler", "value"}}."""
    baselines: dict[str, dict] = {}
    alones: dict[tuple[str, str, str], dict] = {}
    for r in runs:
        w = WORKLOADS.get(r["workload"])
        if not w or not w.baseline:
            continue
        key = (r["kernel"], w.baseline, w.metric)
        if key not in alones:
            alones[key] = _alone(runs, *key)
        alone = alones[key]
        for j in r["jobs"]:
            if not j.get(w.metric):
                continue
            own = alone.get((r["scheduler"], j["job"]))
            if own:
                j["isolation_ratio"] = j[w.metric] / own
            best = min(((m, s) for (s, job), m in alone.items() if job == j["job"]),
                       default=None, key=lambda t: t[0])
            if best:
                j["common_ratio"] = j[w.metric] / best[0]
                baselines[f"{r['kernel']} {r['workload']} {j['job']}"] = {
                    "scheduler": best[1], "value": best[0], "metric": w.metric}
    return baselines


def add_work(runs: list[dict]) -> dict:
    """Work conservation of the fio mixes (a latency-sensitive job beside
    a bulk one): each run's total throughput, every job's together
    ("total_kib", on the run), over the best scheduler's mean total in
    the report ("work_ratio", on the run and on its high job, for the
    summaries). Returns the best totals, {"kernel workload":
    {"scheduler", "kib"}}."""
    best: dict[str, dict] = {}
    mixes = [r for r in runs if (w := WORKLOADS.get(r["workload"]))
             and w.high_job and w.low_job and not w.app]
    for r in mixes:
        r["total_kib"] = sum(j.get("bw_kib") or 0.0 for j in r["jobs"])
    for key in dict.fromkeys((r["kernel"], r["workload"]) for r in mixes):
        totals: dict[str, list[float]] = {}
        for r in mixes:
            if (r["kernel"], r["workload"]) == key:
                totals.setdefault(r["scheduler"], []).append(r["total_kib"])
        kib, sched = max((statistics.fmean(v), s) for s, v in totals.items())
        best[" ".join(key)] = {"scheduler": sched, "kib": kib}
    for r in mixes:
        top = best[f"{r['kernel']} {r['workload']}"]["kib"]
        if top > 0:
            r["work_ratio"] = r["total_kib"] / top
            high = WORKLOADS[r["workload"]].high_job
            for j in r["jobs"]:
                if j["job"] == high:
                    j["work_ratio"] = r["work_ratio"]
    return best


def device_use(drive: dict, plan: dict) -> float | None:
    """How much of the emulated drive's capacity a run used, from its own
    trace (io_ticks cannot say: one request in flight on an eight-channel
    drive reads as busy as eight): on a disk the spindle's busy time over
    the trace's span; on the SSD the channel-seconds over the span times
    the channels; on the cloud volume the larger of its bandwidth and its
    command budget used (commands larger than the metering size count as
    several, as QEMU's throttling counts them: approximated from the mean
    command size)."""
    params = plan.get("disk_params") or {}
    span = drive.get("span_s")
    profile = plan.get("profile")
    if not span or span <= 0:
        return None
    if profile in ("hdd", "hdd-ncq") and "busy_s" in drive:
        return min(1.0, drive["busy_s"] / span)
    if profile == "ssd-model" and "busy_s" in drive and params.get("channels"):
        return min(1.0, drive["busy_s"] / (span * params["channels"]))
    if profile == "cloud" and "bytes" in drive and params.get("iops_limit"):
        bw = drive["bytes"] / span / (params["bandwidth_mib"] * 2**20)
        cmds = drive["commands"] or 0
        mean_kib = drive["bytes"] / 1024 / cmds if cmds else 0.0
        units = cmds * max(1, math.ceil(mean_kib / params.get("iops_size_kib", 256)))
        return min(1.0, max(bw, units / span / params["iops_limit"]))
    return None


def add_shares(runs: list[dict]) -> None:
    """For share workloads: each job's share of the run's IOPS, its ideal
    share under proportional sharing by BE level (weight 8 - level) or by
    its cgroup's weight (share8_cgroup), the
    relative deviation, and the run's mean deviation (seed 002's figure),
    kept on every job of the run so it is summarized with them."""
    for r in runs:
        w = WORKLOADS.get(r["workload"])
        if not w or not w.share:
            continue
        total = sum(j["iops"] for j in r["jobs"])
        # By cgroup weight where the jobs are in cgroups named after them,
        # else by BE level.
        by_cgroup = dict(w.cgroups)
        weights = {j["job"]: by_cgroup.get(j["job"], 8 - int(j.get("prio") or 4))
                   for j in r["jobs"]}
        wsum = sum(weights.values())
        devs = []
        for j in r["jobs"]:
            j["share"] = j["iops"] / total if total else 0.0
            j["share_ideal"] = weights[j["job"]] / wsum
            j["share_dev"] = abs(j["share"] - j["share_ideal"]) / j["share_ideal"]
            devs.append(j["share_dev"])
        for j in r["jobs"]:
            j["share_mean_dev"] = sum(devs) / len(devs)


# Summarised as geometric means (stats.summarize): ratios, and latencies,
# whose spread over repetitions is multiplicative.
GEOMETRIC = ("isolation_ratio", "common_ratio", "work_ratio", "runtime_ms")


def geometric_metric(name: str) -> bool:
    return name in GEOMETRIC or (name.endswith("_us") and name != "late_s")


def summarize(runs: list[dict]) -> list[dict]:
    """Per kernel, workload, scheduler and job: every figure over the
    repetitions (stats.summarize; geometric for ratios and latencies),
    and "starved": in how many repetitions the job completed nothing."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        for j in r["jobs"]:
            groups.setdefault((r["kernel"], r["workload"], r["scheduler"], j["job"]),
                              []).append(j)
    out = []
    for (kernel, workload, sched, job), recs in groups.items():
        # Per-priority figures of jobs that mix priorities (stats.job_record).
        names = list(SUMMARY_METRICS) + sorted({k for x in recs for k in x
                                                if k.startswith("prio_")})
        metrics = {m: stats.summarize([x[m] for x in recs if x.get(m) is not None],
                                      geometric=geometric_metric(m))
                   for m in names}
        out.append({"kernel": kernel, "workload": workload, "scheduler": sched,
                    "job": job, "reps": len(recs),
                    "starved": sum(1 for x in recs if x.get("starved")),
                    "metrics": {k: v for k, v in metrics.items() if v["n"]}})
    return out


def write_csv(path: Path, runs: list[dict]) -> None:
    cols = ["kernel", "workload", "scheduler", "rep", "job", "ios", "iops", "bw_kib",
            "lat_mean_us", "clat_mean_us", "p50_us", "p95_us", "p99_us", "p99_9_us",
            "lat_max_us", "usr_cpu", "sys_cpu", "min_iops_1s", "isolation_ratio",
            "window_s", "late_s", "device_util", "errors"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in runs:
            for j in r["jobs"]:
                row = {**r, **j}
                w.writerow(["" if row.get(c) is None else row.get(c) for c in cols])


def _fmt(m: dict | None, scale: float = 1.0, digits: int = 0) -> str:
    """A summary as "mean (low-high)": the interval stats.summarize made
    (95% from five repetitions, else the range), never below zero for
    figures that cannot be."""
    if not m or m.get("mean") is None:
        return "-"
    s = f"{m['mean'] / scale:,.{digits}f}"
    if m.get("low") is not None and m.get("high") is not None:
        low, high = f"{m['low'] / scale:,.{digits}f}", f"{m['high'] / scale:,.{digits}f}"
        if (low, high) != (s, s):
            s += f" ({low}-{high})"
    return s


def _runs_cell(runs: list[dict], get, scale: float = 1.0, digits: int = 0) -> str:
    """A table cell: the mean and interval of get(run) over @runs."""
    return _fmt(stats.summarize([get(r) for r in runs]), scale, digits)


def starved_note(s: dict) -> str:
    """" (starved in 2 of 5)" for a summary row with starved repetitions."""
    return f" (starved in {s['starved']} of {s['reps']})" if s.get("starved") else ""


def _save(plt, fig, out: Path, name: str, made: list[str]) -> None:
    fig.savefig(out / name, dpi=90, bbox_inches="tight")
    plt.close(fig)
    made.append(name)


def tradeoff_points(runs: list[dict], summaries: list[dict], kernel: str,
                    workload: str) -> list[dict]:
    """For a mix with a latency-sensitive and a bulk job: per scheduler
    (and variant), the high job's figure under load over the common
    baseline (x: "common_ratio", the geometric mean over the repetitions
    with its interval) and the bulk job's throughput in MiB/s (y: the
    mean with its interval), with each repetition's values ("xs", "ys":
    {rep: value}) for paired comparisons. Both axes come from the same
    summaries as the tables. Empty without the two jobs or a baseline."""
    w = WORKLOADS.get(workload)
    if not (w and w.high_job and w.low_job and w.baseline):
        return []
    mine = [r for r in runs if r["kernel"] == kernel and r["workload"] == workload]
    out = []
    for sched in dict.fromkeys(r["scheduler"] for r in mine):
        xs, ys = {}, {}
        for r in mine:
            if r["scheduler"] != sched:
                continue
            jobs = {j["job"]: j for j in r["jobs"]}
            if jobs.get(w.high_job, {}).get("common_ratio") is not None:
                xs[r["rep"]] = jobs[w.high_job]["common_ratio"]
            if jobs.get(w.low_job, {}).get("bw_kib") is not None:
                ys[r["rep"]] = jobs[w.low_job]["bw_kib"] / 1024
        x = stats.summarize(list(xs.values()), geometric=True)
        y = stats.summarize(list(ys.values()))
        if x["mean"] is None or y["mean"] is None:
            continue
        out.append({"scheduler": sched, "x": x["mean"], "y": y["mean"],
                    "x_low": x["low"] if x["low"] is not None else x["mean"],
                    "x_high": x["high"] if x["high"] is not None else x["mean"],
                    "y_low": y["low"] if y["low"] is not None else y["mean"],
                    "y_high": y["high"] if y["high"] is not None else y["mean"],
                    "xs": xs, "ys": ys})
    return out


def in_family(sched: str, subject: str = "prism") -> bool:
    """Whether @sched is @subject, alone or with tunables (prism:low_share=5)."""
    return sched == subject or sched.startswith(subject + ":")


def frontier(points: list[dict], subject: str = "prism") -> list[dict]:
    """@subject's settings among the trade-off @points that no other of
    them beats on both axes (lower tail over the common baseline, more
    bulk throughput), by tail: the line a swept knob draws, each point
    the best progress for that protection."""
    mine = sorted((p for p in points if in_family(p["scheduler"], subject)),
                  key=lambda p: (p["x"], -p["y"]))
    out: list[dict] = []
    for p in mine:
        if not out or p["y"] > out[-1]["y"]:
            out.append(p)
    return out


def dominates(a: dict, b: dict) -> bool:
    """Trade-off point @a at least as good as @b on both axes (means)."""
    return a["x"] <= b["x"] and a["y"] >= b["y"]


def beyond_noise(a: dict, b: dict) -> bool | None:
    """Whether @a's dominance of @b holds beyond the noise between
    repetitions: paired by repetition (stats.paired_ratio of the tail and
    of the bulk throughput), at least one axis's interval lies wholly on
    @a's side of 1 and neither lies wholly on @b's. None without pairs."""
    reps = sorted(set(a["xs"]) & set(b["xs"]) & set(a["ys"]) & set(b["ys"]))
    if not reps:
        return None
    x = stats.paired_ratio([(a["xs"][r], b["xs"][r]) for r in reps])
    y = stats.paired_ratio([(a["ys"][r], b["ys"][r]) for r in reps])
    if x["ratio"] is None or y["ratio"] is None or x["low"] is None or y["low"] is None:
        return None
    better = x["high"] < 1.0 or y["low"] > 1.0
    worse = x["low"] > 1.0 or y["high"] < 1.0
    return better and not worse


def dominance(points: list[dict], subject: str = "prism") -> list[dict]:
    """For each other scheduler of the trade-off, both ways: which of
    @subject's points dominate it and which it dominates (on the means,
    each with whether it holds beyond the paired noise), and the verdict
    for @subject's default and for its frontier as a whole: "dominates"
    (some point of the frontier is at least as good on both axes),
    "dominated" (the peer is at least as good as every point), or
    "neither"."""
    mine = [p for p in points if in_family(p["scheduler"], subject)]
    if not mine:
        return []
    default = next((p for p in mine if p["scheduler"] == subject), None)
    out = []
    for peer in (p for p in points if not in_family(p["scheduler"], subject)):
        over = [p for p in mine if dominates(p, peer)]
        under = [p for p in mine if dominates(peer, p)]

        def verdict(points_: list[dict], peer=peer) -> str:
            if not points_:
                return "-"
            if any(dominates(p, peer) for p in points_):
                return "dominates"
            if all(dominates(peer, p) for p in points_):
                return "dominated"
            return "neither"
        out.append({
            "peer": peer["scheduler"], "x": peer["x"], "y": peer["y"],
            "dominated_by": [{"scheduler": p["scheduler"], "beyond_noise": beyond_noise(p, peer)}
                             for p in over],
            "dominates": [{"scheduler": p["scheduler"], "beyond_noise": beyond_noise(peer, p)}
                          for p in under],
            "default": verdict([default] if default else []),
            "frontier": verdict(mine)})
    return out


def _names(recs: list[dict]) -> str:
    return ", ".join(r["scheduler"] + (" (beyond the noise)" if r["beyond_noise"] else
                                       " (not beyond the noise)" if r["beyond_noise"] is False
                                       else "") for r in recs)


def dominance_lines(points: list[dict], subject: str = "prism") -> list[str]:
    """dominance() in words, one line per peer, with every point's place."""
    recs = dominance(points, subject)
    if not recs:
        return []
    lines = []
    for d in recs:
        where = f"{d['peer']} ({d['x']:.2f}x, {d['y']:.1f} MiB/s)"
        verdict = {"dominates": f"{subject} dominates it",
                   "dominated": f"it dominates {subject}",
                   "neither": "neither dominates"}
        text = (f"- {where}: {subject}'s default: {verdict[d['default']]}"
                if d["default"] != "-" else f"- {where}:")
        text += f"; {subject}'s frontier: {verdict[d['frontier']]}."
        if d["dominated_by"]:
            text += f" Dominated by {_names(d['dominated_by'])}."
        if d["dominates"]:
            text += f" Dominates {_names(d['dominates'])}."
        lines.append(text)
    mine = [p for p in points if in_family(p["scheduler"], subject)]
    lines.append(f"- {subject}'s points: " + "; ".join(
        f"{p['scheduler']} {p['x']:.2f}x, {p['y']:.1f} MiB/s" for p in mine) + "."
                 if mine else "")
    return lines


def scheduler_colors(scheds: list[str]) -> dict[str, tuple]:
    """One colour per scheduler variant, the same in every plot of a report."""
    import matplotlib
    cmap = matplotlib.colormaps["tab10" if len(scheds) <= 10 else "tab20"]
    return {s: cmap(i % cmap.N) for i, s in enumerate(scheds)}


def plain_number(v: float) -> str:
    """A tick label as a person writes it: 0.5, 2, 150, 1000; never 2x10^0."""
    v = float(f"{v:.6g}")
    return f"{v:.12f}".rstrip("0").rstrip(".")


def log_ticks(lo: float, hi: float, want: int = 3) -> list[float]:
    """Round numbers between @lo and @hi for a log axis: the decades, or
    1-2-5 in each, or denser, whichever first gives @want of them."""
    import math
    ticks: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7),
                      (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [float(f"{m * 10.0 ** e:.6g}")
                 for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                 for m in mantissas]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) >= want:
            break
    return ticks


def _plain_log_axis(axis, lo: float, hi: float) -> None:
    from matplotlib import ticker
    axis.set_major_locator(ticker.FixedLocator(log_ticks(lo, hi)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: plain_number(v)))
    axis.set_minor_locator(ticker.NullLocator())


def _overlap(a, b) -> float:
    """The area two display-space boxes share."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


# Where a label may go, in points from its marker, nearest first.
_LABEL_OFFSETS = [(dx * k, dy * k) for k in (1, 2, 3, 4.5)
                  for dx, dy in ((7, 5), (7, -11), (-7, 5), (-7, -11), (0, 9), (0, -15),
                                 (10, -3), (-10, -3))]


def place_labels(fig, ax, labels: list[tuple[str, float, float]], fontsize: int = 8,
                 avoid: list | None = None, colors: list | None = None) -> list:
    """Label each (text, x, y) point of @ax, greedily: the first position
    of _LABEL_OFFSETS whose text stays inside the axes and overlaps no
    label placed before it, no marker and nothing in @avoid (display
    boxes); failing that, the position that overlaps least. A label set
    away from its point gets a thin line to it."""
    from matplotlib.transforms import Bbox
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    px = fig.dpi / 72
    markers = []
    for _, x, y in labels:
        cx, cy = ax.transData.transform((x, y))
        markers.append(Bbox.from_extents(cx - 5 * px, cy - 5 * px, cx + 5 * px, cy + 5 * px))
    taken = list(avoid or [])
    placed = []
    for i, (text, x, y) in enumerate(labels):
        color = colors[i] if colors else "black"
        best = None
        for dx, dy in _LABEL_OFFSETS:
            ann = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy),
                              fontsize=fontsize, ha="left" if dx > 0 else
                              "right" if dx < 0 else "center", va="bottom", color=color)
            box = ann.get_window_extent(renderer)
            outside = box.width * box.height - _overlap(box, frame)
            cost = outside * 10 + sum(_overlap(box, o) for o in taken + markers)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, ann, box, (dx, dy))
            else:
                ann.remove()
            if cost == 0:
                break
        assert best is not None
        _, ann, box, (dx, dy) = best
        if abs(dx) + abs(dy) > 20:
            ann.remove()
            ann = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy),
                              fontsize=fontsize, ha="left" if dx > 0 else
                              "right" if dx < 0 else "center", va="bottom", color=color,
                              arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5,
                                          "shrinkA": 0, "shrinkB": 4})
        taken.append(box)
        placed.append(ann)
    return placed


def tradeoff_figure(plt, points: list[dict], w, title: str, colors: dict):
    """The trade-off of a mix: the high job's figure under load over the
    common baseline (x) against the bulk job's throughput (y), on log
    axes labelled in plain numbers, with the summaries' intervals, each
    point named beside it, and the ideal corner marked: the best alone
    figure with the most bulk throughput any scheduler moved."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    best_y = max(p["y"] for p in points)
    xs = [v for p in points for v in (p["x_low"], p["x_high"])] + [1.0]
    ys = [v for p in points for v in (p["y_low"], p["y_high"]) if v > 0] + [best_y]
    xlo, xhi = min(xs) / 1.25, max(xs) * 1.25
    ylo, yhi = min(ys) / 1.25, max(ys) * 1.25
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xlo, xhi)
    ax.set_ylim(ylo, yhi)
    _plain_log_axis(ax.xaxis, xlo, xhi)
    _plain_log_axis(ax.yaxis, ylo, yhi)
    ax.fill_between([xlo, 1.0], best_y, yhi, color="tab:green", alpha=0.08, lw=0)
    ax.plot([1.0], [best_y], marker="*", markersize=15, color="gold", markeredgecolor="black",
            zorder=4, linestyle="none")
    ax.axvline(1.0, color="grey", lw=0.5)
    line = frontier(points)
    if len(line) >= 2:
        # prism's settings swept: the protection each buys, and its price.
        ax.plot([p["x"] for p in line], [p["y"] for p in line], linestyle="--", lw=1,
                color=colors.get(line[0]["scheduler"], "grey"), zorder=2,
                label="prism's frontier")
        ax.legend(fontsize=8, loc="lower right")
    for p in points:
        ax.errorbar([p["x"]], [max(p["y"], ylo)],
                    xerr=[[p["x"] - p["x_low"]], [p["x_high"] - p["x"]]],
                    yerr=[[max(0.0, p["y"] - max(p["y_low"], ylo))],
                          [p["y_high"] - p["y"]]], fmt="o",
                    capsize=3, color=colors.get(p["scheduler"]), zorder=3)
    what = metric_label(w.metric)
    ax.set_xlabel(f"{w.high_job} {what} under load / the best {what} alone of any "
                  "scheduler  (left is better)")
    ax.set_ylabel(f"{w.low_job} MiB/s  (higher is better)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.canvas.draw()
    place_labels(fig, ax, [("ideal", 1.0, best_y)]
                 + [(p["scheduler"], p["x"], max(p["y"], ylo)) for p in points],
                 colors=["black"] + [colors.get(p["scheduler"], "black") for p in points])
    return fig


BAR_METRICS = (("iops", "IOPS", 1), ("p99_us", "P99 latency (ms)", 1000),
               ("sys_cpu", "system CPU (%)", 1))


def bar_values(rows: list[dict], sched: str, job: str, metric: str,
               scale: float) -> tuple[float, float, float] | None:
    """A bar: the mean over the repetitions and the lowest and highest
    repetition (an interval that stays within what was measured, so
    never below zero), or None."""
    m = next((s["metrics"].get(metric) for s in rows
              if s["scheduler"] == sched and s["job"] == job), None)
    if not m or m.get("mean") is None:
        return None
    return m["min"] / scale, m["mean"] / scale, m["max"] / scale


def bars_figure(plt, rows: list[dict], scheds: list[str], jobs: list[str], title: str,
                colors: dict):
    """IOPS, P99 and CPU, each job on its own row of axes (a job's P99 is
    never read off an axis scaled for another's), one horizontal bar per
    scheduler with its name readable beside it."""
    height = max(1.8, 0.28 * len(scheds) + 0.9)
    fig, axes = plt.subplots(len(jobs), len(BAR_METRICS), squeeze=False, sharey="row",
                             figsize=(13, height * len(jobs) + 0.6))
    ys = list(range(len(scheds)))
    for ji, job in enumerate(jobs):
        for mi, (metric, label, scale) in enumerate(BAR_METRICS):
            ax = axes[ji][mi]
            ax.set_label(f"{metric} {job}")
            for y, sched in zip(ys, scheds, strict=True):
                v = bar_values(rows, sched, job, metric, scale)
                if v is None:
                    continue
                low, mean, high = v
                # Never below zero: runs that all measured the same
                # (icount) may leave the mean a rounding error outside.
                err = [[max(0.0, mean - low)], [max(0.0, high - mean)]]
                ax.barh(y, mean, 0.7, xerr=err, capsize=2,
                        color=colors.get(sched), error_kw={"lw": 0.8})
            ax.set_title(f"{job}: {label}", fontsize=9)
            ax.set_xlim(left=0)
            ax.tick_params(labelsize=8)
        axes[ji][0].set_yticks(ys)
        axes[ji][0].set_yticklabels(scheds)
        axes[ji][0].invert_yaxis()
    fig.suptitle(title)
    # Room for the title above the first row, however many rows there are.
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.2 / fig.get_figheight()))
    return fig


def series_bands(runs: list[dict], kernel: str, workload: str, sched: str, job: str,
                 key: str) -> list[tuple[int, float, float, float, int]]:
    """Per second of the run, over every repetition of @sched: (second,
    median, lowest, highest, repetitions) of @job's series @key, in us."""
    by_t: dict[int, list[float]] = {}
    for r in runs:
        if (r["kernel"], r["workload"], r["scheduler"]) != (kernel, workload, sched):
            continue
        rec = next((j for j in r["jobs"] if j["job"] == job), None)
        for t, v in (rec or {}).get(key) or []:
            by_t.setdefault(int(t), []).append(v)
    return [(t, statistics.median(vs), min(vs), max(vs), len(vs))
            for t, vs in sorted(by_t.items())]


def latency_figure(plt, runs: list[dict], kernel: str, workload: str, scheds: list[str],
                   job: str, title: str, colors: dict):
    """@job's latency per second under each scheduler, from every
    repetition: the median as a line, lowest to highest as a band; the
    legend outside the data."""
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.4))
    # Both from fio's per-second logs: the latency the headline uses
    # (submission + completion; fio's histogram logs hold completion
    # latency only, so no per-second percentile is drawn), and the work
    # done each second, where a starved second shows as a gap to zero.
    for ax, key, what, scale, unit in (
            (axes[0], "lat_series_us", "mean latency (submission + completion)", 1000, "ms"),
            (axes[1], "iops_series", "I/Os completed", 1, "IOPS")):
        values = []
        for sched in scheds:
            band = series_bands(runs, kernel, workload, sched, job, key)
            if not band:
                continue
            ts = [b[0] for b in band]
            ax.fill_between(ts, [b[2] / scale for b in band], [b[3] / scale for b in band],
                            color=colors.get(sched), alpha=0.15, lw=0)
            ax.plot(ts, [b[1] / scale for b in band], color=colors.get(sched), label=sched)
            values += [v / scale for b in band for v in b[1:4]]
        ax.set_xlabel("time (s)")
        ax.set_ylabel(unit)
        ax.set_title(f"{job}: {what} per second", fontsize=10)
        positive = [v for v in values if v > 0]
        if unit == "ms" and positive and max(positive) > 4 * min(positive):
            # A scheduler ten times slower would squeeze the rest flat.
            lo, hi = min(positive) / 1.1, max(positive) * 1.1
            ax.set_yscale("log")
            ax.set_ylim(lo, hi)
            _plain_log_axis(ax.yaxis, lo, hi)
        else:
            ax.set_ylim(bottom=0)
    if axes[1].get_lines() or axes[0].get_lines():
        src = axes[1] if axes[1].get_lines() else axes[0]
        handles, labels = src.get_legend_handles_labels()
        axes[1].legend(handles, labels, fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plots(out: Path, runs: list[dict], summaries: list[dict]) -> list[str]:
    """Per workload, at most three pictures: bars (IOPS, P99, CPU; one row
    of axes per job), the shares against the ideal or the trade-off of a
    mix, and the high job's latency and work over time from every
    repetition. A workload that is only another's baseline gets none
    (its figures are in the ratios and tables)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    kernels = sorted({s["kernel"] for s in summaries})
    for kernel in kernels:
        baselines = {w.baseline for w in WORKLOADS.values() if w.baseline}
        for workload in sorted({s["workload"] for s in summaries if s["kernel"] == kernel}):
            if workload in baselines:
                continue
            rows = [s for s in summaries if s["kernel"] == kernel and s["workload"] == workload]
            scheds = list(dict.fromkeys(s["scheduler"] for s in rows))
            jobs = list(dict.fromkeys(s["job"] for s in rows))
            colors = scheduler_colors(scheds)
            reps = len({r["rep"] for r in runs if r["kernel"] == kernel
                        and r["workload"] == workload})
            fig = bars_figure(plt, rows, scheds, jobs,
                              f"{workload} on {kernel}: mean of {reps} repetition"
                              f"{'s' if reps != 1 else ''} (geometric for P99); whiskers from "
                              "lowest to highest",
                              colors)
            _save(plt, fig, out, f"{kernel}-{workload}-bars.png", made)

            w = WORKLOADS.get(workload)
            if w and w.share:
                fig, ax = plt.subplots(figsize=(10, 4))
                width = 0.8 / max(1, len(scheds))
                for si, sched in enumerate(scheds):
                    vals = [next((s["metrics"]["share"]["mean"] * 100 for s in rows
                                  if s["scheduler"] == sched and s["job"] == job
                                  and "share" in s["metrics"]), 0) for job in jobs]
                    ax.bar([i + si * width for i in range(len(jobs))], vals, width, label=sched,
                           color=colors[sched])
                centres = [i + width * (len(scheds) - 1) / 2 for i in range(len(jobs))]
                ax.plot(centres, [100 * (8 - i) / 36 for i in range(len(jobs))],
                        "k_", markersize=20, label="ideal")
                ax.set_xticks(centres)
                ax.set_xticklabels(jobs, rotation=20, fontsize=8)
                ax.set_ylabel("share of total IOPS (%)")
                ax.set_title(f"{workload} on {kernel}: shares by BE level")
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                          borderaxespad=0)
                fig.tight_layout()
                _save(plt, fig, out, f"{kernel}-{workload}-shares.png", made)
            points = tradeoff_points(runs, summaries, kernel, workload)
            # A bulk job that moved nothing anywhere leaves no log axis to draw.
            if points and w and max(p["y"] for p in points) > 0:
                fig = tradeoff_figure(
                    plt, points, w, f"{workload} on {kernel}: protection against progress\n"
                    f"({reps} repetition{'s' if reps != 1 else ''}; "
                    + ("95% intervals" if reps >= stats.MIN_REPS_FOR_INTERVAL
                       else "lowest to highest") + "; ideal: the shaded corner)", colors)
                _save(plt, fig, out, f"{kernel}-{workload}-tradeoff.png", made)
            job = w.high_job if w and w.high_job else jobs[0]
            fig = latency_figure(plt, runs, kernel, workload, scheds, job,
                                 f"{workload} on {kernel}: {job} over time (median of "
                                 f"{reps} repetition{'s' if reps != 1 else ''}; band: lowest "
                                 "to highest)", colors)
            _save(plt, fig, out, f"{kernel}-{workload}-latency.png", made)
    return made


def twin_line(plan: dict) -> str:
    """What the twin's name stood for (plan "twin", bench/plan.py), or ""."""
    tw = plan.get("twin")
    if not tw:
        return ""
    release = f" {tw['version']}" if tw.get("version") else ""
    return (f"{tw['scheduler']} is prism{release} at `{tw['commit'][:12]}` ({tw['rev']}), "
            f"built as {tw['module']}.ko and loaded beside prism in the same boots: the paired "
            f"ratios compare the two repetition by repetition (vs {tw['scheduler']}). "
            "None of prism's debugfs figures are read for it (its latency histograms are on "
            "where prism's are, for the same bookkeeping, but not read).")


SUMMARY_SENTENCE = (
    "Figures: latencies and ratios are geometric means over the repetitions, throughput "
    "arithmetic; in brackets a 95% interval (from five repetitions; on the log scale for "
    "the geometric ones, cut at zero for the others, so never below it) or, with fewer "
    "repetitions, the lowest to the highest. A job that completed nothing in a repetition "
    "is starved there: it counts, with zero throughput and its window as its latency "
    "(the least it waited), and its row says so.")

IO_TICKS_SENTENCE = (
    "io_ticks busy (the block layer's /sys/block/DEV/stat field 10: time with at least "
    "one request in the driver) was {lo:.0%} to {hi:.0%} over the runs. It cannot tell one "
    "request in flight from many, so it reads near 100% for a drive with many channels "
    "or a volume with a deep queue that was mostly left idle: how much of the drive's "
    "capacity was used is the drive's own trace's figure (\"drive used\"), where there is one.")


def report_md(out: Path, command: str, plan: dict, runs: list[dict],
              summaries: list[dict], images: list[str], extra: dict | None = None) -> str:
    extra = extra or {}
    kernels = sorted({r["kernel_release"] or r["kernel"] for r in runs})
    utils = [r["device_util"] for r in runs if r.get("device_util") is not None]
    lines = [
        "# prism bench report", "",
        f"Command: `{command}`", "",
        f"prism source: `{plan['source']}`." if plan.get("source") else "", "",
        twin_line(plan), "",
        f"Kernel(s): {', '.join(kernels)}. Device profile: {plan['profile']}"
        + (f" ({plan['device']})" if plan.get("device") else "")
        + f". {plan['reps']} repetitions of {plan['runtime']} s after {plan['ramp']} s ramp,"
        + (f" over {plan['boots']} boots," if plan.get("boots", 1) > 1 else "")
        + " schedulers interleaved.", "", SUMMARY_SENTENCE, "",
        (f"Guest: {plan['vcpus']} vCPU{'s' if plan['vcpus'] != 1 else ''}. "
         if plan.get("vcpus") else "")
        + ("Guest clock: instructions (QEMU `-icount shift=0`, one nanosecond per instruction"
           " executed): rates and times measure the CPU work per I/O, not the host's speed."
           if plan.get("clock") == "instructions" else ""), "",
        IO_TICKS_SENTENCE.format(lo=min(utils), hi=max(utils)) if utils else "", "",
        "Latency is submission + completion (fio `lat`), in ms.", "",
    ]
    for kernel in sorted({s["kernel"] for s in summaries}):
        lines += yardstick_tables(runs, summaries, plan, kernel, extra)
        table = overview_table(summaries, kernel)
        if table:
            lines += [f"## Overview ({kernel})", "",
                      "Isolation, own: the job's figure under interference over the same "
                      "figure alone under the same scheduler; common: over the best figure "
                      "alone of any scheduler in this report (1.0 is perfect).", ""] + table
        lines += paired_table(paired_ratios(runs, kernel))
    for kernel in sorted({s["kernel"] for s in summaries}):
        for workload in list(dict.fromkeys(s["workload"] for s in summaries)):
            rows = [s for s in summaries if s["kernel"] == kernel and s["workload"] == workload]
            if not rows:
                continue
            w = WORKLOADS.get(workload)
            lines += [f"## {workload} ({kernel})", "",
                      (f"Seed {w.seed}: {w.description}." if w else ""), "",
                      "| scheduler | job | class | IOPS | MiB/s | mean latency | P99 | P99.9 "
                      "| sys CPU % | worst second IOPS | isolation (P99 / alone) |",
                      "|---|---|---|---|---|---|---|---|---|---|---|"]
            classes = {j["job"]: prio_label(j) for r in runs if r["workload"] == workload
                       for j in r["jobs"]}
            for s in rows:
                m = s["metrics"]
                lines.append(f"| {s['scheduler']} | {s['job']}{starved_note(s)} | "
                             f"{classes.get(s['job'], '-')} | "
                             f"{_fmt(m.get('iops'))} | {_fmt(m.get('bw_kib'), 1024, 1)} | "
                             f"{_fmt(m.get('lat_mean_us'), 1000, 2)} | "
                             f"{_fmt(m.get('p99_us'), 1000, 2)} | "
                             f"{_fmt(m.get('p99_9_us'), 1000, 2)} | "
                             f"{_fmt(m.get('sys_cpu'), 1, 1)} | {_fmt(m.get('min_iops_1s'))} | "
                             f"{_fmt(m.get('isolation_ratio'), 1, 2)} |")
            lines.append("")
            lines += late_lines(rows)
            if w and w.app == "pgbench":
                lines += pgbench_table(rows, w)
            lines += prio_table(rows)
            both = [s for s in rows if "read_p99_us" in s["metrics"]
                    and "write_p99_us" in s["metrics"]]
            if both:
                lines += ["Jobs that read and write, each direction apart (the table above "
                          "gives both together; latency in ms):", "",
                          "| scheduler | job | read P50 | read P99 | write P50 | write P99 |",
                          "|---|---|---|---|---|---|"]
                for s in both:
                    m = s["metrics"]
                    lines.append(f"| {s['scheduler']} | {s['job']} | " + " | ".join(
                        _fmt(m.get(k), 1000, 2) for k in ("read_p50_us", "read_p99_us",
                                                          "write_p50_us", "write_p99_us"))
                        + " |")
                lines.append("")
            fsync_rows = [s for s in rows if "fsync_p99_us" in s["metrics"]]
            if fsync_rows:
                lines += ["fsync latency (ms):", "",
                          "| scheduler | job | mean | P50 | P99 | P99.9 |",
                          "|---|---|---|---|---|---|"]
                for s in fsync_rows:
                    m = s["metrics"]
                    lines.append(f"| {s['scheduler']} | {s['job']} | "
                                 + " | ".join(_fmt(m.get(k), 1000, 2) for k in (
                                     "fsync_mean_us", "fsync_p50_us", "fsync_p99_us",
                                     "fsync_p99_9_us")) + " |")
                lines.append("")
            if w and w.share:
                lines += ["Shares of the total IOPS against the ideal (weight 8 - BE level; "
                          "at one level, equal shares by process):", "",
                          "| scheduler | mean deviation from ideal | "
                          + " | ".join(s["job"] for s in rows
                                       if s["scheduler"] == rows[0]["scheduler"])
                          + " |", "|---|---|" + "---|" * sum(
                              1 for s in rows if s["scheduler"] == rows[0]["scheduler"])]
                for sched in dict.fromkeys(s["scheduler"] for s in rows):
                    jobs = [s for s in rows if s["scheduler"] == sched]
                    dev = _fmt(jobs[0]["metrics"].get("share_mean_dev"), 0.01, 0)
                    lines.append(f"| {sched} | {dev} % | "
                                 + " | ".join(_fmt(s["metrics"].get("share"), 0.01, 1) + " %"
                                              for s in jobs) + " |")
                lines.append("")
            mine = [r for r in runs if r["kernel"] == kernel and r["workload"] == workload]
            lines += machine_table(mine)
            lines += flight_table(mine)
            lines += flight_series_table(mine)
            lines += cost_table(mine)
            lines += latency_table(mine)
            lines += drive_table([r for r in mine if "drive" in r])
            for img in images:
                if img.startswith(f"{kernel}-{workload}-"):
                    lines.append(f"![{img}]({img})")
            lines.append("")
    lines += family_tables(summaries)
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def prio_table(rows: list[dict]) -> list[str]:
    """Jobs whose requests carry different priorities (fio cmdprio): each
    priority's completions and percentiles, per scheduler."""
    lines: list[str] = []
    for s in rows:
        labels = sorted({k[len("prio_"):-len("_p99_us")] for k in s["metrics"]
                         if k.startswith("prio_") and k.endswith("_p99_us")})
        if len(labels) < 2:
            continue
        if not lines:
            lines = ["Priorities within one job (fio's per-priority figures; latency in ms):",
                     "", "| scheduler | job | priority | I/Os | P50 | P99 |",
                     "|---|---|---|---|---|---|"]
        m = s["metrics"]
        for label in labels:
            lines.append(f"| {s['scheduler']} | {s['job']} | {label} | "
                         f"{_fmt(m.get(f'prio_{label}_ios'))} | "
                         f"{_fmt(m.get(f'prio_{label}_p50_us'), 1000, 2)} | "
                         f"{_fmt(m.get(f'prio_{label}_p99_us'), 1000, 2)} |")
    return lines + [""] if lines else []


def pgbench_table(rows: list[dict], w) -> list[str]:
    """Transactions as pgbench logged them, one row per scheduler, with
    what ran beside them."""
    lines = ["Transactions (from pgbench's per-transaction log; latency in ms):", "",
             "| scheduler | TPS | P50 | P95 | P99 | P99 / alone |"
             + (f" {w.low_job} MiB/s |" if w.low_job else ""),
             "|---|---|---|---|---|---|" + ("---|" if w.low_job else "")]
    for sched in dict.fromkeys(s["scheduler"] for s in rows):
        mine = {s["job"]: s["metrics"] for s in rows if s["scheduler"] == sched}
        m = mine.get("pgbench", {})
        line = (f"| {sched} | {_fmt(m.get('iops'), 1, 1)} | "
                + " | ".join(_fmt(m.get(k), 1000, 2) for k in ("p50_us", "p95_us", "p99_us"))
                + f" | {_fmt(m.get('isolation_ratio'), 1, 2)} |")
        if w.low_job:
            line += f" {_fmt(mine.get(w.low_job, {}).get('bw_kib'), 1024, 1)} |"
        lines.append(line)
    return lines + [""]


def late_lines(rows: list[dict], threshold_s: float = 0.5) -> list[str]:
    """Jobs that completed nothing for a while at the start of the
    measurement window (stats.common_window): a scheduler starved them,
    or, for a job that writes batches into the page cache and fsyncs
    them (stats.fsync_batch), its first fsync took that long."""
    out, batches = [], {}
    for s in rows:
        late, window = s["metrics"].get("late_s"), s["metrics"].get("window_s")
        if not (late and window and late["mean"] >= threshold_s):
            continue
        batch = s["metrics"].get("fsync_batch")
        head = (f"- {s['job']} under {s['scheduler']} completed no I/O for the first "
                f"{late['mean']:.1f} s of the {window['mean']:.1f} s window "
                f"(mean of {late['n']} runs; longest {late['max']:.1f} s)")
        if batch and batch.get("mean"):
            batches[s["job"]] = batch["mean"]
            out.append(head + ".")
        else:
            out.append(head + ": starved.")
    for job, n in batches.items():
        # Its writes count when write() returns, into the page cache;
        # what it waited for was the device taking a batch of them.
        out.append(f"\n{job} writes {n:.0f} blocks into the page cache, which returns at "
                   "once, then waits in fsync until the device has taken them all: the time "
                   "above is how long its first fsync in the window took, at least. It was "
                   "slowed, not necessarily starved; under prism, how many of its writes "
                   "the device took is in the latency table's row for its tier.")
    return out + [""] if out else []


def drive_figures(runs: list[dict], plan: dict) -> dict[str, dict]:
    """Per scheduler: the drive's own use (device_use) and the bulk job's
    commands served in sequence, summarised over its runs."""
    out = {}
    for sched in dict.fromkeys(r["scheduler"] for r in runs):
        drives = [r["drive"] for r in runs if r["scheduler"] == sched and r.get("drive")]
        out[sched] = {
            "use": stats.summarize([device_use(d, plan) for d in drives]),
            "bulk_seq": stats.summarize([d.get("bulk_sequential_frac") for d in drives])}
    return out


def yardstick_tables(runs: list[dict], summaries: list[dict], plan: dict, kernel: str,
                     extra: dict) -> list[str]:
    """For each fio mix of a latency-sensitive and a bulk job: one row
    per scheduler with the figures every scheduler is judged by on one
    scale: the high job's tail under load in ms and over the common
    baseline (the best alone of any scheduler here, named), its own-alone
    ratio beside it, the bulk and total throughput, work conservation
    (total over the best total here), and from the emulated drive's trace
    how much of it was used and how much of the bulk work it served in
    sequence; then who dominates whom on the trade-off, both ways."""
    lines: list[str] = []
    baselines = extra.get("baselines", {})
    best_totals = extra.get("best_totals", {})
    for workload in dict.fromkeys(s["workload"] for s in summaries if s["kernel"] == kernel):
        w = WORKLOADS.get(workload)
        if not (w and w.high_job and w.low_job and w.baseline):
            continue
        base = baselines.get(f"{kernel} {workload} {w.high_job}")
        if not base:
            continue
        what = metric_label(w.metric)
        mine = [r for r in runs if r["kernel"] == kernel and r["workload"] == workload]
        drive = drive_figures(mine, plan)
        by = {(s["scheduler"], s["job"]): s for s in summaries
              if s["kernel"] == kernel and s["workload"] == workload}
        top = best_totals.get(f"{kernel} {workload}")
        lines += [f"## The yardstick: {workload} ({kernel})", "",
                  f"Common baseline: {w.high_job}'s {what} alone under {base['scheduler']}, "
                  f"{base['value'] / 1000:.2f} ms, the best of the schedulers here."
                  + (f" Best total throughput: {top['scheduler']}, {top['kib'] / 1024:.1f} "
                     "MiB/s." if top else ""), "",
                  f"| scheduler | {w.high_job} {what} ms | / common baseline | / own alone "
                  f"| {w.low_job} MiB/s | total MiB/s | work (total / best) | drive used % "
                  "| bulk in sequence % |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for sched in dict.fromkeys(r["scheduler"] for r in mine):
            hi = by.get((sched, w.high_job), {})
            lo = by.get((sched, w.low_job), {})
            m, ml = hi.get("metrics", {}), lo.get("metrics", {})
            total = stats.summarize([r.get("total_kib") for r in mine if r["scheduler"] == sched])
            lines.append(
                f"| {sched} | {_fmt(m.get(w.metric), 1000, 2)}{starved_note(hi)} | "
                f"{_fmt(m.get('common_ratio'), 1, 2)} | {_fmt(m.get('isolation_ratio'), 1, 2)} | "
                f"{_fmt(ml.get('bw_kib'), 1024, 1)}{starved_note(lo)} | "
                f"{_fmt(total, 1024, 1)} | {_fmt(m.get('work_ratio'), 1, 2)} | "
                f"{_fmt(drive[sched]['use'], 0.01, 0)} | "
                f"{_fmt(drive[sched]['bulk_seq'], 0.01, 0)} |")
        lines.append("")
        stands = dominance_lines(tradeoff_points(runs, summaries, kernel, workload))
        if stands:
            lines += [f"Who dominates whom ({w.high_job}'s {what} over the common baseline, "
                      f"lower is better; {w.low_job} MiB/s, higher is better; a point "
                      "dominates another at least as good on both, on the means; beyond the "
                      "noise: paired by repetition, one axis's interval wholly in its favour "
                      "and neither wholly against it):", ""] + stands + [""]
    return lines


def overview_table(summaries: list[dict], kernel: str) -> list[str]:
    """One row per headline figure of each workload, one column per
    scheduler: the high job's isolation ratio and the bulk job's
    throughput for the mixes, the mean share deviation, and IOPS and P99
    of the workloads that run alone. Baseline-only workloads are left out
    (their figures are in the ratios)."""
    rows_in = [s for s in summaries if s["kernel"] == kernel]
    scheds = list(dict.fromkeys(s["scheduler"] for s in rows_in))
    by = {(s["workload"], s["job"], s["scheduler"]): s["metrics"] for s in rows_in}
    baselines = {w.baseline for w in WORKLOADS.values() if w.baseline}
    out = []

    def row(label: str, workload: str, job: str, metric: str, scale: float, digits: int):
        cells = [_fmt(by.get((workload, job, sc), {}).get(metric), scale, digits) for sc in scheds]
        if any(c != "-" for c in cells):
            out.append(f"| {workload} | {label} | " + " | ".join(cells) + " |")
    for workload in dict.fromkeys(s["workload"] for s in rows_in):
        w = WORKLOADS.get(workload)
        if not w or workload in baselines:
            continue
        jobs = list(dict.fromkeys(s["job"] for s in rows_in if s["workload"] == workload))
        if w.high_job and w.baseline:
            what = metric_label(w.metric)
            row(f"{w.high_job} {what} / best alone (common)", workload, w.high_job,
                "common_ratio", 1, 2)
            row(f"{w.high_job} {what} / own alone", workload, w.high_job,
                "isolation_ratio", 1, 2)
        if w.high_job and w.family:
            row(f"{w.high_job} MiB/s", workload, w.high_job, "bw_kib", 1024, 1)
        if w.low_job:
            row(f"{w.low_job} MiB/s", workload, w.low_job, "bw_kib", 1024, 1)
        if w.high_job and w.low_job and not w.app:
            row("work: total MiB/s / best total", workload, w.high_job, "work_ratio", 1, 2)
        if w.share:
            row("mean deviation from ideal shares (%)", workload, jobs[0], "share_mean_dev",
                0.01, 0)
        if not (w.high_job or w.low_job or w.share):
            for job in jobs:
                row(f"{job} IOPS", workload, job, "iops", 1, 0)
                row(f"{job} P99 (ms)", workload, job, "p99_us", 1000, 2)
    if not out:
        return []
    return (["| workload | figure | " + " | ".join(scheds) + " |",
             "|---|---|" + "---|" * len(scheds)] + out + [""])


PAIRED_FIGURES = (("IOPS", "iops"), ("P99", "p99_us"))


def paired_ratios(runs: list[dict], kernel: str, subject: str = "prism") -> list[dict]:
    """@subject against every other scheduler, job by job, paired by
    repetition (stats.paired_ratio): one record per workload, job, figure
    and other scheduler."""
    mine = [r for r in runs if r["kernel"] == kernel]
    by = {(r["workload"], r["scheduler"], r["rep"]): {j["job"]: j for j in r["jobs"]}
          for r in mine}
    out = []
    for workload in dict.fromkeys(r["workload"] for r in mine):
        scheds = list(dict.fromkeys(r["scheduler"] for r in mine if r["workload"] == workload))
        if subject not in scheds:
            continue
        reps = sorted({r["rep"] for r in mine if r["workload"] == workload})
        jobs = list(dict.fromkeys(j["job"] for r in mine if r["workload"] == workload
                                  and r["scheduler"] == subject for j in r["jobs"]))
        for job in jobs:
            for label, key in PAIRED_FIGURES:
                for other in scheds:
                    if other == subject:
                        continue
                    pairs = []
                    for rep in reps:
                        a = by.get((workload, subject, rep), {}).get(job, {}).get(key)
                        b = by.get((workload, other, rep), {}).get(job, {}).get(key)
                        if a is not None and b is not None:
                            pairs.append((a, b))
                    r = stats.paired_ratio(pairs)
                    if r["n"]:
                        out.append({"kernel": kernel, "workload": workload, "job": job,
                                    "figure": label, "other": other, **r})
    return out


def paired_table(records: list[dict], subject: str = "prism") -> list[str]:
    if not records:
        return []
    others = list(dict.fromkeys(r["other"] for r in records))
    cells = {(r["workload"], r["job"], r["figure"], r["other"]): r for r in records}

    def cell(r: dict | None) -> str:
        if not r:
            return "-"
        return _fmt({"mean": r["ratio"], "low": r["low"], "high": r["high"]}, 1, 2)
    lines = [f"{subject} over each other scheduler, repetition by repetition (geometric mean "
             "of the per-repetition ratios; in brackets the 95% interval from five "
             "repetitions, else the range; one that excludes 1.00 is a difference beyond "
             "the noise between repetitions):", "",
             "| workload | job | figure | " + " | ".join(f"vs {o}" for o in others) + " |",
             "|---|---|---|" + "---|" * len(others)]
    for key in dict.fromkeys((r["workload"], r["job"], r["figure"]) for r in records):
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | "
                     + " | ".join(cell(cells.get(key + (o,))) for o in others) + " |")
    return lines + [""]


def prio_label(job: dict) -> str:
    """A job's I/O priority as fio set it: RT0, BE4, IDLE; "-" if unset."""
    cls = {"1": "RT", "2": "BE", "3": "IDLE"}.get(str(job.get("prioclass")))
    if not cls:
        return "-"
    return cls if cls == "IDLE" else f"{cls}{job.get('prio') or 0}"


def machine_table(runs: list[dict]) -> list[str]:
    """Per scheduler: the device's utilisation and the whole machine's CPU
    time during the runs (fio's usr/sys above count only its own threads;
    completions run in interrupts and softirqs)."""
    if not any("cpu_all" in r for r in runs):
        return []
    lines = ["Device utilisation and the whole guest's CPU time (all vCPUs, %):", "",
             "| scheduler | io_ticks busy % | CPU busy % | user % | system % | irq+softirq % |",
             "|---|---|---|---|---|---|"]
    for sched in dict.fromkeys(r["scheduler"] for r in runs):
        mine = [r for r in runs if r["scheduler"] == sched]

        def col(values: list, scale: float = 1.0, digits: int = 1) -> str:
            return _fmt(stats.summarize([v for v in values if v is not None]), scale, digits)
        cpu = [r.get("cpu_all", {}) for r in mine]
        lines.append(f"| {sched} | {col([r.get('device_util') for r in mine], 0.01, 0)} | "
                     + " | ".join(col([c.get(k) for c in cpu])
                                  for k in ("busy", "user", "system", "irq")) + " |")
    return lines + [""]


def flight_table(runs: list[dict]) -> list[str]:
    """prism's in-flight control at the end of each prism run (debugfs
    "flight"), per scheduler variant: what it measured and how often it
    held lower tiers back, so a result can be read against its decisions."""
    rows = [r for r in runs if r.get("prism_flight")]
    if not rows:
        return []
    lines = ["prism's in-flight control at the end of the runs (debugfs `flight`; times in "
             "ms; holds are dispatch calls that held lower tiers back):", "",
             "| scheduler | window | HIGH think | NORMAL think | LOW service | lower limit "
             "| target | held in window | held for depth | of which paced | held for a flow "
             "| holds waived, tagless | LOW by share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def flight(key: str, samples: str | None = None):
        def get(r):
            f = r["prism_flight"]
            return f.get(key) if samples is None or f.get(samples) else None
        return get

    def think(tier: str):
        def get(r):
            t = r["prism_flight"].get(tier, {})
            return t.get("think_us") if t.get("think_samples") else None
        return get

    def shared(r):
        t = r.get("prism_tiers", {}).get("low", {})
        return t["shared"] / t["dispatched"] if t.get("dispatched") else None

    for sched in dict.fromkeys(r["scheduler"] for r in rows):
        mine = [r for r in rows if r["scheduler"] == sched]

        def col(get, scale: float, digits: int, mine=mine) -> str:
            return _runs_cell(mine, get, scale, digits)
        lines.append(f"| {sched} | {col(flight('window_us'), 1000, 2)} | "
                     f"{col(think('high'), 1000, 2)} | {col(think('normal'), 1000, 2)} | "
                     f"{col(flight('bulk_us', 'bulk_samples'), 1000, 2)} | "
                     f"{col(flight('lower_limit'), 1, 0)} | "
                     f"{col(flight('target_us'), 1000, 2)} | {col(flight('held_window'), 1, 0)} | "
                     f"{col(flight('held_depth'), 1, 0)} | {col(flight('held_paced'), 1, 0)} | "
                     f"{col(flight('held_flow'), 1, 0)} | "
                     f"{col(flight('tags_short'), 1, 0)} | {col(shared, 0.01, 0)} % |")
    return lines + [""]


def cost_table(runs: list[dict]) -> list[str]:
    """prism's cost model at the end of each prism run (debugfs "cost"),
    per scheduler variant: what it charged for four reference requests
    (means over the runs, in us) and whether it was learning, so that a
    variant with cost_model=auto can be read against what it learned."""
    rows = [r for r in runs if r.get("prism_cost", {}).get("cost_ns")]
    if not rows:
        return []
    lines = ["prism's cost model at the end of the runs (debugfs `cost`: the estimated "
             "device time charged for a request, in us; learning: off, started, or "
             "in_force once the learned coefficients replaced the defaults):", "",
             "| scheduler | media | learning | 4 KiB random read | 4 KiB sequential read "
             "| 1 MiB sequential read | 4 KiB random write |",
             "|---|---|---|---|---|---|---|"]

    def ns(key: str):
        return lambda r: float(r["prism_cost"]["cost_ns"].get(key, "nan"))

    for sched in dict.fromkeys(r["scheduler"] for r in rows):
        mine = [r for r in rows if r["scheduler"] == sched]
        media = "/".join(dict.fromkeys(r["prism_cost"].get("model", {}).get("model", "?")
                                       for r in mine))
        learning = "/".join(dict.fromkeys(r["prism_cost"].get("learning", {})
                                          .get("learning", "?") for r in mine))
        lines.append(f"| {sched} | {media} | {learning} | "
                     + " | ".join(_runs_cell(mine, ns(k), 1000, 1)
                                  for k in ("read_4k_rand", "read_4k_seq", "read_1m_seq",
                                            "write_4k_rand")) + " |")
    return lines + [""]


def flight_series_table(runs: list[dict]) -> list[str]:
    """The depth controller during each prism run (debugfs "flight" once
    a second after the ramp): the limit on the lower tiers' requests in
    flight and their paced duty, each run's median and least, and the
    part of the samples in which it held them below the device's depth;
    means over the runs."""
    rows = [r for r in runs if r.get("prism_flight_series")]
    if not rows:
        return []
    lines = ["The depth controller during the runs (debugfs `flight` once a second after "
             "the ramp; each run's median and least, then the mean over the runs; limited: "
             "the samples with the lower tiers held below the device's depth or paced):", "",
             "| scheduler | samples | lower limit, median | lower limit, least "
             "| paced duty, median (%) | limited |",
             "|---|---|---|---|---|---|"]

    def per_run(r: dict, key: str, how) -> float | None:
        vals = [s[key] for s in r["prism_flight_series"] if s.get(key) is not None]
        return how(vals) if vals else None

    def limited(r: dict) -> float | None:
        samples = [s for s in r["prism_flight_series"]
                   if s.get("lower_limit") is not None and s.get("device_depth")]
        if not samples:
            return None
        return sum(s["lower_limit"] < s["device_depth"] or
                   (s.get("lower_duty") or 100) < 100 for s in samples) / len(samples)

    for sched in dict.fromkeys(r["scheduler"] for r in rows):
        mine = [r for r in rows if r["scheduler"] == sched]
        lines.append(
            f"| {sched} | {_runs_cell(mine, lambda r: len(r['prism_flight_series']))} | "
            f"{_runs_cell(mine, lambda r: per_run(r, 'lower_limit', statistics.median), 1, 1)} | "
            f"{_runs_cell(mine, lambda r: per_run(r, 'lower_limit', min))} | "
            f"{_runs_cell(mine, lambda r: per_run(r, 'lower_duty', statistics.median))} | "
            f"{_runs_cell(mine, limited, 0.01)} % |")
    return lines + [""]


def latency_table(runs: list[dict]) -> list[str]:
    """prism's own latency histograms (debugfs "latency", counted from
    the end of the ramp): per tier and direction, how long requests
    waited in the scheduler and how long the device took, next to fio's
    end-to-end figures."""
    rows = [r for r in runs if r.get("prism_latency")]
    if not rows:
        return []
    lines = ["prism's latency histograms (debugfs `latency`, from the end of the ramp; wait: "
             "allocation to dispatch, device: dispatch to completion; ms; percentiles "
             "interpolated inside buckets of 1.33-1.5x):", "",
             "| scheduler | tier | direction | requests | wait P50 | wait P99 | device P50 "
             "| device P99 |", "|---|---|---|---|---|---|---|---|"]
    for sched in dict.fromkeys(r["scheduler"] for r in rows):
        mine = [r for r in rows if r["scheduler"] == sched]
        keys = sorted({k.split(" ", 1)[1] for r in mine for k in r["prism_latency"]["hists"]},
                      key=lambda k: (["high", "normal", "low"].index(k.split()[0]), k))
        for key in keys:
            def figure(kind: str, q: float | None, key=key, mine=mine) -> dict:
                vals = []
                for r in mine:
                    lat = r["prism_latency"]
                    h = lat["hists"].get(f"{kind} {key}", {})
                    vals.append(sum(h.values()) if q is None
                                else stats.hist_quantile(lat["bounds_ns"], h, q))
                return stats.summarize([v for v in vals if v is not None])
            tier, direction = key.split()
            lines.append(f"| {sched} | {tier.upper()} | {direction} | "
                         f"{_fmt(figure('device', None))} | "
                         f"{_fmt(figure('wait', 0.5), 1e6, 2)} | "
                         f"{_fmt(figure('wait', 0.99), 1e6, 2)} | "
                         f"{_fmt(figure('device', 0.5), 1e6, 2)} | "
                         f"{_fmt(figure('device', 0.99), 1e6, 2)} |")
    return lines + [""]


def drive_table(runs: list[dict]) -> list[str]:
    """The emulated drive's own view of @runs (one workload), per
    scheduler: how much it did and how far it had to move for it."""
    if not runs:
        return []
    lines = ["What the emulated drive served (from its trace; media operations are reads, "
             "uncached writes and cache write-backs):", "",
             "| scheduler | media ops/s | mean service ms | mean jump MB | sequential % "
             "| media busy % | replies late ms |", "|---|---|---|---|---|---|---|"]
    for sched in dict.fromkeys(r["scheduler"] for r in runs):
        drives = [dict(r["drive"], ops_per_s=r["drive"]["media_ops"] / r["wall_s"])
                  for r in runs if r["scheduler"] == sched and r.get("wall_s")]

        def col(key: str, scale: float, digits: int, drives=drives) -> str:
            return _fmt(stats.summarize([d.get(key) for d in drives]), scale, digits)
        lines.append(f"| {sched} | {col('ops_per_s', 1, 0)} | {col('service_ms_mean', 1, 2)} | "
                     f"{col('jump_mb_mean', 1, 1)} | {col('sequential_frac', 0.01, 0)} | "
                     f"{col('media_busy_frac', 0.01, 0)} | {col('late_ms_mean', 1, 3)} |")
    return lines + [""] + lateness_lines(runs)


LATE_FRACTION = 0.05


def lateness_lines(runs: list[dict]) -> list[str]:
    """The drive's server answers each command when the model says it
    completes; a reply sent later than that (the host too busy to keep
    time) means the model did not set the pace. Late by more than
    LATE_FRACTION of the mean service time: the profile was not
    device-bound in those runs, and the report says so."""
    out = []
    for sched in dict.fromkeys(r["scheduler"] for r in runs):
        drives = [r["drive"] for r in runs if r["scheduler"] == sched
                  and r["drive"].get("service_ms_mean")]
        if not drives:
            continue
        late = stats.summarize([d.get("late_ms_mean") for d in drives])["mean"] or 0.0
        service = stats.summarize([d["service_ms_mean"] for d in drives])["mean"]
        if late > LATE_FRACTION * service:
            out.append(f"- Under {sched} the drive's replies were {late:.3f} ms late on "
                       f"average, {late / service:.0%} of its {service:.2f} ms mean service "
                       "time: the host's server added that to every command, so these runs "
                       "were not purely device-bound.")
    return out + [""] if out else []


def family_tables(summaries: list[dict]) -> list[str]:
    """For a family of workloads varying one parameter (token_*): the high
    job's throughput under each, and its spread (standard deviation of the
    per-workload means, MiB/s) per scheduler: seed 002's isolation figure."""
    lines = []
    families = {w.family for w in WORKLOADS.values() if w.family}
    for fam in sorted(families):
        members = [w for w in WORKLOADS.values() if w.family == fam]
        for kernel in sorted({s["kernel"] for s in summaries}):
            rows = {(s["workload"], s["scheduler"]): s for s in summaries
                    if s["kernel"] == kernel and s["job"] == members[0].high_job
                    and s["workload"] in {w.name for w in members}}
            present = [w for w in members if any(k[0] == w.name for k in rows)]
            if len(present) < 2:
                continue
            job = members[0].high_job
            lines += [f"## {fam} family ({kernel}): {job} throughput in MiB/s", "",
                      "| scheduler | " + " | ".join(w.name for w in present)
                      + " | spread (sd, MiB/s) |", "|---|" + "---|" * (len(present) + 1)]
            for sched in dict.fromkeys(k[1] for k in rows):
                means = [rows[(w.name, sched)]["metrics"]["bw_kib"]["mean"] / 1024
                         for w in present if (w.name, sched) in rows]
                spread = stats.summarize(means)["sd"]
                lines.append(f"| {sched} | " + " | ".join(f"{m:,.1f}" for m in means)
                             + f" | {spread:,.1f} |")
            lines.append("")
    return lines


# Per-second series: plotted from the raw runs, left out of results.json
# (most of its size).
SERIES_KEYS = ("iops_series", "lat_series_us", "clat_p99_series_us")


def analyse(runs: list[dict]) -> tuple[list[dict], dict]:
    """Every derived figure of @runs, in place, then the summaries, and
    the report-wide references: the common baselines and best totals."""
    add_starved(runs)
    extra = {"baselines": add_isolation(runs), "best_totals": add_work(runs)}
    add_shares(runs)
    return summarize(runs), extra


def write_all(out: Path, command: str, plan: dict, runs: list[dict]) -> list[dict]:
    summaries, extra = analyse(runs)
    for r in runs:
        if r.get("drive"):
            r["drive_use"] = device_use(r["drive"], plan)
    kernels_ = list(dict.fromkeys(r["kernel"] for r in runs))
    doc = {"schema": 2, "command": command,
           "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "plan": plan, "runs": [slim(r) for r in runs], "summaries": summaries,
           "paired": [p for k in kernels_ for p in paired_ratios(runs, k)],
           **extra,
           "dominance": {f"{k} {wl}": dominance(points)
                         for k in kernels_
                         for wl in dict.fromkeys(r["workload"] for r in runs)
                         if (points := tradeoff_points(runs, summaries, k, wl))}}
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    write_csv(out / "results.csv", runs)
    images = plots(out, runs, summaries)
    report_md(out, command, plan, runs, summaries, images, extra)
    return summaries


def slim(run: dict) -> dict:
    """A run for results.json: without its per-second series."""
    out = {k: v for k, v in run.items() if k not in ("prism_flight_series",
                                                      "twin_flight_series")}
    out["jobs"] = [{k: v for k, v in j.items() if k not in SERIES_KEYS} for j in run["jobs"]]
    return out


def headline(summaries: list[dict], workload: str = "database_backup") -> str:
    """A short table for the terminal: each scheduler's jobs of @workload."""
    rows = [s for s in summaries if s["workload"] == workload]
    out = [f"{'kernel':<7} {'scheduler':<22} {'job':<14} {'IOPS':>16} {'P99 ms':>16} "
           f"{'isolation':>10}"]
    for s in rows:
        m = s["metrics"]
        out.append(f"{s['kernel']:<7} {s['scheduler']:<22} {s['job']:<14} "
                   f"{_fmt(m.get('iops')):>16} {_fmt(m.get('p99_us'), 1000, 2):>16} "
                   f"{_fmt(m.get('isolation_ratio'), 1, 2):>10}")
    return "\n".join(out)
