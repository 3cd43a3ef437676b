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
from prism.host import build, vm

CHECKS_DIR = Path(checks.__file__).parent
NOT_AREAS = {"__init__", "registry", "helpers"}


@pytest.fixture
def nothing_boots(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("--list built or booted something")
    monkeypatch.setattr(build, "build", refuse)
    monkeypatch.setattr(vm, "run", refuse)
    monkeypatch.setattr(cli, "_run_vm", refuse)


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
