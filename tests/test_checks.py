"""The in-guest checks' registry, on the host (no VM, no build): every
check lives in an area's module (prism/guest/checks/<area>.py), says in
its docstring what it protects against, runs in exactly one suite, and
`prism selftest --list` prints it."""

import inspect
from pathlib import Path

import pytest

from prism import cli
from prism.guest import checks, selftest
from prism.guest.checks.registry import REGISTRY

CHECKS_DIR = Path(checks.__file__).parent
NOT_AREAS = {"__init__", "registry", "helpers"}


def test_list_prints_every_registered_check(nothing_boots, capsys):
    assert cli.main(["selftest", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out[1:]}
    assert len(out) - 1 == len(REGISTRY) == len(rows)
    for name, c in REGISTRY.items():
        assert name in rows, f"--list leaves out {name}"
        words = rows[name].split(maxsplit=3)
        assert words[1] == c.area
        assert words[3] == c.summary.removeprefix("Protects against ")


def test_every_check_says_what_it_protects_against():
    for name, c in REGISTRY.items():
        assert inspect.getdoc(c.fn), f"check {name} has no docstring"
        assert c.summary.startswith("Protects against ") and len(c.summary) > 30, name


def test_every_check_runs_in_exactly_one_suite():
    named = checks.MAIN + checks.CLOUD + checks.AUTOLOAD
    assert len(named) == len(set(named))
    assert set(named) == set(REGISTRY)
    # The runner's lists are the registry's, in its order.
    assert [n for n, _ in selftest.CHECKS] == checks.MAIN
    assert [n for n, _ in selftest.CLOUD_CHECKS] == checks.CLOUD
    assert set(selftest.SAME_ON_EVERY_KERNEL) <= set(checks.MAIN)


def test_each_area_is_a_module_with_checks():
    areas = {p.stem for p in CHECKS_DIR.glob("*.py")} - NOT_AREAS
    assert {c.area for c in REGISTRY.values()} == areas
    for name, c in REGISTRY.items():
        assert c.fn.__module__ == f"prism.guest.checks.{c.area}", name
        assert c.area in checks.__doc__, f"the package's docstring does not list {c.area}"


def test_every_import_in_the_checks_resolves():
    """The move into prism/guest/checks/ kept every function body, but a
    relative import inside a function (from ..common import status) then
    named prism.guest.common, which only the guest found, at the check's
    run: every import of every check module, function bodies included,
    resolves on the host."""
    import ast
    import importlib
    from pathlib import Path

    pkg = Path(__file__).resolve().parent.parent / "prism" / "guest" / "checks"
    for path in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                name = importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                   "prism.guest.checks")
                importlib.import_module(name)


def test_flow_lag_measures_the_greedy_phase_from_its_logs():
    """flow_lag's reading of the two per-I/O logs (ms on one clock): the
    sequential reader's completions in each whole second of the greedy
    phase, its longest time without one, and the greedy reads in a row."""
    from prism.guest.checks import flows
    seq = [100, 500, 900, 1000, 2500, 2600, 2900, 3500]
    greedy = [0, *range(1001, 2500), 3000]
    phase = flows.greedy_phase(seq, greedy)
    assert phase["phase_ms"] == 3000
    assert phase["seq_per_second"] == [3, 1, 3]
    assert phase["seq_longest_gap_ms"] == 1500
    assert phase["greedy_run_max"] == 1499
    assert phase["seq_last_ms"] == 500


FLOWS_HEADER = ("slot pid comm tier weight backlogged vt_lead cost_us bytes dispatched "
                "queued owned throttled think_us cgroup\n")


@pytest.mark.parametrize("fq, turns", [
    # vtime 4M of vt_lead's units (1.6e9 in the fair queue's) past vmin,
    # the pair wrapped at 2^64: the start, 8M behind vtime, is one turn
    # (16 ms x 25 / 100) behind vmin.
    (f"fq normal vtime=600000000 vmin={2**64 - 1_000_000_000} wsum=200 backlogged=2", -1.0),
    # vmin ahead of vtime: the floor's reference is vtime.
    ("fq normal vtime=600000000 vmin=700000000 wsum=200 backlogged=2", -2.0),
    # 3.0.0 shows no vmin: vtime.
    ("fq normal vtime=600000000 wsum=200 backlogged=2", -2.0),
])
def test_flow_lag_takes_the_start_against_the_floor(tmp_path, monkeypatch, fq, turns):
    from prism.guest import system
    from prism.guest.checks import flows
    sched = tmp_path / "block" / "nullb9" / "sched"
    sched.mkdir(parents=True)
    (sched / "flows").write_text(FLOWS_HEADER
                                 + "3 42 fio normal 100 1 -8000000 1 1 1 1 1 0 0 0\n"
                                 + "4 43 fio normal 100 1 0 1 1 1 1 1 0 0 0\n"
                                 + fq + "\n" + "overflows=0\n")
    monkeypatch.setattr(system, "DEBUGFS", tmp_path)
    look = flows.lag_look("nullb9", 42)
    assert look["turns"] == turns
    assert look["vmin_shown"] == ("vmin=" in fq)
    assert flows.lag_look("nullb9", 44) is None
