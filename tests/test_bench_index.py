"""docs/results/README.md: generated from the reports' results.json, and
kept current."""

import json

from prism import cli
from prism.bench import index


def _report(root, name, created, workloads, source="abc123", profile="hdd", iso=1.3,
            schedulers=("none", "prism")):
    d = root / name
    d.mkdir()
    summaries = [{"kernel": "6.12", "workload": "database_backup", "scheduler": s,
                  "job": "database_sim", "metrics": {"common_ratio": {"mean": v}}}
                 for s, v in (("none", 2.0), ("prism", iso))]
    (d / "results.json").write_text(json.dumps({
        "created": created + "T10:00:00+00:00",
        "plan": {"profile": profile, "workloads": workloads, "schedulers": list(schedulers),
                 "reps": 3, "source": source},
        "runs": [{"kernel": "6.12"}], "summaries": summaries}))


def test_the_index_lists_reports_and_what_supersedes_them(tmp_path):
    _report(tmp_path, "old", "2026-11-01", ["database_alone", "database_backup"])
    _report(tmp_path, "new", "2026-11-20", ["database_alone", "database_backup",
                                            "share8"], source="def456", iso=1.1)
    _report(tmp_path, "other-disk", "2026-11-25", ["database_backup"], profile="cloud")
    # A later diagnosis that ran only a variant of prism supersedes nothing.
    _report(tmp_path, "diagnosis", "2026-11-26", ["database_backup"],
            schedulers=("prism:target_latency_us=10000000",))
    (tmp_path / "profile-6.12").mkdir()
    (tmp_path / "profile-6.12" / "report.md").write_text("# profile\n")
    text = index.index_md(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| 2026")]
    assert [r.split("|")[2].strip() for r in rows] == [
        "[diagnosis](diagnosis/report.md)", "[other-disk](other-disk/report.md)",
        "[new](new/report.md)", "[old](old/report.md)"]
    old = rows[3]
    assert "`abc123`" in old and "| hdd |" in old and "database_backup" in old
    assert "database_alone" not in old                   # baselines left out
    assert "over the common baseline: prism 1.30x (none 2.00x)" in old
    assert "| `abc123` | - |" in old                     # a commit not in this history
    assert old.rstrip(" |").endswith("[new](new/report.md)")   # same disk, same workloads, later
    assert rows[2].endswith("|  |")                      # nothing later on hdd
    assert "[profile-6.12](profile-6.12/)" in text


def test_the_committed_index_is_current():
    """A report committed without `prism bench index` leaves the index
    behind: this says so."""
    assert cli.main(["bench", "index", "--check"]) == 0, "run: prism bench index"


def test_the_index_leaves_out_a_run_still_going(tmp_path):
    """prism bench run makes its --out directory when it starts and fills
    it at the end: meanwhile (or after a failure) it is no report."""
    _report(tmp_path, "done", "2026-11-01", ["database_backup"])
    (tmp_path / "running").mkdir()
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "plan.json").write_text("{}")
    (tmp_path / "profile-6.12").mkdir()
    (tmp_path / "profile-6.12" / "profile.txt").write_text("x")
    text = index.index_md(tmp_path)
    assert "running" not in text and "failed" not in text
    assert "[profile-6.12](profile-6.12/)" in text
