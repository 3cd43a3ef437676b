"""prism bench run / prism demo: plan a benchmark, run it in one VM boot
per kernel (or on a real device), and write the report."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

from ..common import stats, workloads
from ..common.errors import PrismError, UsageError
from ..drives import diskmodel
from ..guest import selftest
from ..guest.benchrun import MODEL_PROFILES, NULLB_PROFILES, parse_scheduler, rep_range
from ..guest.system import NVME_SERIAL, PGIMAGE_SERIAL, TWINS, VIRTIO_SERIAL, Twin
from ..host import build, kernels, pgimage, twin, vm
from . import report

KNOWN_SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq", "prism")
ALL_SCHEDULERS = ",".join(KNOWN_SCHEDULERS)
# What --schedulers takes besides: prism's twins, an older release's
# module under its own elevator name (prism-v2, prism-v3: guest.system.TWINS,
# host/twin.py), run in the same boots as prism so that the two are
# compared repetition by repetition. Never in the default.
BENCH_SCHEDULERS = KNOWN_SCHEDULERS + tuple(TWINS)
# The devices of prism bench run and prism vm --device, one list for both.
VM_PROFILES = tuple(NULLB_PROFILES) + ("virtio", "nvme") + tuple(MODEL_PROFILES)
# Other spellings both accept: plain nullb is the default null_blk profile
# (prism vm's name for null_blk before the two shared one list).
DEVICE_ALIASES = {"nullb": "nullb-ssd"}


def device_name(name: str) -> str:
    """A --device value with an alias resolved (nullb -> nullb-ssd)."""
    return DEVICE_ALIASES.get(name, name)


# The in-tree schedulers' tunables (queue/iosched/*) on the supported
# kernels (block/mq-deadline.c, kyber-iosched.c, bfq-iosched.c); prism's
# are read from the module's source (build.module_tunables), its twin's
# from the twin's (twin.tunables: v2 had 34, 3.0.0 fewer).
IN_TREE_TUNABLES = {
    "none": (),
    "mq-deadline": ("read_expire", "write_expire", "writes_starved", "front_merges",
                    "async_depth", "fifo_batch", "prio_aging_expire"),
    "kyber": ("read_lat_nsec", "write_lat_nsec"),
    "bfq": ("fifo_expire_sync", "fifo_expire_async", "back_seek_max", "back_seek_penalty",
            "slice_idle", "slice_idle_us", "max_budget", "timeout_sync", "strict_guarantees",
            "low_latency"),
}


def scheduler_tunables(name: str) -> list[str]:
    """The tunables scheduler @name offers."""
    if name == "prism":
        return build.module_tunables()
    if name in TWINS:
        return twin.tunables(TWINS[name])
    return list(IN_TREE_TUNABLES[name])


def check_tunable(name: str, key: str, spec: str) -> None:
    """Refuse a tunable that scheduler @name does not have, here on the
    host: in the guest it would fail only after a build and a boot."""
    known = scheduler_tunables(name)
    if key in known:
        return
    if not known:
        raise UsageError(f"{spec!r}: {name} has no tunables")
    near = difflib.get_close_matches(key, known, n=1)
    raise UsageError(f"{spec!r}: {name} has no tunable {key!r}"
                     + (f" (did you mean {near[0]!r}?)" if near else "")
                     + f"; its tunables: {', '.join(sorted(known))}")


def check_value(name: str, key: str, val: str, spec: str) -> None:
    """Refuse a value of a prism tunable that the module would refuse,
    here on the host. The ranges are the table the guest's checks hold
    the module to (selftest.TUNABLES, TUNABLE_GAPS), which
    tests/test_cli.py compares with module/prism_sysfs.c's."""
    if name != "prism" or key not in selftest.TUNABLES:
        return
    try:
        v = int(val, 0)     # as the module's kstrtoint(, 0)
    except ValueError:
        raise UsageError(f"{spec!r}: {key} takes a whole number, not {val!r}") from None
    _default, _good, lo, hi = selftest.TUNABLES[key]
    gaps = selftest.TUNABLE_GAPS.get(key, ())
    if not lo <= v <= hi or v in gaps:
        raise UsageError(f"{spec!r}: {val} is out of prism's range for {key}, {lo} to {hi}"
                         + (f" except {', '.join(map(str, gaps))}" if gaps else ""))


def parse_schedulers(text: str) -> list[str]:
    """'none,bfq:low_latency=0,slice_idle=0,prism' -> three specs: a
    key=value item without a scheduler name belongs to the one before."""
    specs: list[str] = []
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        if "=" in item and ":" not in item:
            if not specs:
                raise UsageError(f"tunable {item!r} comes before any scheduler")
            specs[-1] += ("," if ":" in specs[-1] else ":") + item
        else:
            specs.append(item)
    for spec in specs:
        name, tunables = parse_scheduler(spec)
        if name not in BENCH_SCHEDULERS:
            raise UsageError(f"unknown scheduler {name!r}; known: {', '.join(BENCH_SCHEDULERS)}")
        for key, val in tunables.items():
            if not key or val == "":
                raise UsageError(f"bad tunable in {spec!r}: write NAME=VALUE")
            check_tunable(name, key, spec)
            check_value(name, key, val, spec)
    if not specs:
        raise UsageError("no scheduler named")
    if len(set(specs)) != len(specs):
        raise UsageError("a scheduler variant is named twice")
    twin_of(specs)
    return specs


def twin_of(specs: list[str]) -> Twin | None:
    """The twin scheduler specs @specs run, or None. One a benchmark:
    the guest is handed one twin module (PRISM_TWIN_KO, plan "twin_ko")
    and a report describes one (plan "twin")."""
    named = sorted({parse_scheduler(s)[0] for s in specs} & set(TWINS))
    if len(named) > 1:
        raise UsageError(f"--schedulers names {' and '.join(named)}: one twin a benchmark "
                         "(run each against prism in a benchmark of its own)")
    return TWINS[named[0]] if named else None


def names_twin(specs: list[str]) -> bool:
    """Whether scheduler specs @specs run one of prism's twins."""
    return twin_of(specs) is not None


def check_twin(args, tw: Twin) -> None:
    """Refuse, before any build, what twin @tw cannot run on: a kernel
    it does not build for (twin.check_kernel), or a real device where
    nothing says which twin to load (prism builds nothing for a real
    device's run: its modules are the user's to load, or, for the twin,
    to name)."""
    if args.device.startswith("/"):
        if not (Path("/sys/module") / tw.loaded).exists() \
                and not os.environ.get("PRISM_TWIN_KO"):
            raise UsageError(f"{tw.scheduler} on a real device: load its module first, or "
                             f"set PRISM_TWIN_KO to it (prism build --twin {tw.scheduler} "
                             "--kernel SERIES builds it for a pinned kernel)")
        return
    for k in kernels.parse_booted(args.kernel):
        twin.check_kernel(k, tw)


# --- real devices: refuse data (--force) and mounts (--allow-mounted) ---

def _block_name(path: str) -> str:
    return Path(os.path.realpath(path)).name


def _partitions(name: str, sys_block: Path = Path("/sys/class/block")) -> list[str]:
    d = sys_block / name
    return [p.name for p in d.iterdir() if (p / "partition").exists()] if d.exists() else []


def _holders(name: str, sys_block: Path = Path("/sys/class/block")) -> list[str]:
    """Devices stacked on @name (dm, md, ...), recursively."""
    out = []
    h = sys_block / name / "holders"
    if h.exists():
        for p in h.iterdir():
            out.append(p.name)
            out += _holders(p.name, sys_block)
    return out


def device_users(name: str, mounts: str, swaps: str,
                 related: list[str]) -> list[str]:
    """What uses @name or a device in @related (its partitions and the
    devices stacked on them): mount points and swap areas."""
    names = {name, *related}
    users = []
    for line in mounts.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].startswith("/dev/") and _block_name(f[0]) in names:
            users.append(f"{f[0]} mounted on {f[1]}")
    for line in swaps.splitlines()[1:]:
        f = line.split()
        if f and f[0].startswith("/dev/") and _block_name(f[0]) in names:
            users.append(f"{f[0]} is swap")
    return users


def signatures(path: str) -> list[str]:
    """Filesystem, RAID or partition-table signatures blkid finds."""
    if not shutil.which("blkid"):
        raise PrismError("blkid not found: it is needed to check the device "
                         "(apt-get install util-linux)")
    r = subprocess.run(["blkid", "-p", "-o", "export", path], capture_output=True, text=True)
    found = []
    for line in r.stdout.splitlines():
        key, _, val = line.partition("=")
        if key in ("TYPE", "PTTYPE"):
            found.append(f"{key.lower()} {val}")
    return found


def check_real_device(path: str, force: bool, allow_mounted: bool = False) -> None:
    """Refuse a device that holds data (a filesystem, RAID member or
    partition table, partitions or devices stacked on it) unless @force,
    and one that is in use (it, a partition or a device stacked on them
    mounted or swap) unless @allow_mounted as well: the workloads write
    raw blocks and make filesystems on it."""
    if os.geteuid() != 0:
        raise UsageError(f"benchmarking {path} needs root (it writes scheduler settings "
                         "and reads raw blocks)")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    if not stat.S_ISBLK(st.st_mode):
        raise UsageError(f"{path} is not a block device")
    name = _block_name(path)
    if not Path(f"/sys/block/{name}/queue/scheduler").exists():
        raise UsageError(f"{path} has no I/O scheduler of its own (a partition?): "
                         "name the whole disk")
    related = _partitions(name) + _holders(name)
    for part in _partitions(name):
        related += _holders(part)
    mounts = Path("/proc/mounts").read_text()
    swaps = Path("/proc/swaps").read_text() if Path("/proc/swaps").exists() else ""
    in_use = device_users(name, mounts, swaps, related)
    data = [f"{path} carries a {s}" for s in signatures(path)]
    if related:
        data.append(f"{path} has partitions or stacked devices: "
                    f"{', '.join(sorted(set(related)))}")
    refused = [f"{p} (--allow-mounted runs on it all the same)"
               for p in in_use if not allow_mounted]
    refused += [f"{p} (--force overwrites it)" for p in data if not force]
    if refused:
        raise UsageError(f"refusing to benchmark {path}: " + "; ".join(refused)
                         + ". The workloads write raw blocks and make filesystems on the "
                         "device under test")
    for p in in_use:
        print(f"prism: warning: {p}: running all the same (--allow-mounted)", file=sys.stderr)
    for p in data:
        print(f"prism: warning: {p}: it may be overwritten (--force)", file=sys.stderr)


# --- running -----------------------------------------------------------

def disk_profile(args) -> diskmodel.Profile:
    """The emulated drive's parameters: the profile's defaults, or the
    file given with --disk-params."""
    params = {}
    path = getattr(args, "disk_params", None)
    if path:
        try:
            params = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise UsageError(f"{path}: {e}") from None
    try:
        return diskmodel.load_profile(args.device, params)
    except ValueError as e:
        raise UsageError(f"{path or args.device}: {e}") from None


def source_revision() -> str | None:
    """The commit of the prism tree that runs, '+changes' if its module
    or harness differ from it: a report says which code it measured."""
    repo = build.REPO
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--",
                                "module", "prism"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty else "")


RESULTS_DIR = build.REPO / "docs" / "results"


def check_committed(out: str, revision: str | None) -> None:
    """Only committed source is measured into the repository's results:
    a report under docs/results/ must say which commit it measured, so a
    tree whose module or harness differs from its commit writes elsewhere
    (an experiment's output directory)."""
    target = Path(out).resolve()
    if target != RESULTS_DIR and RESULTS_DIR not in target.parents:
        return
    if revision is None or revision.endswith("+changes"):
        raise UsageError(f"--out {out}: docs/results/ holds reports of committed source "
                         "only, and module/ or prism/ differ from HEAD (commit them, or "
                         "write the report elsewhere)")


def command_line(args) -> str:
    """The command as typed, for a report's Command: the arguments that
    prism's main() was given (args.argv; sys.argv only without them),
    the output directory as given."""
    argv = getattr(args, "argv", None)
    return "prism " + shlex.join(sys.argv[1:] if argv is None else argv)


def with_out(command: str, out: str) -> str:
    """A recorded @command with its --out naming @out instead: a report
    written again elsewhere (prism bench report DIR --out OUT, a run made
    in a scratch directory and rebuilt into docs/results/) records where
    it is, not the scratch directory it was first written to."""
    return re.sub(r"(--out[ =])('[^']*'|\S+)", lambda m: m[1] + shlex.quote(out), command,
                  count=1)


def make_plan(args) -> dict:
    plan = {"profile": "real" if args.device.startswith("/") else args.device,
            "device": args.device if args.device.startswith("/") else None,
            "workloads": [w.name for w in workloads.get(args.workload)],
            "schedulers": parse_schedulers(args.schedulers),
            "reps": args.reps, "runtime": args.runtime, "ramp": args.ramp,
            "source": source_revision()}
    if getattr(args, "boots", 1) > 1:
        plan["boots"] = args.boots
    tw = twin_of(plan["schedulers"])
    if tw:
        # Which code the twin's name stood for, for the report.
        plan["twin"] = twin.describe(tw)
    if not args.device.startswith("/"):
        plan["vcpus"] = getattr(args, "cpus", 2)
        if getattr(args, "accel", "auto") == "icount":
            plan["clock"] = "instructions"
    if args.device in MODEL_PROFILES:
        # Recorded with the results: what the emulated drive was.
        plan["disk_params"] = dataclasses.asdict(disk_profile(args))
    if any(workloads.WORKLOADS[w].app == "pgbench" for w in plan["workloads"]):
        plan["pgbench_scale"] = getattr(args, "pgbench_scale", pgimage.DEFAULT_SCALE)
    return plan


def validate(args) -> None:
    if args.reps < 1 or args.runtime < 1 or args.ramp < 0:
        raise UsageError("--reps and --runtime must be at least 1, --ramp at least 0")
    boots = getattr(args, "boots", 1)
    if boots < 1 or boots > args.reps:
        raise UsageError(f"--boots must be from 1 to --reps ({args.reps}): each boot "
                         "runs some of the repetitions")
    if boots > 1 and args.device.startswith("/"):
        raise UsageError("--boots is for the VM profiles: a real device is not booted")
    if not args.device.startswith("/") and args.device not in VM_PROFILES:
        raise UsageError(f"unknown device {args.device!r}: a profile ("
                         + ", ".join(VM_PROFILES) + ") or a /dev path")
    apps = [w.name for w in workloads.get(args.workload) if w.app]
    if apps and args.device in NULLB_PROFILES:
        raise UsageError(f"{', '.join(apps)} need a device that keeps a database larger "
                         f"than the guest's memory: not {args.device} (use hdd, hdd-ncq, "
                         "cloud, ssd-model, virtio, nvme or a real device)")
    if apps and getattr(args, "pgbench_scale", 1) < 1:
        raise UsageError("--pgbench-scale must be at least 1")
    if getattr(args, "accel", "auto") == "icount" and args.device in MODEL_PROFILES:
        raise UsageError(f"--accel icount: {args.device} is served from the host in the "
                         "host's time, which the guest's instruction clock does not follow "
                         "(use it with nullb-cpu, nullb-ssd, virtio or nvme)")
    if getattr(args, "disk_params", None) and args.device not in MODEL_PROFILES:
        raise UsageError("--disk-params is for the emulated drives: "
                         + ", ".join(MODEL_PROFILES))
    if args.device.startswith("/"):
        check_real_device(args.device, args.force, args.allow_mounted)
    else:
        kernels.parse_booted(args.kernel)
    tw = twin_of(parse_schedulers(args.schedulers))
    if tw:
        check_twin(args, tw)
    if getattr(args, "out", None):
        check_committed(args.out, source_revision())
    # Last: a usage error is worth knowing first.
    if not shutil.which("fio"):
        raise PrismError("fio not found (apt-get install fio)")


def with_database(plan: dict) -> dict:
    """The pgbench database image (built on the host, once per scale) for
    a plan that runs pgbench."""
    if "pgbench_scale" not in plan:
        return plan
    return dict(plan, pgbench_image=str(pgimage.image(plan["pgbench_scale"])))


def boot_parts(plan: dict) -> list[tuple[int, int]]:
    """--boots: the repetitions split into that many boots as evenly as
    they go, each boot interleaving the schedulers as one boot does, so
    that each repetition still pairs runs of one boot. A boot's state (the
    host's load, where the guest's memory and threads land) moves a whole
    boot's figures together on the CPU-bound profiles; spreading the
    repetitions over boots keeps one boot's state from deciding a median."""
    boots, reps = plan.get("boots", 1), plan["reps"]
    edges = [reps * i // boots for i in range(boots + 1)]
    return [(edges[i], edges[i + 1]) for i in range(boots)]


def boot_budget(plan: dict) -> float:
    """Seconds a benchmark boot may take: every run's ramp and runtime
    with room for its set-up (a fresh device, a database started and
    stopped), and for writing the pgbench image: a 75-run plan outlived
    the VM's default 30-minute limit and was killed at run 68."""
    lo, hi = rep_range(plan)
    runs = len(plan["workloads"]) * len(plan["schedulers"]) * (hi - lo)
    per_run = plan["runtime"] + plan["ramp"] + (60 if "pgbench_scale" in plan else 20)
    return runs * per_run + 600


def bench_disks(plan: dict, args, rundir: Path) -> list[vm.Disk | vm.ModelDisk]:
    """The disks of a benchmark boot: the profile's device (none for
    null_blk, which the guest makes), and the pgbench image read-only
    beside it when the plan runs pgbench, so that the guest copies the
    database from a disk at virtio's speed and not through the 9p root
    (2-3 MB/s under TCG: 20 minutes for the scale-200 image). Sets
    plan["trace"] for a model drive."""
    # File-backed disks are sparse: room for pgbench's database too.
    disks: list[vm.Disk | vm.ModelDisk] = []
    if plan["profile"] == "virtio":
        disks = [vm.Disk(serial=VIRTIO_SERIAL, path=rundir / "virtio.img", size_mb=16384)]
    elif plan["profile"] == "nvme":
        disks = [vm.NvmeDisk(serial=NVME_SERIAL, path=rundir / "nvme.img", size_mb=16384)]
    elif plan["profile"] in MODEL_PROFILES:
        disk = vm.ModelDisk(disk_profile(args), rundir, trace=True)
        disks = [disk]
        plan["trace"] = disk.trace_path.name
    if plan.get("pgbench_image"):
        disks.append(vm.Disk(serial=PGIMAGE_SERIAL, path=Path(plan["pgbench_image"]),
                             readonly=True))
    return disks


def run_in_vm(k: kernels.Kernel, plan: dict, args) -> tuple[Path, list[dict]]:
    ko = build.build(k)
    twin_ko = twin.build_twin(k, twin.get(plan["twin"]["scheduler"])) \
        if plan.get("twin") else None
    rundir = vm.new_rundir()
    plan = dict(with_database(plan), ko=str(ko))
    if twin_ko:
        plan["twin_ko"] = str(twin_ko)
    disks = bench_disks(plan, args, rundir)
    (rundir / "plan.json").write_text(json.dumps(plan, indent=1))
    lo, hi = rep_range(plan)
    kernels.log(f"{k.series}: {len(plan['workloads']) * len(plan['schedulers']) * (hi - lo)} "
                f"runs in one boot (repetitions {lo + 1}-{hi} of {plan['reps']}); "
                f"raw output in {rundir / 'bench'}")
    res = vm.run(k, "python3 -m prism.guest.benchrun --plan plan.json --out bench", ko=ko,
                 twin_ko=twin_ko, disks=disks, memory=args.memory, cpus=args.cpus, rundir=rundir,
                 accel=args.accel,
                 timeout=max(args.timeout, boot_budget(plan)))
    probs = res.log_problems
    for kind, line in probs:
        print(f"prism: kernel log: {kind}: {line}", file=sys.stderr)
    if res.returncode != 0:
        raise PrismError(f"benchmark on {k.series} failed (guest exit {res.returncode} "
                         f"after {res.elapsed:.0f} s); see {rundir} (console.txt); "
                         f"its last output:\n{res.tail()}")
    if probs:
        raise PrismError(f"benchmark on {k.series}: the kernel log reports problems "
                         f"({rundir / 'dmesg.txt'})")
    if plan.get("trace"):
        stats.split_trace(rundir / plan["trace"], rundir / "bench")
        stats.condense_traces(rundir / "bench")
    return rundir / "bench", report.collect(rundir / "bench", k.series)


def run_on_device(plan: dict, args) -> tuple[Path, list[dict]]:
    plan = with_database(plan)
    out = Path(args.out) / "raw"
    planfile = Path(args.out) / "plan.json"
    planfile.write_text(json.dumps(plan, indent=1))
    r = subprocess.run([sys.executable, "-m", "prism.guest.benchrun", "--plan", str(planfile),
                        "--out", str(out)])
    if r.returncode:
        raise PrismError(f"benchmark on {args.device} failed")
    return out, report.collect(out, os.uname().release)


RAW_ARCHIVE = "raw.tar.xz"


def archive_raw(out: Path) -> None:
    """Keep a report's raw runs as one compressed archive (thousands of
    small files otherwise; a clone of the repository stays small);
    rebuild() reads it back."""
    raw = out / "raw"
    if not raw.is_dir():
        return
    tmp = out / (RAW_ARCHIVE + ".tmp")
    with tarfile.open(tmp, "w:xz") as tar:
        for path in sorted(raw.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(out)), recursive=False)
    tmp.rename(out / RAW_ARCHIVE)
    shutil.rmtree(raw)


def rebuild(src: Path, out: Path | None = None) -> list[dict]:
    """Write a report directory's results.json, CSV, plots and report.md
    again from its raw runs (raw/<kernel>/, or raw/ for a real device, or
    the same inside raw.tar.xz), with the command and plan it recorded:
    after a change to the report code, or after a run that failed part
    way (the manifest keeps the runs measured until then). With @out, the
    report goes there and @src is only read (a committed report rebuilt
    without touching the checkout)."""
    if not (src / "raw").exists() and (src / RAW_ARCHIVE).exists():
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(src / RAW_ARCHIVE) as tar:
                tar.extractall(tmp, filter="data")
            return _rebuild(src, Path(tmp) / "raw", out or src)
    return _rebuild(src, src / "raw", out or src)


def _rebuild(src: Path, raw: Path, out: Path) -> list[dict]:
    old = json.loads((src / "results.json").read_text()) if (src / "results.json").exists() \
        else {}
    dirs = [raw] if (raw / "manifest.json").exists() else \
        sorted(d for d in raw.glob("*") if (d / "manifest.json").exists())
    if not dirs:
        raise UsageError(f"{src}: no raw runs (raw/<kernel>/manifest.json or "
                         f"{RAW_ARCHIVE}) to build a report from")
    runs, plan = [], old.get("plan")
    for d in dirs:
        kernel = d.name if d != raw else next(
            (r["kernel"] for r in old.get("runs", [])), os.uname().release)
        runs += report.collect(d, kernel)
        plan = plan or json.loads((d / "manifest.json").read_text())["plan"]
    command = old.get("command", "(not recorded: rebuilt from the raw runs by prism bench report)")
    if out != src:
        command = with_out(command, str(out))
    assert plan is not None     # from results.json or the first manifest
    out.mkdir(parents=True, exist_ok=True)
    summaries = report.write_all(out, command, plan, runs)
    print(report.headline(summaries, plan["workloads"][-1]))
    kernels.log(f"report: {out / 'report.md'} ({len(runs)} runs)")
    return summaries


def run(args, command: str | None = None) -> list[dict]:
    # Every check of the arguments comes before the report directory is
    # made: a usage error leaves nothing behind.
    validate(args)
    plan = make_plan(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = command or command_line(args)
    started = time.monotonic()
    runs: list[dict] = []
    if plan["profile"] == "real":
        raw, got = run_on_device(plan, args)
        runs += got
    else:
        for k in kernels.parse_booted(args.kernel):
            dest = out / "raw" / k.series
            shutil.rmtree(dest, ignore_errors=True)
            metas: list[dict] = []
            for part in boot_parts(plan):
                raw, got = run_in_vm(k, dict(plan, rep_range=part), args)
                # One raw directory per kernel: the run directories are
                # named by repetition, so the boots' never collide; the
                # manifest lists them all.
                shutil.copytree(raw, dest, dirs_exist_ok=True)
                metas += json.loads((raw / "manifest.json").read_text())["runs"]
                (dest / "manifest.json").write_text(
                    json.dumps({"plan": plan, "runs": metas}, indent=1))
                runs += got
    summaries = report.write_all(out, command, plan, runs)
    archive_raw(out)
    print(report.headline(summaries, plan["workloads"][-1]))
    kernels.log(f"report: {out / 'report.md'} ({(time.monotonic() - started) / 60:.1f} min)")
    return summaries
