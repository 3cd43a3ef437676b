"""Boot a pinned kernel under QEMU with virtme-ng and run a command in it.

The guest sees the host's root filesystem read-only over 9p, so the
module built in the cache, fio and this package are all there; a
read-write directory (the run directory) carries results, the exit code
and the kernel log back. Disks are attached as virtio-blk devices backed
by sparse files; the guest finds them by serial.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..common.errors import PrismError, UsageError
from ..drives import diskmodel
from ..guest.system import MODEL_SERIALS
from . import build, kernels, klog

REPO = build.REPO


@dataclasses.dataclass
class Disk:
    serial: str          # the guest finds the disk by /sys/block/*/serial
    path: Path           # a raw image file, created sparse if missing
    size_mb: int = 256
    readonly: bool = False

    def qemu_opts(self, index: int) -> str:
        drive_id = f"prismdisk{index}"
        ro = ",readonly=on" if self.readonly else ""
        # format=raw: else QEMU probes the format and guards block 0.
        return (f"-drive file={self.path},if=none,id={drive_id},format=raw{ro} "
                f"-device virtio-blk-pci,drive={drive_id},serial={self.serial}")


@dataclasses.dataclass
class NvmeDisk(Disk):
    """A file-backed disk behind QEMU's NVMe controller: one hardware queue
    per guest CPU and multi-range discard (256 segments), the shape of
    most real SSDs. The guest finds it by the controller's serial.

    @throttle_iops meters it in QEMU at that many I/Os per second (at the
    host's speed, so the device and not TCG is the bottleneck), and
    @io_queue_depth limits the guest driver's queues (nvme.io_queue_depth,
    a module parameter: it applies to every NVMe disk of the boot; 2 gives
    one tag per queue), so requests wait in the scheduler, not the device."""
    throttle_iops: int = 0
    io_queue_depth: int = 0

    def qemu_opts(self, index: int) -> str:
        drive_id = f"prismdisk{index}"
        throttle = (f",throttling.iops-total={self.throttle_iops}"
                    if self.throttle_iops else "")
        return (f"-drive file={self.path},if=none,id={drive_id},format=raw,cache=none"
                f"{throttle} -device nvme,serial={self.serial},drive={drive_id}")

    def kernel_args(self) -> list[str]:
        return [f"nvme.io_queue_depth={self.io_queue_depth}"] if self.io_queue_depth else []


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM it when the process that started it
    dies, even by SIGKILL, when no finally block runs (Linux's
    PR_SET_PDEATHSIG). A drive server left behind would keep serving a
    dead boot's image."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


@dataclasses.dataclass
class ModelDisk:
    """An emulated HDD, SSD or cloud volume: the guest sees a virtio disk, while a host
    process (prism disk serve) answers its requests over NBD when the
    drive model says they complete, at the host's speed and not the
    emulated CPU's. The guest side sets the disk's rotational flag (QEMU's
    virtio-blk has none) and its queue depth (virtio_blk.queue_depth)."""
    profile: diskmodel.Profile
    rundir: Path
    trace: bool = False
    proc: subprocess.Popen | None = None
    # A second disk of one profile in a boot needs its own serial (and
    # rundir, which holds its socket, image and trace).
    serial_name: str | None = None

    @property
    def name(self) -> str:
        return diskmodel.profile_name(self.profile)

    @property
    def serial(self) -> str:
        return MODEL_SERIALS[self.serial_name or self.name]

    @property
    def socket(self) -> Path:
        return self.rundir / "disk.sock"

    @property
    def backing(self) -> Path:
        return self.rundir / "disk.img"

    @property
    def trace_path(self) -> Path:
        return self.rundir / "disk-trace.csv"

    def qemu_opts(self, index: int) -> str:
        drive_id = f"prismdisk{index}"
        # A cloud volume's rate limits: QEMU's token buckets, at the host's
        # speed, in front of the model.
        model = diskmodel.make_model(self.profile)
        throttle = "".join(f",throttling.{k}={v}" for k, v in (
            model.qemu_throttling().items() if isinstance(model, diskmodel.CloudModel) else ()))
        # One queue: the profile's depth is then the device's depth.
        return (f"-drive file=nbd+unix:///?socket={self.socket},if=none,id={drive_id},"
                f"format=raw,cache=none{throttle} "
                f"-device virtio-blk-pci,drive={drive_id},serial={self.serial},num-queues=1")

    def kernel_args(self) -> list[str]:
        return [f"virtio_blk.queue_depth={self.profile.queue_depth}"]

    def guest_setup(self) -> str:
        rot = 1 if isinstance(self.profile, diskmodel.HddProfile) else 0
        return (f'for d in /sys/block/vd*; do [ "$(cat $d/serial 2>/dev/null)" = '
                f'{self.serial} ] && echo {rot} > $d/queue/rotational; done\n')

    def start(self) -> None:
        self.rundir.mkdir(parents=True, exist_ok=True)
        params = self.rundir / "disk-params.toml"
        params.write_text(diskmodel.to_toml(self.profile))
        cmd = [sys.executable, "-m", "prism.cli", "disk", "serve", "--disk-params", str(params),
               "--socket", str(self.socket), "--backing", str(self.backing)]
        if self.trace:
            cmd += ["--trace", str(self.trace_path)]
        self.socket.unlink(missing_ok=True)
        log = open(self.rundir / "disk-server.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, PYTHONPATH=str(REPO)),
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 20
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise PrismError(f"the disk model server did not start; see "
                                 f"{self.rundir / 'disk-server.log'}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The data only lives as long as the boot: drop the (sparse) image.
        self.backing.unlink(missing_ok=True)


@dataclasses.dataclass
class VmResult:
    returncode: int      # the guest command's exit code; -1 if it never ended
    output: str          # console output (guest stdout/stderr)
    dmesg: str           # the guest's kernel log at the end of the command
    rundir: Path         # the read-write directory the guest wrote into
    elapsed: float
    guest_started: bool = True   # the guest script ran (its first line)
    timed_out: bool = False
    # The kernel's console (warnings and worse, and vng's own messages) as
    # it was printed: what is left of the kernel log when the guest dies
    # (a panic powers the VM off) before the command's end can save dmesg.
    kernel_console: str = ""

    def tail(self, lines: int = 15) -> str:
        """The console's last lines, for an error message; the kernel
        console's too when the guest never got to the command's end."""
        out = "".join(self.output.splitlines(keepends=True)[-lines:])
        if self.returncode == -1 and self.kernel_console.strip():
            out += ("\nthe kernel console's last lines:\n"
                    + "".join(self.kernel_console.splitlines(keepends=True)[-2 * lines:]))
        return out

    @property
    def log_problems(self) -> list[tuple[str, str]]:
        return klog.problems(self.dmesg or self.kernel_console)


def require_tools() -> None:
    """Name the package that provides each missing tool."""
    need = {"vng": "virtme-ng (pip install virtme-ng)",
            "qemu-system-x86_64": "qemu-system-x86 (apt-get install qemu-system-x86)",
            "kmod": "kmod (apt-get install kmod)",
            "udevadm": "udev (apt-get install udev)"}
    missing = [f"{tool}: install {pkg}" for tool, pkg in need.items()
               if not shutil.which(tool)]
    if missing:
        raise PrismError("missing tools; " + "; ".join(missing))


def kvm_usable() -> bool:
    """Whether /dev/kvm can be opened. On the project's build machines it
    opens but guests hang, so KVM is used only when asked for."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def kvm_works(k: kernels.Kernel, timeout: float = 30) -> bool:
    """Whether a KVM guest gets as far as printing the kernel banner. The
    answer is cached per host kernel: on the project's build machines
    /dev/kvm opens but guests hang, which only a boot can tell."""
    if not kvm_usable():
        return False
    probe = kernels.cache_dir() / f"kvm-probe-{os.uname().release}"
    if probe.exists():
        return probe.read_text().strip() == "yes"
    kernels.log(f"probing KVM (up to {timeout:.0f} s, once per host kernel)")
    cmd = ["qemu-system-x86_64", "-accel", "kvm", "-M", "q35", "-m", "256M",
           "-display", "none", "-serial", "stdio", "-no-reboot",
           "-kernel", str(k.vmlinuz), "-append", "console=ttyS0 panic=-1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    ok = False
    try:
        out, _ = proc.communicate(timeout=timeout)
        ok = b"Linux version" in out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        ok = b"Linux version" in (out or b"")
    probe.write_text("yes\n" if ok else "no\n")
    kernels.log("KVM works" if ok else "KVM guests do not boot here; using TCG")
    return ok


def new_rundir() -> Path:
    base = kernels.cache_dir() / "vm"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="run-", dir=base))


def _guest_pythonpath(rundir: Path) -> Path:
    """A copy of this package in the run directory for the guest to
    import: the guest replaces /tmp and /var/tmp with empty ones, so a
    checkout there (CI's, say) would not be visible in it."""
    lib = rundir / "pylib"
    shutil.rmtree(lib, ignore_errors=True)
    shutil.copytree(REPO / "prism", lib / "prism",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # prism.__version__ reads it beside the package.
    (lib / "module").mkdir()
    shutil.copy2(REPO / "module" / "VERSION", lib / "module" / "VERSION")
    # The package's cgroup weight helper, which a check runs.
    (lib / "packaging").mkdir()
    shutil.copy2(REPO / "packaging" / "prism-cgroup-weight",
                 lib / "packaging" / "prism-cgroup-weight")
    # And its udev rules, which a check has udev apply.
    shutil.copytree(REPO / "packaging" / "udev", lib / "packaging" / "udev")
    return lib


# After the command, on a kernel with kmemleak (the debug kernels): two
# scans 5 s apart, as kmemleak reports an object only when a second scan
# finds it unreferenced with its contents unchanged; the "new suspected
# memory leaks" line lands in the kernel log (klog), the leaks' stacks in
# the run directory's kmemleak.txt.
KMEMLEAK_SCAN = """mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
for i in 1 2; do
  echo scan > /sys/kernel/debug/kmemleak || echo "kmemleak: scan $i refused" >&2
  [ "$i" = 2 ] || sleep 5
done
cat /sys/kernel/debug/kmemleak > "$PRISM_RUNDIR/kmemleak.txt"
"""


def _guest_script(command: str, rundir: Path, ko: Path | None, setup: str = "",
                  twin_ko: Path | None = None, kmemleak: bool = False) -> str:
    env = {
        "PRISM_RUNDIR": str(rundir),
        "PYTHONPATH": str(_guest_pythonpath(rundir)),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if ko:
        env["PRISM_KO"] = str(ko)
        testblk = ko.parent / "testblk" / "prism_testblk.ko"
        if testblk.exists():
            env["PRISM_TESTBLK_KO"] = str(testblk)
    if twin_ko:
        # prism's twin (twin.py), loaded by the guest when it is selected.
        env["PRISM_TWIN_KO"] = str(twin_ko)
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    return f"""#!/bin/bash
{exports}
cd "$PRISM_RUNDIR"
: > "$PRISM_RUNDIR/started"
{setup}bash -c {shlex.quote(command)}
rc=$?
echo "$rc" > "$PRISM_RUNDIR/rc"
{KMEMLEAK_SCAN if kmemleak else ""}dmesg > "$PRISM_RUNDIR/dmesg.txt"
sync
exit "$rc"
"""


def kernel_args(disks: Sequence[Disk | ModelDisk]) -> list[str]:
    """The guest kernel parameters the disks need. A driver's module
    parameter (virtio_blk.queue_depth, nvme.io_queue_depth) holds for
    every disk of that driver, so two disks that want it different cannot
    share a boot: refused, rather than one of them silently getting the
    other's depth."""
    wanted: dict[str, str] = {}
    for d in disks:
        for arg in d.kernel_args() if hasattr(d, "kernel_args") else []:
            key, _, val = arg.partition("=")
            if wanted.get(key, val) != val:
                raise UsageError(f"these disks cannot share a boot: they need {key}={wanted[key]} "
                                 f"and {key}={val} (a module parameter holds for every disk "
                                 "of its driver)")
            wanted[key] = val
    return [f"{k}={v}" for k, v in wanted.items()]


# The guest's clock counts instructions, one nanosecond each, and skips
# ahead while every vCPU is idle: what a run measures in guest time is the
# instructions it executed, whatever else the host does meanwhile. TCG
# then runs the vCPUs in one thread, in turn.
ICOUNT_OPTS = "-icount shift=0,sleep=off"


def check_disks(disks: Sequence[Disk | ModelDisk], accel: str) -> None:
    """Refuse disks that cannot boot together or under @accel: pure, so
    that the CLI asks before it builds anything, and run() again."""
    kernel_args(disks)
    if accel == "icount" and any(isinstance(d, ModelDisk) for d in disks):
        raise UsageError("--accel icount: the emulated drives keep the host's time, "
                         "which the guest's instruction clock does not follow")


def run(k: kernels.Kernel, command: str, *, ko: Path | None = None,
        disks: Sequence[Disk | ModelDisk] = (), memory: str = "2G", cpus: int = 2,
        accel: str = "auto", timeout: float = 1800, rundir: Path | None = None,
        echo: bool = True, plugin: Path | None = None,
        twin_ko: Path | None = None) -> VmResult:
    """Boot @k, run @command (bash) in the guest, return what happened.
    @ko: prism's module, and @twin_ko its twin's (twin.py), for the guest
    at $PRISM_KO and $PRISM_TWIN_KO. @plugin: a QEMU TCG plugin to load
    (TCG or icount only), told the run directory in PRISM_INSNPROF_DIR."""
    if k.build_only and not k.boots:
        raise UsageError(f"{k.name} is in the build-only set (prism/host/kernels.py): "
                         "prism builds for it but never boots it, and fetches no image")
    kernels.ensure_bootable(k)
    check_disks(disks, accel)
    require_tools()
    if not k.vmlinuz.exists():
        raise PrismError(f"{k.vmlinuz} missing: run '{kernels.fetch_command(k)}'")
    if not (k.modules_dir / "modules.dep").exists():
        raise PrismError(f"{k.modules_dir} (installed beside the image) incomplete: "
                         f"run '{kernels.fetch_command(k)}'")
    rundir = rundir or new_rundir()
    rundir.mkdir(parents=True, exist_ok=True)
    for f in ("rc", "dmesg.txt", "started", "console.txt", "kernel-console.txt"):
        (rundir / f).unlink(missing_ok=True)
    models = [d for d in disks if isinstance(d, ModelDisk)]
    script = rundir / "guest.sh"
    script.write_text(_guest_script(command, rundir, ko,
                                    "".join(d.guest_setup() for d in models), twin_ko,
                                    kmemleak=k.debug))
    script.chmod(0o755)

    qemu_opts = []
    for i, d in enumerate(disks):
        if isinstance(d, Disk) and not d.path.exists():
            with open(d.path, "wb") as img:
                img.truncate(d.size_mb << 20)
        qemu_opts.append(d.qemu_opts(i))

    # vng finds the modules tree from the image's path: /lib/modules/ABI
    # for /boot/vmlinuz-ABI; for an image extracted from its .deb
    # (kernels.fetch_image: IMAGE_DIR/boot/vmlinuz-ABI; the debug kernel's
    # install has the same layout), IMAGE_DIR/lib/modules/ABI,
    # which the guest gets linked at /lib/modules/ABI (virtme_link_mods),
    # the rest of its root being the host's.
    # --verbose sends the kernel console to vng's stderr (kept apart from
    # the guest's output by _boot); loglevel=5 keeps it to warnings and
    # worse, so a panic that powers the guest off still leaves its trace.
    # tsc=reliable: under a loaded host TCG's TSC drifts against its HPET,
    # and the clocksource watchdog then marks the TSC unstable mid-run.
    # That flips sched_clock's static key, and QEMU's multi-threaded TCG
    # can run a stale int3 of the patch on the other vCPU: an oops in
    # sched_clock_cpu (CI, 7.3, at 476 s; 4 of 69 boots saw the marking).
    # It would also move the guest's clock to the HPET, which halves what
    # a CPU-bound run measures. The same patch once at boot (late init) is
    # covered by the retry below: the guest had not started.
    cmd = ["vng", "--run", str(k.vmlinuz), "--force-9p", "--cpus", str(cpus),
           "--memory", memory, f"--rwdir={rundir}", "--verbose", "--append=loglevel=5",
           "--append=tsc=reliable", "--exec", str(script)]
    if accel == "auto":
        accel = "kvm" if kvm_works(k) else "tcg"
    if accel == "kvm":
        if not kvm_usable():
            raise PrismError("--accel kvm: /dev/kvm cannot be opened")
    else:
        cmd.insert(3, "--disable-kvm")
    if accel == "icount":
        qemu_opts.append(ICOUNT_OPTS)
    env = None
    if plugin:
        if accel == "kvm":
            raise PrismError("a TCG plugin needs --accel tcg or icount, not kvm")
        qemu_opts.append(f"-plugin {plugin}")
        env = dict(os.environ, PRISM_INSNPROF_DIR=str(rundir))
    if qemu_opts:
        # "=" form: the value starts with "-" and must not read as an option.
        cmd.append("--qemu-opts=" + " ".join(qemu_opts))
    cmd += [f"--append={a}" for a in kernel_args(disks)]
    for d in models:
        d.start()
    try:
        res = _boot(cmd, rundir, timeout, echo, env)
        if not res.guest_started and not res.timed_out:
            # vng or QEMU gave up before the guest ran a line of ours (seen
            # once in CI: exit after 4 s, nothing kept). Nothing of the
            # command has run, so one more boot is safe; say so and why.
            kernels.log("the VM exited before the guest started its command; "
                        "booting once more. Its last output:\n" + res.tail())
            res = _boot(cmd, rundir, timeout, echo, env)
        return res
    finally:
        for d in models:
            d.stop()


def _boot(cmd: list[str], rundir: Path, timeout: float, echo: bool,
          env: dict[str, str] | None = None) -> VmResult:
    start = time.monotonic()
    console = rundir / "kernel-console.txt"
    with open(console, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, text=True, errors="replace",
                                start_new_session=True, cwd=str(rundir), env=env)
    lines = []
    timed_out = False
    try:
        deadline = start + timeout
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
            if time.monotonic() > deadline:
                timed_out = True
                break
        if not timed_out:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    elapsed = time.monotonic() - start

    rc_file = rundir / "rc"
    rc = int(rc_file.read_text().strip() or -1) if rc_file.exists() else -1
    dmesg_file = rundir / "dmesg.txt"
    dmesg = dmesg_file.read_text(errors="replace") if dmesg_file.exists() else ""
    output = "".join(lines)
    if timed_out:
        output += f"\nprism: guest killed after {timeout:.0f} s\n"
    (rundir / "console.txt").write_text(output)
    return VmResult(rc, output, dmesg, rundir, elapsed,
                    guest_started=(rundir / "started").exists(), timed_out=timed_out,
                    kernel_console=console.read_text(errors="replace"))
