"""The in-guest checks, one module an area, and the order a boot runs
them in.

Each check is a function of ctx (what the suite's setup() made: device
names, region sizes; see prism/guest/selftest.py) that returns a record
{"ok": bool, ...details}; @check("name") (registry.py) registers it under
the name --only, --skip and results.json use, and its docstring's first
line says what it protects against (`prism selftest --list` prints them).
What more than one area uses is in helpers.py.

A new check goes into its area's module with @check and a docstring, and
its name into MAIN or CLOUD below, where the boot runs it; tests/test_vm.py
asserts on its record. The areas:

  lifecycle    load, select, tunables, switches under load, removal, unload
  integrity    verified data, remapped tiers, discards, passthrough, requeues
  devices      the emulated drives, the learned cost model, the device's depth
  writeback    fsync chains, writeback throttling, writeback's tier, pacing
  flows        fair queuing by flow: weights, idling, greedy processes, raising
  priorities   between tiers: HIGH before LOW, aging, shares, histograms
  hold         anticipation, the direct lane, parking, tag shortage, NCQ
  limiter      the rate cap, the tag reserve, depth control and pacing
  cgroups      io.prism.weight, shares and writeback by cgroup, the helper
  stress       random stores and switches under verified load
  packaging    what the package installs: DKMS autoload, udev rules, status
"""

from __future__ import annotations

from collections.abc import Callable

from . import (  # noqa: F401 (each module registers its checks)
    cgroups,
    devices,
    flows,
    hold,
    integrity,
    lifecycle,
    limiter,
    packaging,
    priorities,
    stress,
    writeback,
)
from .registry import REGISTRY, Check

# The main suite, in the order one boot runs it (prism.guest.selftest).
MAIN = [
    "load",
    "select_nullb",
    "select_virtio",
    "tunables",
    "verify_virtio",
    "verify_nullb",
    "verify_nvme",
    "drive_hdd",
    "anticipation_hdd",
    "sync_chain_hdd",
    "wbt_off",
    "writeback_low",
    "flow_idle_hdd",
    "flow_wait_own_tag",
    "flow_idle_queueing",
    "flow_idle_flash",
    "cost_learn_hdd",
    "switch_under_load_nvme",
    "priority_latency",
    "priority_latency_nvme",
    "flow_shares",
    "flows_greedy",
    "flow_lag",
    "weight_raise",
    "direct_lane",
    "bulk_merge",
    "aging",
    "share",
    "share_sweep",
    "rate_cap",
    "latency_hist",
    "discard",
    "passthrough_nvme",
    "mapping_flips",
    "tag_reserve",
    "requeue",
    "shared_tags",
    "hot_remove",
    "freeze_capped",
    "stress",
    "device_depth",
    "hold_parks",
    "tags_short",
    "cgroup_weight",
    "cgroup_shares",
    "cgroup_writeback",
    "cgroup_weight_helper",
    "udev_rules",
    "unload",
    # Last: it locks the kernel down for the rest of the boot.
    "status_tool",
]

# The cloud volume's checks run in a boot of their own (cli.cloud_check_disks).
CLOUD = [
    "drive_cloud",
    "depth_control_cloud",
    "pacing_cloud",
    "pacing_writeback_cloud",
    "overdue_ncq",
]

# Run before the main suite loads prism, with --autoload-first
# (selftest.run_autoload_first).
AUTOLOAD = ["autoload"]

CHECKS: list[tuple[str, Callable[[dict], dict]]] = [(n, REGISTRY[n].fn) for n in MAIN]
CLOUD_CHECKS: list[tuple[str, Callable[[dict], dict]]] = [(n, REGISTRY[n].fn) for n in CLOUD]

# Checks that measure the policy or the emulated drives, not the kernel's
# side of the elevator API: the same code decides on every kernel, so the
# test suite runs them on the newest kernel only (--skip), to keep CI short
# with three kernels. Everything that exercises the request lifecycle
# (verify, switching, requeue, discard, flush routing, tag depths, merges,
# removal, parking and the restart marks, cgroups) runs on every kernel.
# The holds (anticipation_hdd, rate_cap, direct_lane) are the policy's
# arithmetic on prism's one timer, which hold_parks and freeze_capped
# exercise on every kernel.
SAME_ON_EVERY_KERNEL = ["drive_hdd", "cost_learn_hdd", "sync_chain_hdd", "priority_latency_nvme",
                        "priority_latency", "share", "flows_greedy", "weight_raise",
                        "flow_shares", "flow_idle_hdd", "flow_wait_own_tag", "flow_lag",
                        "flow_idle_queueing", "flow_idle_flash", "aging", "share_sweep",
                        "rate_cap", "tags_short", "anticipation_hdd", "direct_lane",
                        "cgroup_shares"]

BY_SUITE = {"main": MAIN, "cloud": CLOUD, "autoload": AUTOLOAD}


def registered() -> list[tuple[str, Check]]:
    """Every check as (suite, check), in the order its boot runs it."""
    return [(suite, REGISTRY[n]) for suite, names in BY_SUITE.items() for n in names]


def listing() -> str:
    """`prism selftest --list`: name, area, suite and summary, a line each."""
    rows = [("CHECK", "AREA", "SUITE", "PROTECTS AGAINST")]
    rows += [(c.name, c.area, suite, c.summary.removeprefix("Protects against "))
             for suite, c in registered()]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    w2 = max(len(r[2]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c:<{w2}}  {d}" for a, b, c, d in rows)
