"""The recorded fio run (tests/data/fio-run) as a benchmark's raw output:
shared by the report tests (test_bench.py) and the CLI's (test_cli.py)."""

import json
import shutil
from pathlib import Path

FIO_RUN = Path(__file__).resolve().parent / "data" / "fio-run"


def raw_runs(raw: Path, plan: dict) -> None:
    """@raw as one boot of prism bench run leaves it: the recorded run as
    database_alone and as database_backup under prism, repetition 0, and
    the manifest naming them with @plan."""
    metas = []
    for i, (w, s) in enumerate([("database_alone", "prism"), ("database_backup", "prism")]):
        d = raw / f"{i:03d}-{w}-{s}-r0"
        shutil.copytree(FIO_RUN, d)
        meta = json.loads((d / "meta.json").read_text())
        meta.update(workload=w, scheduler=s, rep=0, dir=d.name)
        metas.append(meta)
    (raw / "manifest.json").write_text(json.dumps({"plan": plan, "runs": metas}))
