"""`prism kernels debug-build`: a pin's own source built with the kernel's
checkers on, so that the VM suite can run under them (`--kernel 6.12-debug`).

Debian's kernels have no lockdep, KASAN or kmemleak, and those are what
catch a lock taken in the wrong order, a use after free of a request, or
a scheduler's allocation never freed, while the checks themselves still
pass. Building such a kernel took 24 minutes on this machine's two cores
(niced, beside a VM; virtme-ng's config, KASAN, no debug info) and leaves
a 2.6 GB tree, so it is done once per release, outside CI, by this
command, and never as a side effect of a boot (kernels.require_debug()).

What it does, with the pin of the same Debian version (kernels.DEBUG):
- extracts the whole linux-source tree from the cached .deb (downloaded
  if missing, as for block/) into kernels.debug_tree();
- configures it as virtme-ng configures a kernel for booting under it
  (`vng --kconfig`), adds WANTED (the checkers, Debian's choices for the
  block layer, what the guest suite loads and mounts) and runs `make
  olddefconfig`, then verifies that every item kept its value: Kconfig
  drops a symbol whose dependencies are not met without a word;
- builds bzImage and the modules, and installs them into
  kernels.image_dir() in the layout of an extracted .deb, which vm.run()
  boots as it boots 7.3's (modules_install runs depmod there);
- stamps the install with its inputs (the source version, the config
  asked for, virtme-ng's and gcc's versions): the same inputs again make
  it a no-op.

The built tree stays: the module builds against it (its Module.symvers,
its block/), and build.py rebuilds the module when the stamp changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..common.errors import PrismError
from . import kernels

# The config prism asks for on top of virtme-ng's, symbol (without
# CONFIG_) -> value as .config spells it; "n" is "is not set". Each must
# hold in the final .config (misses()).
WANTED = {
    # The checkers. Lockdep proves the locking order on every path taken
    # (PROVE_RCU comes with it); sleeping in atomic context is reported;
    # lockdep's tables are enlarged as syzbot's are, since a whole suite
    # boot (module loads, many devices, switches) outgrows the defaults,
    # and a full table turns lockdep off with a BUG.
    "DEBUG_KERNEL": "y",
    "PROVE_LOCKING": "y",
    "PROVE_RCU": "y",
    "DEBUG_ATOMIC_SLEEP": "y",
    "LOCKDEP_BITS": "16",
    "LOCKDEP_CHAINS_BITS": "17",
    "LOCKDEP_STACK_TRACE_BITS": "20",
    "DEBUG_LIST": "y",
    # KASAN, generic (the only mode on x86), inline: faster than outline
    # under TCG, for a larger kernel.
    "KASAN": "y",
    "KASAN_GENERIC": "y",
    "KASAN_INLINE": "y",
    # kmemleak on from boot, with its periodic scan off: the harness
    # scans when the guest's command has ended (vm._guest_script), so a
    # boot reports once, after the checks, and no scan of the whole
    # memory (seconds under TCG) lands in the middle of a timed check.
    "DEBUG_KMEMLEAK": "y",
    "DEBUG_KMEMLEAK_DEFAULT_OFF": "n",
    "DEBUG_KMEMLEAK_AUTO_SCAN": "n",
    "DETECT_HUNG_TASK": "y",
    "SOFTLOCKUP_DETECTOR": "y",
    # No debug info: it would double the build's time and size on two
    # cores, and the reports name function+offset already, which
    # scripts/faddr2line resolves once a report needs source lines (with
    # the info turned on then, for that one build).
    "DEBUG_INFO_NONE": "y",
    "DEBUG_INFO": "n",
    # x86_64_defconfig builds with -Werror: a warning of this compiler
    # under KASAN's instrumentation (a frame size) must not end a long
    # build. prism's own module build fails on any warning anyway.
    "WERROR": "n",
    # The release string: kernels.DEBUG's ABI; LOCALVERSION= on make's
    # command line keeps "+" off it.
    "LOCALVERSION": f'"{kernels.DEBUG_LOCALVERSION}"',
    "LOCALVERSION_AUTO": "n",
    # The block layer as Debian's 6.12 builds it (its config in
    # linux-headers), so that the same code runs with the checkers on:
    # the schedulers (kyber and bfq as modules), cgroups with writeback,
    # throttling and iocost (the blkcg policies prism shares slots with),
    # writeback throttling (check wbt_off), zones, integrity, debugfs,
    # the tick, the preemption model.
    "MODULES": "y",
    "MODULE_UNLOAD": "y",
    "MQ_IOSCHED_DEADLINE": "y",
    "MQ_IOSCHED_KYBER": "m",
    "IOSCHED_BFQ": "m",
    "BFQ_GROUP_IOSCHED": "y",
    "CGROUPS": "y",
    "MEMCG": "y",
    "BLK_CGROUP": "y",
    "CGROUP_WRITEBACK": "y",
    "BLK_DEV_THROTTLING": "y",
    "BLK_CGROUP_IOCOST": "y",
    "BLK_WBT": "y",
    "BLK_WBT_MQ": "y",
    "BLK_DEV_ZONED": "y",
    "BLK_DEV_INTEGRITY": "y",
    "DEBUG_FS": "y",
    "BLK_DEBUG_FS": "y",
    "BLK_DEV_IO_TRACE": "y",
    "HZ_250": "y",
    "PREEMPT_DYNAMIC": "y",
    # What the guest suite uses: null_blk (module parameters, configfs),
    # the virtio and NVMe disks (built in: their queue depths come on the
    # command line), NVMe passthrough through io_uring, scsi_debug's
    # shared tags, loop and ext4 (stress, transactions, writeback), the
    # lockdown that status_tool raises, and 9p for virtme-ng's root.
    "BLK_DEV_NULL_BLK": "m",
    "CONFIGFS_FS": "y",
    "VIRTIO_BLK": "y",
    "BLK_DEV_NVME": "y",
    "NVME_MULTIPATH": "y",
    "IO_URING": "y",
    "SCSI_DEBUG": "m",
    "BLK_DEV_LOOP": "m",
    "EXT4_FS": "y",
    "SECURITY": "y",
    "SECURITYFS": "y",
    "SECURITY_LOCKDOWN_LSM": "y",
    "NET_9P": "y",
    "NET_9P_VIRTIO": "y",
    "9P_FS": "y",
    # Not wanted from virtme-ng's config: graphics, sound and KVM host
    # support, a large part of its build, unused by a boot that runs a
    # command on the serial console.
    "DRM": "n",
    "SOUND": "n",
    "KVM": "n",
}

# What the build runs, and what provides it (named when missing);
# openssl makes the key the modules are signed with (MODULE_SIG, which
# the lockdown LSM selects, as in Debian's kernels: prism's own module
# loads unsigned and taints, as there).
TOOLS = {"make": "apt-get install make", "gcc": "apt-get install gcc",
         "bc": "apt-get install bc", "flex": "apt-get install flex",
         "bison": "apt-get install bison", "xz": "apt-get install xz-utils",
         "depmod": "apt-get install kmod", "openssl": "apt-get install openssl",
         "vng": "pip install virtme-ng"}
# Headers the build's host programs include: objtool's libelf, and
# OpenSSL for the certificate and signing tools.
HEADERS = {Path("/usr/include/libelf.h"): "apt-get install libelf-dev",
           Path("/usr/include/openssl/opensslv.h"): "apt-get install libssl-dev"}


def missing_tools() -> list[str]:
    """Each tool or header the build needs and this machine lacks, with
    how to install it."""
    missing = [f"{tool}: {how}" for tool, how in TOOLS.items() if not shutil.which(tool)]
    return missing + [f"{h.name}: {how}" for h, how in HEADERS.items() if not h.exists()]


def fragment(wanted: dict[str, str]) -> str:
    """@wanted as .config lines."""
    return "".join(f"# CONFIG_{name} is not set\n" if value == "n"
                   else f"CONFIG_{name}={value}\n" for name, value in wanted.items())


def parse_config(text: str) -> dict[str, str]:
    """A .config's symbols: CONFIG_X=V -> X: V, "# CONFIG_X is not set"
    -> X: "n" (a symbol missing from it is not set either)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            name, _, value = line[len("CONFIG_"):].partition("=")
            out[name] = value
        elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
            out[line[len("# CONFIG_"):-len(" is not set")]] = "n"
    return out


def misses(text: str, wanted: dict[str, str]) -> list[str]:
    """The items of @wanted that the .config @text does not hold, each as
    "CONFIG_X=wanted (got V)"."""
    have = parse_config(text)
    return [f"CONFIG_{name}={value} (got {have.get(name, 'n')})"
            for name, value in wanted.items() if have.get(name, "n") != value]


def _version(cmd: list[str]) -> str:
    """The first line @cmd prints (a tool's version)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0] if lines else ""


# virtme-ng reads this beside its own config (`vng --kconfig`).
VNG_USER_CONFIG = Path.home() / ".config" / "virtme-ng" / "kernel.config"


def stamp_text(k: kernels.Kernel) -> str:
    """What the build of @k is made from, as its stamp holds it: a build
    whose stamp reads the same is not made again."""
    config = fragment(WANTED)
    if VNG_USER_CONFIG.exists():
        config += VNG_USER_CONFIG.read_text()
    return (f"abi {k.abi}\nsource {k.source_pkg}={k.version}\n"
            f"vng {_version(['vng', '--version'])}\n"
            f"gcc {_version(['gcc', '--version'])}\n"
            f"config sha256 {hashlib.sha256(config.encode()).hexdigest()}\n")


def _logged(cmd: list[str], cwd: Path, log: Path, what: str) -> None:
    """Run @cmd in @cwd, its output appended to @log; PrismError with the
    log's end if it fails."""
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        r = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)
    if r.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise PrismError(f"{what} failed (exit {r.returncode}); the end of {log}:\n{tail}")


def _drop_other_versions(k: kernels.Kernel) -> None:
    """Remove the trees of @k's earlier versions (a moved pin's): a few
    GB each, never used again."""
    for old in kernels.debug_dir(k).parent.glob("*"):
        if old.name != k.version:
            kernels.log(f"removing {old} (an earlier version's debug kernel)")
            kernels._remove_tree(old)


def extract(k: kernels.Kernel) -> Path:
    """The whole source tree of @k's linux-source, extracted into
    kernels.debug_tree() unless it is there."""
    tree = kernels.debug_tree(k)
    if (tree / "Makefile").exists():
        return tree
    deb = kernels._source_deb(k)
    tmp = tree.with_name(tree.name + ".tmp")
    kernels._remove_tree(tmp)
    tmp.mkdir(parents=True)
    kernels.log(f"extracting the whole source tree of {deb.name} into {tree} "
                "(about 1.7 GB)")
    inner = f"./usr/src/linux-source-{k.series}.tar.xz"
    r = subprocess.run(["bash", "-o", "pipefail", "-c",
                        f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{inner}' | xz -d | "
                        f"tar -x -C '{tmp}' --strip-components=1"],
                       text=True, capture_output=True)
    if r.returncode or not (tmp / "block" / "elevator.h").exists():
        kernels._remove_tree(tmp)
        raise PrismError(f"extracting {deb.name} failed: "
                         + (r.stderr.strip()[-500:] or "no block/elevator.h in it"))
    tmp.rename(tree)
    return tree


def configure(k: kernels.Kernel, tree: Path, log: Path) -> None:
    """virtme-ng's config for @tree, WANTED on top, `make olddefconfig`,
    each item of WANTED checked in the result and the release string
    against @k's ABI."""
    kernels.log(f"configuring {tree}: vng --kconfig, then {len(WANTED)} items of prism's "
                f"({tree / 'prism-debug.config'}), make olddefconfig; output in {log}")
    _logged(["vng", "--kconfig"], tree, log, "vng --kconfig")
    (tree / "prism-debug.config").write_text(fragment(WANTED))
    with open(tree / ".config", "a") as config:
        config.write("\n" + fragment(WANTED))
    _logged(["make", "olddefconfig"], tree, log, "make olddefconfig")
    lost = misses((tree / ".config").read_text(), WANTED)
    if lost:
        raise PrismError(f"{len(lost)} config item(s) did not hold in {tree / '.config'} "
                         "(a dependency unmet, or a choice taken otherwise): "
                         + "; ".join(lost))
    version = subprocess.run(["make", "-s", "kernelversion"], cwd=tree, capture_output=True,
                             text=True).stdout.strip()
    if version + kernels.DEBUG_LOCALVERSION != k.abi:
        raise PrismError(f"{tree} is Linux {version!r}, so its release would be "
                         f"{version}{kernels.DEBUG_LOCALVERSION}, not {k.abi}")


def compile_tree(k: kernels.Kernel, tree: Path, jobs: int, log: Path) -> None:
    """make bzImage and modules in @tree; its release must be @k's ABI."""
    kernels.log(f"building bzImage and modules in {tree} with make -j{jobs} (about 25 "
                f"minutes on two cores); output in {log}")
    _logged(["make", f"-j{jobs}", "LOCALVERSION=", "bzImage", "modules"], tree, log,
            "the kernel build")
    release = (tree / "include" / "config" / "kernel.release").read_text().strip()
    if release != k.abi:
        raise PrismError(f"{tree} built Linux {release}, not {k.abi}")


def install(k: kernels.Kernel, tree: Path, stamp: str, log: Path) -> Path:
    """The image and modules of @tree into kernels.image_dir(), as
    IMAGE_DIR/boot/vmlinuz-ABI and IMAGE_DIR/lib/modules/ABI (with the
    modules.dep modules_install's depmod makes), stamped with @stamp:
    into a temporary directory, renamed when complete."""
    dest = kernels.image_dir(k)
    tmp = dest.with_name(dest.name + ".tmp")
    kernels._remove_tree(tmp)
    (tmp / "boot").mkdir(parents=True)
    kernels.log(f"installing the image and modules into {dest}")
    _logged(["make", "LOCALVERSION=", f"INSTALL_MOD_PATH={tmp}", "modules_install"], tree, log,
            "make modules_install")
    if not (tmp / "lib" / "modules" / k.abi / "modules.dep").exists():
        raise PrismError(f"make modules_install left no lib/modules/{k.abi}/modules.dep "
                         f"in {tmp}; see {log}")
    shutil.copy2(tree / "arch" / "x86" / "boot" / "bzImage", tmp / "boot" / f"vmlinuz-{k.abi}")
    (tmp / kernels.DEBUG_STAMP).write_text(stamp)
    kernels._remove_tree(dest)
    tmp.rename(dest)
    return dest


def build(k: kernels.Kernel, jobs: int | None = None, config_only: bool = False) -> None:
    """Make the debug kernel @k bootable (see the module's docstring),
    with @jobs parallel jobs (default: one per CPU); with @config_only,
    stop once its config is made and verified."""
    missing = missing_tools()
    if missing:
        raise PrismError(f"building {k.name} needs what this machine lacks: "
                         + "; ".join(missing))
    stamp = stamp_text(k)
    done = kernels.image_dir(k) / kernels.DEBUG_STAMP
    if kernels.debug_ready(k) and done.read_text() == stamp:
        kernels.log(f"{k.name} ({k.abi}) is built from the same inputs: {k.vmlinuz}, "
                    f"tree {kernels.debug_tree(k)}")
        return
    _drop_other_versions(k)
    tree = extract(k)
    log = kernels.debug_dir(k) / "build.log"
    log.write_text("")
    configure(k, tree, log)
    if config_only:
        kernels.log(f"{tree / '.config'} holds every item asked for; not built (--config-only)")
        return
    compile_tree(k, tree, jobs or os.cpu_count() or 1, log)
    install(k, tree, stamp, log)
    kernels.log(f"{k.name} built: {k.vmlinuz}, modules {k.modules_dir}; boot it with "
                f"--kernel {k.name} (prism selftest, prism stress, prism vm)")
