"""The benchmark workloads: fio job files in prism/jobs/, each with the
seed it comes from, which job is latency-sensitive and which is bulk, and
the workload that gives the latency-sensitive job's baseline alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import PrismError

WORKLOAD_DIR = Path(__file__).resolve().parent / "jobs"


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    seed: str
    description: str
    high_job: str | None = None      # latency-sensitive job (isolation ratio)
    low_job: str | None = None       # bulk job (starvation: its worst second)
    baseline: str | None = None      # workload running high_job alone

    @property
    def jobfile(self) -> Path:
        return WORKLOAD_DIR / f"{self.name}.fio"


WORKLOADS = {w.name: w for w in [
    Workload("database_backup", "000",
             "4 KiB random reads at BE1 (database_sim) against 128 KiB "
             "sequential reads at BE7 (backup_sim)",
             high_job="database_sim", low_job="backup_sim",
             baseline="database_alone"),
    Workload("database_alone", "000",
             "database_sim alone: the baseline for database_backup"),
]}


def get(names: str) -> list[Workload]:
    """Workloads named in a comma list, each baseline added (once) before
    the workloads that need it."""
    out: list[Workload] = []
    for name in [n.strip() for n in names.split(",") if n.strip()]:
        if name not in WORKLOADS:
            raise PrismError(f"unknown workload {name!r}; known: "
                             + ", ".join(sorted(WORKLOADS)))
        w = WORKLOADS[name]
        for dep in (w.baseline, w.name):
            if dep and WORKLOADS[dep] not in out:
                out.append(WORKLOADS[dep])
    if not out:
        raise PrismError("no workload named")
    return out
