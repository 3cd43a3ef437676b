"""blktests' block group against prism, in the guest.

The host (prism.host.blktests) builds blktests and copies it into the
VM's run directory, where the guest can write its results. Here prism is
loaded first, so every test that loops over a queue's schedulers
(_io_schedulers) includes it, and the scratch disk (TEST_DEVS) runs under
prism. A test that fails is run once more with prism loaded, since some
time themselves against the emulated CPU (017 counts requests in flight
during sleeps of 0.1 s, on a null_blk device that is not even prism's):
one that passes then is flaky, not broken, and says so. One that fails
again is run with prism unloaded: only a failure that goes away then is
prism's.

Host:  prism blktests --kernel all [--tests block/005,...]
Guest: python3 -m prism.guest.blktests --tests ... --out blktests.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

# The scratch disk the host attaches for TEST_DEVS (virtio, file-backed).
SCRATCH_SERIAL = "prism-blktests"

# Tests that exercise what a scheduler touches: they loop over the
# schedulers (005, 014, 015, 020, 021, 027), or drive discards (003,
# 009), flushes (004), the in-flight counter (017), queue freezes (016,
# 022), hotplug under I/O with schedulers switched (027) or a host-wide
# tag set (031). The tests run by pytest; the whole group has its own
# command. Left to it: 001 (scsi_debug hotplug with the default scheduler,
# never prism; three minutes under TCG) and 010 (8 GiB read from each of
# 32 null_blk devices without a scheduler: hours under TCG).
SCHED_TESTS = ["block/003", "block/004", "block/005", "block/009",
               "block/014", "block/015", "block/016", "block/017", "block/020",
               "block/021", "block/022", "block/027", "block/031"]
# The part of SCHED_TESTS the test suite runs on every kernel; the rest
# only on the newest (tests/test_blktests.py: CI time). These drive what
# the two kernels route differently under a scheduler: discards (003),
# flushes (004), switching under I/O (005), nr_requests changes (021) and
# queue freezes (022), two of them looping over every scheduler. On the
# older kernel the guest suite's own checks cover the rest of the ground
# (hot_remove, shared_tags, one-tag devices, requeue, queue changes under
# load). 014 and 015 need null_blk's fault injection, which Debian's
# kernels lack.
EVERY_KERNEL_TESTS = ["block/003", "block/004", "block/005", "block/021", "block/022"]
# blktests' own limit for its fio runs, in seconds (TIMEOUT in its config):
# without it some tests read their whole size, which TCG takes hours for.
# 022 sleeps it and 003, 004, 005 and 031 run fio for it, so it sets most
# of a run's length: the test suite takes a shorter one (CI_FIO_TIMEOUT),
# still thousands of requests through prism per test under TCG.
FIO_TIMEOUT = 30
CI_FIO_TIMEOUT = 5


def parse_results(results: Path) -> dict[str, dict]:
    """blktests writes results/<device or nodev>/<group>/<test>, one
    "key<TAB>value" per line (status: pass, fail or not run; reason)."""
    out: dict[str, dict] = {}
    if not results.exists():
        return out
    for f in sorted(results.glob("*/*/*")):
        if not f.is_file() or "." in f.name:
            continue
        rec = {}
        for line in f.read_text(errors="replace").splitlines():
            k, _, v = line.partition("\t")
            rec[k.strip()] = v.strip()
        name = f"{f.parent.name}/{f.name}"
        where = f.parent.parent.name
        entry = {"status": rec.get("status", "unknown"), "device": where}
        if rec.get("reason"):
            entry["reason"] = rec["reason"]
        if entry["status"] == "fail":
            full = f.with_name(f.name + ".full")
            bad = f.with_name(f.name + ".out.bad")
            for extra in (bad, full):
                if extra.exists():
                    entry.setdefault("detail", extra.read_text(errors="replace")[-1500:])
        prev = out.get(name)
        # A test run on a device and on nodev: keep the worse outcome.
        if prev is None or entry["status"] == "fail":
            out[name] = entry
    return out


def skip_reasons(output: str) -> dict[str, str]:
    """Why each test was not run: blktests prints the reasons only on its
    output, indented under the test's "[not run]" line."""
    out: dict[str, str] = {}
    current = None
    for line in output.splitlines():
        m = re.match(r"^(\w+/\d+)\b.*\[not run\]\s*$", line)
        if m:
            current = m.group(1)
            out[current] = ""
        elif current and line.startswith("    ") and line.strip():
            # Skip the measurement lines ("runtime  ...  1.0s").
            if "..." not in line:
                out[current] = "; ".join(filter(None, [out[current], line.strip()]))
        else:
            current = None
    return out


def run_check(root: Path, tests: list[str], log: Path) -> dict[str, dict]:
    shutil.rmtree(root / "results", ignore_errors=True)
    # Its output goes to the log as it comes (progress), and is kept for
    # the skip reasons.
    lines = []
    with open(log, "a") as f:
        proc = subprocess.Popen(["./check"] + tests, cwd=root, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            f.write(line)
            f.flush()
        proc.wait()
    results = parse_results(root / "results")
    for test, reason in skip_reasons("".join(lines)).items():
        if test in results and reason and not results[test].get("reason"):
            results[test]["reason"] = reason
    return results


def mark_flaky(first: dict[str, dict], again: dict[str, dict]) -> list[str]:
    """The failed tests of @first that passed when run again with prism
    (@again) become, in place, passes that were flaky (their first
    failure kept); returns those that failed again."""
    still = []
    for t, r in first.items():
        if r["status"] != "fail":
            continue
        if again.get(t, {}).get("status") == "pass":
            r["status"] = "pass"
            r["flaky"] = r.pop("detail", "") or r.get("reason", "failed once")
        else:
            still.append(t)
    return still


def blame(first: dict[str, dict], without: dict[str, dict]) -> None:
    """Whose failure each test still failing in @first is, in place, from
    its run without prism (@without)."""
    for t, r in first.items():
        if r["status"] == "fail":
            r["without_prism"] = without.get(t, {}).get("status", "unknown")
            # Excused only if it fails the same way without prism.
            r["prism_failure"] = r["without_prism"] != "fail"


def guest_main(argv=None) -> int:
    from . import system as g

    ap = argparse.ArgumentParser(prog="python3 -m prism.guest.blktests")
    ap.add_argument("--tests", default=",".join(SCHED_TESTS),
                    help="comma-separated, or 'block' for the whole group")
    ap.add_argument("--out", default="blktests.json")
    ap.add_argument("--fio-timeout", type=int, default=FIO_TIMEOUT,
                    help="blktests' TIMEOUT: the seconds its fio runs and waits last")
    args = ap.parse_args(argv)
    rundir = Path(os.environ.get("PRISM_RUNDIR", "."))
    root = rundir / "blktests"
    tests = ["block"] if args.tests == "block" else args.tests.split(",")

    g.load_prism()
    g.mount_debugfs()
    g.sh("modprobe configfs; mountpoint -q /sys/kernel/config || "
         "mount -t configfs none /sys/kernel/config", check=False)
    g.sh("modprobe kyber-iosched; modprobe bfq", check=False)
    scratch = g.disk_by_serial(SCRATCH_SERIAL)
    g.set_scheduler(scratch, "prism")
    (root / "config").write_text(f"TEST_DEVS=(/dev/{scratch})\nTIMEOUT={args.fio_timeout}\n")
    log = rundir / "blktests.log"
    log.write_text("")
    g.log(f"blktests {' '.join(tests)} on /dev/{scratch} with prism loaded")
    with_prism = run_check(root, tests, log)
    failed = [t for t, r in with_prism.items() if r["status"] == "fail"]
    again: dict[str, dict] = {}
    without: dict[str, dict] = {}
    if failed:
        g.log(f"running once more with prism: {' '.join(failed)}")
        again = run_check(root, failed, log)
    still = mark_flaky(with_prism, again)
    if still:
        # Again with prism gone from every queue and unloaded.
        for d in g.SYS_BLOCK.iterdir():
            if (d / "queue" / "scheduler").exists() and g.schedulers(d.name)[1] == "prism":
                g.set_scheduler(d.name, "none")
        g.unload_prism()
        g.log(f"rerunning without prism: {' '.join(still)}")
        without = run_check(root, still, log)
    blame(with_prism, without)
    doc = {"tests": tests, "scratch": scratch, "results": with_prism}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for t, r in sorted(with_prism.items()):
        g.log(f"{t}: {r['status']}" + (f" ({r['reason']})" if r.get("reason") else "")
              + (" [failed once, passed when run again]" if r.get("flaky") else "")
              + (f" [without prism: {r['without_prism']}]" if "without_prism" in r else ""))
    return 1 if any(r.get("prism_failure") for r in with_prism.values()) else 0


if __name__ == "__main__":
    raise SystemExit(guest_main())
