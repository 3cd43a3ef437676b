"""prism status: what prism is doing on this machine's disks, for an
operator. Reads sysfs (the scheduler, nr_requests, the tunables) and,
where debugfs is mounted and readable (root), prism's own files: the
tiers' counts, the in-flight limit and the hold, the cgroups scheduled
as flows, and the latency histograms' percentiles when they are kept. Reads only; never mounts,
loads or writes anything."""

from __future__ import annotations

import json
from pathlib import Path

from ..common import stats
from .selftest import KEYWORD_TUNABLES, TUNABLES
from .system import parse_prism_cgroups, parse_prism_latency, parse_prism_table

SYS_BLOCK = Path("/sys/block")
DEBUGFS = Path("/sys/kernel/debug")
# Whole disks that never take an I/O scheduler worth showing.
SKIP_PREFIXES = ("loop", "ram", "zram", "dm-", "md", "sr")
DEFAULTS = {n: str(spec[0]) for n, spec in (TUNABLES | KEYWORD_TUNABLES).items()}
# The in-flight control's values worth a line, as debugfs "flight" names them.
FLIGHT_KEYS = ("device_depth", "lower_limit", "lower_duty", "target_us", "window_us",
               "held_window", "held_depth", "held_flow", "held_paced", "tags_short",
               "empty_dispatches", "parked")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def latency_percentiles(text: str) -> dict[str, dict]:
    """debugfs "latency" (system.parse_prism_latency()): per "kind tier
    direction" that counted anything, its count and P50 and P99 in ms."""
    if not text.startswith("bucket_ns"):
        return {}
    lat = parse_prism_latency(text)
    out = {}
    for key, counts in lat["hists"].items():
        p50 = stats.hist_quantile(lat["bounds_ns"], counts, 0.5)
        p99 = stats.hist_quantile(lat["bounds_ns"], counts, 0.99)
        out[key] = {"n": sum(counts.values()), "p50_ms": p50 and p50 / 1e6,
                    "p99_ms": p99 and p99 / 1e6}
    return out


def disk_status(dev: str) -> dict:
    """One disk: its schedulers, and prism's state when prism is active."""
    queue = SYS_BLOCK / dev / "queue"
    words = (_read(queue / "scheduler") or "").split()
    active = next((w.strip("[]") for w in words if w.startswith("[")), "none")
    out: dict = {"dev": dev, "scheduler": active,
                 "offered": [w.strip("[]") for w in words],
                 "rotational": (_read(queue / "rotational") or "").strip() == "1",
                 "nr_requests": (_read(queue / "nr_requests") or "").strip()}
    if active != "prism":
        return out
    tun = {p.name: (_read(p) or "").strip()
           for p in sorted((queue / "iosched").glob("*")) if p.is_file()}
    out["tunables"] = tun
    out["changed"] = {k: v for k, v in tun.items() if k in DEFAULTS and v != DEFAULTS[k]}
    sched = DEBUGFS / "block" / dev / "sched"
    tiers = _read(sched / "tiers")
    if tiers is None:
        out["debugfs"] = (f"{sched} not readable: as root, with debugfs mounted "
                          "(mount -t debugfs none /sys/kernel/debug)")
        return out
    out["tiers"] = parse_prism_table(tiers)
    flight = parse_prism_table(_read(sched / "flight") or "")
    out["flight"] = {k: flight[k] for k in FLIGHT_KEYS if k in flight}
    out["cgroups"] = parse_prism_cgroups(_read(sched / "cgroups") or "")
    out["latency"] = latency_percentiles(_read(sched / "latency") or "")
    return out


def disks() -> list[str]:
    """Whole disks that take a scheduler, in name order."""
    return sorted(p.name for p in SYS_BLOCK.glob("*")
                  if (p / "queue" / "scheduler").exists()
                  and not p.name.startswith(SKIP_PREFIXES))


def status(devs: list[str] | None = None) -> list[dict]:
    return [disk_status(d) for d in (devs or disks())]


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
        else:
            out.append("  latency histograms off (echo 1 > "
                       f"{DEBUGFS}/block/{r['dev']}/sched/latency to keep them)")
    return "\n".join(out) + "\n"


def to_json(records: list[dict]) -> str:
    return json.dumps(records, indent=1)
