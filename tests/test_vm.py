"""The kernel tests: one QEMU boot per supported kernel runs the whole
in-guest suite (prism/selftest.py); each check is asserted here on its
own, and after each boot the kernel log must hold no WARN, BUG, oops,
lockdep or hung-task report.

Skipped with --no-vm. Kernels: --kernels 6.1,6.12 (default both).
"""

import json

import pytest

from prism import build, cli, diskmodel, kernels, selftest, vm

CHECK_NAMES = ["setup"] + [name for name, _ in selftest.CHECKS]


@pytest.fixture(scope="session")
def boot(kernel, request):
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    k = kernels.get(kernel)
    ko = build.build(k)
    rundir = vm.new_rundir()
    disks = cli.selftest_disks(rundir)
    res = vm.run(k, "python3 -m prism.selftest --out results.json", ko=ko,
                 disks=disks, timeout=2400, rundir=rundir, echo=True)
    out = rundir / "results.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    return res, results


@pytest.mark.vm
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_vm_check(boot, check):
    res, results = boot
    assert check in results, (f"check {check} did not run (guest exit {res.returncode}); "
                              f"output tail:\n{res.output[-3000:]}")
    r = results[check]
    assert r["ok"], json.dumps(r, indent=1)[:6000]


@pytest.mark.vm
def test_vm_hdd_random_reads_follow_the_model(boot):
    """The guest's depth-1 random reads on the emulated HDD run at the
    model's rate (its time is the host's, whatever TCG does): never
    faster, and not much slower for the guest's own overhead."""
    _, results = boot
    iops = results.get("drive_hdd", {}).get("qd1_randread_iops")
    assert iops, "the drive_hdd check did not measure"
    expected = diskmodel.HddModel().expected_random_iops(8)
    assert 0.6 * expected < iops < 1.1 * expected, (iops, expected)


@pytest.mark.vm
def test_vm_kernel_log_clean(boot):
    res, _ = boot
    assert res.dmesg, f"no kernel log came back (guest exit {res.returncode})"
    assert res.log_problems == [], "\n".join(f"{k}: {line}" for k, line in res.log_problems)


@pytest.mark.vm
def test_vm_guest_suite_exit(boot):
    res, results = boot
    assert res.returncode == 0, (f"guest suite exit {res.returncode}; failed: "
                                 + ", ".join(n for n, r in results.items() if not r.get("ok")))


@pytest.mark.vm
@pytest.mark.parametrize("device", ["nullb-ssd", "hdd"])
def test_bench_quick_end_to_end(request, tmp_path, device):
    """prism bench run in one boot, all five schedulers, a short run each:
    the whole pipeline from plan to report (its numbers are not asserted),
    on null_blk and on the emulated HDD."""
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    import argparse

    from prism import bench

    series = [s.strip() for s in request.config.getoption("--kernels").split(",")]
    kernel = "6.12" if "6.12" in series else series[0]
    args = argparse.Namespace(kernel=kernel, workload="database_backup",
                              schedulers=bench.ALL_SCHEDULERS, reps=1, runtime=2, ramp=1,
                              device=device, force=False, out=str(tmp_path / "out"),
                              accel="auto", timeout=1200, memory="2G", cpus=2)
    summaries = bench.run(args, command="pytest quick bench")
    out = tmp_path / "out"
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["runs"]) == 2 * 5     # baseline + mix, five schedulers, one rep
    assert {r["scheduler"] for r in doc["runs"]} == set(bench.KNOWN_SCHEDULERS)
    for run in doc["runs"]:
        assert run["device_util"] > 0
        assert all(j["ios"] > 0 and j["errors"] == 0 for j in run["jobs"])
    prism_runs = [r for r in doc["runs"] if r["scheduler"] == "prism"]
    assert all(r["prism_tiers"]["high"]["inserted"] > 0 for r in prism_runs)
    assert any(s["metrics"].get("isolation_ratio") for s in summaries)
    assert (out / "report.md").exists() and (out / "results.csv").exists()
    assert (out / f"{kernel}-database_backup-bars.png").exists()
    if device == "hdd":
        # The drive's trace, cut per run: it served every run's I/O.
        assert doc["plan"]["disk_params"]["rpm"] == 7200
        for run in doc["runs"]:
            assert run["drive"]["media_ops"] > 0 and run["drive"]["commands"] > 0
        assert "What the emulated drive served" in (out / "report.md").read_text()


@pytest.mark.vm
def test_bench_every_workload_on_the_hdd(request, tmp_path):
    """Every workload runs on the emulated HDD (the drive issue's promise),
    under prism, one short run each: job files, filesystem set-up on the
    drive, trace cutting and the report, with a clean kernel log (bench.run
    refuses otherwise)."""
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    import argparse

    from prism import bench, workloads

    series = [s.strip() for s in request.config.getoption("--kernels").split(",")]
    kernel = "6.12" if "6.12" in series else series[0]
    args = argparse.Namespace(kernel=kernel, workload="all", schedulers="prism", reps=1,
                              runtime=1, ramp=0, device="hdd", force=False,
                              out=str(tmp_path / "out"), accel="auto", timeout=1200,
                              memory="2G", cpus=2)
    bench.run(args, command="pytest every workload on hdd")
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["workload"] for r in doc["runs"]] == [w.name for w in workloads.get("all")]
    for run in doc["runs"]:
        assert run["jobs"] and all(j["errors"] == 0 for j in run["jobs"]), run["workload"]
        assert sum(j["ios"] for j in run["jobs"]) > 0, run["workload"]
        assert run["drive"]["commands"] > 0, run["workload"]
        # Every request that entered and is not completed is queued or in
        # flight; ext4 may be committing a journal, and a request counted
        # out of flight is counted completed a moment later, so allow a
        # few in between but never fewer owned than held.
        books = run["prism_tiers"]
        assert all(0 <= t["owned"] - t["queued"] - t["inflight"] <= 4
                   for t in books.values()), (run["workload"], books)
