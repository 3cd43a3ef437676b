import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dkmstool  # noqa: E402  (tests/ is on the path as pytest's rootdir)

from prism.host import kernels  # noqa: E402

# What the VM suite boots unless told otherwise: the switch is each pin's
# vm_tested in prism/host/kernels.py (7.3 is fetched and built, not yet booted).
VM_TESTED = ",".join(k.series for k in kernels.vm_tested())


def pytest_addoption(parser):
    parser.addoption("--kernels", default=os.environ.get("PRISM_TEST_KERNELS", VM_TESTED),
                     help="comma-separated kernels for the VM tests (default: the pins "
                     f"with vm_tested=True in prism/host/kernels.py, {VM_TESTED})")
    parser.addoption("--no-vm", action="store_true",
                     help="skip the tests that boot kernels under QEMU")
    parser.addoption("--no-blktests", action="store_true",
                     help="skip blktests' block tests (tests/test_blktests.py)")
    parser.addoption("--blktests-kernels",
                     default=os.environ.get("PRISM_BLKTESTS_KERNELS", ""),
                     help="kernels blktests runs on (default: the oldest and the "
                     "newest of --kernels; about five minutes on the newest, two on "
                     "another)")


def _series(text: str, option: str) -> list[str]:
    series = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in series if not all(part.isdigit() for part in s.split("."))]
    if not series or bad:
        raise pytest.UsageError(f"{option}: expected kernel series like 6.1,6.12, "
                                f"got {text!r}")
    return series


def newest(series: list[str]) -> str:
    """The newest series by version number (6.12 after 6.1)."""
    return max(series, key=kernels.series_key)


def ends(series: list[str]) -> list[str]:
    """The oldest and the newest of @series (one, if they are the same):
    blktests' default kernels. The elevator API's differences lie between
    the supported range's ends (prism_compat.h), and a kernel between
    them still runs the main suite's lifecycle checks (switching, hot
    removal, freezes, shared tags); its blktests boot is about two
    minutes of CI that test nothing the ends do not."""
    return list(dict.fromkeys([min(series, key=kernels.series_key), newest(series)]))


def pytest_configure(config):
    """The kernel lists, parsed once: config.prism_kernels (--kernels)
    and config.prism_blktests_kernels (--blktests-kernels, else the
    oldest and newest of those: ends()),
    each with its newest series (config.prism_newest_kernel,
    config.prism_newest_blktests_kernel), which runs the checks that do
    not change with the kernel."""
    config.prism_kernels = _series(config.getoption("--kernels"), "--kernels")
    given = config.getoption("--blktests-kernels")
    config.prism_blktests_kernels = (_series(given, "--blktests-kernels") if given
                                     else ends(config.prism_kernels))
    config.prism_newest_kernel = newest(config.prism_kernels)
    config.prism_newest_blktests_kernel = newest(config.prism_blktests_kernels)


def pytest_generate_tests(metafunc):
    """A test or fixture taking "kernel" runs once per --kernels series
    (the VM suites: test_vm.py, test_blktests.py)."""
    if "kernel" in metafunc.fixturenames:
        metafunc.parametrize("kernel", metafunc.config.prism_kernels, scope="session")
    if "blktests_kernel" in metafunc.fixturenames:
        metafunc.parametrize("blktests_kernel", metafunc.config.prism_blktests_kernels,
                             scope="session")


@pytest.fixture(scope="session")
def dkms_package(tmp_path_factory, request):
    """prism-iosched-dkms built, apt-installed on the host, and installed
    and DKMS-built in the build root of each kernel the session boots
    (dkmstool.install_in_root()), once a session (dkmstool.install_package()):
    tests/test_deb.py checks each step, and each main boot autoloads the
    module it installed (test_vm.py), so no boot builds its own (about
    50 s a kernel). Purged when the session ends; anything it leaves
    behind fails the session there."""
    booted = [] if request.config.getoption("--no-vm") else request.config.prism_kernels
    roots = [kernels.get(s) for s in booted]
    pkg = dkmstool.install_package(tmp_path_factory.mktemp("deb"), roots)
    yield pkg
    left = dkmstool.purge_package(pkg)
    assert not left, f"apt-get purge prism-iosched-dkms left: {left}"


@pytest.fixture
def nothing_boots(monkeypatch):
    """Any build or boot fails the test: a usage error, or prism selftest
    --list, must come first (tests/test_cli.py, tests/test_checks.py)."""
    from prism import cli
    from prism.bench import plan
    from prism.host import build, vm

    def refuse(*args, **kwargs):
        raise AssertionError("built or booted before the arguments were checked")
    for mod, name in ((build, "build"), (vm, "run"), (plan, "run_on_device"),
                      (plan, "run_in_vm"), (cli.blktests, "prepare"), (cli.insnprof, "run"),
                      (cli.twin, "build_twin")):
        monkeypatch.setattr(mod, name, refuse)
