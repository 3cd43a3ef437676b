#!/usr/bin/python3
"""prism status: what prism is doing on this machine's disks, for an
operator. Reads sysfs (the scheduler, nr_requests, the tunables) and,
where debugfs is mounted and readable (root), prism's own files: the
tiers' counts, the in-flight limit and the hold, the busiest processes
and cgroups, and the latency histograms' percentiles when they are kept.
Reads only; never mounts, loads or writes anything.

One file, the standard library only: the Debian package installs it as
/usr/sbin/prism-status, and the harness's `prism status` runs the same
code. It is also where the parsers of prism's debugfs formats live
(module/prism_debugfs.c, docs/debugfs.md), for the harness to share."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

SYS_BLOCK = Path("/sys/block")
DEBUGFS = Path("/sys/kernel/debug")
LOCKDOWN = Path("/sys/kernel/security/lockdown")
MOUNTS = Path("/proc/self/mounts")
# Whole disks that never take an I/O scheduler worth showing.
SKIP_PREFIXES = ("loop", "ram", "zram", "dm-", "md", "sr")
# The tunables' defaults as the module shows them (tests/test_status.py
# checks them against the module's, through the selftest's table).
DEFAULTS = {
    "read_expire": "500", "write_expire": "5000", "writes_starved": "2",
    "fifo_batch": "16", "prio_aging_expire": "10000", "be_tiers": "3",
    "normal_share": "25", "low_share": "10", "slice_idle_us": "-1",
    "target_latency_us": "0", "low_rate_kbps": "0", "writeback_low": "1",
    "bulk_merge_kb": "0",
    "cost_model": "fixed rbps=0 rseqiops=0 rrandiops=0 wbps=0 wseqiops=0 wrandiops=0",
}
# The in-flight control's values worth a line, as debugfs "flight" names them.
FLIGHT_KEYS = ("device_depth", "lower_limit", "lower_duty", "target_us", "window_us",
               "held_window", "held_depth", "held_flow", "held_paced", "tags_short",
               "empty_dispatches", "parked", "held_stalled")
# How many processes' flows to show per disk, the most served first.
TOP_FLOWS = 8


# --- prism's debugfs formats (module/prism_debugfs.c) ---

def parse_prism_table(text: str) -> dict:
    """A prism debugfs file of a header line and a row per name (tiers,
    flight), then perhaps lines of key=value pairs (flight): {row name:
    {column: value}}, and each pair at the top level; all values int."""
    lines = text.split("\n")
    header = lines[0].split()
    out: dict = {}
    for line in lines[1:]:
        f = line.split()
        if len(f) == len(header) and "=" not in f[0]:
            out[f[0]] = {k: int(v) for k, v in zip(header[1:], f[1:], strict=True)}
        elif f:
            out.update({k: int(v) for k, v in (kv.split("=", 1) for kv in f)})
    return out


def unescape(word: str) -> str:
    """A field the module wrote with seq_escape(): \\ooo back to its byte."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), word)


def parse_prism_flows(text: str) -> list[dict]:
    """debugfs "flows": one record per process flow line (the fair queues',
    groups' and overflow lines are left out); comm unescaped (the module
    writes a space in a command as \\040), every other column but tier an
    int."""
    lines = text.split("\n")
    header = lines[0].split()
    out = []
    for line in lines[1:]:
        f = line.split()
        if len(f) == len(header) and f[0].isdigit():
            rec: dict = dict(zip(header, f, strict=True))
            for k in header:
                if k not in ("comm", "tier"):
                    rec[k] = int(rec[k])
            rec["comm"] = unescape(rec["comm"])
            out.append(rec)
    return out


def parse_prism_cgroups(text: str) -> dict[str, dict]:
    """debugfs "cgroups" by path: cgroup (its id), weight, cost_us, bytes,
    dispatched, queued and owned (the path, last, may hold spaces)."""
    lines = text.splitlines()
    if not lines:
        return {}
    header = lines[0].split()
    out = {}
    for line in lines[1:]:
        f = line.split(maxsplit=len(header) - 1)
        if len(f) == len(header) and all(x.isdigit() for x in f[:-1]):
            out[f[-1]] = {k: int(v) for k, v in zip(header[:-1], f[:-1], strict=True)}
    return out


def parse_prism_latency(text: str) -> dict:
    """debugfs "latency": the buckets' lower bounds in ns, and per "kind
    tier direction" (e.g. "device high read") the buckets that counted
    anything, as {bucket index: count}."""
    lines = text.split("\n")
    bounds = [int(v) for v in lines[0].split()[1:]]
    hists = {}
    for line in lines[1:]:
        f = line.split()
        if not f:
            continue
        counts = {i: int(v) for i, v in enumerate(f[3:]) if int(v)}
        if counts:
            hists[" ".join(f[:3]).lower()] = counts
    return {"bounds_ns": bounds, "hists": hists}


def hist_quantile(bounds, counts: dict, q: float) -> float | None:
    """The @q quantile (0-1) of a histogram: @bounds are the buckets'
    lower bounds (the last bucket open-ended), @counts {bucket index:
    count} (JSON may have made the keys strings). Linear inside the
    bucket that holds it; the last bucket gives its lower bound."""
    hist = {int(k): int(v) for k, v in counts.items()}
    total = sum(hist.values())
    if not total:
        return None
    rank = q * total
    seen = 0
    for b in sorted(hist):
        n = hist[b]
        if seen + n >= rank:
            lo = bounds[b]
            if b + 1 >= len(bounds):
                return float(lo)
            return lo + (bounds[b + 1] - lo) * max(0.0, rank - seen) / n
        seen += n
    return float(bounds[max(hist)])


# --- reading a disk ---

class Unreadable(Exception):
    """A debugfs file that exists and cannot be read: why, for the user."""


def _read(path: Path) -> str | None:
    """A file's text, None if it is not there; Unreadable if it is there
    and may not be read (not root, or kernel lockdown)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except PermissionError as e:
        raise Unreadable(str(e)) from None
    except OSError:
        return None


def _read_quiet(path: Path) -> str | None:
    try:
        return _read(path)
    except Unreadable:
        return None


def lockdown() -> str | None:
    """The kernel's lockdown mode when one is in force ("integrity",
    "confidentiality"), else None."""
    text = _read_quiet(LOCKDOWN) or ""
    m = re.search(r"\[(\w+)\]", text)
    return m[1] if m and m[1] != "none" else None


def debugfs_mounted() -> bool:
    """Whether a debugfs is mounted at DEBUGFS (from MOUNTS)."""
    for line in (_read_quiet(MOUNTS) or "").splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] == str(DEBUGFS) and f[2] == "debugfs":
            return True
    return False


def why_no_debugfs(sched: Path) -> str:
    """Why prism's debugfs directory @sched cannot be read, and what to do."""
    if not debugfs_mounted():
        return (f"debugfs is not mounted, and prism's counters are there: "
                f"mount -t debugfs none {DEBUGFS}")
    mode = lockdown()
    if mode == "confidentiality":
        return (f"kernel lockdown ({mode}) hides debugfs: only the scheduler and the "
                "tunables can be shown")
    if os.geteuid() != 0:
        return f"{sched} not readable: run as root (debugfs is root's)"
    return f"{sched} is missing: is debugfs mounted without block/?"


def latency_percentiles(text: str) -> dict[str, dict]:
    """debugfs "latency": per "kind tier direction" that counted anything,
    its count and P50 and P99 in ms."""
    if not text.startswith("bucket_ns"):
        return {}
    lat = parse_prism_latency(text)
    out = {}
    for key, counts in lat["hists"].items():
        p50 = hist_quantile(lat["bounds_ns"], counts, 0.5)
        p99 = hist_quantile(lat["bounds_ns"], counts, 0.99)
        out[key] = {"n": sum(counts.values()), "p50_ms": p50 and p50 / 1e6,
                    "p99_ms": p99 and p99 / 1e6}
    return out


def busiest_flows(flows: list[dict], cgroups: dict[str, dict],
                  top: int = TOP_FLOWS) -> list[dict]:
    """The @top flows that were served the most device time, each with its
    cgroup's path (from the cgroups file; "/" for the root's)."""
    paths = {c["cgroup"]: path for path, c in cgroups.items()}
    out = []
    for f in sorted(flows, key=lambda f: -f["cost_us"])[:top]:
        cg = f.get("cgroup", 0)
        out.append({k: f[k] for k in ("pid", "comm", "tier", "weight", "cost_us", "bytes",
                                      "dispatched", "queued", "owned") if k in f}
                   | {"cgroup": paths.get(cg, "/" if not cg else str(cg))})
    return out


def disk_status(dev: str) -> dict:
    """One disk: its schedulers, and prism's state when prism is active."""
    queue = SYS_BLOCK / dev / "queue"
    words = (_read_quiet(queue / "scheduler") or "").split()
    active = next((w.strip("[]") for w in words if w.startswith("[")), "none")
    out: dict = {"dev": dev, "scheduler": active,
                 "offered": [w.strip("[]") for w in words],
                 "rotational": (_read_quiet(queue / "rotational") or "").strip() == "1",
                 "nr_requests": (_read_quiet(queue / "nr_requests") or "").strip()}
    if active != "prism":
        return out
    tun = {p.name: (_read_quiet(p) or "").strip()
           for p in sorted((queue / "iosched").glob("*")) if p.is_file()}
    out["tunables"] = tun
    out["changed"] = {k: v for k, v in tun.items() if k in DEFAULTS and v != DEFAULTS[k]}
    sched = DEBUGFS / "block" / dev / "sched"
    tiers = _read_quiet(sched / "tiers")
    if tiers is None:
        out["debugfs"] = why_no_debugfs(sched)
        return out
    out["tiers"] = parse_prism_table(tiers)
    flight = parse_prism_table(_read_quiet(sched / "flight") or "")
    out["flight"] = {k: flight[k] for k in FLIGHT_KEYS if k in flight}
    out["cgroups"] = parse_prism_cgroups(_read_quiet(sched / "cgroups") or "")
    out["flows"] = busiest_flows(parse_prism_flows(_read_quiet(sched / "flows") or ""),
                                 out["cgroups"])
    try:
        out["latency"] = latency_percentiles(_read(sched / "latency") or "")
    except Unreadable:
        # The one writable file: lockdown (integrity) refuses it.
        out["latency"] = {}
        out["latency_hidden"] = (f"kernel lockdown ({lockdown() or 'on'}) hides the "
                                 "latency histograms (a writable debugfs file)")
    return out


def disks() -> list[str]:
    """Whole disks that take a scheduler, in name order."""
    return sorted(p.name for p in SYS_BLOCK.glob("*")
                  if (p / "queue" / "scheduler").exists()
                  and not p.name.startswith(SKIP_PREFIXES))


def status(devs: list[str] | None = None) -> list[dict]:
    return [disk_status(d) for d in (devs or disks())]


# --- what it prints ---

def _num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{float(v):,.{digits}f}"


def format_status(records: list[dict]) -> str:
    """What prism status prints: a block per disk, prism's in detail."""
    if not records:
        return "no disks with an I/O scheduler found under /sys/block\n"
    out = []
    for r in records:
        media = "rotational" if r["rotational"] else "flash"
        out.append(f"{r['dev']}: {r['scheduler']} ({media}, nr_requests {r['nr_requests']}; "
                   f"offered: {' '.join(r['offered'])})")
        if r["scheduler"] != "prism":
            # Said in words: a reader looking for prism's figures should
            # not have to infer from their absence that it is not in use.
            if "prism" in r["offered"]:
                out.append(f"  prism is not active here (echo prism > "
                           f"/sys/block/{r['dev']}/queue/scheduler)")
            else:
                out.append("  prism is not active here, nor loaded (modprobe prism-iosched)")
            continue
        changed = " ".join(f"{k}={v}" for k, v in r["changed"].items())
        out.append(f"  tunables away from the defaults: {changed or 'none'}")
        if "debugfs" in r:
            out.append(f"  {r['debugfs']}")
            continue
        out.append("  tier     queued  in flight  dispatched  completed   aged  shared")
        for name, t in r["tiers"].items():
            out.append(f"  {name:<7}{_num(t.get('queued')):>8}{_num(t.get('inflight')):>11}"
                       f"{_num(t.get('dispatched')):>12}{_num(t.get('completed')):>11}"
                       f"{_num(t.get('aged')):>7}{_num(t.get('shared')):>8}")
        f = r["flight"]
        if f:
            duty = f.get("lower_duty")
            out.append(f"  lower tiers in the device: at most {f.get('lower_limit', '-')} of "
                       f"{f.get('device_depth', '-')}"
                       + (f", paced at {duty}% duty" if duty and duty != 100 else "")
                       + f"; target {f.get('target_us', '-')} us, idle window "
                       f"{f.get('window_us', '-')} us")
            out.append(f"  held: {f.get('held_window', 0)} for a window, "
                       f"{f.get('held_depth', 0)} for depth, {f.get('held_flow', 0)} for a "
                       f"process, {f.get('held_paced', 0)} paced; waived (tier without a "
                       f"tag): {f.get('tags_short', 0)}; parked now: {f.get('parked', 0)}")
        if r.get("flows"):
            out.append("  processes     pid  command          tier    weight  served ms"
                       "       MiB  queued  owned  cgroup")
            for fl in r["flows"]:
                out.append(f"  {fl['pid']:>13}  {fl['comm'][:15]:<15}  {fl['tier']:<7}"
                           f"{fl['weight']:>7}{_num(fl['cost_us'] / 1000):>11}"
                           f"{_num(fl['bytes'] / 2**20, 1):>10}{fl['queued']:>8}"
                           f"{fl['owned']:>7}  {fl['cgroup']}")
        if r.get("cgroups"):
            out.append("  cgroup flows    weight  served ms       MiB  queued  owned  path")
            for path, c in sorted(r["cgroups"].items(), key=lambda kv: -kv[1]["cost_us"]):
                out.append(f"  {c['cgroup']:<14}{c['weight']:>8}{_num(c['cost_us'] / 1000):>11}"
                           f"{_num(c['bytes'] / 2**20, 1):>10}{c['queued']:>8}{c['owned']:>7}"
                           f"  {path}")
        if r["latency"]:
            out.append("  latency (since kept)      count    P50 ms    P99 ms")
            for key, v in r["latency"].items():
                out.append(f"  {key:<24}{_num(v['n']):>7}{_num(v['p50_ms'], 2):>10}"
                           f"{_num(v['p99_ms'], 2):>10}")
        elif "latency_hidden" in r:
            out.append(f"  {r['latency_hidden']}")
        else:
            out.append("  latency histograms off (echo 1 > "
                       f"{DEBUGFS}/block/{r['dev']}/sched/latency to keep them)")
    return "\n".join(out) + "\n"


def to_json(records: list[dict], indent: int | None = 1) -> str:
    return json.dumps(records, indent=indent)


def check_disks(devs: list[str]) -> None:
    """ValueError naming the first of @devs that is not a disk with an I/O
    scheduler."""
    for dev in devs:
        if not (SYS_BLOCK / dev / "queue" / "scheduler").exists():
            raise ValueError(f"{dev}: no such disk with an I/O scheduler under {SYS_BLOCK}")


def run(devs: list[str], as_json: bool = False, watch: float | None = None,
        out=None) -> int:
    """Print the status of @devs (every disk if empty) once, or every
    @watch seconds until interrupted (JSON: one document a line)."""
    out = out or sys.stdout
    check_disks(devs)
    if watch is None:
        records = status(devs or None)
        out.write(to_json(records) + "\n" if as_json else format_status(records))
        return 0
    try:
        while True:
            records = status(devs or None)
            if as_json:
                out.write(to_json(records, indent=None) + "\n")
            else:
                out.write("\033[H\033[2J" + time.strftime("%H:%M:%S ") + "\n"
                          + format_status(records))
            out.flush()
            time.sleep(watch)
    except KeyboardInterrupt:
        return 0


def positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("devs", nargs="*", metavar="DEV", help="disks, as named under /sys/block "
                   "(default: every one)")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    p.add_argument("--watch", nargs="?", const=1.0, type=positive_seconds, metavar="SECONDS",
                   help="refresh every SECONDS (default 1) until interrupted, like iostat")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="prism-status",
        description="What the prism I/O scheduler is doing on this machine's disks: the "
                    "scheduler, changed tunables, tiers, holds, the busiest processes and "
                    "cgroups, latency. Reads only; prism's counters need root and debugfs.")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args.devs, args.json, args.watch)
    except ValueError as e:
        print(f"prism-status: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
