"""The bottom layer, shared by the plan on the host, the run in the guest
and the report: errors.py (the harness's exceptions), workloads.py with
the fio job files in jobs/ (the workload catalogue), stats.py (fio's
output read into per-job records, and the statistics the report draws
from them), and status.py (prism status: a link to tools/prism-status,
one file on the standard library alone, which the Debian package and
make install install as prism-status, and the parsers of prism's debugfs
files that the checks share). It imports nothing of prism outside this
package.
"""
