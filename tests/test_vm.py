"""The kernel tests: one QEMU boot per supported kernel runs the whole
in-guest suite (prism/selftest.py); each check is asserted here on its
own, and after each boot the kernel log must hold no WARN, BUG, oops,
lockdep or hung-task report.

Skipped with --no-vm. Kernels: --kernels 6.1,6.12 (default both).
"""

import json

import pytest

from prism import build, kernels, selftest, vm

CHECK_NAMES = ["setup"] + [name for name, _ in selftest.CHECKS]


def pytest_generate_tests(metafunc):
    if "kernel" in metafunc.fixturenames:
        series = [s.strip() for s in metafunc.config.getoption("--kernels").split(",")
                  if s.strip()]
        metafunc.parametrize("kernel", series, scope="session")


@pytest.fixture(scope="session")
def boot(kernel, request):
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    k = kernels.get(kernel)
    ko = build.build(k)
    rundir = vm.new_rundir()
    disks = [vm.Disk(serial=selftest.VIRTIO_SERIAL, path=rundir / "virtio.img",
                     size_mb=256)]
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
def test_vm_kernel_log_clean(boot):
    res, _ = boot
    assert res.dmesg, f"no kernel log came back (guest exit {res.returncode})"
    assert res.log_problems == [], "\n".join(f"{k}: {line}" for k, line in res.log_problems)


@pytest.mark.vm
def test_vm_guest_suite_exit(boot):
    res, results = boot
    assert res.returncode == 0, (f"guest suite exit {res.returncode}; failed: "
                                 + ", ".join(n for n, r in results.items() if not r.get("ok")))
