"""prism bench aims: the plan (docs/aims.toml) read and checked, each aim's
verdict computed from a recorded report, a report's source judged before
it backs an aim, the README's table from the runs that name a column, and
the committed aims.md, table and index current."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from prism import cli
from prism.bench import aims
from prism.common.errors import UsageError

RECORDED = Path(__file__).resolve().parent / "data" / "reports"


def _report(results: Path, name: str, recorded: str, source: str) -> None:
    """A report directory holding a recorded report's runs, as measured
    from @source."""
    doc = json.loads((RECORDED / f"{recorded}.json").read_text())
    d = results / name
    d.mkdir(parents=True)
    doc["plan"]["source"] = source
    (d / "results.json").write_text(json.dumps(
        {"created": "2026-12-07T10:00:00+00:00", "plan": doc["plan"], "runs": doc["runs"]}))


PLAN = """
kernel = "6.12"
[run.ssd]
args = "--workload database_backup --device ssd-model --schedulers none,prism --reps 5"
readme = "ssd"
[run.hdd]
args = "--workload database_backup --device hdd --schedulers none,prism --reps 5"
readme = "hdd"
earlier = "hdd-old"

[[aim]]
id = "ssd-tail"
aim = "tail"
run = "ssd"
[[aim.checks]]
figure = "common_ratio"
workload = "database_backup"
job = "database_sim"
scheduler = "prism"
at_most = 2.0

[[aim]]
id = "ssd-backup"
aim = "backup"
run = "ssd"
[[aim.checks]]
figure = "bw_kib"
workload = "database_backup"
job = "backup_sim"
scheduler = "prism"
over = "mq-deadline"
at_least = 0.5
[[aim.checks]]
dominance = "default"
workload = "database_backup"
peers = ["bfq"]

[[aim]]
id = "hdd-alone"
aim = "alone"
run = "hdd"
[[aim.checks]]
figure = "p99_us"
workload = "database_alone"
job = "database_sim"
scheduler = "prism"
over = "best"
at_most = 1.05
"""


def _head() -> str:
    return subprocess.run(["git", "-C", str(aims.REPO), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_verdicts_from_recorded_reports(tmp_path):
    plan = aims.tomllib.loads(PLAN)
    results = tmp_path / "results"
    _report(results, "ssd-6.12", "ssd-model-v3-6.12", aims.release_commit()[:12])
    # hdd's own run is not made: its earlier report stands for it.
    _report(results, "hdd-old", "hdd-v3-v2-6.12", "63ef6dcdb2dd")
    rows = {r["id"]: r for r in aims.verdicts(plan, results)}
    # prism's database tail on the SSD: 1.61x the common baseline: met.
    assert rows["ssd-tail"]["verdict"] == "met"
    assert rows["ssd-tail"]["figures"] == ["common_ratio 1.61 (at most 2)"]
    # Its backup at 6% of mq-deadline's, and bfq not dominated: not met.
    assert rows["ssd-backup"]["verdict"] == "not met"
    assert "0.06x mq-deadline's" in rows["ssd-backup"]["figures"][0]
    assert "bfq: neither" in rows["ssd-backup"]["figures"][1]
    # prism's P99 alone on the HDD was 1.27x the best scheduler's.
    assert rows["hdd-alone"]["report"] == "hdd-old"
    assert rows["hdd-alone"]["figures"] == ["p99_us 1.27x best's (at most 1.05)"]
    assert rows["hdd-alone"]["verdict"] == "not met"
    md = aims.aims_md(plan, results)
    assert "| **ssd-tail**: tail |" in md and "| met |" in md
    assert "*earlier*" in md.split("hdd-alone")[1].split("\n")[0]
    table = aims.expect_table(plan, results).splitlines()
    assert table[0] == "| scheduler | ssd | hdd |"
    assert table[6].startswith("| prism | **1.61x, 22.8 MiB/s, work 0.09** | **1.66x,")
    version = aims.release_version()
    assert f"a module before {version}" in table[-1] and f"{version}'s module" in table[-1]


def test_a_floor_on_work_fails_in_a_starved_repetition(tmp_path):
    """bw_kib at least 1 KiB/s holds on the mean of five repetitions of the
    SSD's backup, and fails once it completed nothing in one of them (the
    fsync aim's BE7 writer, starved in 4 of 5 with a mean of 41 KiB/s)."""
    plan = aims.tomllib.loads(PLAN)
    # ssd-backup's first check as a floor of its own: 1 KiB/s, not over a peer.
    moves = {k: v for k, v in plan["aim"][1]["checks"][0].items() if k != "over"}
    plan["aim"].append({"id": "ssd-moves", "aim": "the backup moves", "run": "ssd",
                        "checks": [moves | {"at_least": 1.0}]})
    results = tmp_path / "results"
    _report(results, "ssd-6.12", "ssd-model-v3-6.12", aims.release_commit()[:12])
    assert {r["id"]: r for r in aims.verdicts(plan, results)}["ssd-moves"]["verdict"] == "met"
    path = results / "ssd-6.12" / "results.json"
    doc = json.loads(path.read_text())
    run = next(r for r in doc["runs"] if r["scheduler"] == "prism"
               and r["workload"] == "database_backup")
    job = next(j for j in run["jobs"] if j["job"] == "backup_sim")
    job["ios"] = 0
    path.write_text(json.dumps(doc))
    row = {r["id"]: r for r in aims.verdicts(plan, results)}["ssd-moves"]
    assert row["verdict"] == "not met"
    assert row["figures"][0].endswith("but starved in 1 of 5 repetitions")


def test_a_report_from_uncommitted_source_backs_no_aim(tmp_path):
    plan = aims.tomllib.loads(PLAN)
    results = tmp_path / "results"
    _report(results, "ssd-6.12", "ssd-model-v3-6.12", _head() + "+changes")
    rows = {r["id"]: r for r in aims.verdicts(plan, results)}
    assert rows["ssd-tail"]["provenance"] == "unbacked"
    assert rows["ssd-tail"]["verdict"] == "not measured" and not rows["ssd-tail"]["figures"]
    # A commit that is not in this history (an experiment's branch, lost).
    assert aims.provenance("0123456789ab") == "unbacked"
    assert aims.provenance(None) == "unbacked"
    assert aims.provenance(aims.release_commit()) == "release"
    assert aims.provenance("63ef6dcdb2dd") == "earlier"        # v3's notebook, before 3.0.0
    assert aims.provenance(_head()) in ("release", "unreleased")
    shutil.rmtree(results)
    assert all(r["verdict"] == "not measured" for r in aims.verdicts(plan, results))


def test_the_plan_is_checked(tmp_path):
    bad = tmp_path / "aims.toml"
    bad.write_text(PLAN.replace('run = "hdd"', 'run = "nosuch"'))
    with pytest.raises(UsageError, match="hdd-alone names no run"):
        aims.load(bad)
    bad.write_text("kernel = ")
    with pytest.raises(UsageError):
        aims.load(bad)
    assert cli.main(["bench", "aims", "--plan", str(bad)]) == 2
    assert cli.main(["bench", "aims", "--run", "nosuch", "--check"]) == 2
    plan = aims.load()
    for name in plan["run"]:
        args = aims.command(plan, name)
        assert args[-2:] == ["--out", f"docs/results/{name}-{plan['kernel']}"]
        cli.parser().parse_args(["bench", "run", *args])


def test_the_committed_aims_table_and_readme_are_current():
    """A report committed without `prism bench aims` leaves docs/aims.md,
    the README's table or the index behind: this says so."""
    assert cli.main(["bench", "aims", "--check"]) == 0, "run: prism bench aims"
