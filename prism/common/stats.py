"""From fio's output to figures: per-job records of one run, and summaries
over the repetitions (summarize: geometric or arithmetic mean, with a 95%
interval from five repetitions, the range below that)."""

from __future__ import annotations

import contextlib
import csv
import gzip
import itertools
import json
import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

# In the shipped status script (stdlib only); re-exported for the reports.
from .status import hist_quantile  # noqa: F401

PERCENTILES = {"p50": "50.000000", "p95": "95.000000", "p99": "99.000000",
               "p99_9": "99.900000"}


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function
    (modified Lentz), as in Numerical Recipes' betacf."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_tail(t: float, df: float) -> float:
    """P(|T| > t) for Student's t with df degrees of freedom."""
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(level: float, df: int) -> float:
    """The two-sided @level quantile of Student's t (t95 = level 0.95):
    the t with P(|T| > t) = 1 - level, by bisection on the exact tail."""
    if df <= 0:
        return float("nan")
    lo, hi = 0.0, 1.0
    while t_two_sided_tail(hi, df) > 1.0 - level:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_tail(mid, df) > 1.0 - level:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


def t95(df: int) -> float:
    return t_quantile(0.95, df)


# Fewer repetitions than this give the range (lowest to highest) in place
# of a 95% interval: a t-interval on two to four skewed values says more
# than the data do.
MIN_REPS_FOR_INTERVAL = 5


def summarize(values: Sequence[float | None], geometric: bool = False) -> dict:
    """n, mean, sd, min, max of @values (None and NaN dropped), and the
    interval "low" to "high" with how it was made ("how"): with at least
    MIN_REPS_FOR_INTERVAL values a 95% interval ("ci95"), else the range
    ("range"); one value has none.

    @geometric (ratios and latencies): the geometric mean, its interval
    from the t distribution of the logarithms (multiplicative, so never
    below zero); a value that is not positive makes the mean 0 and the
    interval the range. Otherwise the arithmetic mean with its t-interval
    cut at zero where every value is non-negative (the mean of such
    values cannot be below zero, and no interval shown is)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(v)]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "low": None, "high": None, "how": None,
                "min": None, "max": None}
    lo, hi = min(vals), max(vals)
    sd = statistics.stdev(vals) if n > 1 else 0.0
    out = {"n": n, "sd": sd, "min": lo, "max": hi}
    if geometric and lo > 0:
        logs = [math.log(v) for v in vals]
        mean = statistics.fmean(logs)
        out["mean"] = math.exp(mean)
        out["geometric"] = True
        if n >= MIN_REPS_FOR_INTERVAL:
            half = t95(n - 1) * statistics.stdev(logs) / math.sqrt(n)
            return dict(out, low=math.exp(mean - half), high=math.exp(mean + half),
                        how="ci95")
    else:
        out["mean"] = 0.0 if geometric else statistics.fmean(vals)
        if geometric:
            out["geometric"] = True
        if n >= MIN_REPS_FOR_INTERVAL and not geometric:
            half = t95(n - 1) * sd / math.sqrt(n)
            low = out["mean"] - half
            return dict(out, low=max(0.0, low) if lo >= 0 else low,
                        high=out["mean"] + half, how="ci95")
    if n == 1:
        return dict(out, low=None, high=None, how=None)
    return dict(out, low=lo, high=hi, how="range")


def paired_ratio(pairs: Sequence[tuple[float | None, float | None]]) -> dict:
    """The ratio a/b of two schedulers measured in the same repetitions
    (each pair run back to back in one boot): the geometric mean of the
    per-repetition ratios, with a 95% interval from the t distribution of
    their logarithms, or with fewer than MIN_REPS_FOR_INTERVAL pairs the
    range of the ratios ("how": "ci95" or "range"). Pairing cancels what
    drifts between repetitions (the host's load under TCG), so this is
    far tighter than the ratio of two means whose intervals overlap.
    Pairs with a non-positive side are skipped."""
    ratios = [a / b for a, b in pairs
              if a is not None and b is not None and a > 0 and b > 0]
    s = summarize(ratios, geometric=True)
    return {"n": s["n"], "ratio": s["mean"], "low": s["low"], "high": s["high"],
            "how": s["how"]}


def geometric(values: Sequence[float | None]) -> dict:
    """The geometric mean of positive @values with its interval, as
    paired_ratio against 1: for ratios shown on log scales."""
    return paired_ratio([(v, 1.0) for v in values])


def _merge_dirs(job: dict, key: str) -> dict:
    """Latency stats of a job over reads and writes: fio's own "mixed"
    figures where the job file asks for them (unified_rw_reporting=both:
    exact percentiles over both directions), else weighted by count."""
    mixed = job.get("mixed", {}).get(key, {})
    if mixed.get("N"):
        return {"N": mixed["N"], "mean": mixed["mean"], "max": mixed["max"],
                "percentile": mixed.get("percentile", {})}
    parts = [job[d][key] for d in ("read", "write", "trim")
             if d in job and job[d].get(key, {}).get("N")]
    if not parts:
        return {}
    n = sum(p["N"] for p in parts)
    out = {"N": n, "mean": sum(p["mean"] * p["N"] for p in parts) / n,
           "max": max(p["max"] for p in parts)}
    # Percentiles of a mixed job: the larger direction's, stated as such.
    main = max(parts, key=lambda p: p["N"])
    out["percentile"] = main.get("percentile", {})
    return out


def prio_name(prioclass, prio) -> str:
    """RT0, BE4, IDLE; "none" for requests without a priority."""
    cls = {1: "RT", 2: "BE", 3: "IDLE"}.get(int(prioclass or 0))
    if not cls:
        return "none"
    return cls if cls == "IDLE" else f"{cls}{int(prio or 0)}"


def fio_seconds(text: str | None) -> float:
    """A fio time option's value in seconds ("2", "2s", "500ms", "1m";
    a bare number is seconds, as for startdelay); 0 if absent or not one."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)?\s*", str(text or ""))
    if not m:
        return 0.0
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m[2] or "s"]
    return float(m[1]) * scale


def fsync_batch(options: dict) -> int | None:
    """How many buffered writes a job makes before each fsync (fio
    `fsync=N`, N > 1, without direct I/O), else None. Such a job's writes
    return at once into the page cache and count when write() returns; it
    then waits in fsync until the device has taken all N, so it shows no
    completion for as long as its fsync takes, however the device serves
    its writes."""
    try:
        n = int(options.get("fsync", 0))
    except ValueError:
        return None
    return n if n > 1 and str(options.get("direct", "0")) != "1" else None


def job_record(job: dict) -> dict:
    """One fio job of one run: throughput, latency (us), CPU."""
    ios = sum(job[d]["total_ios"] for d in ("read", "write") if d in job)
    iops = sum(job[d]["iops"] for d in ("read", "write") if d in job)
    bw = sum(job[d]["bw"] for d in ("read", "write") if d in job)  # KiB/s
    # lat = submission + completion (under none much waiting is in
    # submission, in tag allocation); its percentiles need lat_percentiles=1.
    lat = _merge_dirs(job, "lat_ns")
    clat = _merge_dirs(job, "clat_ns")
    rec = {"job": job["jobname"], "ios": ios, "iops": iops, "bw_kib": bw,
           "kib": sum(job[d]["io_kbytes"] for d in ("read", "write") if d in job),
           # How long the job measured: fio's per-direction runtime, which
           # for a group_reporting entry is its longest clone's (job_runtime
           # is the clones' sum there).
           "runtime_ms": max(job[d].get("runtime", 0) for d in ("read", "write", "trim")
                             if d in job),
           "errors": job.get("error", 0),
           "usr_cpu": job.get("usr_cpu", 0.0), "sys_cpu": job.get("sys_cpu", 0.0),
           "prio": job.get("job options", {}).get("prio"),
           "prioclass": job.get("job options", {}).get("prioclass"),
           "startdelay_s": fio_seconds(job.get("job options", {}).get("startdelay")),
           "fsync_batch": fsync_batch(job.get("job options", {}))}
    src = lat if lat.get("percentile") else clat
    rec["lat_source"] = "lat" if src is lat else "clat"
    rec["lat_mean_us"] = lat.get("mean", 0.0) / 1000 if lat else None
    rec["clat_mean_us"] = clat.get("mean", 0.0) / 1000 if clat else None
    rec["lat_max_us"] = lat.get("max", 0.0) / 1000 if lat else None
    for name, key in PERCENTILES.items():
        v = src.get("percentile", {}).get(key) if src else None
        rec[f"{name}_us"] = v / 1000 if v is not None else None
    v = clat.get("percentile", {}).get(PERCENTILES["p99"]) if clat else None
    rec["clat_p99_us"] = v / 1000 if v is not None else None
    # Priorities mixed inside the job (cmdprio): each one's figures apart.
    for d in ("read", "write"):
        for pr in job.get(d, {}).get("prios", []):
            plat = pr.get("lat_ns") or pr.get("clat_ns") or {}
            if not plat.get("N"):
                continue
            label = prio_name(pr.get("prioclass"), pr.get("prio"))
            rec[f"prio_{label}_ios"] = rec.get(f"prio_{label}_ios", 0) + plat["N"]
            for name in ("p50", "p99"):
                v = plat.get("percentile", {}).get(PERCENTILES[name])
                if v is not None:
                    rec[f"prio_{label}_{name}_us"] = v / 1000
    # Each direction on its own, for jobs that both read and write.
    for d in ("read", "write"):
        part = job.get(d, {})
        dlat = part.get("lat_ns", {})
        if not dlat.get("percentile"):
            dlat = part.get("clat_ns", {})
        if dlat.get("N") and dlat.get("percentile"):
            for name in ("p50", "p99"):
                rec[f"{d}_{name}_us"] = dlat["percentile"][PERCENTILES[name]] / 1000
    # fsync calls (fio's fsync=N): their own latency distribution.
    sync = job.get("sync", {})
    sync_lat = sync.get("lat_ns", {})
    if sync.get("total_ios") and sync_lat.get("N"):
        rec["fsyncs"] = sync["total_ios"]
        rec["fsync_mean_us"] = sync_lat["mean"] / 1000
        for name, key in PERCENTILES.items():
            v = sync_lat.get("percentile", {}).get(key)
            rec[f"fsync_{name}_us"] = v / 1000 if v is not None else None
    return rec


def read_log(path: Path) -> list[tuple[float, float]]:
    """(seconds, value) per line of a fio per-interval log, directions
    summed per interval (IOPS) or averaged (latency) by the caller."""
    out: list[tuple[float, float]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2 and f[0].isdigit():
            out.append((int(f[0]) / 1000.0, float(f[1])))
    return out


def per_second(points: list[tuple[float, float]], how: str) -> list[tuple[int, float]]:
    """Bucket log points by whole second; 'sum' for IOPS, 'mean' for latency."""
    buckets: dict[int, list[float]] = {}
    for t, v in points:
        buckets.setdefault(int(round(t)), []).append(v)
    rows = []
    for sec in sorted(buckets):
        vals = buckets[sec]
        rows.append((sec, sum(vals) if how == "sum" else statistics.fmean(vals)))
    return rows


def iops_per_second(points: list[tuple[float, float]]) -> list[tuple[int, float]]:
    """Completions per whole second from fio iops logs averaged over
    1000 ms (a job's clones' points summed per second). fio writes a line
    only for an interval with a completion, as delta * 1000 / spent in
    whole numbers: one completion in an interval of 1,001 ms reads 0. So
    a logged 0 is at least one completion (read as 1), and a second
    between the first and the last with no line at all had none (0). Read
    the other way, a reader paced at two requests a second showed "empty"
    seconds in 4 of 5 runs that had a completion in every one."""
    rows = dict(per_second([(t, v if v > 0 else 1.0) for t, v in points], "sum"))
    if not rows:
        return []
    return [(sec, rows.get(sec, 0.0)) for sec in range(min(rows), max(rows) + 1)]


# fio's latency histogram (stat.h): bins in groups of 2^6, each group
# twice as wide as the one before; values in nanoseconds.
_PLAT_BITS = 6
_PLAT_VAL = 1 << _PLAT_BITS


def hist_bin_value(idx: int) -> float:
    """The middle of fio histogram bin @idx, in ns (as fio's own
    tools/hist/fiologparser_hist.py decodes it)."""
    if idx < (_PLAT_VAL << 1):
        return float(idx)
    error_bits = (idx >> _PLAT_BITS) - 1
    base = 1 << (error_bits + _PLAT_BITS)
    k = idx % _PLAT_VAL
    return base + (k + 0.5) * (1 << error_bits)


def read_hist_log(path: Path) -> list[tuple[float, list[int]]]:
    """(seconds, bin counts) per line of a fio --write_hist_log file
    (log_hist_coarseness 0): each line counts the completions of one
    interval and one direction."""
    out: list[tuple[float, list[int]]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        f = line.split(",")
        if len(f) > 3 and f[0].strip().isdigit():
            out.append((int(f[0]) / 1000.0, [int(x) for x in f[3:]]))
    return out


def hist_percentile(bins: list[int], pct: float) -> float | None:
    """The @pct percentile (ns) of a histogram, None if it is empty."""
    total = sum(bins)
    if not total:
        return None
    rank = pct / 100.0 * total
    seen = 0
    for i, n in enumerate(bins):
        seen += n
        if seen >= rank:
            return hist_bin_value(i)
    return hist_bin_value(len(bins) - 1)


def p99_per_second(entries: list[tuple[float, list[int]]]) -> list[tuple[int, float]]:
    """Per whole second, the P99 of completion latency in us over every
    direction and clone that logged in it."""
    buckets: dict[int, list[int]] = {}
    for t, bins in entries:
        acc = buckets.setdefault(int(round(t)), [0] * len(bins))
        for i, n in enumerate(bins):
            acc[i] += n
    out = []
    for sec in sorted(buckets):
        v = hist_percentile(buckets[sec], 99.0)
        if v is not None:
            out.append((sec, v / 1000))
    return out


P99_SERIES = "p99_series.json"


def job_logs(fio_json: dict):
    """(job, numbers of its per-second logs) for each job of a fio run.
    Logs are numbered by job in creation order (log_lat.1.log is the
    first job); a JSON entry that group_reporting made of numjobs clones
    covers that many consecutive logs."""
    first = 1
    for job in fio_json["jobs"]:
        clones = int(job.get("job options", {}).get("numjobs", 1))
        yield job, range(first, first + clones)
        first += clones


def condense_hist_logs(fio_json: dict, rundir: Path) -> None:
    """Replace a run's histogram logs (a few KB per job and second) by
    P99_SERIES: each job's per-second completion-latency P99, its clones
    merged bin by bin."""
    series = {}
    for job, logs in job_logs(fio_json):
        entries = [e for i in logs for e in read_hist_log(rundir / f"log_clat_hist.{i}.log")]
        if entries:
            series[job["jobname"]] = p99_per_second(entries)
    (rundir / P99_SERIES).write_text(json.dumps(series))
    for p in rundir.glob("log_clat_hist.*.log"):
        p.unlink()


def common_window(recs: list[dict]) -> None:
    """Measure every job of a run over the same window. fio starts a job's
    measurement when its ramp ends, and it notices that only at the job's
    next completion: a job a scheduler starves begins measuring late, and
    its own IOPS would count only the time it was served. The job files
    stop every job with the first (exitall), so the window is the longest
    job's measuring time (runtime_ms); each job's throughput is taken over
    it, and late_s says
    how long after its start a job completed its first I/O. A job that
    started a whole second late had a second with no completion. A job
    told to start later (startdelay: the application start-up workloads)
    is not late for that time."""
    runtimes = [r["runtime_ms"] for r in recs if r.get("runtime_ms")]
    if not runtimes:
        return
    window = max(runtimes) / 1000
    for r in recs:
        r["window_s"] = window
        r["late_s"] = max(0.0, window - (r.get("runtime_ms") or 0) / 1000
                          - (r.get("startdelay_s") or 0.0))
        r["iops"] = r["ios"] / window
        r["bw_kib"] = r["kib"] / window
        if r["late_s"] >= 1.0 and "min_iops_1s" in r:
            r["min_iops_1s"] = 0.0


def run_records(fio_json: dict, rundir: Path | None = None) -> list[dict]:
    """Job records of one run, with per-second series when logs exist
    (a job's clones' logs summed for IOPS, averaged for latency; see
    job_logs), throughput over the run's common window (see
    common_window)."""
    recs = []
    p99_file = rundir / P99_SERIES if rundir is not None else None
    p99 = json.loads(p99_file.read_text()) if p99_file and p99_file.exists() else {}
    for job, logs in job_logs(fio_json):
        rec = job_record(job)
        if rundir is not None:
            iops = iops_per_second([p for i in logs
                                    for p in read_log(rundir / f"log_iops.{i}.log")])
            lat = per_second([p for i in logs
                              for p in read_log(rundir / f"log_lat.{i}.log")], "mean")
            rec["iops_series"] = iops
            rec["lat_series_us"] = [(t, v / 1000) for t, v in lat]
            if p99.get(rec["job"]):
                rec["clat_p99_series_us"] = [tuple(x) for x in p99[rec["job"]]]
            # Starvation: the worst whole second of the run (not the last,
            # partial one) for this job.
            full = [v for _, v in iops[:-1]] if len(iops) > 1 else [v for _, v in iops]
            rec["min_iops_1s"] = min(full) if full else None
        recs.append(rec)
    common_window(recs)
    return recs


# -- the emulated drive's trace (prism disk serve --trace) -------------------

TRACE_NAME = "disk-trace.csv"


def trace_file(rundir: Path) -> Path | None:
    """A run's cut of the drive's trace, plain or gzip'd (as committed
    reports keep it), or None."""
    for name in (TRACE_NAME, TRACE_NAME + ".gz"):
        if (rundir / name).exists():
            return rundir / name
    return None


DRIVE_SUMMARY = "drive.json"


def condense_traces(raw: Path) -> None:
    """Replace each run's cut of the drive trace (a line per command: tens
    of MB for a benchmark on a fast profile) by its trace_summary, which
    is what the report uses; the bulk job's region from the run's
    workload (meta.json)."""
    from .workloads import WORKLOADS
    for trace in sorted(raw.glob("*/" + TRACE_NAME)):
        bulk = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            meta = json.loads((trace.parent / "meta.json").read_text())
            bulk = WORKLOADS[meta["workload"]].low_region()
        (trace.parent / DRIVE_SUMMARY).write_text(json.dumps(trace_summary(trace, bulk)))
        trace.unlink()


def split_trace(trace: Path, raw: Path) -> None:
    """Give each run under @raw the lines of @trace it caused: benchrun
    noted the trace's size before and after each run (meta trace_bytes);
    a line cut by either mark belongs to the run in which it was finished."""
    data = trace.read_bytes()
    header, _, _ = data.partition(b"\n")
    for meta_file in sorted(raw.glob("*/meta.json")):
        meta = json.loads(meta_file.read_text())
        if "trace_bytes" not in meta:
            continue
        a, b = meta["trace_bytes"]
        a = data.find(b"\n", a - 1) + 1 if a > 0 else len(header) + 1
        b = data.find(b"\n", b - 1) + 1 if b > 0 else 0
        b = b or len(data)
        (meta_file.parent / TRACE_NAME).write_bytes(header + b"\n" + data[a:max(a, b)])


def trace_summary(path: Path, bulk: tuple[int, int] | None = None) -> dict:
    """What the drive did during one run: commands completed per op, the
    media operations (reads, uncached writes, cache write-backs) with
    their mean service time, mean distance between one and the next
    (MB from where the last ended) and the fraction that continued
    exactly where the last ended (sequential); for the work it was given,
    the bytes of its commands, the seconds of media service summed
    ("busy_s": channel-seconds on a drive with several) and the span of
    the trace ("span_s"). With @bulk, the byte range [start, end) of the
    bulk job: its media operations and the fraction of them the drive
    served in sequence (each starting where the media operation before
    it, of any job, ended: no seek)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = list(csv.DictReader(f))
    media = sorted((r for r in rows if r["op"] == "destage"
                    or (r["op"] in ("read", "write") and r["cached"] == "0")),
                   key=lambda r: float(r["start_s"]))
    commands = [r for r in rows if r["op"] != "destage"]
    out: dict[str, float | None] = {"commands": len(commands),
           "media_ops": len(media),
           "cached_writes": sum(1 for r in rows if r["op"] == "write" and r["cached"] == "1"),
           "flushes": sum(1 for r in rows if r["op"] == "flush"),
           "bytes": sum(int(r["sectors"]) * 512 for r in commands
                        if r["op"] in ("read", "write"))}
    if rows:
        out["span_s"] = (max(float(r["end_s"]) for r in rows)
                         - min(float(r["start_s"]) for r in rows))
    if not media:
        return out
    jumps, seq = [], 0
    bulk_ops = bulk_seq = 0
    for prev, cur in itertools.pairwise(media):
        gap = abs(int(cur["sector"]) - (int(prev["sector"]) + int(prev["sectors"])))
        jumps.append(gap * 512 / 1e6)
        seq += gap == 0
        if bulk and bulk[0] <= int(cur["sector"]) * 512 < bulk[1]:
            bulk_ops += 1
            bulk_seq += gap == 0
    span = float(media[-1]["end_s"]) - float(media[0]["start_s"])
    busy = sum(float(r["service_ms"]) for r in media) / 1000
    out.update(service_ms_mean=statistics.fmean(float(r["service_ms"]) for r in media),
               jump_mb_mean=statistics.fmean(jumps) if jumps else 0.0,
               sequential_frac=seq / len(jumps) if jumps else 0.0,
               media_busy_frac=min(1.0, busy / span) if span > 0 else 0.0,
               busy_s=busy,
               late_ms_mean=statistics.fmean(float(r["late_ms"]) for r in commands)
               if commands else 0.0)
    if bulk:
        out["bulk_media_ops"] = bulk_ops
        out["bulk_sequential_frac"] = bulk_seq / bulk_ops if bulk_ops else None
    return out
