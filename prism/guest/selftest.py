"""The in-VM check suite's runner: everything the foundation must prove
on a real kernel, run in one boot per kernel. The checks themselves live
in prism/guest/checks/, one module an area (lifecycle, integrity, devices,
writeback, flows, priorities, hold, limiter, cgroups, stress, packaging),
and prism/guest/checks/__init__.py lists the order a boot runs them in.
Each check returns a record {"ok": bool, ...details}; the host side
(tests/test_vm.py) asserts on them one by one, and on the kernel log
afterwards. `prism selftest --list` lists them on the host.

Run in the guest as: python3 -m prism.guest.selftest --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import traceback
from pathlib import Path

from . import system as g
from .checks import CHECKS, CLOUD_CHECKS, SAME_ON_EVERY_KERNEL
from .checks.helpers import KEYWORD_TUNABLES, TUNABLE_GAPS, TUNABLES
from .checks.packaging import check_autoload

# The host reads these through this module too (cli, tests): the check
# lists above, and the tunables' table the module's sysfs is checked against.
__all__ = ["CHECKS", "CLOUD_CHECKS", "KEYWORD_TUNABLES", "SAME_ON_EVERY_KERNEL", "SUITES",
           "TUNABLES", "TUNABLE_GAPS", "main", "parse_seeds"]


def setup() -> dict:
    g.load_prism()
    g.mount_debugfs()
    # 2 slots of 5 ms: at most 400 IOPS, far below what fio reaches under
    # TCG, so the device and not the emulated CPU is the bottleneck and
    # requests really queue in the scheduler.
    nullb = g.nullb_module(depth=2, completion_us=5000)[0]
    nullb_verify = g.nullb_configfs("verify", depth=8, completion_us=100, size_mb=256)
    nullb_discard = g.nullb_configfs("discard", depth=8, completion_us=100, size_mb=256,
                                     extra={"discard": 1})
    # 64 slots of 5 ms: the kernel gives it 128 scheduler tags (four
    # sbitmap words of 32) for the tag reserve check to lower.
    nullb_tags = g.nullb_configfs("tags", depth=64, completion_us=5000, size_mb=1024,
                                  memory_backed=False)
    virtio = g.disk_by_serial(g.VIRTIO_SERIAL)
    nvme = g.disk_by_serial(g.NVME_SERIAL)
    nvme_slow = g.disk_by_serial(g.NVME_SERIAL + "-slow")
    hdd = g.disk_by_serial(g.MODEL_SERIALS["hdd"])
    # prism's test disk (tests/kmod/prism_testblk.c), not requeueing yet.
    ko = os.environ.get("PRISM_TESTBLK_KO")
    if not ko:
        raise RuntimeError("PRISM_TESTBLK_KO is not set: the test disk was not built")
    g.sh(f"insmod {ko} requeue_every=0 queue_depth=4")
    # The HDD check verifies 4 regions of 8 MiB: some seconds at disk speed.
    return {"nullb": nullb, "nullb_verify": nullb_verify, "nullb_discard": nullb_discard,
            "nullb_tags": nullb_tags, "virtio": virtio, "nvme": nvme,
            "nvme_slow": nvme_slow, "hdd": hdd,
            "testblk": "prismtb0",
            # Verified regions: 4 of 32 MiB on the fast devices (about
            # 7,000 verified 4 KiB writes for the RT job alone; each
            # doubling costs the test suite about a minute per kernel).
            "size_mb": {"virtio": 128, "nullb_verify": 128, "hdd": 32, "nvme": 128,
                        "nullb_discard": 256, "testblk": 256}}


def setup_cloud() -> dict:
    g.load_prism()
    g.mount_debugfs()
    return {"cloud": g.disk_by_serial(g.MODEL_SERIALS["cloud"]),
            "cloud_small": g.disk_by_serial(g.MODEL_SERIALS["cloud-small"]),
            "hdd_ncq": g.disk_by_serial(g.MODEL_SERIALS["hdd-ncq"]),
            "size_mb": {"cloud": 64}}


def run_autoload_first() -> dict:
    """check_autoload, before anything else loads prism: the test suite
    installs the module through DKMS around the main boot and asks for it
    with --autoload-first (a boot of its own would cost as much as the
    check's seconds again). setup() reloads null_blk after it."""
    g.mount_debugfs()
    version = (Path(__file__).resolve().parents[2] / "module" / "VERSION").read_text().strip()
    ctx = {"nullb": g.nullb_module(depth=4, completion_us=100)[0], "version": version}
    return check_autoload(ctx)


SUITES = {"main": (setup, CHECKS), "cloud": (setup_cloud, CLOUD_CHECKS)}


# A check still running after this long has most likely stalled the
# guest: save what the kernel knows before the host's timeout kills it.
CHECK_STALL_S = 300


def save_stall(name: str) -> None:
    """sysrq-w's blocked tasks and the whole kernel log, to the run
    directory (stall-<check>.txt), for a check that runs far too long."""
    log = g.log_blocked_tasks()
    ps = g.sh(g.TASK_LIST, check=False).stdout
    out = Path(os.environ.get("PRISM_RUNDIR", ".")) / f"stall-{name}.txt"
    out.write_text(f"check {name} still running after {CHECK_STALL_S} s\n{ps}\n{log}")
    g.log(f"check {name}: still running after {CHECK_STALL_S} s; kernel log in {out}")


def run_check(name: str, fn, ctx) -> dict:
    g.log(f"check {name} ...")
    t0 = time.monotonic()
    watchdog = threading.Timer(CHECK_STALL_S, save_stall, args=(name,))
    watchdog.daemon = True
    watchdog.start()
    try:
        res = fn(ctx)
    except Exception:
        res = {"ok": False, "error": traceback.format_exc()}
    finally:
        watchdog.cancel()
    res["seconds"] = round(time.monotonic() - t0, 1)
    g.log(f"check {name}: {'ok' if res['ok'] else 'FAILED'} ({res['seconds']} s)")
    return res


def parse_seeds(text: str) -> list[int]:
    """"7", "1-20" or "3,5,9" as a list of seeds."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m prism.guest.selftest")
    ap.add_argument("--out", default="results.json")
    ap.add_argument("--only", help="comma-separated check names")
    ap.add_argument("--skip", help="comma-separated check names not to run")
    ap.add_argument("--suite", choices=tuple(SUITES), default="main")
    ap.add_argument("--stress-seeds", help="the stress check's seeds: N, N-M or a comma "
                    "list (default 1,2)")
    ap.add_argument("--stress-seconds", type=int, help="seconds of stores per seed "
                    "(default 20)")
    ap.add_argument("--stress-slowdown", type=int, default=1,
                    help="multiply the stress check's time bounds (a debug kernel)")
    ap.add_argument("--autoload-first", action="store_true",
                    help="run check_autoload before the suite loads prism (DKMS must "
                    "have installed the module for this kernel)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    setup_fn, checks = SUITES[args.suite]
    results = {}
    if args.autoload_first:
        results["autoload"] = run_check("autoload", lambda ctx: run_autoload_first(), None)
    try:
        ctx = setup_fn()
        results["setup"] = {"ok": True, **ctx}
        ctx["stress_seeds"] = parse_seeds(args.stress_seeds) if args.stress_seeds else None
        ctx["stress_seconds"] = args.stress_seconds
        ctx["stress_slowdown"] = args.stress_slowdown
    except Exception:
        results["setup"] = {"ok": False, "error": traceback.format_exc()}
        ctx = None
    for name, fn in checks:
        if ctx is None or (only and name not in only) or name in skip:
            continue
        results[name] = run_check(name, fn, ctx)
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
