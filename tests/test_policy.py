"""Runs the userspace policy tests (tests/policy/*.c), compiled against
module/prism_policy.c and module/prism_cgweight.c (the pure C of the
module) with sanitizers, one pytest case each."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRCS = sorted((REPO / "tests" / "policy").glob("*.c"))
PURE = [REPO / "module" / f for f in ("prism_policy.c", "prism_cgweight.c")]
NAMES = [name for src in SRCS
         for name in re.findall(r"^TEST\((\w+)\)", src.read_text(), re.M)]


@pytest.fixture(scope="session")
def policy_binary(tmp_path_factory):
    out = tmp_path_factory.mktemp("policy") / "policy_test"
    cmd = ["gcc", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-O1", "-g",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{REPO / 'module'}", *map(str, PURE), *map(str, SRCS),
           "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"policy tests do not compile:\n{r.stderr}"
    return out


def test_every_case_is_collected(policy_binary):
    listed = subprocess.run([str(policy_binary), "--list"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert sorted(listed) == sorted(NAMES) and len(NAMES) >= 20


@pytest.mark.parametrize("name", NAMES)
def test_policy(policy_binary, name):
    r = subprocess.run([str(policy_binary), name], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"ok {name}"
