"""Helpers that run inside the test VM (as root, on the guest kernel):
loading prism (and its twin), making null_blk devices, finding attached
disks, choosing schedulers, running fio and reading prism's debugfs
counters."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

# The parsers of prism's debugfs files live in the shipped status script;
# re-exported here for the checks.
from ..common.status import (  # noqa: F401
    parse_prism_cgroups,
    parse_prism_flows,
    parse_prism_latency,
    parse_prism_table,
)

SYS_BLOCK = Path("/sys/block")
# The serial of the file-backed virtio disk the host attaches.
VIRTIO_SERIAL = "prism-virtio"
# The serial of the file-backed disk behind QEMU's NVMe controller.
NVME_SERIAL = "prism-nvme"
# The pgbench database image, attached read-only by the host so that the
# guest copies it from a disk and not through the 9p root (2-3 MB/s under TCG).
PGIMAGE_SERIAL = "prism-pgimage"
# The emulated drives, by profile (prism.host.vm.ModelDisk attaches them).
MODEL_SERIALS = {"hdd": "prism-hdd", "hdd-ncq": "prism-hdd-ncq",
                 "ssd-model": "prism-ssd-model", "cloud": "prism-cloud",
                 "cloud-small": "prism-cloud-small"}
DEBUGFS = Path("/sys/kernel/debug")
CONFIGFS = Path("/sys/kernel/config")
# prism's twins: the modules of older releases under names of their own
# (prism/host/twin.py builds them), each loaded beside prism so that one
# boot measures both. The one table of what a twin is; everything else
# (the host's build, the plan, the guest's loading) reads it.


@dataclasses.dataclass(frozen=True)
class Twin:
    """One twin. scheduler: its elevator name (what queue/scheduler lists
    and takes; ELV_NAME_MAX is 16 with the NUL, and a module name must
    not hold a dot, so no "prism-3.0.0"); rev: the commit its module is
    built from; release: which release that is, in the CHANGELOG's words;
    series: the pinned kernels it builds for (its own release's pins);
    weight_file: its blkcg policy's cgroup file, renamed from
    io.prism.weight (None: the release had no policy); latency_tunable:
    it keeps latency histograms by a tunable latency_hist (v2), not
    through debugfs "latency" as prism does now."""
    scheduler: str
    rev: str
    release: str
    series: tuple[str, ...]
    weight_file: str | None = None
    latency_tunable: bool = False

    @property
    def module(self) -> str:
        """The module: Kbuild's object, hence the .ko's file name, and
        MODULE_ALIAS, as the kernel's request_module() asks for an
        elevator (NAME-iosched)."""
        return f"{self.scheduler}-iosched"

    @property
    def loaded(self) -> str:
        """The name the loaded module goes by (kbuild turns dashes into
        underscores): /sys/module/NAME."""
        return self.module.replace("-", "_")


TWINS = {t.scheduler: t for t in (
    # v2's last commit (CHANGELOG "0.1.0 (v2)": the module as it was
    # before v3's work began), which v3 was measured against. Its module
    # predates the 7.x compat (init_sched() with the core's elevator_queue,
    # depth_updated() per queue, hrtimer_setup()): 6.1 and 6.12 only.
    Twin("prism-v2", "01b59b5", "v2 (0.1.0)", ("6.1", "6.12"), latency_tunable=True),
    # The release commit of 3.0.0 (CHANGELOG "3.0.0 (v3)"), which v4 is
    # measured against (issue 56). Its kernel-range is 6.1 to 7.3, the
    # pins it was released on, which have not moved since.
    Twin("prism-v3", "abdf007", "3.0.0 (v3)", ("6.1", "6.12", "7.3"),
         weight_file="io.prism-v3.weight"),
)}


def twin_named(name: str) -> Twin | None:
    """The twin scheduler @name stands for, or None (prism or a peer)."""
    return TWINS.get(name)


def sh(cmd: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", cmd], text=True, capture_output=True, timeout=timeout)
    if check and r.returncode:
        raise RuntimeError(f"`{cmd}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def log(msg: str) -> None:
    print(f"[guest] {msg}", flush=True)


def module_loaded(name: str = "prism_iosched") -> bool:
    return (Path("/sys/module") / name).exists()


def load_prism(ko: str | None = None) -> None:
    if module_loaded():
        return
    ko = ko or os.environ.get("PRISM_KO")
    if not ko:
        raise RuntimeError("PRISM_KO is not set: which prism-iosched.ko to load?")
    sh(f"insmod {ko}")


def unload_prism() -> subprocess.CompletedProcess:
    return sh("rmmod prism_iosched", check=False)


def load_twin(name: str, ko: str | None = None) -> None:
    """Load prism's twin @name beside prism: @ko, else $PRISM_TWIN_KO (the
    host exports it as it does PRISM_KO; one twin a boot). A .ko of
    another name is refused: the twin's file is named for it, so that
    prism's own module, another twin's, or one built before the rename,
    can never be measured as this twin."""
    tw = TWINS[name]
    if module_loaded(tw.loaded):
        return
    ko = ko or os.environ.get("PRISM_TWIN_KO")
    if not ko:
        raise RuntimeError(f"PRISM_TWIN_KO is not set: which {tw.module}.ko to load "
                           f"for {name}?")
    if Path(ko).name != f"{tw.module}.ko":
        raise RuntimeError(f"{ko} is not {tw.module}.ko: not loading it as {name}")
    sh(f"insmod {ko}")


def mount_debugfs() -> None:
    if not (DEBUGFS / "block").exists():
        sh(f"mount -t debugfs none {DEBUGFS}", check=False)


def nullb_module(depth: int = 4, completion_us: int = 500, nr_devices: int = 1,
                 size_gb: int = 4) -> list[str]:
    """Timer-completed null_blk devices: @depth slots of @completion_us each,
    so the device, not the emulated CPU, is the bottleneck."""
    sh("rmmod null_blk", check=False)
    sh(f"modprobe null_blk queue_mode=2 hw_queue_depth={depth} irqmode=2 "
       f"completion_nsec={completion_us * 1000} nr_devices={nr_devices} gb={size_gb} "
       "submit_queues=1 poll_queues=0")
    return [f"nullb{i}" for i in range(nr_devices)]


def nullb_configfs(name: str, *, depth: int = 4, completion_us: int = 500,
                   size_mb: int = 256, memory_backed: bool = True,
                   extra: dict | None = None) -> str:
    """A configfs null_blk device; memory-backed ones keep data, so fio
    verify works on them. Returns the block device name."""
    if not (CONFIGFS / "nullb").exists():
        sh("modprobe configfs", check=False)
        sh(f"mountpoint -q {CONFIGFS} || mount -t configfs none {CONFIGFS}")
        sh("modprobe null_blk nr_devices=0", check=False)
    d = CONFIGFS / "nullb" / name
    d.mkdir(exist_ok=True)
    # irqmode 2 completes from a timer after completion_nsec; 0 at once.
    settings = {"queue_mode": 2, "hw_queue_depth": depth,
                "irqmode": 2 if completion_us else 0,
                "completion_nsec": completion_us * 1000, "size": size_mb,
                "memory_backed": int(memory_backed), "submit_queues": 1,
                "poll_queues": 0, **(extra or {})}
    for key, val in settings.items():
        (d / key).write_text(f"{val}\n")
    (d / "power").write_text("1\n")
    index = (d / "index").read_text().strip()
    # Older kernels name the disk nullb<index>, newer ones after the item.
    candidates = (f"nullb{index}", name)
    for _ in range(50):
        for dev in candidates:
            if (SYS_BLOCK / dev).exists():
                return dev
        time.sleep(0.1)
    raise RuntimeError(f"configfs null_blk {name} appeared as none of {candidates}")


def nullb_configfs_remove(name: str) -> None:
    """Power off and remove the configfs null_blk device @name, if there."""
    d = CONFIGFS / "nullb" / name
    if d.exists():
        (d / "power").write_text("0\n")
        d.rmdir()


@contextlib.contextmanager
def temporary_nullb(name: str, **settings) -> Iterator[str]:
    """A configfs null_blk device (see nullb_configfs()) for the length of
    a with block, removed after it however it ends."""
    dev = nullb_configfs(name, **settings)
    try:
        yield dev
    finally:
        nullb_configfs_remove(name)


def disk_by_serial(serial: str) -> str:
    # virtio-blk shows the serial on the disk, NVMe on its controller.
    # A disk may have the file and refuse to read it (7.3's virtio-blk
    # answers ENXIO for one without a serial): not the one sought.
    for dev in sorted(SYS_BLOCK.iterdir()):
        for s in (dev / "serial", dev / "device" / "serial"):
            try:
                found = s.read_text().strip()
            except OSError:
                continue
            if found == serial:
                return dev.name
    raise RuntimeError(f"no disk with serial {serial!r} attached")


def schedulers(dev: str) -> tuple[list[str], str]:
    """(available, active) schedulers of @dev."""
    text = (SYS_BLOCK / dev / "queue" / "scheduler").read_text().split()
    active = next(s.strip("[]") for s in text if s.startswith("["))
    return [s.strip("[]") for s in text], active


# Schedulers Debian builds as modules, by module name.
SCHEDULER_MODULES = {"kyber": "kyber-iosched", "bfq": "bfq"}


def offered_schedulers(dev: str, sched: str) -> list[str]:
    """The schedulers @dev offers, once @sched's module is loaded if it is
    one that is built as a module and not offered yet."""
    available = schedulers(dev)[0]
    if sched not in available and sched in SCHEDULER_MODULES:
        sh(f"modprobe {SCHEDULER_MODULES[sched]}", check=False)
        available = schedulers(dev)[0]
    elif sched not in available and sched in TWINS:
        # Not installed anywhere modprobe looks: the host's build, by path.
        load_twin(sched)
        available = schedulers(dev)[0]
    return available


def _write_scheduler(dev: str, sched: str) -> None:
    with open(SYS_BLOCK / dev / "queue" / "scheduler", "w") as f:
        f.write(sched)


def set_scheduler(dev: str, sched: str, tunables: dict | None = None) -> None:
    """Switch @dev to a fresh instance of @sched (tunables at their
    defaults, counters at zero), loading its module if needed, then apply
    tunables. Raises if the switch did not take."""
    offered_schedulers(dev, sched)
    if sched != "none" and schedulers(dev)[1] == sched:
        # Selecting the active scheduler again changes nothing in the
        # kernel: the last run's tunables and counters would carry over.
        _write_scheduler(dev, "none")
    _write_scheduler(dev, sched)
    active = schedulers(dev)[1]
    if active != sched:
        raise RuntimeError(f"{dev}: asked for {sched}, active is {active}")
    for key, val in (tunables or {}).items():
        write_tunable(dev, key, val)


def write_queue(dev: str, name: str, value) -> None:
    """Set a queue attribute such as nr_requests; raises if refused."""
    (SYS_BLOCK / dev / "queue" / name).write_text(f"{value}\n")


def tunable_path(dev: str, name: str) -> Path:
    return SYS_BLOCK / dev / "queue" / "iosched" / name


def read_tunable(dev: str, name: str) -> str:
    return tunable_path(dev, name).read_text().strip()


def write_rc(path: Path, text: str) -> int:
    """Write @text to @path in one write(); returns 0 or the errno the
    kernel answered with (sysfs, cgroup and debugfs files)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        return e.errno or -1
    try:
        os.write(fd, text.encode())
        return 0
    except OSError as e:
        return e.errno or -1
    finally:
        os.close(fd)


def write_tunable(dev: str, name: str, value) -> int:
    """Write @value; returns 0 or the errno the kernel answered with."""
    return write_rc(tunable_path(dev, name), str(value))


def prism_tiers(dev: str) -> dict[str, dict[str, int]]:
    """prism's per-tier counters from debugfs."""
    mount_debugfs()
    return parse_prism_table((DEBUGFS / "block" / dev / "sched" / "tiers").read_text())


def prism_flight(dev: str) -> dict:
    """prism's in-flight control from debugfs: per tier, and the controller."""
    mount_debugfs()
    return parse_prism_table((DEBUGFS / "block" / dev / "sched" / "flight").read_text())


# Every task with its state and where it sleeps ("D": waiting on I/O).
TASK_LIST = "ps -eo pid,stat,wchan:32,comm"


def log_blocked_tasks(tail: int | None = None) -> str:
    """Have the kernel log the stacks of its blocked tasks (sysrq-w) and
    return its log, the last @tail lines of it if given."""
    with contextlib.suppress(OSError):
        Path("/proc/sysrq-trigger").write_text("w")
    time.sleep(1)
    return sh("dmesg" + (f" | tail -{tail}" if tail else ""), check=False).stdout


def stall_report(dev: str, pids: Sequence[int]) -> str:
    """What to know when I/O on @dev stopped completing, for a check's
    error: every task in D state and the stacks of @pids and their
    children (sysrq-w puts the blocked tasks' stacks in the kernel log),
    blk-mq's view of each hardware queue, the kernel log's tail, and last
    prism's own debugfs files. Those are read by a child left to itself:
    a reader spinning on a lock that a stuck CPU holds would never
    return, and must not take the check with it."""
    out = []

    def read(path: Path) -> str:
        try:
            return path.read_text()
        except OSError as e:
            return f"({e})"
    tasks = [str(p) for p in pids]
    for p in pids:
        kids = Path(f"/proc/{p}/task/{p}/children")
        tasks += read(kids).split() if kids.exists() else []
    for t in tasks:
        for stack in sorted(Path(f"/proc/{t}/task").glob("*/stack")):
            out.append(f"== stack {stack}\n{read(stack)}")
    out.append("== tasks in D state\n" + sh(f"{TASK_LIST} | awk '$2 ~ /D/'",
                                            check=False).stdout)
    for hctx in sorted((DEBUGFS / "block" / dev).glob("hctx*")):
        for name in ("state", "dispatch", "busy", "sched_tags", "tags", "dispatched", "run"):
            if (hctx / name).exists():
                out.append(f"== {hctx.name}/{name}\n{read(hctx / name)}")
    out.append("== kernel log (tail)\n" + log_blocked_tasks(150))
    sched = DEBUGFS / "block" / dev / "sched"
    dump = Path(os.environ.get("PRISM_RUNDIR", "/tmp")) / f"stall-{dev}.txt"
    script = f'for f in {sched}/*; do echo "== $f"; cat "$f"; done > {dump}'
    subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    out.append(f"== prism debugfs ({dump})\n{read(dump)}")
    return "\n".join(out)


def prism_latency_path(dev: str) -> Path:
    return DEBUGFS / "block" / dev / "sched" / "latency"


def prism_latency(dev: str) -> dict:
    """prism's latency histograms from debugfs (parse_prism_latency())."""
    mount_debugfs()
    return parse_prism_latency(prism_latency_path(dev).read_text())


def prism_latency_keep(dev: str, on: bool = True) -> None:
    """Empty prism's latency histograms and keep them from now on (@on),
    or stop keeping them (they cost about 50 instructions a request)."""
    mount_debugfs()
    prism_latency_path(dev).write_text("1\n" if on else "0\n")


def prism_flows(dev: str) -> list[dict]:
    """prism's process flows from debugfs (status.parse_prism_flows())."""
    mount_debugfs()
    return parse_prism_flows((DEBUGFS / "block" / dev / "sched" / "flows").read_text())


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_root() -> Path | None:
    """The cgroup v2 hierarchy (mounted if it is not), with the io and
    memory controllers enabled for its children (cgroup writeback needs
    both); None if there is none."""
    if not (CGROUP_ROOT / "cgroup.subtree_control").exists():
        sh(f"mount -t cgroup2 none {CGROUP_ROOT}", check=False)
    if not (CGROUP_ROOT / "cgroup.subtree_control").exists():
        return None
    sh(f"echo '+io +memory' > {CGROUP_ROOT}/cgroup.subtree_control", check=False)
    return CGROUP_ROOT


def cgroup_argv(cg: Path, argv: Sequence[str]) -> list[str]:
    """@argv run in cgroup @cg: a shell moves itself there, then execs it."""
    return ["bash", "-c", f'echo $$ > "{cg}/cgroup.procs" && exec "$@"', "--", *argv]


def prism_cgroups(dev: str) -> dict[str, dict]:
    mount_debugfs()
    return parse_prism_cgroups((DEBUGFS / "block" / dev / "sched" / "cgroups").read_text())


def prism_cost(dev: str) -> dict[str, dict[str, str]]:
    """prism's cost model from debugfs, by line: "model" (the coefficients
    in force), "cost_ns", "learning" (the learner's state and window) and,
    once it has fitted something, "learned"."""
    mount_debugfs()
    out: dict[str, dict[str, str]] = {}
    for line in (DEBUGFS / "block" / dev / "sched" / "cost").read_text().splitlines():
        f = line.split()
        if not f:
            continue
        name = f[0].split("=", 1)[0]
        if "=" not in f[0]:
            f = f[1:]
        out[name] = dict(kv.split("=", 1) for kv in f)
    return out


def prism_batch(dev: str) -> dict[str, str]:
    mount_debugfs()
    text = (DEBUGFS / "block" / dev / "sched" / "batch").read_text()
    return dict(kv.split("=", 1) for kv in text.split())


def fio(jobfile: str | None = None, args: Sequence[str] = (),
        timeout: float | None = 600) -> dict:
    """Run fio with JSON output; returns the parsed report. Raises on a
    non-zero exit (an I/O or verify error) with fio's stderr. @timeout is
    in the guest's clock; None waits as long as fio runs."""
    cmd = ["fio", "--output-format=json"] + list(args)
    if jobfile:
        cmd.append(jobfile)
    r = subprocess.run(cmd, text=True, capture_output=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"fio failed ({r.returncode}): {r.stderr.strip()[-1500:]}"
                           f"{fio_job_errors(r.stdout)}")
    return parse_fio_json(r.stdout)


def fio_job_errors(stdout: str) -> str:
    """The jobs fio reports an error for, from its JSON output, if any."""
    try:
        jobs = parse_fio_json(stdout)["jobs"]
    except (RuntimeError, ValueError, KeyError):
        return ""
    bad = [f"{j['jobname']}: error {j['error']}" for j in jobs if j.get("error")]
    return ("; jobs: " + ", ".join(bad)) if bad else ""


def parse_fio_json(text: str) -> dict:
    # fio may print notes before the JSON document.
    start = text.find("{")
    if start < 0:
        raise RuntimeError("fio printed no JSON")
    return json.loads(text[start:])
