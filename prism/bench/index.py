"""The index of committed reports (docs/results/README.md), generated
from each report's results.json so that dates, revisions and figures
cannot drift from what was measured: one line per report with its date,
the prism revision it measured and whether its module is this
revision's, the device and kernel, what it ran, its headline figure,
and the later report that supersedes it, if any. (The README's "What to
expect" table and docs/aims.md come from prism bench aims.)"""

from __future__ import annotations

import json
from pathlib import Path

from ..common.workloads import WORKLOADS
from . import report
from .aims import provenance


def load(results: Path) -> list[dict]:
    """Every report directory under @results that has a results.json."""
    out = []
    for f in sorted(results.glob("*/results.json")):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        p = d.get("plan", {})
        dp = p.get("disk_params") or {}
        profile = p.get("profile") or "?"
        if "iops_limit" in dp:      # a cloud volume: which one
            profile += f" ({dp['iops_limit']} IOPS, {dp.get('bandwidth_mib', '?')} MiB/s)"
        out.append({"dir": f.parent.name, "created": d.get("created", "")[:10],
                    "source": p.get("source") or "?", "profile": profile,
                    "device_key": json.dumps([p.get("profile"), dp], sort_keys=True),
                    "kernels": sorted({r.get("kernel", "?") for r in d.get("runs", [])}),
                    "workloads": [w for w in p.get("workloads", [])
                                  if not any(w == x.baseline for x in WORKLOADS.values())],
                    "schedulers": p.get("schedulers", []), "reps": p.get("reps"),
                    # Summarised again by today's report code: an older
                    # report has no common baseline of its own.
                    "summaries": report.analyse(d["runs"])[0]
                    if d.get("runs") and all("jobs" in r for r in d["runs"])
                    else d.get("summaries", [])})
        rec = out[-1]
        rec["dominance"] = dominance_text(d.get("runs", []), rec["summaries"])
    return out


def dominance_text(runs: list[dict], summaries: list[dict]) -> str:
    """For the first mix with a trade-off: whom prism's frontier dominates
    and who dominates it (every point), on the common baseline's axis."""
    for s in summaries:
        w = WORKLOADS.get(s["workload"])
        if not (w and w.high_job and w.low_job and w.baseline) or s["job"] != w.high_job:
            continue
        try:
            points = report.tradeoff_points(runs, summaries, s["kernel"], s["workload"])
        except (KeyError, TypeError):
            return ""
        recs = report.dominance(points)
        if not recs:
            return ""
        over = [d["peer"] for d in recs if d["frontier"] == "dominates"]
        under = [d["peer"] for d in recs if d["frontier"] == "dominated"]
        return ("prism's frontier dominates " + (", ".join(over) or "no peer")
                + "; dominated by " + (", ".join(under) or "no peer"))
    return ""


def headline(rep: dict) -> str:
    """The figure a reader looks for first: for the first workload with a
    latency-sensitive job, its figure under load over the common baseline
    (the best alone of any scheduler in the report) under each prism
    variant and under none; else nothing."""
    for name in rep["workloads"]:
        w = WORKLOADS.get(name)
        if not (w and w.high_job and w.baseline):
            continue
        cells = []
        for s in rep["summaries"]:
            if (s["workload"] == name and s["job"] == w.high_job
                    and s["scheduler"].startswith("prism")):
                m = s["metrics"].get("common_ratio")
                if m and m.get("mean") is not None:
                    cells.append(f"{s['scheduler']} {m['mean']:.2f}x")
        none = next((s["metrics"].get("common_ratio") for s in rep["summaries"]
                     if s["workload"] == name and s["job"] == w.high_job
                     and s["scheduler"] == "none"), None)
        if cells:
            return (f"{name} over the common baseline: " + ", ".join(cells)
                    + (f" (none {none['mean']:.2f}x)" if none and none.get("mean") else ""))
    return ""


def superseded(reports: list[dict]) -> dict[str, str]:
    """Report dir -> the newest later report on the same device profile and
    kernel that measured the same thing again: its workloads include all
    of the earlier one's, its schedulers too, and it ran at least as many
    repetitions (a one-repetition smoke run of prism alone supersedes
    nothing, nor does a diagnosis that ran only variants)."""
    out: dict[str, str] = {}
    for r in reports:
        later = [o for o in reports if o["created"] > r["created"]
                 and o["device_key"] == r["device_key"] and o["kernels"] == r["kernels"]
                 and set(r["workloads"]) <= set(o["workloads"]) and r["workloads"]
                 and set(r["schedulers"]) <= set(o["schedulers"])
                 and (o["reps"] or 0) >= (r["reps"] or 0)]
        if later:
            out[r["dir"]] = max(later, key=lambda o: (o["created"], o["dir"]))["dir"]
    return out


def index_md(results: Path) -> str:
    reports = load(results)
    sup = superseded(reports)
    lines = ["# Committed reports", "",
             "Generated by `prism bench index` from each report's `results.json`; do not "
             "edit by hand. Newest first. Revision: the prism commit measured "
             "(`+changes`: uncommitted changes on top of it, not reproducible from the "
             "repository); module: *release* if the module it measured is the release's "
             "(module/VERSION), *earlier* if from before it, *unreleased* if changed since. "
             "Superseded by: a later report on the same device and kernel "
             "that ran the same workloads again. Reports removed from the tree, and how to "
             "get them back: [REMOVED.md](REMOVED.md).", "",
             "| date | report | revision | module | device | kernel | workloads | reps "
             "| headline | superseded by |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(reports, key=lambda r: (r["created"], r["dir"]), reverse=True):
        module = {"release": "release", "earlier": "earlier",
                  "unreleased": "unreleased"}.get(provenance(r["source"]), "-")
        lines.append(f"| {r['created']} | [{r['dir']}]({r['dir']}/report.md) | "
                     f"`{r['source']}` | {module} | {r['profile']} | {', '.join(r['kernels'])} | "
                     f"{', '.join(r['workloads'])} | {r['reps'] or '-'} | "
                     f"{'; '.join(x for x in (headline(r), r.get('dominance')) if x) or '-'} | "
                     + (f"[{sup[r['dir']]}]({sup[r['dir']]}/report.md)"
                        if r["dir"] in sup else "") + " |")
    # Without results.json: instruction profiles. An empty directory, or
    # one with a plan but no results, is a run still going (prism bench
    # run makes its --out at the start) or one that failed: not listed.
    others = sorted(d.name for d in results.iterdir()
                    if d.is_dir() and not (d / "results.json").exists()
                    and not (d / "plan.json").exists() and any(d.iterdir()))
    if others:
        lines += ["", "Reports without results.json (instruction profiles, `prism "
                  "profile`): " + ", ".join(f"[{o}]({o}/)" for o in others) + "."]
    return "\n".join(lines) + "\n"
