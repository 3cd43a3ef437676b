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
                     default=os.environ.get("PRISM_BLKTESTS_KERNELS", ""),
                     help="kernels blktests runs on (default: those of --kernels; "
                     "about five minutes a kernel)")


def pytest_generate_tests(metafunc):
    """A test or fixture taking "kernel" runs once per --kernels series
    (the VM suites: test_vm.py, test_blktests.py)."""
    if "kernel" in metafunc.fixturenames:
        series = [s.strip() for s in metafunc.config.getoption("--kernels").split(",")
                  if s.strip()]
        metafunc.parametrize("kernel", series, scope="session")
    if "blktests_kernel" in metafunc.fixturenames:
        chosen = (metafunc.config.getoption("--blktests-kernels")
                  or metafunc.config.getoption("--kernels"))
        series = [s.strip() for s in chosen.split(",") if s.strip()]
        metafunc.parametrize("blktests_kernel", series, scope="session")
