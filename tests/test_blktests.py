"""blktests' scheduler-relevant block tests (prism.guest.blktests.SCHED_TESTS),
one QEMU boot per kernel with prism loaded, so every test that loops over
a queue's schedulers includes prism and the scratch disk runs under it.
Each test is a pytest case: it passes when blktests passed it (at once, or
when run again after a failure: a warning then shows the first failure),
or when it failed the same way with prism unloaded (not prism's failure;
the case then says so); tests the kernel or the VM cannot run are skipped with
blktests' reason. The whole block group: prism blktests --tests block.

About five minutes per kernel under TCG: the newest kernel of the run
takes them all, the others the part whose paths differ between kernels
(blktests.EVERY_KERNEL_TESTS; the rest skip saying so, and
`prism blktests --kernel 6.1` runs them all there). Run on every kernel of
--kernels (6.1 and 6.12) unless --blktests-kernels (or
PRISM_BLKTESTS_KERNELS) names others. --no-blktests leaves them out.
Skipped, with how to get blktests, when its snapshot is absent.
"""

import argparse
import warnings

import pytest

from prism import cli
from prism.host import blktests, kernels


def blktests_for(kernel: str, config) -> list[str]:
    """What blktests runs on @kernel: everything on the newest kernel
    asked for, EVERY_KERNEL_TESTS on the others."""
    newest = config.prism_newest_blktests_kernel  # conftest.py's pytest_configure()
    return blktests.SCHED_TESTS if kernel == newest else blktests.EVERY_KERNEL_TESTS


@pytest.fixture(scope="session")
def blktests_boot(blktests_kernel, request):
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    if request.config.getoption("--no-blktests"):
        pytest.skip("--no-blktests")
    try:
        blktests.source()
    except blktests.Missing as e:
        pytest.skip(str(e))
    args = argparse.Namespace(tests=",".join(blktests_for(blktests_kernel, request.config)),
                              memory="2G", cpus=2,
                              fio_timeout=blktests.CI_FIO_TIMEOUT,
                              accel="auto", timeout=1200, device="blktests")
    return cli.run_blktests(kernels.get(blktests_kernel), args)


@pytest.mark.vm
@pytest.mark.parametrize("test", blktests.SCHED_TESTS)
def test_blktests(blktests_boot, blktests_kernel, test, request):
    if test not in blktests_for(blktests_kernel, request.config):
        pytest.skip(f"{test} runs on the newest kernel of the run only (CI time); "
                    f"prism blktests --kernel {blktests_kernel} --tests {test} runs it here")
    res, doc = blktests_boot
    results = doc.get("results", {})
    assert results, f"blktests did not report (guest exit {res.returncode}):\n{res.output[-3000:]}"
    assert test in results, f"{test} has no result; reported: {sorted(results)}"
    r = results[test]
    if r["status"] == "not run":
        pytest.skip(f"{test} not run: {r.get('reason', '?')}")
    if r["status"] == "fail":
        assert not r.get("prism_failure"), (
            f"{test} fails under prism and not without it ({r.get('without_prism')}):\n"
            f"{r.get('detail', '')}")
        pytest.xfail(f"{test} fails without prism too: {r.get('detail', '')[-300:]}")
    assert r["status"] == "pass", r
    if r.get("flaky"):
        warnings.warn(f"{test} failed once under prism and passed when run again:\n"
                      f"{r['flaky'][-600:]}", stacklevel=1)


@pytest.mark.vm
def test_blktests_kernel_log_clean(blktests_boot):
    res, _ = blktests_boot
    assert res.dmesg, f"no kernel log came back (guest exit {res.returncode})"
    assert res.log_problems == [], "\n".join(f"{k}: {line}" for k, line in res.log_problems)
