"""ruff and mypy, as configured in pyproject.toml, are clean."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    if shutil.which(name):
        return [name]
    pytest.skip(f"{name} not installed (pip install -e '.[test]' installs it)")
    return []


def test_ruff_is_clean():
    r = subprocess.run(_tool("ruff") + ["check", "prism", "tests"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-1000:]


def test_mypy_is_clean():
    r = subprocess.run(_tool("mypy") + ["--python-executable", sys.executable], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-1000:]
