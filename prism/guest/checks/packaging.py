"""What the package installs, as installed: the DKMS module autoloaded
by its alias, the udev rules applied by udev, prism-status on a busy
queue and under lockdown."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .. import system as g
from .helpers import (
    conservation,
)
from .registry import check

SECURITYFS = Path("/sys/kernel/security")


# A reader whose command has a space: debugfs escapes it, status unescapes.
SPACED_COMM = "my reader"


SPACED_READER = (
    "import sys\n"
    "open('/proc/self/comm', 'w').write(sys.argv[2])\n"
    "with open(sys.argv[1], 'rb', buffering=0) as f:\n"
    "    while f.read(1 << 20):\n"
    "        pass\n")


PACKAGE_STATUS = Path("/usr/sbin/prism-status")


@check("status_tool")
def check_status_tool(ctx) -> dict:
    """Protects against prism-status failing on a busy queue or under lockdown.

    The shipped prism-status (this package's status.py run as a script,
    as /usr/sbin/prism-status is) on a busy prism queue: its tiers,
    flight, latency percentiles, and the busiest processes, among them one
    whose command holds a space; on a disk without prism, that disk's
    scheduler only. Then with the kernel locked down to integrity (what
    Secure Boot gives on Debian; raised at run time, as lockdown=integrity
    on the command line would have it, but after prism is loaded: a
    locked-down kernel loads no unsigned module): prism's read-only files
    still read, and status says the latency histograms are hidden. Last of
    all the checks: lockdown lasts until the guest powers off."""
    from ..common import status
    dev, other = ctx["nullb"], ctx["virtio"]
    if not g.module_loaded():
        g.load_prism()
    g.set_scheduler(dev, "prism")
    g.set_scheduler(other, "none")
    g.prism_latency_keep(dev, True)
    # The installed package's script when the session installed it (the
    # host's root, shared), else this checkout's status.py: the same file.
    script = PACKAGE_STATUS if PACKAGE_STATUS.exists() else Path(status.__file__)

    def run_status(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-I", str(script), *args], text=True,
                              capture_output=True, timeout=120)

    fio = subprocess.Popen(["fio", f"--filename=/dev/{dev}", "--direct=1", "--time_based=1",
                            "--runtime=120", "--ioengine=libaio", "--name=rt", "--prioclass=1",
                            "--rw=randread", "--bs=4k", "--iodepth=2", "--name=idle",
                            "--prioclass=3", "--rw=read", "--bs=64k", "--iodepth=4"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reader = subprocess.Popen([sys.executable, "-c", SPACED_READER, f"/dev/{dev}", SPACED_COMM],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out: dict = {}

    def started(recs: dict) -> bool:
        """fio's jobs and the reader among the busiest, HIGH's device
        latency counted."""
        mine = recs.get(dev, {})
        comms = {f["comm"] for f in mine.get("flows", [])}
        return ({"fio", SPACED_COMM} <= comms
                and any(k.startswith("device high") for k in mine.get("latency", {})))

    try:
        # Until fio's jobs and the reader have all been served (fio takes
        # seconds to start under TCG on 6.1), at most 60 s.
        for _ in range(30):
            time.sleep(2)
            busy = run_status("--json", dev, other)
            recs = {r["dev"]: r for r in json.loads(busy.stdout)} if busy.returncode == 0 else {}
            if busy.returncode or started(recs):
                break
        # Both disks in one run: the words for a disk without prism can
        # only come from the other disk's block.
        text = run_status(dev, other).stdout
        out["busy"] = {"rc": busy.returncode, "stderr": busy.stderr[-500:]}
        mine = recs.get(dev, {})
        out["busy"].update({
            "tiers": sorted(mine.get("tiers", {})),
            "flight_keys": len(mine.get("flight", {})),
            "comms": sorted({f["comm"] for f in mine.get("flows", [])}),
            "latency": sorted(mine.get("latency", {})),
            "all_served": started(recs),
            "other": {k: recs.get(other, {}).get(k) for k in ("scheduler", "tiers")},
            "spaced_in_text": SPACED_COMM in text,
            "other_said": "prism is not active here" in text})
        if not (SECURITYFS / "lockdown").exists():
            g.sh(f"mount -t securityfs none {SECURITYFS}", check=False)
        lock = SECURITYFS / "lockdown"
        if lock.exists():
            lock.write_text("integrity\n")
            out["lockdown"] = lock.read_text().strip()
            locked = run_status("--json", dev)
            rec = json.loads(locked.stdout)[0] if locked.returncode == 0 else {}
            out["locked"] = {"rc": locked.returncode, "tiers": sorted(rec.get("tiers", {})),
                             "latency": rec.get("latency"),
                             "hidden": rec.get("latency_hidden", ""),
                             "text": run_status(dev).stdout[-2000:]}
        else:
            out["lockdown"] = None
    finally:
        for p in (fio, reader):
            p.kill()
            p.wait()
    g.set_scheduler(dev, "none")
    if out.get("lockdown") is None:
        g.prism_latency_keep(dev, False)
    unloaded = g.unload_prism().returncode == 0
    b, lk = out["busy"], out.get("locked", {})
    tiers = ["high", "low", "normal"]
    ok = (b["rc"] == 0 and b["tiers"] == tiers and b["flight_keys"] >= 8
          and b["all_served"]
          and b["other"] == {"scheduler": "none", "tiers": None} and b["spaced_in_text"]
          and b["other_said"]
          and out.get("lockdown") == "none [integrity] confidentiality"
          and lk.get("rc") == 0 and lk.get("tiers") == tiers and lk.get("latency") == {}
          and "kernel lockdown (integrity) hides the latency" in lk.get("text", "")
          and unloaded)
    return {"ok": ok, "unloaded": unloaded, "script": str(script), **out}


UDEV_RULES = Path(__file__).resolve().parents[3] / "packaging" / "udev"


# Where prism-iosched-dkms installs them. The test session installs the
# package on the host before the main boots (tests/conftest.py's
# dkms_package), and the guest sees the host's root: then the rules
# checked are the package's own, as an administrator would link them.
UDEV_PACKAGE_RULES = Path("/usr/share/prism-iosched/udev")


UDEV_RUN_RULES = Path("/run/udev/rules.d")


def udev_rules_dir() -> Path:
    """The installed package's rules if there are any, else the checkout's."""
    if (UDEV_PACKAGE_RULES / "61-prism-settings.rules").exists():
        return UDEV_PACKAGE_RULES
    return UDEV_RULES


def settings_rules_for(dev: str, rules: Path) -> str:
    """The shipped 61-prism-settings.rules, from @rules, with its examples
    uncommented, the per-disk one matched to @dev by name (null_blk has no
    serial), and a value the module refuses after them."""
    out = []
    for line in (rules / "61-prism-settings.rules").read_text().splitlines():
        if line.startswith(("#ATTR", "#ENV")):
            line = line[1:]
        if line.startswith("ENV{ID_SERIAL}=="):
            line = f'KERNEL=="{dev}", ' + line.split(", ", 1)[1]
        if line.startswith("LABEL="):
            out.append('ATTR{queue/iosched/normal_share}="1000"')
        out.append(line)
    return "\n".join(out) + "\n"


@check("udev_rules")
def check_udev_rules(ctx) -> dict:
    """Protects against the package's udev rules not selecting prism or applying settings.

    The package's udev rules, applied by udev itself (udevd started here
    if the guest has none, the rules put in /run/udev/rules.d): the
    rotational rule leaves a non-rotational disk alone, and the settings
    rule does nothing where prism is not in force; 60-prism-all.rules
    selects prism and raises nr_requests to 64, and the settings rule,
    uncommented, sets its tunables, the per-disk line on that disk only,
    on a change event and on a disk added later; a refused value (a share
    of 1000%) leaves the old one and the lines after it still apply."""
    dev = ctx["nullb"]
    started = False
    out: dict = {}
    if not Path("/run/udev/control").exists():
        g.sh("/lib/systemd/systemd-udevd --daemon")
        started = True
        for _ in range(50):
            if Path("/run/udev/control").exists():
                break
            time.sleep(0.1)
    UDEV_RUN_RULES.mkdir(parents=True, exist_ok=True)
    rules = udev_rules_dir()
    installed = [UDEV_RUN_RULES / n for n in
                 ("60-prism-rotational.rules", "60-prism-all.rules", "61-prism-settings.rules")]

    def trigger() -> None:
        g.sh("udevadm control --reload")
        g.sh(f"udevadm trigger --action=change --subsystem-match=block --sysname-match={dev}")
        g.sh("udevadm settle --timeout=30")

    def state(name: str) -> dict:
        got = {"scheduler": g.schedulers(name)[1],
               "nr_requests": (g.SYS_BLOCK / name / "queue" / "nr_requests").read_text().strip()}
        if got["scheduler"] == "prism":
            for t in ("low_share", "be_tiers", "low_rate_kbps", "normal_share"):
                got[t] = g.read_tunable(name, t)
        return got

    try:
        g.set_scheduler(dev, "none")
        rotational = (g.SYS_BLOCK / dev / "queue" / "rotational").read_text().strip()
        shutil.copy2(rules / "60-prism-rotational.rules", installed[0])
        installed[2].write_text(settings_rules_for(dev, rules))
        trigger()
        out["rotational_rule"] = {"rotational": rotational, **state(dev)}
        installed[0].unlink()
        shutil.copy2(rules / "60-prism-all.rules", installed[1])
        g.set_scheduler(dev, "none")
        trigger()
        out["change"] = state(dev)
        g.set_scheduler(dev, "none")
        with g.temporary_nullb("udevadd", depth=2, completion_us=100) as added:
            g.sh("udevadm settle --timeout=30")
            out["added"] = {"dev": added, **state(added)}
    finally:
        for f in installed:
            with contextlib.suppress(OSError):
                f.unlink()
        g.sh("udevadm control --reload", check=False)
        if started:
            g.sh("udevadm control --exit", check=False)
        g.set_scheduler(dev, "none")
    set_ = {"low_share": "25", "be_tiers": "1"}
    rot = out["rotational_rule"]
    ok = (rot["scheduler"] == ("prism" if rot["rotational"] == "1" else "none")
          and out["change"]["scheduler"] == "prism"
          and out["change"]["nr_requests"] == "64"
          and all(out["change"][k] == v for k, v in set_.items())
          and out["change"]["low_rate_kbps"] == "20480"
          and out["change"]["normal_share"] == out["added"].get("normal_share")
          and out["change"]["normal_share"] != "1000"
          and out["added"]["scheduler"] == "prism"
          and out["added"]["nr_requests"] == "64"
          and all(out["added"][k] == v for k, v in set_.items())
          and out["added"]["low_rate_kbps"] == "0")
    return {"ok": ok, "udevd_started": started, "rules_from": str(rules), **out}


@check("autoload")
def check_autoload(ctx) -> dict:
    """Protects against the DKMS-installed module not loading by its alias when selected.

    The module as DKMS installed it (the host installed it into the
    kernel's module tree before this boot; PRISM_KO is not set): with
    prism not loaded, writing "prism" to a queue's scheduler makes the
    kernel load prism-iosched from updates/dkms through its alias, as
    for bfq and kyber; then it schedules, and unloads once switched away."""
    dev = ctx["nullb"]
    was_loaded = g.module_loaded()
    path = g.sh("modinfo -n prism-iosched", check=False).stdout.strip()
    wanted = g.sh("modinfo -F srcversion prism-iosched", check=False).stdout.strip()
    offered_before = "prism" in g.schedulers(dev)[0]
    g._write_scheduler(dev, "prism")
    active = g.schedulers(dev)[1]
    sysmod = Path("/sys/module/prism_iosched")
    loaded = {f: (sysmod / f).read_text().strip() if (sysmod / f).exists() else None
              for f in ("version", "srcversion")}
    g.sh(f"dd if=/dev/{dev} of=/dev/null bs=4k count=100 iflag=direct")
    books = conservation(dev)
    g.set_scheduler(dev, "none")
    unloaded = g.unload_prism().returncode == 0 and not g.module_loaded()
    ok = (not was_loaded and not offered_before and "/updates/dkms/" in path
          and active == "prism" and bool(wanted) and loaded["srcversion"] == wanted
          and loaded["version"] == ctx["version"] and books["balanced"] and unloaded)
    return {"ok": ok, "loaded_before": was_loaded, "offered_before": offered_before,
            "modinfo_path": path, "installed_srcversion": wanted, "loaded": loaded,
            "active": active, "unloaded": unloaded, **books}
