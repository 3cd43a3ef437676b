"""The stress check: random valid, extreme and invalid stores and
switches under verified load, seed by seed (`prism stress` runs many)."""

from __future__ import annotations

import math
import os
import random
import subprocess
import time
from pathlib import Path

from .. import system as g
from .helpers import (
    EINVAL,
    KEYWORD_TUNABLES,
    SCHEDULERS,
    TUNABLE_GAPS,
    TUNABLES,
    conservation,
    verify_jobfile,
)
from .registry import check

# The stress test's bounds: no store (a tunable, nr_requests, rotational,
# a scheduler switch, each under load) may take longer than this, and
# once the defaults are back every job must end within STRESS_DRAIN_S of
# its runtime. Under TCG a switch away and back under this load took up
# to 3 s on 6.12 (the virtio disk takes one request at a time).
STRESS_STORE_BOUND_S = 10


STRESS_DRAIN_S = 60


# Not "": a write of nothing never reaches the store.
STRESS_BAD_VALUES = ("abc", "\n", "1.5", "-", "0x", "99999999999999999999")


def stress_value(rng, name: str):
    """A value for tunable @name: valid at random (often an extreme),
    or invalid (out of range, or not a number); (value, valid)."""
    if name in KEYWORD_TUNABLES:
        _shown, writes, bads = KEYWORD_TUNABLES[name]
        if rng.random() < 0.8:
            return rng.choice(sorted(writes)), True
        return rng.choice(STRESS_BAD_VALUES + bads), False
    _default, _good, lo, hi = TUNABLES[name]
    r = rng.random()
    if r < 0.25:
        return rng.choice((lo, hi)), True
    if r < 0.6:
        # Log-uniform over the range, so small values come up as often
        # as the huge ones a wide range is mostly made of.
        span = hi - lo
        val = lo + min(span, int(math.exp(rng.uniform(0, math.log(span + 1))) - 1))
        return val, val not in TUNABLE_GAPS.get(name, ())
    if r < 0.8:
        return rng.choice((lo - 1, hi + 1)), False
    return rng.choice(STRESS_BAD_VALUES), False


def stress_store(rng, devs: list[str]) -> dict:
    """One random store on one of @devs: a tunable (mostly), nr_requests,
    the rotational flag, or a switch to another scheduler and back to a
    fresh prism. Returns what was done, its errno and its time."""
    dev = rng.choice(devs)
    r = rng.random()
    t0 = time.monotonic()
    err = 0
    what = "?"
    try:
        if r < 0.8:
            name = rng.choice(sorted(TUNABLES) + sorted(KEYWORD_TUNABLES))
            val, valid = stress_value(rng, name)
            err = g.write_tunable(dev, name, val)
            what = f"{name}={val!r}"
            # Out-of-range and malformed values must be refused; valid
            # ones may find the elevator switched away for a moment
            # (ENOENT).
            if not valid and err != EINVAL and err != 2:
                what += f" ACCEPTED (errno {err})"
        elif r < 0.9:
            nr = rng.choice((2, 4, 8, 16, 64, 256))
            what = f"nr_requests={nr}"
            g.write_queue(dev, "nr_requests", nr)
        elif r < 0.95:
            rot = rng.randint(0, 1)
            what = f"rotational={rot}"
            g.write_queue(dev, "rotational", rot)
        else:
            other = rng.choice([s for s in SCHEDULERS if s != "prism"])
            what = f"switch {other} and back"
            g.set_scheduler(dev, other)
            away = time.monotonic() - t0
            g.set_scheduler(dev, "prism")
            # Which freeze took the time: prism's drain, or the other's.
            what += f" (away {away:.2f} s, back {time.monotonic() - t0 - away:.2f} s)"
    except OSError as e:
        err = e.errno or -1
    except RuntimeError as e:  # a switch that did not take
        err = -1
        what += f" FAILED: {e}"
    return {"dev": dev, "what": what, "errno": err, "s": time.monotonic() - t0}


def fs_writer_jobfile(mnt: str, runtime: int) -> str:
    """Buffered writes with fsync on a file system: its journal commits,
    flushes and writeback reach the disk beneath through the page cache."""
    return (f"[global]\ndirectory={mnt}\nioengine=psync\ndirect=0\nsize=48M\n"
            f"time_based=1\nruntime={runtime}\n\n"
            "[fsync_writer]\nrw=randwrite\nbs=8k\nfsync=8\nprioclass=2\nprio=4\n\n"
            "[bulk_writer]\nrw=write\nbs=256k\nprioclass=3\nend_fsync=1\n")


def stress_bounds(ctx) -> tuple[float, float]:
    """The stress check's store and drain bounds, scaled for a slower
    kernel (--stress-slowdown: a debug kernel's KASAN and lockdep)."""
    slow = ctx.get("stress_slowdown") or 1
    return STRESS_STORE_BOUND_S * slow, STRESS_DRAIN_S * slow


def stress_round(ctx, seed: int, seconds: int) -> dict:
    """One seed of check_stress."""
    store_bound, drain_bound = stress_bounds(ctx)
    rng = random.Random(seed)
    nullb, virtio = ctx["nullb_verify"], ctx["virtio"]
    devs = [nullb, virtio]
    rot = {d: (g.SYS_BLOCK / d / "queue" / "rotational").read_text().strip() for d in devs}
    for d in devs:
        g.set_scheduler(d, "prism")
    rundir = Path(os.environ.get("PRISM_RUNDIR", "/tmp"))
    # The virtio disk's first half is verified raw; its second half, a
    # loop device with direct I/O (so its I/O reaches the disk's queue
    # as it is issued), carries an ext4 file system.
    half = ctx["size_mb"]["virtio"]
    g.sh("modprobe loop", check=False)
    loop = g.sh(f"losetup -f --show --direct-io=on -o {half}M --sizelimit {half}M "
                f"/dev/{virtio}").stdout.strip()
    mnt = rundir / f"stress-fs-{seed}"
    mnt.mkdir(exist_ok=True)
    g.sh(f"mkfs.ext4 -q -F {loop}")
    g.sh(f"mount -o noatime {loop} {mnt}")
    jobs = {}
    for name, dev, size in (("nullb", nullb, ctx["size_mb"]["nullb_verify"]),
                            ("virtio", virtio, half)):
        path = rundir / f"stress-{name}-{seed}.fio"
        path.write_text(verify_jobfile(dev, size, seconds))
        jobs[name] = str(path)
    fsjob = rundir / f"stress-fs-{seed}.fio"
    fsjob.write_text(fs_writer_jobfile(str(mnt), seconds))
    jobs["fs"] = str(fsjob)
    procs = {n: subprocess.Popen(["fio", "--output-format=json", j], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n, j in jobs.items()}
    stores = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        stores.append(stress_store(rng, devs))
        time.sleep(rng.uniform(0.01, 0.05))
    # The defaults back: a fresh prism, the flags as they were.
    for d in devs:
        g.set_scheduler(d, "prism")
        g.write_queue(d, "rotational", rot[d])
    t_drain = time.monotonic()
    results = {}
    for n, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(1.0, t_drain + drain_bound
                                                 - time.monotonic()))
            rep = g.parse_fio_json(out) if out.strip() else {"jobs": []}
            results[n] = {"rc": p.returncode,
                          "errors": sum(j["error"] for j in rep.get("jobs", [])),
                          "stderr": err[-500:]}
        except subprocess.TimeoutExpired:
            p.kill()
            results[n] = {"rc": None, "errors": None, "stderr": "did not finish"}
    drain_s = time.monotonic() - t_drain
    g.sh(f"umount {mnt}", check=False)
    g.sh(f"losetup -d {loop}", check=False)
    books = {d: conservation(d)["balanced"] for d in devs}
    slowest = max(stores, key=lambda s: s["s"])
    wrong = [s["what"] for s in stores if "ACCEPTED" in s["what"] or "FAILED" in s["what"]]
    ok = (all(r["rc"] == 0 and r["errors"] == 0 for r in results.values())
          and slowest["s"] <= store_bound and not wrong and all(books.values()))
    return {"ok": ok, "seed": seed, "stores": len(stores),
            "switches": sum(s["what"].startswith("switch") for s in stores),
            "refused": sum(s["errno"] != 0 for s in stores),
            "slowest_store": {**slowest, "s": round(slowest["s"], 3)},
            "wrong_answers": wrong[:10], "jobs": results,
            "drain_s": round(drain_s, 2), "balanced": books}


@check("stress")
def check_stress(ctx) -> dict:
    """Protects against stores and switches under load that hang, lose data or take bad values.

    Random valid, extreme and invalid values written into every
    tunable every 10-50 ms, with nr_requests, rotational and scheduler
    switches among them, while fio verifies data at four priorities on
    null_blk and the virtio disk and an ext4 file system on the same
    virtio disk takes buffered writes with fsync. Then the defaults go
    back: every job ends within STRESS_DRAIN_S, no store took longer
    than STRESS_STORE_BOUND_S, no bad value was accepted and every switch
    took, no verify
    error, books balanced (the kernel log is checked after the boot).
    `prism stress` runs many seeds."""
    seeds = ctx.get("stress_seeds") or [1]
    seconds = ctx.get("stress_seconds") or 20
    rounds = [stress_round(ctx, s, seconds) for s in seeds]
    for d in (ctx["nullb_verify"], ctx["virtio"]):
        g.set_scheduler(d, "none")
    store_bound, drain_bound = stress_bounds(ctx)
    return {"ok": all(r["ok"] for r in rounds), "store_bound_s": store_bound,
            "drain_bound_s": drain_bound, "rounds": rounds}
