"""The module's and the scheduler's lifecycle: prism loads, is selected,
takes and refuses its tunables, survives switches under load and a
disk removed under it, and unloads."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from .. import system as g
from .helpers import (
    EINVAL,
    KEYWORD_TUNABLES,
    SCHED_TAGS,
    SCHEDULERS,
    TUNABLE_GAPS,
    TUNABLES,
    conservation,
    run_verify,
)
from .registry import check


@check("load")
def check_load(ctx) -> dict:
    """Protects against a module that loads but is not offered as a scheduler."""
    g.load_prism()
    avail, _ = g.schedulers(ctx["nullb"])
    return {"ok": "prism" in avail, "available": avail}


@check("select_nullb")
def check_select_nullb(ctx) -> dict:
    """Protects against missing or misnamed tunables, wrong defaults, missing debugfs files."""
    dev = ctx["nullb"]
    g.set_scheduler(dev, "prism")
    present = sorted(p.name for p in (g.SYS_BLOCK / dev / "queue" / "iosched").iterdir())
    defaults: dict = {name: int(g.read_tunable(dev, name)) for name in TUNABLES}
    defaults |= {name: g.read_tunable(dev, name) for name in KEYWORD_TUNABLES}
    expected = {name: spec[0] for name, spec in (TUNABLES | KEYWORD_TUNABLES).items()}
    g.mount_debugfs()
    debugfs = sorted(p.name for p in (g.DEBUGFS / "block" / dev / "sched").iterdir())
    wanted = {"tiers", "batch", "streams", "flows", "cost"}
    ok = (g.schedulers(dev)[1] == "prism" and present == sorted(TUNABLES | KEYWORD_TUNABLES)
          and defaults == expected and wanted <= set(debugfs))
    return {"ok": ok, "tunables": present, "defaults": defaults,
            "expected_defaults": expected, "debugfs": debugfs,
            "batch": g.prism_batch(dev)}


@check("select_virtio")
def check_select_virtio(ctx) -> dict:
    """Protects against a first selection that does not take or leaves the books unbalanced."""
    dev = ctx["virtio"]
    g.set_scheduler(dev, "prism")
    g.sh(f"dd if=/dev/{dev} of=/dev/null bs=64k count=64 iflag=direct")
    books = conservation(dev)
    return {"ok": g.schedulers(dev)[1] == "prism" and books["balanced"],
            "device": dev,
            "rotational": (g.SYS_BLOCK / dev / "queue" / "rotational").read_text().strip(),
            "batch": g.prism_batch(dev), **books}


@check("switch_under_load_nvme")
def check_switch_under_load(ctx, devkey: str = "nvme") -> dict:
    """Protects against switching schedulers under load on a multi-queue device going wrong.

    50 switches among all schedulers while a verifying fio runs, on
    QEMU's NVMe: two hardware queues (the stress check switches prism
    away and back on null_blk and virtio, one queue each)."""
    dev = ctx[devkey]
    g.set_scheduler(dev, "prism")
    switches = []
    errors = []
    done = threading.Event()

    def switcher():
        try:
            for i in range(50):
                sched = SCHEDULERS[i % len(SCHEDULERS)]
                t0 = time.monotonic()
                g.set_scheduler(dev, sched)
                switches.append((sched, round(time.monotonic() - t0, 3)))
                time.sleep(0.2)
        except Exception as e:  # reported, not raised: fio must be stopped
            errors.append(repr(e))
        finally:
            done.set()

    t = threading.Thread(target=switcher)
    t.start()
    rounds = []
    while not done.is_set():
        try:
            rounds.append(run_verify(dev, ctx["size_mb"][devkey],
                                     f"switch-{devkey}", runtime=5))
        except Exception as e:
            errors.append(repr(e))
            break
    t.join(timeout=600)
    ok = (len(switches) == 50 and not errors and rounds
          and all(r["errors"] == 0 for r in rounds))
    return {"ok": ok, "switches": len(switches), "switch_seconds": switches,
            "fio_rounds": len(rounds), "errors": errors,
            "fio_errors": sum(r["errors"] for r in rounds)}


@check("tunables")
def check_tunables(ctx) -> dict:
    """Protects against bad values accepted or half-applied, good ones not sticking.

    Bad input gets -EINVAL and changes nothing; good input sticks."""
    dev = ctx["nullb"]
    g.set_scheduler(dev, "prism")
    failures = []
    for name, (default, good, lo, hi) in TUNABLES.items():
        before = g.read_tunable(dev, name)
        for bad in ("abc", "\n", "1.5", "0x", "12abc", str(lo - 1), str(hi + 1),
                    "99999999999999999999"):
            err = g.write_tunable(dev, name, bad)
            after = g.read_tunable(dev, name)
            if err != EINVAL or after != before:
                failures.append(f"{name}={bad!r}: errno {err}, {before} -> {after}")
        for val in (good, lo, hi, default):
            err = g.write_tunable(dev, name, val)
            got = g.read_tunable(dev, name)
            if err or int(got) != val:
                failures.append(f"{name}={val}: errno {err}, reads back {got}")
        g.write_tunable(dev, name, default)
    for kname, (kdefault, writes, bads) in KEYWORD_TUNABLES.items():
        before = g.read_tunable(dev, kname)
        for bad in bads:
            err = g.write_tunable(dev, kname, bad)
            after = g.read_tunable(dev, kname)
            if err != EINVAL or after != before:
                failures.append(f"{kname}={bad!r}: errno {err}, {before} -> {after}")
        for words, shown in writes.items():
            err = g.write_tunable(dev, kname, words)
            got = g.read_tunable(dev, kname)
            if err or got != shown:
                failures.append(f"{kname}={words!r}: errno {err}, reads back {got!r}")
        g.write_tunable(dev, kname, kdefault)
    for name, gaps in TUNABLE_GAPS.items():
        before = g.read_tunable(dev, name)
        for val in gaps:
            err = g.write_tunable(dev, name, val)
            if err != EINVAL or g.read_tunable(dev, name) != before:
                failures.append(f"{name}={val}: errno {err}")
    final: dict = {name: int(g.read_tunable(dev, name)) for name in TUNABLES}
    final |= {name: g.read_tunable(dev, name) for name in KEYWORD_TUNABLES}
    restored = final == {n: s[0] for n, s in (TUNABLES | KEYWORD_TUNABLES).items()}
    return {"ok": not failures and restored, "failures": failures, "final": final}


@check("hot_remove")
def check_hot_remove(ctx) -> dict:
    """Protects against a hang, leak or WARN when a disk goes away while prism holds requests.

    A device removed while prism holds requests: a slow configfs
    null_blk (2 slots of 5 ms, 64 scheduler tags) is powered off under
    deep fio jobs at three classes. fio sees errors (the disk is gone);
    the kernel must not hang, leak or warn (exit_sched checks prism's
    books as the queue goes)."""
    dev = g.nullb_configfs("hot", depth=2, completion_us=5000, size_mb=512,
                           memory_backed=False)
    g.set_scheduler(dev, "prism")
    g.write_queue(dev, "nr_requests", SCHED_TAGS)
    args = ["fio", "--output-format=json", "--direct=1", "--ioengine=libaio", "--runtime=20",
            "--time_based=1", f"--filename=/dev/{dev}", "--group_reporting=0",
            "--continue_on_error=all"]
    for name, extra in (("rt", ["--rw=randread", "--prioclass=1"]),
                        ("be", ["--rw=randwrite", "--prioclass=2", "--prio=4"]),
                        ("idle", ["--rw=read", "--prioclass=3"])):
        args += [f"--name={name}", "--bs=4k", "--iodepth=32"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Until prism holds requests: 3 s on Debian's kernels, more where fio
    # starts slowly (the debug kernel's KASAN: none queued after 3 s).
    deadline = time.monotonic() + 60
    queued = 0
    while not queued and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
        queued = sum(t["queued"] for t in g.prism_tiers(dev).values())
    t0 = time.monotonic()
    (g.CONFIGFS / "nullb" / "hot" / "power").write_text("0\n")
    removed_s = time.monotonic() - t0
    try:
        proc.communicate(timeout=120)
        fio_ended = True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        fio_ended = False
    (g.CONFIGFS / "nullb" / "hot").rmdir()
    gone = not (g.SYS_BLOCK / dev).exists()
    return {"ok": queued > 0 and fio_ended and gone, "queued_at_removal": queued,
            "removal_s": round(removed_s, 2), "fio_ended": fio_ended, "device_gone": gone}


@check("unload")
def check_unload(ctx) -> dict:
    """Protects against rmmod succeeding while prism is in use, or failing after it.

    rmmod is refused while prism is in use and clean after switching away."""
    users = [d.name for d in g.SYS_BLOCK.iterdir() if (d / "queue" / "scheduler").exists()]
    g.set_scheduler(ctx["nullb"], "prism")
    busy = g.unload_prism()
    refused = busy.returncode != 0 and g.module_loaded()
    for d in users:
        if g.schedulers(d)[1] == "prism":
            g.set_scheduler(d, "none")
    freed = g.unload_prism()
    unloaded = freed.returncode == 0 and not g.module_loaded()
    # And it comes back: load, use, switch away, unload once more.
    g.load_prism()
    g.set_scheduler(ctx["nullb"], "prism")
    g.sh(f"dd if=/dev/{ctx['nullb']} of=/dev/null bs=4k count=100 iflag=direct")
    g.set_scheduler(ctx["nullb"], "none")
    again = g.unload_prism().returncode == 0
    # The blkcg policy left with the module: a new cgroup has no file of it.
    policy_gone = None
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.subtree_control").exists():
        after = root / "prism-after-unload"
        after.mkdir(exist_ok=True)
        policy_gone = not (after / "io.prism.weight").exists()
        after.rmdir()
    return {"ok": refused and unloaded and again and policy_gone is not False,
            "refused_while_used": refused, "rmmod_busy_stderr": busy.stderr.strip(),
            "unloaded": unloaded, "reload_cycle": again, "cgroup_policy_gone": policy_gone}
