import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def pytest_addoption(parser):
    parser.addoption("--kernels", default=os.environ.get("PRISM_TEST_KERNELS", "6.1,6.12"),
                     help="comma-separated kernels for the VM tests (default 6.1,6.12)")
    parser.addoption("--no-vm", action="store_true",
                     help="skip the tests that boot kernels under QEMU")
    parser.addoption("--no-blktests", action="store_true",
                     help="skip blktests' block tests (tests/test_blktests.py)")
    parser.addoption("--blktests-kernels",
                     default=os.environ.get("PRISM_BLKTESTS_KERNELS", "6.12"),
                     help="kernels blktests runs on (default 6.12, five minutes a kernel; "
                     "6.1,6.12 for both)")


def pytest_generate_tests(metafunc):
    """A test or fixture taking "kernel" runs once per --kernels series
    (the VM suites: test_vm.py, test_blktests.py)."""
    if "kernel" in metafunc.fixturenames:
        series = [s.strip() for s in metafunc.config.getoption("--kernels").split(",")
                  if s.strip()]
        metafunc.parametrize("kernel", series, scope="session")
    if "blktests_kernel" in metafunc.fixturenames:
        series = [s.strip() for s in
                  metafunc.config.getoption("--blktests-kernels").split(",") if s.strip()]
        metafunc.parametrize("blktests_kernel", series, scope="session")
