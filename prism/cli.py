"""prism: the one command-line entry point.

  prism fetch --kernel 6.12         its release's build root (headers, linux-source),
                                    the image extracted, block/ into the cache
  prism build --kernel 6.12         build prism-iosched.ko against it (--twin NAME: and
                                    a release's module beside it, prism-v2-iosched.ko or
                                    prism-v3-iosched.ko); --kernel build-only: the
                                    kernels built but never booted
  prism checkpatch                  checkpatch.pl --no-tree -f on the module sources
  prism kernels list                the pinned kernels (tested and build-only), where built
  prism kernels update              move the pins to the newest ABI of each series
  prism kernels debug-build         build 6.12's source with lockdep, KASAN and kmemleak,
                                    bootable as --kernel 6.12-debug (once per release)
  prism vm --kernel 6.12 -- CMD     boot the kernel under QEMU, module at $PRISM_KO
  prism selftest --kernel 6.12      the in-VM check suite, one boot
  prism blktests --kernel 6.12      blktests' block tests with prism loaded, one boot
  prism stress --kernel 6.12        random tunables and switches under verified load
  prism bench run --workload W ...  the benchmark: workloads x schedulers x reps
  prism demo [--quick]              the main comparison: a database beside a backup on an
                                    emulated disk, all five schedulers
  prism status [DEV...]             what prism is doing on this machine's disks (reads only)
  prism profile                     instructions per I/O by kernel function, per scheduler
  prism disk serve --profile hdd    serve the emulated disk over NBD (host side)
  prism disk params --profile hdd   print the model's parameter file
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import signal
import sys
import time
import tomllib
from pathlib import Path

from . import __version__
from .bench import plan
from .common import status as prism_status
from .common import workloads
from .common.errors import PrismError, Terminated, UsageError
from .drives import diskmodel, nbd
from .guest import checks, selftest
from .guest.system import NVME_SERIAL, TWINS, VIRTIO_SERIAL
from .host import blktests, build, debugkernel, insnprof, kernels, pgimage, pins, twin, vm


def _kernels(arg: str) -> list[kernels.Kernel]:
    return kernels.parse(arg)


def _booted(arg: str) -> list[kernels.Kernel]:
    """--kernel of a command that boots: no build-only kernel."""
    return kernels.parse_booted(arg)


def selftest_disks(rundir: Path) -> list[vm.Disk | vm.ModelDisk]:
    """What prism.guest.selftest expects: a small virtio disk, two NVMe disks
    (one metered at 400 IOPS for the priority check; the driver's queues
    are one tag deep on both) and the emulated HDD."""
    return [vm.Disk(serial=VIRTIO_SERIAL, path=rundir / "virtio.img", size_mb=256),
            vm.NvmeDisk(serial=NVME_SERIAL, path=rundir / "nvme.img", size_mb=256),
            vm.NvmeDisk(serial=NVME_SERIAL + "-slow", path=rundir / "nvme-slow.img",
                        size_mb=2048, throttle_iops=400, io_queue_depth=2),
            vm.ModelDisk(diskmodel.HddProfile(), rundir, trace=True)]


def cloud_check_disks(rundir: Path) -> list[vm.Disk | vm.ModelDisk]:
    """The cloud volumes for selftest's cloud suite, in a boot of their
    own: virtio_blk.queue_depth holds for every virtio disk, and the HDD
    of the main suite needs 1 where a volume needs 64. The default volume,
    and a small one (200 IOPS, 16 MiB/s, as docs/disk-params/cloud-small.toml)
    where one bulk request is a large part of a second; and an NCQ disk
    (hdd-ncq's drive, offered 64 deep as the volumes are: the drive still
    reorders among its 32 oldest) for the overdue-request check."""
    return [vm.ModelDisk(diskmodel.CloudProfile(), rundir, trace=True),
            vm.ModelDisk(diskmodel.CloudProfile(iops_limit=200, bandwidth_mib=16.0),
                         rundir / "cloud-small", serial_name="cloud-small"),
            vm.ModelDisk(diskmodel.HddNcqProfile(queue_depth=64), rundir / "hdd-ncq")]


def _disks(args, rundir: Path) -> list[vm.Disk | vm.ModelDisk]:
    if getattr(args, "disk_params", None) and args.device not in diskmodel.PROFILES:
        raise UsageError("--disk-params goes with --device " + " or ".join(diskmodel.PROFILES))
    if args.device == "selftest":
        return selftest_disks(rundir)
    if args.device == "selftest-cloud":
        return cloud_check_disks(rundir)
    if args.device == "virtio":
        return [vm.Disk(serial=VIRTIO_SERIAL, path=rundir / "virtio.img", size_mb=1024)]
    if args.device == "blktests":
        return [vm.Disk(serial=blktests.SCRATCH_SERIAL, path=rundir / "blktests.img",
                        size_mb=1024)]
    if args.device == "nvme":
        return [vm.NvmeDisk(serial=NVME_SERIAL, path=rundir / "nvme.img", size_mb=1024)]
    if args.device in diskmodel.PROFILES:
        return [vm.ModelDisk(plan.disk_profile(args), rundir, trace=True)]
    return []


def cmd_fetch(args) -> int:
    for k in _kernels(args.kernel):
        kernels.fetch(k)
        if k.build_only:
            kernels.log(f"{k.abi}: headers {k.headers_dir}, block/ in {kernels.block_dir(k)} "
                        "(build-only: no image)")
            continue
        kernels.log(f"{k.abi}: image {k.vmlinuz}, headers {k.headers_dir}, "
                    f"block/ in {kernels.block_dir(k)}"
                    + (f"; built in {kernels.build_root(k)}, modules {k.modules_dir}"
                       if k.root else "")
                    + ("" if k.vm_tested else "; not booted by the test suite yet "
                       "(vm_tested=False in prism/host/kernels.py)"))
    return 0


def cmd_build(args) -> int:
    ks = _kernels(args.kernel)
    tws = [twin.get(name) for name in dict.fromkeys(
        n.strip() for n in (args.twin or "").split(",") if n.strip())]
    for tw in tws:
        for k in ks:
            twin.check_kernel(k, tw)
    for k in ks:
        ko = build.build(k, fetch=not args.no_fetch)
        kernels.log(f"built {ko}")
        for tw in tws:
            ko = twin.build_twin(k, tw, fetch=not args.no_fetch)
            kernels.log(f"built {ko} ({tw.scheduler}: prism {tw.release}, commit {tw.rev})")
    return 0


def cmd_status(args) -> int:
    """What prism is doing on this machine's disks: sysfs and debugfs."""
    try:
        return prism_status.run(args.devs, args.json, args.watch, version=args.version)
    except ValueError as e:
        raise UsageError(str(e)) from None


def cmd_kernels_list(args) -> int:
    for k in kernels.parse("every") + list(kernels.DEBUG.values()):
        if k.debug:
            where = (f"built from {k.source_pkg} by {kernels.DEBUG_BUILDER}, in "
                     f"{kernels.debug_dir(k)}")
            built = "built" if kernels.debug_ready(k) else "NOT built yet"
            booted = f"{built}, booted only when named"
        elif k.build_only:
            where = f"headers extracted into the {k.release} build-only root"
            booted = "build-only: built, never booted"
        else:
            where = f"built in the {k.root} root, booted from the extracted image"
            booted = ("booted by the test suite" if k.vm_tested
                      else "NOT booted by the test suite")
        print(f"{k.name:<10} {k.abi} ({k.version}, {k.release}): {where}; {booted}")
    return 0


def cmd_kernels_debug_build(args) -> int:
    """Build the debug kernels (debugkernel.py)."""
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    for k in kernels.DEBUG.values():
        debugkernel.build(k, args.jobs, config_only=args.config_only)
    return 0


def cmd_kernels_update(args) -> int:
    """Move the pins to the newest ABI of their series (pins.py)."""
    ks = _kernels(args.kernel)
    debug = [k.name for k in ks if k.debug]
    if debug:
        raise UsageError(f"{', '.join(debug)}: no pin of its own; it follows the pin of "
                         "its series, which this command moves")
    listings = None
    if args.listing:
        d = Path(args.listing)
        try:
            listings = {rel: (d / f"madison-{rel}.txt").read_text()
                        for rel in {k.release for k in ks}}
        except OSError as e:
            raise UsageError(f"--listing: {e}") from None
    moves = pins.update(ks, listings, write=not args.dry_run)
    for c in moves:
        print(c)
    if not moves:
        kernels.log("every pin is the newest ABI of its series: nothing changed")
    elif args.dry_run:
        kernels.log(f"dry run: {pins.KERNELS_PY} not written")
    else:
        moved = ",".join(c.name for c in moves)
        booted = ",".join(c.name for c in moves if not kernels.get(c.name).build_only)
        kernels.log(f"rewrote {pins.KERNELS_PY}. Next: prism fetch --kernel {moved}, "
                    f"prism build --kernel {moved}"
                    + (f", then the VM suite on each booted one before committing "
                       f"(python3 -m pytest --kernels {booted})" if booted else
                       " before committing (build-only: nothing to boot)"))
    return 0


def cmd_checkpatch(args) -> int:
    status = 0
    for k in _kernels(args.kernel):
        clean, report = build.run_checkpatch(k)
        print(report)
        kernels.log(f"checkpatch ({k.name}'s): " + ("clean" if clean else "problems found"))
        status |= 0 if clean else 1
    return status


def _run_vm(k, command, args, rundir=None) -> vm.VmResult:
    # The disks' arguments checked before the build: a usage error makes nothing.
    vm.check_disks(_disks(args, Path(".")), args.accel)
    ko = build.build(k)
    rundir = rundir or vm.new_rundir()
    kernels.log(f"booting {k.abi} ({args.accel}); module {ko}; run dir {rundir}")
    disks = _disks(args, rundir)
    for d in disks:
        if isinstance(d, vm.ModelDisk):
            kernels.log(f"emulated {d.name} attached (serial {d.serial}, queue depth "
                        f"{d.profile.queue_depth}); its trace: {d.trace_path}")
    return vm.run(k, command, ko=ko, disks=disks,
                  memory=args.memory, cpus=args.cpus, accel=args.accel,
                  timeout=args.timeout, rundir=rundir)


def _report_log(res: vm.VmResult) -> bool:
    probs = res.log_problems
    for kind, line in probs:
        print(f"prism: kernel log: {kind}: {line}", file=sys.stderr)
    kernels.log(f"guest exit code {res.returncode} after {res.elapsed:.0f} s; "
                f"kernel log {res.rundir / 'dmesg.txt'}: "
                + (f"{len(probs)} problem(s)" if probs else "clean"))
    return not probs


def guest_failure(k, res: vm.VmResult, clean: bool) -> str | None:
    """Why a boot of @k that ran a command failed, for the one message
    that goes with exit 1 (the guest's own code is named, not returned:
    every prism command exits 0, 1 or 2); None if it did not."""
    if res.returncode > 0:
        return f"{k.name}: the guest's command exited {res.returncode}"
    if res.returncode < 0:
        return (f"{k.name}: the guest's command never ended ("
                + (f"killed after --timeout {res.elapsed:.0f} s" if res.timed_out
                   else f"the guest died; see {res.rundir / 'console.txt'}") + ")")
    if not clean:
        return (f"{k.name}: the guest's command exited 0, but the kernel log reports "
                f"problems ({res.rundir / 'dmesg.txt'})")
    return None


def cmd_vm(args) -> int:
    command = " ".join(args.command).strip()
    if command.startswith("-- "):
        command = command[3:]
    if not command:
        raise UsageError("nothing to run: prism vm --kernel K -- CMD")
    status = 0
    for k in _booted(args.kernel):
        res = _run_vm(k, command, args)
        why = guest_failure(k, res, _report_log(res))
        if why:
            print(f"prism: error: {why}", file=sys.stderr)
            status = 1
    return status


def cmd_profile(args) -> int:
    ks = _booted(args.kernel)
    if len(ks) != 1:
        raise UsageError("prism profile: one kernel at a time")
    k = ks[0]
    scheds = [s for s in args.schedulers.split(",") if s]
    if not scheds or len(set(scheds)) != len(scheds):
        raise UsageError("--schedulers: a comma list of distinct schedulers")
    if args.ios < 1000 or args.jobs < 1:
        raise UsageError("--ios must be at least 1000 and --jobs at least 1")
    if args.lines and "prism" not in scheds:
        raise UsageError("--lines breaks down prism's functions: add prism to --schedulers")
    tws = [TWINS[s] for s in scheds if s in TWINS]
    if len(tws) > 1:
        raise UsageError("--schedulers: one twin a profile (the guest is handed one)")
    for tw in tws:
        twin.check_kernel(k, tw)
    ko = build.build(k)
    twin_ko = twin.build_twin(k, tws[0]) if tws else None
    rundir = vm.new_rundir()
    kernels.log(f"profiling {', '.join(scheds)} on {k.abi} (icount, one vCPU, "
                f"{args.ios} reads per job); run dir {rundir}")
    res = insnprof.run(k, ko, scheds, args.ios, args.jobs, rundir, args.timeout,
                       twin_ko=twin_ko)
    clean = _report_log(res)
    if res.returncode:
        raise PrismError(guest_failure(k, res, clean))
    jobs, profiles = insnprof.load(rundir)
    text = insnprof.report(jobs, profiles, args.top)
    for func in args.lines:
        for p in profiles:
            if p.scheduler == "prism":
                text += "\n" + insnprof.annotate(p, func, ko, args.top)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmdline = plan.command_line(args)
        source = plan.source_revision()
        (out / "report.md").write_text(f"# Instructions per I/O ({k.abi})\n\n"
                                       f"`{cmdline}`\n\n"
                                       + (f"prism source: `{source}`.\n\n" if source else "")
                                       + text)
        kernels.log(f"wrote {out / 'report.md'}")
    why = guest_failure(k, res, clean)
    if why:
        print(f"prism: error: {why}", file=sys.stderr)
        return 1
    return 0


# What a debug kernel's selftest leaves out unless --only names it: the
# checks that measure the policy or the drives (a kernel with lockdep,
# KASAN and kmemleak is no place to time anything, and they run the same
# code as the request lifecycle's), tag_reserve, whose tiers' activity
# depends on timing (on the first debug boot its IDLE job owned every
# tag as the RT reader's completions came too slowly to keep its tier
# active), writeback_low, whose split of writeback between LOW and
# NORMAL follows timing (the debug kernel's first run of it, 2026-12-05:
# 36 LOW writes to 40 NORMAL with writeback_low=1, where Debian's kernels
# give more than 4 to 1; not looked into), and status_tool, which locks
# the kernel down, debugfs with it, so that kmemleak could not scan after
# it.
DEBUG_KERNEL_SKIPS = selftest.SAME_ON_EVERY_KERNEL + ["status_tool", "tag_reserve",
                                                      "writeback_low"]
# What a debug kernel's selftest runs in a boot of its own after the
# others: shared_tags, whose removal of its scsi_debug disk (rmmod, after
# the others' writeback and the NVMe disk's probe) makes 6.12.118's lockdep
# report a cycle in the kernel's own code (q_usage_counter, the NVMe
# scan's limits_lock, writeback's work, del_gendisk; no prism frame in any
# of its stacks), in two boots of two on 2026-12-05. Lockdep turns itself
# off after its first report, so the checks after it would run unwatched;
# alone, shared_tags leaves a clean log.
DEBUG_OWN_BOOT = ["shared_tags"]
# The stress check's time bounds on a debug kernel, times Debian's.
DEBUG_STRESS_SLOWDOWN = 4


def check_names(only: str, suite: str) -> None:
    """selftest --only: each name one of the suite's checks, on the host
    (in the guest an unknown name would only run nothing, after a build
    and a boot)."""
    known = [name for name, _fn in selftest.SUITES[suite][1]]
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        near = [m for n in unknown for m in difflib.get_close_matches(n, known, n=1)]
        raise UsageError(f"--only {only!r}: "
                         + (f"no check {', '.join(unknown)} in the {suite} suite"
                            if unknown else "names no check")
                         + (f" (did you mean {', '.join(near)}?)" if near else "")
                         + f"; its checks: {', '.join(known)}")


def cmd_selftest(args) -> int:
    if args.list:
        print(checks.listing())
        return 0
    if args.only:
        check_names(args.only, args.suite)
    status = 0
    for k in _booted(args.kernel):
        args.device = "selftest" if args.suite == "main" else "selftest-cloud"
        passes = [f" --only {args.only}" if args.only else ""]
        if k.debug and args.suite == "main" and not args.only:
            kernels.log(f"{k.name}: the request lifecycle's checks; left out: "
                        + ", ".join(DEBUG_KERNEL_SKIPS) + " (--only runs any); "
                        + ", ".join(DEBUG_OWN_BOOT) + " in a boot of its own")
            passes = [" --skip " + ",".join(DEBUG_KERNEL_SKIPS + DEBUG_OWN_BOOT),
                      " --only " + ",".join(DEBUG_OWN_BOOT)]
        for which in passes:
            res = _run_vm(k, f"python3 -m prism.guest.selftest --suite {args.suite} "
                             f"--out results.json{which}", args)
            clean = _report_log(res)
            out = res.rundir / "results.json"
            results = json.loads(out.read_text()) if out.exists() else {}
            for name, r in results.items():
                kernels.log(f"{k.name} {name}: {'ok' if r.get('ok') else 'FAILED'}")
            if res.returncode != 0 or not clean or not results:
                status = 1
    return status


def cmd_stress(args) -> int:
    """selftest's stress check for many seeds (CI runs two), one boot per
    kernel: each seed's stores, slowest store, jobs and books."""
    try:
        seeds = selftest.parse_seeds(args.seeds)
    except ValueError:
        raise UsageError(f"--seeds {args.seeds!r}: N, N-M or a comma list") from None
    if not seeds or args.seconds < 1:
        raise UsageError("--seeds names no seed, or --seconds is below 1")
    # A seed takes its seconds, its drain and a file system made.
    args.timeout = max(args.timeout, 300 + len(seeds) * (args.seconds + 90))
    status = 0
    for k in _booted(args.kernel):
        args.device = "selftest"
        # A debug kernel (KASAN, lockdep) under TCG is several times
        # slower: its first stress run drained the verify jobs in 62 s,
        # past the 60 s bound, with a clean log and the books balanced.
        slowdown = f" --stress-slowdown {DEBUG_STRESS_SLOWDOWN}" if k.debug else ""
        res = _run_vm(k, "python3 -m prism.guest.selftest --only stress --out results.json "
                         f"--stress-seeds {args.seeds} --stress-seconds {args.seconds}"
                         + slowdown, args)
        clean = _report_log(res)
        out = res.rundir / "results.json"
        stress = (json.loads(out.read_text()) if out.exists() else {}).get("stress", {})
        for r in stress.get("rounds", []):
            slow = r["slowest_store"]
            kernels.log(f"{k.name} seed {r['seed']}: {'ok' if r['ok'] else 'FAILED'}: "
                        f"{r['stores']} stores ({r['switches']} switches, {r['refused']} "
                        f"refused), slowest {slow['s']} s ({slow['what']}), drain "
                        f"{r['drain_s']} s")
            if not r["ok"]:
                why = {x: r[x] for x in ("jobs", "wrong_answers", "balanced")}
                kernels.log(f"  {json.dumps(why)}")
        if "error" in stress:
            kernels.log(f"{k.name}: {stress['error'][-2000:]}")
        if res.returncode != 0 or not clean or not stress.get("ok"):
            status = 1
    return status


def run_blktests(k, args) -> tuple[vm.VmResult, dict]:
    """One boot of @k running blktests (args.tests) with prism loaded;
    returns the boot and the guest's blktests.json."""
    built = blktests.prepare(kernels.cache_dir())
    rundir = vm.new_rundir()
    blktests.copy_to(built, rundir)
    args.device = "blktests"
    fio_timeout = getattr(args, "fio_timeout", None) or blktests.FIO_TIMEOUT
    res = _run_vm(k, f"python3 -m prism.guest.blktests --tests {args.tests} "
                     f"--fio-timeout {fio_timeout} --out blktests.json",
                  args, rundir=rundir)
    out = rundir / "blktests.json"
    return res, (json.loads(out.read_text()) if out.exists() else {})


def cmd_blktests(args) -> int:
    blktests.check_tests(args.tests)
    status = 0
    for k in _booted(args.kernel):
        try:
            res, doc = run_blktests(k, args)
        except blktests.Missing as e:
            raise PrismError(str(e)) from None
        clean = _report_log(res)
        s = blktests.summary(doc)
        for outcome, names in s.items():
            kernels.log(f"{k.name} blktests {outcome} ({len(names)}): " + "; ".join(names))
        if not doc or s["failed"] or not clean:
            status = 1
    return status


def cmd_bench_run(args) -> int:
    plan.run(args)
    return 0


def cmd_bench_report(args) -> int:
    src = Path(args.dir)
    if not src.is_dir():
        raise UsageError(f"{src}: no such report directory")
    # A report rebuilt into docs/results/ is one of committed source too.
    if (src / "results.json").exists():
        source = json.loads((src / "results.json").read_text()).get("plan", {}).get("source")
        plan.check_committed(args.out or args.dir, source)
    plan.rebuild(src, Path(args.out) if args.out else None)
    return 0


def _write_or_check(outputs: dict[Path, str], check: bool, what: str) -> int:
    """Write each stale output, or with @check only name them (exit 1)."""
    stale = [out for out, text in outputs.items()
             if not out.exists() or out.read_text() != text]
    if check:
        for out in stale:
            print(f"{out} is not current: run {what}", file=sys.stderr)
        return 1 if stale else 0
    for out in stale:
        out.write_text(outputs[out])
        print(f"prism: wrote {out}")
    return 0


def cmd_bench_index(args) -> int:
    """docs/results/README.md from the reports' results.json."""
    from .bench import index
    results = Path(args.results)
    if not results.is_dir():
        raise UsageError(f"{results}: no such directory")
    rc = _write_or_check({results / "README.md": index.index_md(results)}, args.check,
                         "prism bench index")
    if not args.check:
        print(f"prism: {len(index.load(results))} reports indexed")
    return rc


def cmd_bench_aims(args) -> int:
    """Run the plan's runs asked for, then docs/aims.md, the README's
    table and the results index from the reports."""
    from .bench import aims, index
    the = aims.load(Path(args.plan))
    names = list(the["run"]) if args.all else args.run
    unknown = [n for n in names if n not in the["run"]]
    if unknown:
        raise UsageError(f"no run {', '.join(unknown)} in {args.plan} (runs: "
                         + ", ".join(the["run"]) + ")")
    if names and args.check:
        raise UsageError("--check runs nothing: give it without --run or --all")
    # Every run's arguments are checked before the first boots.
    ap = parser()
    parsed = [(n, ap.parse_args(["bench", "run", *aims.command(the, n)])) for n in names]
    for _, a in parsed:
        plan.validate(a)
    for n, a in parsed:
        line = "prism bench run " + shlex.join(aims.command(the, n))
        kernels.log(f"aims: run {n}: {line}")
        plan.run(a, line)
    outputs = {aims.AIMS_MD: aims.aims_md(the),
               aims.RESULTS / "README.md": index.index_md(aims.RESULTS)}
    if aims.README.exists():
        outputs[aims.README] = aims.readme_with_table(aims.README.read_text(),
                                                      aims.expect_table(the))
    return _write_or_check(outputs, args.check, "prism bench aims")


def cmd_bench_list(args) -> int:
    for w in workloads.WORKLOADS.values():
        print(f"{w.name:<18} seed {w.seed}: {w.description}")
    return 0


DEMO_OUT = "prism-results"
# The demo's device: the emulated 7200 rpm disk at queue depth 1, chosen by
# measurement (docs/results/demo-hdd-6.12 against the null_blk demo): it is
# the bottleneck in every run, and the order of dispatch decides the
# database's tail there.
DEMO_DEVICE = "hdd"


def cmd_demo(args) -> int:
    """Seed 000's comparison on a device-bound profile (DEMO_DEVICE unless
    --device says otherwise): set up what is missing, run, print the
    table, write the report and plots."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out = args.out or f"{DEMO_OUT}/demo-{'quick-' if args.quick else ''}{stamp}"
    args.workload = "database_backup"
    args.schedulers = plan.ALL_SCHEDULERS
    if args.quick:
        args.reps, args.runtime, args.ramp = 1, 3, 1
    else:
        args.reps, args.runtime, args.ramp = 3, 10, 2
    # plan.run validates before anything is fetched or built.
    cmd = ("prism demo" + (" --quick" if args.quick else "") + f" --kernel {args.kernel}"
           + ("" if args.device == DEMO_DEVICE else f" --device {args.device}"))
    plan.run(args, command=cmd)
    return 0


def _disk_profile(args):
    """--profile and --disk-params of prism disk serve/params."""
    name = args.profile
    if not name and args.disk_params:
        try:
            name = tomllib.loads(Path(args.disk_params).read_text()).get("profile")
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise UsageError(f"{args.disk_params}: {e}") from None
    return plan.disk_profile(argparse.Namespace(device=name or "hdd",
                                                 disk_params=args.disk_params))


def cmd_disk_serve(args) -> int:
    profile = _disk_profile(args)
    for what, path in (("--socket", args.socket), ("--backing", args.backing),
                       ("--trace", args.trace)):
        if path and not Path(path).parent.is_dir():
            raise UsageError(f"{what} {path}: no directory {Path(path).parent}")
    nbd.serve(profile, Path(args.socket), Path(args.backing),
              Path(args.trace) if args.trace else None)
    return 0


def cmd_disk_params(args) -> int:
    sys.stdout.write(diskmodel.to_toml(_disk_profile(args)))
    return 0


def positive_int(text: str) -> int:
    """--cpus: a whole number above 0 (argparse's usage error otherwise)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return v


def memory_size(text: str) -> str:
    """--memory as QEMU's -m takes it: MiB, or a number with a suffix
    K, M, G or T; above 0."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip(), re.I)
    if not m or float(m[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 2G, 512M, "
                                         "or a number of MiB)")
    return text.strip()


def _vm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="6.12",
                   help="6.1, 6.12 (default), 7.3, a comma list or all; or "
                        + ", ".join(kernels.DEBUG) + f" (built by {kernels.DEBUG_BUILDER}); "
                        "or a PREEMPT_RT flavour, "
                        + ", ".join(k.name for k in kernels.build_only() if k.boots)
                        + " (its image fetched at its first boot)")
    p.add_argument("--memory", default="2G", type=memory_size,
                   help="guest memory: a number of MiB, or with a suffix K, M, G or T "
                        "(default 2G)")
    p.add_argument("--cpus", type=positive_int, default=2, help="guest CPUs (default 2)")
    p.add_argument("--accel", choices=("auto", "tcg", "kvm", "icount"), default="auto",
                   help="auto (default): KVM if a probe boot works (cached per host "
                        "kernel), TCG otherwise; or force one; icount: TCG with the "
                        "guest's clock counting instructions (1 ns each), so guest "
                        "timings measure CPU work, repeatably (for nullb-cpu; not for "
                        "the emulated drives, which keep the host's time)")
    p.add_argument("--timeout", type=prism_status.positive_seconds, default=1800,
                   help="kill the guest after this many seconds (default 1800; a benchmark "
                        "boot gets at least what its plan needs)")


def _bench_device_options(p: argparse.ArgumentParser, default: str) -> None:
    """Where a benchmark runs: bench run and demo take the same three options."""
    p.add_argument("--device", type=plan.device_name, default=default,
                   help=f"a VM profile ({', '.join(plan.VM_PROFILES)}; default {default}; "
                        "nullb is nullb-ssd) "
                        "or a real block device such as /dev/sdX (root, no VM)")
    p.add_argument("--force", action="store_true",
                   help="run on a real device that holds data (a filesystem, RAID member or "
                        "partition table, partitions or stacked devices): the workloads "
                        "overwrite it")
    p.add_argument("--allow-mounted", action="store_true",
                   help="run on a real device even if it, a partition or a device stacked on "
                        "it is mounted or swap (with --force: such a device holds data)")
    p.add_argument("--disk-params", metavar="FILE",
                   help="parameter file for an emulated drive (see prism disk params)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prism", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"prism {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    p = sub.add_parser("fetch", help="make a pinned kernel buildable and bootable in the "
                       "cache (its build root, its image extracted, block/): nothing "
                       "installed on the host")
    p.add_argument("--kernel", default="6.12",
                   help="6.1, 6.12 (default), 7.3, a comma list, all (the tested set), "
                        "build-only (kernels built, never booted: prism kernels list) "
                        "or every (both)")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("build", help="build prism-iosched.ko for a pinned kernel")
    p.add_argument("--kernel", default="6.12",
                   help="6.1, 6.12 (default), 7.3, a comma list, all (the tested set), "
                        "build-only (kernels built, never booted: prism kernels list) "
                        "or every (both)")
    p.add_argument("--no-fetch", action="store_true",
                   help="do not install or download anything")
    p.add_argument("--twin", nargs="?", const="prism-v2", metavar="NAME",
                   help="also build a twin, an older release's module under names of its "
                        "own that loads beside prism: "
                        + "; ".join(f"{t.scheduler} is {t.release} (kernels "
                                    f"{', '.join(t.series)})" for t in TWINS.values())
                        + "; a comma list for several; bare --twin: prism-v2. prism bench "
                        "run builds one when --schedulers names it")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("status", help="what prism is doing on this machine's disks: the "
                       "scheduler, changed tunables, tiers, holds, the busiest processes "
                       "and cgroups, latency (reads only; prism's part of it needs root "
                       "and debugfs; the package ships it as prism-status)")
    prism_status.add_arguments(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("checkpatch", help="checkpatch.pl --no-tree -f on the module")
    p.add_argument("--kernel", default="6.12",
                   help="whose checkpatch.pl: 6.1, 6.12 (default), 7.3, a comma list, all, "
                        "build-only or every")
    p.set_defaults(func=cmd_checkpatch)

    p = sub.add_parser("kernels", help="the pinned kernels: prism kernels list, "
                       "prism kernels update, prism kernels debug-build")
    ksub = p.add_subparsers(dest="kernels_cmd", metavar="COMMAND", required=True)
    p = ksub.add_parser("list", help="the pins, where each is built, which the suite boots")
    p.set_defaults(func=cmd_kernels_list)
    p = ksub.add_parser("debug-build", help="build "
                        + ", ".join(kernels.DEBUG) + " from its pin's linux-source with "
                        "lockdep, KASAN and kmemleak (once per release, outside CI; about "
                        "25 minutes on two cores)",
                        description="Extracts the whole linux-source tree of the pin into "
                        "~/.cache/prism-7x/debug ($PRISM_ROOTS), configures it as virtme-ng "
                        "does plus prism's items (prism/host/debugkernel.py), checks that each "
                        "held, builds it and installs its image and modules beside it; then "
                        "--kernel " + ", ".join(kernels.DEBUG) + " boots it. Run again with "
                        "the same inputs, it does nothing.")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="parallel make jobs (default: one per CPU)")
    p.add_argument("--config-only", action="store_true",
                   help="stop once the config is made and verified (the tree extracted, "
                        "nothing compiled)")
    p.set_defaults(func=cmd_kernels_debug_build)
    p = ksub.add_parser("update", help="move each pin in prism/host/kernels.py to the newest "
                        "ABI of its series in Debian's archive, and print what changed",
                        description="Reads the archive with apt (apt-get update first: the "
                        "host's lists for bookworm, private lists under ~/.cache/prism-7x/apt "
                        "for trixie and sid; /etc/apt is not touched), picks for each series the "
                        "newest ABI whose image, headers and linux-source share a version, "
                        "and rewrites the pins.")
    p.add_argument("--kernel", default="every", help="the pins to move: a comma list, all "
                   "(the tested set), build-only, or every (default: both)")
    p.add_argument("--dry-run", action="store_true", help="print, do not write kernels.py")
    p.add_argument("--listing", metavar="DIR", help="read madison-RELEASE.txt files "
                   "(apt-cache madison output) from DIR instead of the archive")
    p.set_defaults(func=cmd_kernels_update)

    p = sub.add_parser("vm", help="boot a kernel under QEMU and run a command")
    _vm_options(p)
    p.add_argument("--device", type=plan.device_name, choices=plan.VM_PROFILES,
                   default="nullb-ssd",
                   help="nullb-ssd (default; nullb is the same), nullb-cpu: nothing attached, "
                        "load null_blk in the guest (prism bench makes it with 4 slots of "
                        "0.5 ms, or with no delay); "
                        "virtio: attach a 1 GiB file-backed virtio disk, serial prism-virtio; "
                        "nvme: the same behind QEMU's NVMe controller (one queue per CPU, "
                        "multi-range discard), serial prism-nvme; "
                        "hdd, hdd-ncq, ssd-model, cloud: attach that emulated drive "
                        "(serial prism-NAME), served from the host; its trace is "
                        "disk-trace.csv in the run directory")
    p.add_argument("--disk-params", metavar="FILE",
                   help="parameter file for an emulated drive (see prism disk params)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD",
                   help="the command to run in the guest")
    p.set_defaults(func=cmd_vm)

    p = sub.add_parser("blktests", help="run blktests' block tests with prism loaded "
                                        "(one boot per kernel)")
    _vm_options(p)
    p.add_argument("--tests", default=",".join(blktests.SCHED_TESTS),
                   help="comma-separated tests, or 'block' for the whole group (default: "
                        "the scheduler-relevant ones pytest runs)")
    p.add_argument("--fio-timeout", type=int, default=blktests.FIO_TIMEOUT, metavar="S",
                   help="blktests' TIMEOUT, the seconds its fio runs and waits last "
                        f"(default {blktests.FIO_TIMEOUT})")
    p.set_defaults(func=cmd_blktests, timeout=5400)

    p = sub.add_parser("selftest", help="run the in-VM check suite (one boot per kernel)")
    _vm_options(p)
    p.add_argument("--only", help="comma-separated check names")
    p.add_argument("--list", action="store_true",
                   help="print the checks (name, area, suite, what each protects against) "
                        "and exit, booting nothing")
    p.add_argument("--suite", choices=("main", "cloud"), default="main",
                   help="main (default): every check, on null_blk, virtio, NVMe and the "
                        "emulated HDD; cloud: the cloud volume's checks, in a boot of its own "
                        "(its queue depth cannot share a boot with the HDD's)")
    p.set_defaults(func=cmd_selftest)

    p = sub.add_parser("stress", help="the stress check: random tunable writes, queue changes "
                       "and scheduler switches under verified load, one round per random seed "
                       "(one boot per kernel)")
    _vm_options(p)
    p.add_argument("--seeds", default="1-10", help="the random seeds, one round each (a seed "
                   "repeats its round's choices): N, N-M or a comma list (default 1-10)")
    p.add_argument("--seconds", type=int, default=20,
                   help="seconds of stores per seed (default 20)")
    p.set_defaults(func=cmd_stress)

    p = sub.add_parser("bench", help="benchmarks: prism bench run ..., prism bench list")
    bsub = p.add_subparsers(dest="bench_cmd", metavar="COMMAND", required=True)
    p = bsub.add_parser("list", help="the workloads")
    p.set_defaults(func=cmd_bench_list)
    p = bsub.add_parser("run", help="run workloads x schedulers x repetitions, interleaved")
    _vm_options(p)
    p.add_argument("--workload", required=True, help="comma list (see prism bench list); "
                   "baselines a workload needs are added")
    p.add_argument("--schedulers", default=plan.ALL_SCHEDULERS,
                   help="comma list; variants as NAME:key=val,key=val "
                        "(e.g. bfq:low_latency=0,slice_idle=0); default all five; "
                        + "; ".join(f"{t.scheduler} is prism {t.release}" for t in
                                    TWINS.values())
                        + ": a twin, loaded beside prism in the same boots for a paired "
                        "comparison (one a benchmark)")
    p.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    p.add_argument("--boots", type=int, default=1,
                   help="split the repetitions over this many VM boots, one after another "
                        "(default 1): each boot interleaves the schedulers; for the CPU-bound "
                        "profiles, whose figures move with the boot")
    p.add_argument("--runtime", type=int, default=20, help="seconds per run (default 20)")
    p.add_argument("--ramp", type=int, default=2, help="ramp seconds before measuring (default 2)")
    _bench_device_options(p, default="nullb-ssd")
    p.add_argument("--pgbench-scale", type=int, default=pgimage.DEFAULT_SCALE,
                   help="pgbench's scale for the pgbench_* workloads (default "
                        f"{pgimage.DEFAULT_SCALE}, about 3 GB: more than the guest caches); "
                        "the database is built once per scale on the host")
    p.add_argument("--out", required=True, help="directory for the report")
    p.set_defaults(func=cmd_bench_run)
    p = bsub.add_parser("index", help="write docs/results/README.md, the index of the "
                        "committed reports, from their results.json")
    p.add_argument("--results", default=str(Path(__file__).resolve().parents[1] / "docs"
                                            / "results"),
                   help="the reports' directory (default: the checkout's docs/results)")
    p.add_argument("--check", action="store_true",
                   help="only say whether the index is current (exit 1 if not)")
    p.set_defaults(func=cmd_bench_index)

    p = bsub.add_parser("aims", help="run the release's aims (docs/aims.toml) and write "
                        "docs/aims.md, the README's table and the results index",
                        description="Run the runs of docs/aims.toml that are asked for "
                        "(--run NAME, or --all), each a prism bench run into "
                        "docs/results/NAME-KERNEL, then regenerate docs/aims.md (each aim's "
                        "verdict, computed from its report), the README's \"What to "
                        "expect\" table and docs/results/README.md. Without --run or "
                        "--all it only regenerates them from the reports there.")
    p.add_argument("--run", action="append", default=[], metavar="NAME",
                   help="a run of the plan (repeatable)")
    p.add_argument("--all", action="store_true", help="every run of the plan (hours)")
    p.add_argument("--plan", default=str(Path(__file__).resolve().parents[1] / "docs"
                                         / "aims.toml"),
                   help="the plan (default: the checkout's docs/aims.toml)")
    p.add_argument("--check", action="store_true",
                   help="only say whether docs/aims.md, the README's table and the index "
                        "are current (exit 1 if not)")
    p.set_defaults(func=cmd_bench_aims)

    p = bsub.add_parser("report", help="write a report again from its raw runs")
    p.add_argument("dir", metavar="DIR", help="a report directory made by prism bench run")
    p.add_argument("--out", metavar="OUT",
                   help="write the report (results, plots, report.md) to OUT instead of "
                        "DIR, which is then only read")
    p.set_defaults(func=cmd_bench_report)

    p = sub.add_parser("disk", help="the emulated drive: prism disk serve, prism disk params")
    dsub = p.add_subparsers(dest="disk_cmd", metavar="COMMAND", required=True)
    p = dsub.add_parser("serve", help="serve an emulated drive over NBD until interrupted",
                        description="Serve an emulated drive's model over NBD on a "
                                    "Unix socket; attach with QEMU as "
                                    "-drive file=nbd+unix:///?socket=PATH,format=raw,...")
    p.add_argument("--profile", choices=tuple(diskmodel.PROFILES),
                   help=", ".join(diskmodel.PROFILES) + " (default hdd)")
    p.add_argument("--disk-params", metavar="FILE",
                   help="parameter file (TOML; see prism disk params)")
    p.add_argument("--socket", required=True, help="Unix socket to listen on")
    p.add_argument("--backing", required=True,
                   help="file holding the data (created sparse at the model's capacity)")
    p.add_argument("--trace", metavar="FILE",
                   help="CSV of every command served: times, sector, size, service time")
    p.set_defaults(func=cmd_disk_serve)
    p = dsub.add_parser("params", help="print a profile's parameter file")
    p.add_argument("--profile", choices=tuple(diskmodel.PROFILES),
                   help=", ".join(diskmodel.PROFILES) + " (default hdd)")
    p.add_argument("--disk-params", metavar="FILE", help="start from this file instead")
    p.set_defaults(func=cmd_disk_params)

    p = sub.add_parser("profile", help="instructions per I/O by kernel function under each "
                                       "scheduler (icount + a QEMU plugin, one boot)")
    p.add_argument("--kernel", default="6.12", help="6.1, 6.12 (default) or 7.3")
    p.add_argument("--schedulers", default="mq-deadline,prism",
                   help="comma list; the first is the baseline (default mq-deadline,prism)")
    p.add_argument("--ios", type=int, default=200000,
                   help="4 KiB random reads per job in each measured run (default 200000)")
    p.add_argument("--jobs", type=int, default=1, help="submitting fio jobs (default 1)")
    p.add_argument("--top", type=int, default=30, help="rows per table (default 30)")
    p.add_argument("--lines", action="append", default=[], metavar="FUNC",
                   help="also break one of prism's functions down by source line "
                        "(repeatable)")
    p.add_argument("--out", metavar="DIR", help="also write DIR/report.md")
    p.add_argument("--timeout", type=prism_status.positive_seconds, default=1800,
                   help="kill the guest after this many seconds (default 1800)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("demo", help="the main comparison: a database's random reads beside a "
                       "backup's sequential reads on the emulated 7200 rpm disk, under all "
                       "five schedulers; prints the table, writes a report with plots")
    _vm_options(p)
    p.add_argument("--quick", action="store_true",
                   help="one short repetition: exercises the pipeline in a few minutes")
    _bench_device_options(p, default=DEMO_DEVICE)
    p.add_argument("--out", help=f"report directory (default {DEMO_OUT}/demo-<time>)")
    p.set_defaults(func=cmd_demo)
    _describe_subcommands(ap)
    return ap


def _describe_subcommands(ap: argparse.ArgumentParser) -> None:
    """Each subcommand's own --help opens with the line the list of
    commands shows for it, unless it has a longer description."""
    for a in ap._actions:
        if isinstance(a, argparse._SubParsersAction):
            for choice in a._choices_actions:
                sub = a.choices[choice.dest]
                if not sub.description:
                    sub.description = choice.help
                _describe_subcommands(sub)


def _terminate(signum, frame) -> None:
    raise Terminated(signum)


def stop_on_signals() -> None:
    """Let SIGTERM and SIGHUP stop prism the way Ctrl-C does, through its
    finally blocks: a `kill` of a running `prism bench` or `prism vm` then
    also kills the guest and stops the emulated drive's server, instead of
    leaving them running with the next boot's name on them."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # What a report records as its command: the arguments as given here.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    stop_on_signals()
    try:
        return args.func(args)
    except UsageError as e:
        # Bad arguments or input files: nothing was done (as argparse's 2).
        print(f"prism: error: {e}", file=sys.stderr)
        return 2
    except PrismError as e:
        # Something failed while working: a build, a boot, a download.
        print(f"prism: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated as e:
        print(f"prism: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum


if __name__ == "__main__":
    raise SystemExit(main())
