"""The in-guest side: code that runs inside the test VM, as root on the
kernel under test, started by the host as `python3 -m prism.guest.X` from a
copy of this package in the run directory. system.py holds the helpers
(load prism, make null_blk devices, find disks by serial, choose
schedulers, run fio, read prism's debugfs); selftest.py runs the check
suite, whose checks live in checks/, a module an area; benchrun.py
executes a benchmark plan (also on the host, for a real device the user
names), pgbench.py runs PostgreSQL on the device under test,
blktests.py runs blktests' block group (prism status, which the checks
also run here, is prism.common.status). It imports only itself and
prism.common: nothing of the host, the drives or the benchmark above it.
"""
