"""prism's twins (prism/host/twin.py, guest.system.TWINS): v2's and 3.0.0's
modules under names of their own, extracted from git, renamed and built
on the host; no VM needed."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prism.common.errors import PrismError, UsageError
from prism.guest import system as g
from prism.host import kernels, twin

V2, V3 = g.TWINS["prism-v2"], g.TWINS["prism-v3"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private PRISM_CACHE: the extraction is the test's own."""
    monkeypatch.setenv("PRISM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("tw", g.TWINS.values(), ids=list(g.TWINS))
def test_twin_names_fit_the_kernel(tw):
    """ELV_NAME_MAX is 16 with the NUL on every pin: the kernel copies a
    longer name short and would never match it. No dot: kbuild pastes
    the module's name into C identifiers (__KBUILD_MODNAME)."""
    assert len(tw.scheduler) <= 15 and tw.scheduler != "prism"
    assert re.fullmatch(r"prism-[a-z0-9-]+", tw.scheduler)
    assert tw.module == tw.scheduler + "-iosched"
    assert tw.loaded == tw.module.replace("-", "_")
    assert g.twin_named(tw.scheduler) is tw and g.twin_named("prism") is None


def test_the_twins_are_the_releases():
    """prism-v2 is v2's last commit, prism-v3 the release commit of 3.0.0
    (the commit that last changed module/VERSION on main, to 3.0.0)."""
    assert (V2.rev, V3.rev) == ("01b59b5", "abdf007")
    assert twin.version(V2) == "0.1.0" and twin.version(V3) == "3.0.0"
    assert V2.weight_file is None and V3.weight_file == "io.prism-v3.weight"
    assert V2.latency_tunable and not V3.latency_tunable
    # 3.0.0's kernel-range is its series.
    text = subprocess.run(["git", "-C", str(twin.build.REPO), "show",
                           f"{V3.rev}:module/kernel-range"], capture_output=True,
                          text=True, check=True).stdout
    rng = dict(re.findall(r"^(PRISM_\w+_SERIES)=(\S+)$", text, re.M))
    assert (rng["PRISM_OLDEST_SERIES"], rng["PRISM_NEWEST_SERIES"]) == (V3.series[0],
                                                                        V3.series[-1])
    assert set(V3.series) <= set(kernels.KERNELS)


def test_the_twin_source_has_the_twins_names_only(cache):
    tree = twin.extract(V2)
    assert tree == cache / "twin" / V2.rev / "src"
    assert not tree.is_relative_to(Path(twin.build.REPO))
    kbuild = (tree / "Kbuild").read_text()
    assert re.search(r"^obj-m := prism-v2-iosched\.o$", kbuild, re.M)
    assert "prism-v2-iosched-y :=" in kbuild
    assert "prism-iosched" not in kbuild
    text = "\n".join(f.read_text() for f in sorted(tree.glob("*.[ch]")))
    # As a name (a string), nowhere; prose such as an #error's may keep it.
    assert '"prism-iosched"' not in text
    assert len(re.findall(r'\.elevator_name\s*=\s*"prism-v2",', text)) == 1
    assert not re.search(r'\.elevator_name\s*=\s*"prism"', text)
    assert 'MODULE_ALIAS("prism-v2-iosched");' in text
    # Only what kbuild reads: no Makefile or dkms.conf that installs prism-iosched.
    assert {f.name for f in tree.iterdir()} >= {"Kbuild", "VERSION", "prism_sched.c"}
    assert not {"Makefile", "dkms.conf", "find-block-dir.sh"} & {f.name for f in tree.iterdir()}
    # modinfo's version says which commit it is.
    assert (tree / "VERSION").read_text().strip().endswith("+" + twin.commit(V2)[:12])
    # v2 has no blkcg policy: nothing of one to rename.
    assert "blkcg_policy_register" not in text and "prism.weight" not in text
    # Reused while the commit and the rules are the same.
    stamp = (tree / ".stamp").stat().st_mtime_ns
    assert twin.extract(V2) == tree and (tree / ".stamp").stat().st_mtime_ns == stamp


def _tree(tmp_path: Path, rev: str = V2.rev) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["git", "-C", str(twin.build.REPO), "archive", rev,
                          "module"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=out, check=True)
    return tmp_path / "module"


def _v2_tree(tmp_path: Path) -> Path:
    return _tree(tmp_path, V2.rev)


def _counts(tree: Path) -> dict[str, int]:
    """How often each name the rename touches appears in @tree's sources."""
    text = "\n".join(f.read_text() for f in sorted(tree.glob("*.[ch]")))
    return {key: len(re.findall(pattern, text)) for key, pattern in {
        "elevator": r'\.elevator_name\s*=\s*"([^"]*)"',
        "alias": r'MODULE_ALIAS\("[^"]*"\)',
        "cftype prism": r'\.name\s*=\s*"prism\.weight"',
        "cftype twin": r'\.name\s*=\s*"prism-v3\.weight"',
        "file in strings": r'"[^"\n]*\bio\.prism\.weight',
        "twin file in strings": r'"[^"\n]*\bio\.prism-v3\.weight',
        "pr_fmt prism": r'#define pr_fmt\(fmt\) "prism: "',
        "pr_fmt twin": r'#define pr_fmt\(fmt\) "prism-v3: "',
        "policies": r"\bblkcg_policy_register\(",
    }.items()}


def test_the_300_twin_renames_its_policy_and_names(cache, tmp_path):
    """3.0.0's module registers a blkcg policy (io.prism.weight): the
    twin's offers io.prism-v3.weight instead, or the two could not be
    loaded together (the core WARNs, then every cgroup mkdir fails with
    EEXIST). Each substitution found what it expected, once."""
    before = _counts(_tree(tmp_path, V3.rev))
    assert before == {"elevator": 1, "alias": 1, "cftype prism": 1, "cftype twin": 0,
                      "file in strings": 2, "twin file in strings": 0, "pr_fmt prism": 1,
                      "pr_fmt twin": 0, "policies": 1}
    tree = twin.extract(V3)
    assert tree == cache / "twin" / V3.rev / "src"
    after = _counts(tree)
    assert after == {"elevator": 1, "alias": 1, "cftype prism": 0, "cftype twin": 1,
                     "file in strings": 0, "twin file in strings": 2, "pr_fmt prism": 0,
                     "pr_fmt twin": 1, "policies": 1}
    text = "\n".join(f.read_text() for f in sorted(tree.glob("*.[ch]")))
    assert len(re.findall(r'\.elevator_name\s*=\s*"prism-v3",', text)) == 1
    assert 'MODULE_ALIAS("prism-v3-iosched");' in text
    assert not re.search(r'"prism"', text) and '"prism-iosched"' not in text
    kbuild = (tree / "Kbuild").read_text()
    assert re.search(r"^obj-m := prism-v3-iosched\.o$", kbuild, re.M)
    assert "prism-v3-iosched-$(CONFIG_BLK_CGROUP) += prism_cgroup.o" in kbuild
    assert "prism-iosched" not in kbuild
    # What kbuild reads (kernel-range, for modinfo), and no more.
    names = {f.name for f in tree.iterdir()}
    assert {"Kbuild", "VERSION", "kernel-range", "prism_cgroup.c", "prism_sysfs.c"} <= names
    assert not {"Makefile", "dkms.conf", "check-kernel-range.sh"} & names
    assert (tree / "VERSION").read_text() == f"3.0.0+{twin.commit(V3)[:12]}\n"
    # Outside the policy's file nothing changed but the two names.
    src = _tree(tmp_path / "again", V3.rev)
    changed = {f.name for f in sorted(tree.glob("*.[ch]"))
               if f.read_text() != (src / f.name).read_text()}
    assert changed == {"prism_sched.c", "prism_cgroup.c"}
    # Its tunables are 3.0.0's (prism_sysfs.c), not v2's.
    names = twin.tunables(V3)
    assert "target_latency_us" in names and "anticipate_us" not in names


def test_a_policy_the_twin_does_not_name_stops_the_rename(tmp_path):
    """A revision with a blkcg policy whose twin names no cgroup file, or
    whose cftype moved, or a twin that names a file its revision lacks:
    never a second module offering io.prism.weight."""
    no_file = g.Twin("prism-v9", V3.rev, "9", ("6.12",))
    with pytest.raises(PrismError, match="blkcg policy"):
        twin.rename(_tree(tmp_path / "a", V3.rev), no_file)
    tree = _tree(tmp_path / "b", V3.rev)
    src = tree / "prism_cgroup.c"
    src.write_text(src.read_text().replace('.name = "prism.weight"', ".name = PRISM_FILE"))
    with pytest.raises(PrismError, match="the blkcg policy's cgroup file"):
        twin.rename(tree, V3)
    wants_file = g.Twin("prism-v2", V2.rev, "v2", ("6.12",), weight_file="io.prism-v2.weight")
    with pytest.raises(PrismError, match="registers no blkcg policy"):
        twin.rename(_tree(tmp_path / "c", V2.rev), wants_file)


@pytest.mark.parametrize("edit,what", [
    (lambda t: t.replace('.elevator_name = "prism"', '.elevator_name = PRISM_NAME'),
     "the elevator name"),
    (lambda t: t.replace('MODULE_ALIAS("prism-iosched");', ""), "the module alias"),
    (lambda t: t.replace('.elevator_name = "prism",',
                         '.elevator_name = "prism",\n\t.elevator_alias = "prism3",'),
     "elevator alias"),
    (lambda t: t + "\nEXPORT_SYMBOL_GPL(prism_choose);\n", "exported symbols"),
])
def test_a_revision_that_reads_otherwise_stops_the_rename(tmp_path, edit, what):
    """A later revision whose text moved must not build a second module
    registering itself as "prism": the rename fails, naming what."""
    tree = _v2_tree(tmp_path)
    src = tree / "prism_sched.c"
    src.write_text(edit(src.read_text()))
    with pytest.raises(PrismError, match=what):
        twin.rename(tree, V2)


def test_a_kbuild_without_the_object_stops_the_rename(tmp_path):
    tree = _v2_tree(tmp_path)
    kbuild = tree / "Kbuild"
    kbuild.write_text(kbuild.read_text().replace("obj-m := prism-iosched.o",
                                                 "obj-m += prism-iosched.o"))
    with pytest.raises(PrismError, match="the module's object"):
        twin.rename(tree, V2)


def test_the_twins_tunables_are_v2s(cache):
    names = twin.tunables(V2)
    assert len(names) == 34          # CHANGELOG: v2 had 34 tunables
    assert {"anticipate_us", "flow_idle_us", "low_share", "cost_rkbps"} <= set(names)
    assert "slice_idle_us" not in names


def test_the_twin_refuses_kernels_it_predates():
    with pytest.raises(UsageError, match="7.3"):
        twin.check_kernel(kernels.get("7.3"), V2)
    for series in ("6.1", "6.12"):
        twin.check_kernel(kernels.get(series), V2)
    # 3.0.0 builds for every pin of its release, and nothing else.
    for series in ("6.1", "6.12", "7.3"):
        twin.check_kernel(kernels.get(series), V3)
    with pytest.raises(UsageError, match="prism-v3 .* not 7.2"):
        twin.check_kernel(kernels.Kernel("7.2", "7.2.13+deb14-amd64", "7.2.13-1",
                                         root="sid"), V3)
    with pytest.raises(UsageError, match="no twin 'prism-v4'"):
        twin.get("prism-v4")


def test_an_unknown_revision_is_a_clear_error():
    with pytest.raises(PrismError, match="not a git checkout that has"):
        twin.commit(V2, "0" * 40)


@pytest.mark.parametrize("tw,series", [(t, s) for t in g.TWINS.values() for s in t.series],
                         ids=[f"{t.scheduler}-{s}" for t in g.TWINS.values() for s in t.series])
def test_the_twin_builds_beside_prism(tw, series):
    """A twin's module builds for its own pins without a warning, under
    the twin's module and elevator names (the shared cache: built once)."""
    k = kernels.get(series)
    if not (k.headers_dir / "Makefile").exists() or not kernels.block_dir(k).exists():
        pytest.skip(f"{k.headers_pkg} or block/ of linux-source-{series} missing "
                    f"(prism fetch --kernel {series})")
    ko = twin.build_twin(k, tw, fetch=False)
    assert ko.name == f"{tw.module}.ko"

    def info(field: str) -> list[str]:
        return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True,
                              text=True).stdout.split("\n")[:-1]
    assert info("name") == [tw.loaded]
    assert info("alias") == [tw.module]
    assert info("vermagic")[0].startswith(k.abi + " ")
    assert info("version") == [f"{twin.version(tw)}+{twin.commit(tw)[:12]}"]
    # The elevator name as registered; no "prism" string beside it, and
    # no cgroup file of prism's.
    strings = set(subprocess.run(["strings", str(ko)], capture_output=True,
                                 text=True).stdout.split("\n"))
    assert tw.scheduler in strings and "prism" not in strings
    assert "prism.weight" not in strings
    if tw.weight_file:
        assert tw.weight_file.removeprefix("io.") in strings
    # Nothing exported that prism's own module could clash with.
    symvers = ko.parent / "Module.symvers"
    assert not symvers.exists() or not symvers.read_text().strip()
    assert twin.build_twin(k, tw, fetch=False) == ko


@pytest.mark.parametrize("tw", g.TWINS.values(), ids=list(g.TWINS))
def test_the_twin_is_built_outside_the_repo(cache, tw):
    k = kernels.get("6.12")
    assert twin.build_dir(k, tw) == cache / "twin" / tw.rev / k.abi
    assert not twin.module_path(k, tw).is_relative_to(twin.build.REPO)


# The guest side: loading the twin when a plan or a selection names it.

@pytest.fixture
def insmods(monkeypatch):
    """The guest's insmod and module list, faked: what was loaded, in order."""
    loaded: list[str] = []
    monkeypatch.setattr(g, "module_loaded", lambda name="prism_iosched": any(
        Path(ko).name.removesuffix(".ko").replace("-", "_") == name for ko in loaded))
    monkeypatch.setattr(g, "sh", lambda cmd, check=True, timeout=None: loaded.append(
        cmd.removeprefix("insmod ")))
    monkeypatch.setenv("PRISM_KO", "/cache/build/6.12/prism-iosched.ko")
    monkeypatch.setenv("PRISM_TWIN_KO", "/cache/twin/01b59b5/6.12/prism-v2-iosched.ko")
    return loaded


def test_the_guest_loads_the_twin_from_its_own_variable(insmods, monkeypatch):
    g.load_twin("prism-v2")
    assert insmods == ["/cache/twin/01b59b5/6.12/prism-v2-iosched.ko"]
    g.load_twin("prism-v2")
    assert len(insmods) == 1, "loaded once"
    insmods.clear()
    monkeypatch.setenv("PRISM_TWIN_KO", "/cache/build/6.12/prism-iosched.ko")
    with pytest.raises(RuntimeError, match="not prism-v2-iosched.ko"):
        g.load_twin("prism-v2")
    # One twin's module is never loaded as the other.
    monkeypatch.setenv("PRISM_TWIN_KO", "/cache/twin/01b59b5/6.12/prism-v2-iosched.ko")
    with pytest.raises(RuntimeError, match="not prism-v3-iosched.ko"):
        g.load_twin("prism-v3")
    monkeypatch.delenv("PRISM_TWIN_KO")
    with pytest.raises(RuntimeError, match="PRISM_TWIN_KO is not set"):
        g.load_twin("prism-v2")
    assert insmods == []
    g.load_twin("prism-v3", "/cache/twin/abdf007/6.12/prism-v3-iosched.ko")
    assert insmods == ["/cache/twin/abdf007/6.12/prism-v3-iosched.ko"]


def test_selecting_the_twin_loads_it_like_any_module_scheduler(insmods, monkeypatch):
    offered = ["mq-deadline", "none"]
    monkeypatch.setattr(g, "schedulers", lambda dev: (
        offered + (["prism-v2"] if insmods else []), "none"))
    assert "prism-v2" in g.offered_schedulers("vda", "prism-v2")
    assert insmods == ["/cache/twin/01b59b5/6.12/prism-v2-iosched.ko"]
    insmods.clear()
    monkeypatch.setenv("PRISM_TWIN_KO", "/cache/twin/abdf007/6.12/prism-v3-iosched.ko")
    monkeypatch.setattr(g, "schedulers", lambda dev: (
        offered + (["prism-v3"] if insmods else []), "none"))
    assert "prism-v3" in g.offered_schedulers("vda", "prism-v3")
    assert insmods == ["/cache/twin/abdf007/6.12/prism-v3-iosched.ko"]
    # Other schedulers do not load it.
    insmods.clear()
    g.offered_schedulers("vda", "mq-deadline")
    assert insmods == []


def test_a_plan_naming_the_twin_loads_it_before_the_first_run(insmods, monkeypatch,
                                                               tmp_path):
    from prism.guest import benchrun

    plan = {"ko": "/cache/build/6.12/prism-iosched.ko",
            "twin_ko": "/cache/twin/01b59b5/6.12/prism-v2-iosched.ko",
            "schedulers": ["prism", "prism-v2:low_share=5"], "workloads": [], "reps": 1,
            "runtime": 1, "ramp": 0, "profile": "nullb-ssd"}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setattr(benchrun.shutil, "which", lambda _: "/usr/bin/fio")
    monkeypatch.setattr(g, "mount_debugfs", lambda: None)
    benchrun.main(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out")])
    assert insmods == [plan["ko"], plan["twin_ko"]]
    insmods.clear()
    plan["schedulers"] = ["prism", "none"]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    benchrun.main(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out")])
    assert insmods == [plan["ko"]]
    insmods.clear()
    plan["schedulers"] = ["prism", "prism-v3"]
    plan["twin_ko"] = "/cache/twin/abdf007/6.12/prism-v3-iosched.ko"
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    benchrun.main(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out")])
    assert insmods == [plan["ko"], plan["twin_ko"]]


def test_the_host_tells_the_guest_where_the_twin_is(tmp_path):
    from prism.host import vm

    ko = tmp_path / "build" / "prism-iosched.ko"
    twin_ko = tmp_path / "twin" / "prism-v2-iosched.ko"
    script = vm._guest_script("true", tmp_path, ko, twin_ko=twin_ko)
    assert f"export PRISM_KO={ko}" in script
    assert f"export PRISM_TWIN_KO={twin_ko}" in script
    assert "PRISM_TWIN_KO" not in vm._guest_script("true", tmp_path, ko)


# The plan and the report: the twin named like any scheduler.

def test_the_twin_is_a_scheduler_of_the_bench_with_v2s_tunables():
    from prism.bench import plan as bench

    assert bench.parse_schedulers("none,prism,prism-v2:low_share=5,anticipate_us=0") == [
        "none", "prism", "prism-v2:low_share=5,anticipate_us=0"]
    assert "prism-v2" not in bench.ALL_SCHEDULERS.split(","), "never in the default"
    # v2's tunables, not v3's, and the other way round.
    with pytest.raises(UsageError, match="prism-v2 has no tunable 'slice_idle_us'"):
        bench.parse_schedulers("prism-v2:slice_idle_us=0")
    with pytest.raises(UsageError, match="prism has no tunable 'anticipate_us'"):
        bench.parse_schedulers("prism:anticipate_us=0")
    assert bench.names_twin(["none", "prism-v2:low_share=5"])
    assert not bench.names_twin(["none", "prism", "prism:low_share=5"])


def test_the_300_twin_is_a_scheduler_of_the_bench_with_its_tunables():
    from prism.bench import plan as bench

    assert bench.parse_schedulers("mq-deadline,prism,prism-v3:low_share=25") == [
        "mq-deadline", "prism", "prism-v3:low_share=25"]
    assert "prism-v3" not in bench.ALL_SCHEDULERS.split(",")
    with pytest.raises(UsageError, match="prism-v3 has no tunable 'anticipate_us'"):
        bench.parse_schedulers("prism-v3:anticipate_us=0")
    assert bench.twin_of(["prism", "prism-v3", "prism-v3:low_share=25"]) is V3
    assert bench.twin_of(["prism", "none"]) is None
    # One twin a benchmark: the guest is handed one module.
    with pytest.raises(UsageError, match="prism-v2 and prism-v3: one twin a benchmark"):
        bench.parse_schedulers("prism,prism-v2,prism-v3")


def _bench_args(tmp_path, **kw):
    from prism import cli

    argv = ["bench", "run", "--workload", "share8", "--schedulers", "prism,prism-v2",
            "--out", str(tmp_path / "out")]
    for key, val in kw.items():
        argv += [f"--{key}", val]
    return cli.parser().parse_args(argv)


def test_a_plan_with_the_twin_is_refused_where_it_cannot_run(tmp_path, monkeypatch):
    from prism.bench import plan as bench

    bench.validate(_bench_args(tmp_path, kernel="6.1,6.12"))
    with pytest.raises(UsageError, match="not 7.3"):
        bench.validate(_bench_args(tmp_path, kernel="6.12,7.3"))
    # A real device: the twin must be loaded there, or named.
    args = _bench_args(tmp_path, device="/dev/sdx")
    monkeypatch.setattr(bench, "check_real_device", lambda *a: None)
    monkeypatch.delenv("PRISM_TWIN_KO", raising=False)
    with pytest.raises(UsageError, match="PRISM_TWIN_KO"):
        bench.validate(args)
    monkeypatch.setenv("PRISM_TWIN_KO", "/somewhere/prism-v2-iosched.ko")
    bench.validate(args)
    # 3.0.0's twin runs on every pin of its release, 7.3 too.
    bench.validate(_bench_args(tmp_path, kernel="6.1,6.12,7.3", schedulers="prism,prism-v3",
                               device="nullb-ssd"))


def test_a_boot_with_the_twin_builds_it_and_hands_it_over(tmp_path, monkeypatch):
    """run_in_vm builds the twin beside prism for the boot's kernel and
    hands both to the guest (plan.json and PRISM_TWIN_KO); the plan says
    which commit the twin's name stood for."""
    from prism.bench import plan as bench
    from prism.host import build, vm

    args = _bench_args(tmp_path)
    plan = bench.make_plan(args)
    assert plan["twin"] == {"scheduler": "prism-v2", "module": "prism-v2-iosched",
                            "rev": V2.rev, "commit": twin.commit(V2), "version": "0.1.0"}
    built, booted = [], {}
    monkeypatch.setattr(build, "build", lambda k: tmp_path / "prism-iosched.ko")
    monkeypatch.setattr(twin, "build_twin", lambda k, tw: built.append(k.series) or (
        tmp_path / f"{tw.module}.ko"))
    monkeypatch.setattr(vm, "new_rundir", lambda: tmp_path / "run")
    (tmp_path / "run").mkdir()

    def run(k, command, **kw):
        booted.update(kw)
        return vm.VmResult(0, "", "", tmp_path / "run", 1.0)
    monkeypatch.setattr(vm, "run", run)
    monkeypatch.setattr(bench.report, "collect", lambda d, kernel: [])
    bench.run_in_vm(kernels.get("6.12"), plan, args)
    assert built == ["6.12"] and booted["twin_ko"] == tmp_path / "prism-v2-iosched.ko"
    sent = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert sent["twin_ko"] == str(tmp_path / "prism-v2-iosched.ko")
    # Without the twin, nothing of it.
    built.clear()
    plan = bench.make_plan(_bench_args(tmp_path, schedulers="none,prism"))
    assert "twin" not in plan
    bench.run_in_vm(kernels.get("6.12"), plan, args)
    assert built == [] and booted["twin_ko"] is None
    assert "twin_ko" not in json.loads((tmp_path / "run" / "plan.json").read_text())
    # 3.0.0's twin: described as 3.0.0 at its release commit, and built.
    plan = bench.make_plan(_bench_args(tmp_path, schedulers="mq-deadline,prism,prism-v3"))
    assert plan["twin"] == {"scheduler": "prism-v3", "module": "prism-v3-iosched",
                            "rev": "abdf007",
                            "commit": "abdf007964bd98dcfd19bd55ba9b9e9a50b9de08",
                            "version": "3.0.0"}
    bench.run_in_vm(kernels.get("6.12"), plan, args)
    assert built == ["6.12"] and booted["twin_ko"] == tmp_path / "prism-v3-iosched.ko"
    sent = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert sent["twin_ko"] == str(tmp_path / "prism-v3-iosched.ko")


@pytest.mark.parametrize("name,rev,commit,version", [
    ("prism-v2", "01b59b5", "01b59b511d7082208463e37e33dda5669e8f3ea5", None),
    ("prism-v3", "abdf007", "abdf007964bd98dcfd19bd55ba9b9e9a50b9de08", "3.0.0")])
def test_the_report_names_the_twin_and_pairs_prism_with_it(tmp_path, name, rev, commit,
                                                           version):
    """The twin's line says which release and commit its name stood for
    (a plan from before "version" was recorded says the commit only), and
    the paired table compares prism with it."""
    from prism.bench import report

    data = Path(__file__).resolve().parent / "data" / "fio-run"
    raw = tmp_path / "raw"
    metas = []
    for s in ["prism", name, "none"]:
        for rep in range(2):
            for w in ("database_alone", "database_backup"):
                d = raw / f"{len(metas):03d}-{w}-{s}-r{rep}"
                shutil.copytree(data, d)
                meta = json.loads((d / "meta.json").read_text())
                meta.update(workload=w, scheduler=s, rep=rep, dir=d.name)
                metas.append(meta)
    (raw / "manifest.json").write_text(json.dumps({"plan": {}, "runs": metas}))
    plan = {"profile": "nullb-ssd", "reps": 2, "runtime": 3, "ramp": 1,
            "workloads": ["database_alone", "database_backup"],
            "schedulers": ["prism", name, "none"],
            "twin": {"scheduler": name, "module": f"{name}-iosched", "rev": rev,
                     "commit": commit} | ({"version": version} if version else {})}
    out = tmp_path / "out"
    out.mkdir()
    report.write_all(out, "prism bench run test", plan, report.collect(raw, "6.12"))
    md = (out / "report.md").read_text()
    release = f" {version}" if version else ""
    assert f"{name} is prism{release} at `{commit[:12]}` ({rev}), built as {name}-iosched.ko" \
        in md
    assert f"| vs {name} | vs none |" in md
    assert f"| {name} | database_sim |" in md
    doc = json.loads((out / "results.json").read_text())
    assert {p["other"] for p in doc["paired"]} == {name, "none"}
    assert (out / "6.12-database_backup-bars.png").read_bytes()[:4] == b"\x89PNG"
    # No twin, no line about it.
    assert report.twin_line({}) == ""


def test_prism_build_twin_checks_every_kernel_first(monkeypatch, capsys):
    from prism import cli
    from prism.host import build

    built = []
    monkeypatch.setattr(build, "build", lambda k, fetch=True: built.append(k.series))
    monkeypatch.setattr(twin, "build_twin", lambda k, tw, fetch=True: built.append(
        f"{tw.scheduler} {k.series}"))
    assert cli.main(["build", "--twin", "--kernel", "6.12,7.3"]) == 2
    assert built == [] and "not 7.3" in capsys.readouterr().err
    assert cli.main(["build", "--twin", "--kernel", "6.1,6.12", "--no-fetch"]) == 0
    assert built == ["6.1", "prism-v2 6.1", "6.12", "prism-v2 6.12"]
    built.clear()
    assert cli.main(["build", "--twin", "prism-v3", "--kernel", "7.3", "--no-fetch"]) == 0
    assert built == ["7.3", "prism-v3 7.3"]
    built.clear()
    assert cli.main(["build", "--twin", "prism-v2,prism-v3", "--kernel", "7.3"]) == 2
    assert built == [] and "prism-v2" in capsys.readouterr().err
    assert cli.main(["build", "--twin", "prism-v4", "--kernel", "6.12"]) == 2
    assert built == [] and "no twin 'prism-v4'" in capsys.readouterr().err


def test_the_twin_keeps_histograms_where_prism_does(monkeypatch, tmp_path):
    """Paired with prism, the twin does the same bookkeeping: its latency
    histograms are on wherever prism's are (not read: v2's debugfs is
    not parsed)."""
    from prism.guest import benchrun

    writes = []
    monkeypatch.setattr(g, "offered_schedulers", lambda dev, name: [name])
    monkeypatch.setattr(g, "set_scheduler", lambda dev, name: None)
    monkeypatch.setattr(g, "tunable_path", lambda dev, name: tmp_path)
    monkeypatch.setattr(g, "write_tunable", lambda dev, k, v: writes.append((k, v)) or 0)
    monkeypatch.setattr(g, "prism_latency_keep",
                        lambda dev, on=True: writes.append(("debugfs latency", on)))
    for spec in ("prism", "prism-v2", "prism-v2:latency_hist=0", "bfq", "prism-v3"):
        benchrun.apply_scheduler("vda", spec, latency_hist=True)
    benchrun.apply_scheduler("vda", "prism-v2", latency_hist=False)
    benchrun.apply_scheduler("vda", "prism-v3", latency_hist=False)
    # prism and 3.0.0 keep them on through debugfs, v2 through its tunable.
    assert writes == [("debugfs latency", True), ("latency_hist", 1), ("latency_hist", "0"),
                      ("debugfs latency", True)]


def test_the_300_twin_gets_the_cgroup_weights_in_its_own_file(monkeypatch, tmp_path):
    """A cgroup workload pairs prism's io.prism.weight with 3.0.0's twin's
    io.prism-v3.weight (the same weights); v2 had no such file."""
    from prism.common import workloads
    from prism.guest import benchrun

    assert benchrun.WEIGHT_FILES == {"prism": "io.prism.weight", "bfq": "io.bfq.weight",
                                     "prism-v3": "io.prism-v3.weight"}
    wl = next(w for w in workloads.WORKLOADS.values() if w.cgroups and not w.io_max)
    root = tmp_path / "cg"
    root.mkdir()
    monkeypatch.setattr(g, "CGROUP_ROOT", root)
    monkeypatch.setattr(g, "cgroup_root", lambda: root)
    monkeypatch.setattr(g, "SYS_BLOCK", tmp_path / "block")
    (tmp_path / "block" / "vda").mkdir(parents=True)
    (tmp_path / "block" / "vda" / "dev").write_text("254:0\n")
    got = benchrun.make_cgroups(wl, "prism-v3:low_share=25", "vda")
    assert got["weight_file"] == "io.prism-v3.weight"
    for name, weight in wl.cgroups:
        assert (root / f"prism-bench-{name}" / "io.prism-v3.weight").read_text() \
            == f"{weight}\n"
    assert benchrun.make_cgroups(wl, "prism-v2", "vda")["weight_file"] is None
