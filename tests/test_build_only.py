"""The build-only set (prism/host/kernels.py's BUILD_ONLY): kernels people
run that prism must build for without a warning, never booted. The set's
shape is checked offline; each kernel is built only where it was fetched
(`prism fetch --kernel build-only`: three build roots in ~/.cache/prism-7x
and four linux-source packages, about 1.3 GB and 3 minutes from an empty
cache, more than CI's budget allows: CI skips these builds)."""

import subprocess

import pytest

from prism import cli
from prism.host import build, kernels


def test_the_sets_are_apart_and_named_once():
    tested, bo = kernels.parse("all"), kernels.parse("build-only")
    assert tested == list(sorted(kernels.KERNELS.values(),
                                 key=lambda k: kernels.series_key(k.series)))
    assert bo == kernels.build_only() and bo
    assert kernels.parse("every") == tested + bo
    assert not set(kernels.KERNELS) & set(kernels.BUILD_ONLY)
    assert all(k.build_only and not k.vm_tested and k.root for k in bo)
    assert not any(k.build_only for k in tested)
    assert all(name == k.name for name, k in kernels.BUILD_ONLY.items())
    assert {k.abi for k in bo}.isdisjoint(k.abi for k in tested)
    # The suite's default boots are the tested set's alone.
    assert set(kernels.vm_tested()) <= set(tested)
    assert kernels.get("7.3-rt").source_pkg == "linux-source-7.3"


def test_build_only_kernels_have_roots_of_their_own():
    """Apart from the tested kernels' roots, whose package lists (and so
    the CI's downloads) a build-only pin must not change."""
    tested_roots = {kernels.build_root(k) for k in kernels.KERNELS.values() if k.root}
    for k in kernels.build_only():
        assert kernels.build_root(k) not in tested_roots
        assert kernels.build_root(k) == kernels.build_only_root(k)
        assert k.headers_dir.is_relative_to(kernels.build_root(k))
    for release in {k.root for k in kernels.KERNELS.values() if k.root}:
        assert not [p for p in kernels.root_packages(release) if "rt-amd64" in p
                    or "cloud-amd64" in p]


@pytest.mark.parametrize("command", [["selftest"], ["blktests"], ["vm", "--", "true"],
                                     ["bench", "run", "--workload", "database_backup"]])
def test_a_build_only_kernel_is_never_booted(command, capsys, tmp_path):
    """Refused as a usage error, before anything is built or run."""
    name = kernels.build_only()[0].name
    argv = command[:1] + ["--kernel", name] + command[1:]
    if command[0] == "bench":
        argv = ["bench", "run", "--kernel", name, "--workload", "database_backup",
                "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    assert not (tmp_path / "out").exists()
    assert "build-only" in capsys.readouterr().err


def test_the_rt_flavours_boot_for_stress_and_fetch_their_image_only_then(monkeypatch):
    """PREEMPT_RT (issue 41): the -rt flavours may be booted (prism stress
    --kernel 6.12-rt); building for them fetches no image, a boot does."""
    rts = [k for k in kernels.build_only() if k.boots]
    assert sorted(k.name for k in rts) == ["6.12-rt", "7.3-rt"]
    assert [k.name for k in kernels.parse_booted("6.12-rt,7.3-rt")] == ["6.12-rt", "7.3-rt"]
    fetched = []
    monkeypatch.setattr(kernels, "ensure_build_only", lambda k: None)
    monkeypatch.setattr(kernels, "fetch_image", lambda k: fetched.append(k.name))
    monkeypatch.setattr(kernels, "image_ready", lambda k: False)
    for k in rts:
        kernels.install_packages(k)
    assert fetched == []
    for k in rts:
        kernels.ensure_bootable(k)
    assert fetched == ["6.12-rt", "7.3-rt"]
    # A flavour that does not boot is never fetched.
    kernels.ensure_bootable(kernels.build_only()[0])
    assert fetched == ["6.12-rt", "7.3-rt"]


def test_kernels_list_shows_both_sets(capsys):
    assert cli.main(["kernels", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # And the debug kernels, in no set (tests/test_debug_kernel.py).
    assert len(lines) == len(kernels.KERNELS) + len(kernels.BUILD_ONLY) + len(kernels.DEBUG)
    for k in kernels.build_only():
        assert [line for line in lines if line.split()[0] == k.name
                and "build-only" in line and k.abi in line]


@pytest.mark.parametrize("name", sorted(kernels.BUILD_ONLY))
def test_the_module_builds_for_a_build_only_kernel(name):
    """Without a warning (build.build() fails on one), against the very
    headers and block/ of the kernel, as for the tested set."""
    k = kernels.get(name)
    if not kernels.installed(k) or not (kernels.block_dir(k) / "elevator.h").exists():
        pytest.skip(f"{name} not fetched (prism fetch --kernel {name}, or --kernel "
                    "build-only for the whole set; CI does not fetch it)")
    ko = build.build(k, fetch=False)
    vermagic = subprocess.run(["modinfo", "-F", "vermagic", str(ko)], capture_output=True,
                              text=True).stdout
    assert vermagic.startswith(k.abi + " ")
    if k.abi.endswith("-rt-amd64"):
        config = (k.headers_dir / ".config").read_text()
        assert "\nCONFIG_PREEMPT_RT=y\n" in config
