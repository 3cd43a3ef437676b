"""The guest half of `prism profile`: the same fixed number of 4 KiB random
reads on a delay-free null_blk (the bench's nullb-cpu) under each scheduler,
with a mark before and after each measured run for the host's
instruction-counting plugin (prism/host/insnprof.c), which snapshots its
counters at every mark.

  python3 -m prism.guest.insnprof --ios N --jobs J SCHED...

Leaves insnprof.json (one entry per scheduler: fio's IOPS, the marks
around its run, the kallsyms file that names its addresses) in
$PRISM_RUNDIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from . import system as g
from .benchrun import NULLB_PROFILES, NULLB_SIZE_MB

# No wait here is bounded by the guest's clock. Under `-icount sleep=off`
# it jumps to the next timer whenever the vCPU is idle, and it is idle
# while the host serves it (reading fio from the shared root, writing a
# snapshot): a 600 s timeout can expire in a second of real time, which
# killed a warm-up fio run in CI. The host's --timeout bounds the boot in
# real time instead.
# Ahead of each measured run (or as many as it has, if fewer): the
# scheduler's first requests (its allocations, the flow table, the cost
# model's start) are not its steady cost per request.
WARMUP_IOS = 20000


class Marks:
    """Numbered marks the plugin answers with a snapshot of its counters."""

    def __init__(self, rundir: Path):
        self.rundir = rundir
        self.next = 1

    def mark(self) -> int:
        n = self.next
        (self.rundir / f"mark-{n}").touch()
        while not (self.rundir / f"done-{n}").exists():
            time.sleep(0.01)
        self.next += 1
        return n


def randread(dev: str, ios: int, jobs: int) -> dict:
    """@ios 4 KiB random reads per job (io_uring, iodepth 32, as the
    cpu_randread workloads), no time limit: every scheduler does the same
    work. Returns fio's report."""
    return g.fio(args=["--name=profile", f"--filename=/dev/{dev}", "--direct=1",
                       "--rw=randread", "--bs=4k", "--ioengine=io_uring", "--iodepth=32",
                       f"--numjobs={jobs}", "--group_reporting", f"--number_ios={ios}",
                       "--size=2G", "--randrepeat=0"], timeout=None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ios", type=int, required=True, help="reads per job in a measured run")
    ap.add_argument("--jobs", type=int, default=1, help="submitting jobs (default 1)")
    ap.add_argument("schedulers", nargs="+")
    args = ap.parse_args()
    rundir = Path(os.environ["PRISM_RUNDIR"])
    if "prism" in args.schedulers and not g.module_loaded():
        g.load_prism()
    spec = NULLB_PROFILES["nullb-cpu"]
    dev = g.nullb_configfs("profile", depth=spec["depth"],
                           completion_us=spec["completion_us"], size_mb=NULLB_SIZE_MB,
                           memory_backed=False)
    marks = Marks(rundir)
    results = []
    for sched in args.schedulers:
        g.set_scheduler(dev, sched)
        randread(dev, min(WARMUP_IOS, args.ios), args.jobs)
        before = marks.mark()
        report = randread(dev, args.ios, args.jobs)
        after = marks.mark()
        # Module addresses change with every load: name them now.
        kallsyms = f"kallsyms-{after}"
        shutil.copyfile("/proc/kallsyms", rundir / kallsyms)
        read = report["jobs"][0]["read"]
        g.log(f"{sched}: {read['total_ios']} reads at {read['iops']:.0f} IOPS (guest clock)")
        results.append({"scheduler": sched, "iops": read["iops"],
                        "ios": read["total_ios"], "before": before, "after": after,
                        "kallsyms": kallsyms})
    g.set_scheduler(dev, "none")
    (rundir / "insnprof.json").write_text(json.dumps({"jobs": args.jobs,
                                                       "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
