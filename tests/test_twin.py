"""prism's twin (prism/host/twin.py): v2's module under names of its own,
extracted from git, renamed and built on the host; no VM needed."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prism.common.errors import PrismError, UsageError
from prism.guest import system as g
from prism.host import kernels, twin


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private PRISM_CACHE: the extraction is the test's own."""
    monkeypatch.setenv("PRISM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_twin_names_fit_the_kernel():
    """ELV_NAME_MAX is 16 with the NUL on every pin: the kernel copies a
    longer name short and would never match it."""
    assert len(g.TWIN_SCHEDULER) <= 15 and g.TWIN_SCHEDULER != "prism"
    assert g.TWIN_MODULE == g.TWIN_SCHEDULER + "-iosched"
    assert g.TWIN_LOADED == "prism_v2_iosched"


def test_the_twin_source_has_the_twins_names_only(cache):
    tree = twin.extract()
    assert tree == cache / "twin" / twin.TWIN_REV / "src"
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
    assert (tree / "VERSION").read_text().strip().endswith("+" + twin.commit()[:12])
    # Reused while the commit and the rules are the same.
    stamp = (tree / ".stamp").stat().st_mtime_ns
    assert twin.extract() == tree and (tree / ".stamp").stat().st_mtime_ns == stamp


def _v2_tree(tmp_path: Path) -> Path:
    out = subprocess.run(["git", "-C", str(twin.build.REPO), "archive", twin.TWIN_REV,
                          "module"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=out, check=True)
    return tmp_path / "module"


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
        twin.rename(tree)


def test_a_kbuild_without_the_object_stops_the_rename(tmp_path):
    tree = _v2_tree(tmp_path)
    kbuild = tree / "Kbuild"
    kbuild.write_text(kbuild.read_text().replace("obj-m := prism-iosched.o",
                                                 "obj-m += prism-iosched.o"))
    with pytest.raises(PrismError, match="the module's object"):
        twin.rename(tree)


def test_the_twins_tunables_are_v2s(cache):
    names = twin.tunables()
    assert len(names) == 34          # CHANGELOG: v2 had 34 tunables
    assert {"anticipate_us", "flow_idle_us", "low_share", "cost_rkbps"} <= set(names)
    assert "slice_idle_us" not in names


def test_the_twin_refuses_kernels_it_predates():
    with pytest.raises(UsageError, match="7.3"):
        twin.check_kernel(kernels.get("7.3"))
    for series in ("6.1", "6.12"):
        twin.check_kernel(kernels.get(series))


def test_an_unknown_revision_is_a_clear_error():
    with pytest.raises(PrismError, match="not a git checkout that has"):
        twin.commit("0" * 40)


@pytest.mark.parametrize("series", twin.TWIN_SERIES)
def test_the_twin_builds_beside_prism(series):
    """v2's module builds for its own pins without a warning, under the
    twin's module and elevator names (the shared cache: built once)."""
    k = kernels.get(series)
    if not (k.headers_dir / "Makefile").exists() or not kernels.block_dir(k).exists():
        pytest.skip(f"{k.headers_pkg} or block/ of linux-source-{series} missing "
                    f"(prism fetch --kernel {series})")
    ko = twin.build_twin(k, fetch=False)
    assert ko.name == "prism-v2-iosched.ko"

    def info(field: str) -> list[str]:
        return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True,
                              text=True).stdout.split("\n")[:-1]
    assert info("name") == ["prism_v2_iosched"]
    assert info("alias") == ["prism-v2-iosched"]
    assert info("vermagic")[0].startswith(k.abi + " ")
    assert info("version") == [f"0.1.0+{twin.commit()[:12]}"]
    # The elevator name as registered; no "prism" string beside it.
    strings = set(subprocess.run(["strings", str(ko)], capture_output=True,
                                 text=True).stdout.split("\n"))
    assert "prism-v2" in strings and "prism" not in strings
    # Nothing exported that prism's own module could clash with.
    symvers = ko.parent / "Module.symvers"
    assert not symvers.exists() or not symvers.read_text().strip()
    assert twin.build_twin(k, fetch=False) == ko


def test_the_twin_is_built_outside_the_repo(cache):
    k = kernels.get("6.12")
    assert twin.build_dir(k) == cache / "twin" / twin.TWIN_REV / k.abi
    assert not twin.module_path(k).is_relative_to(twin.build.REPO)


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
    g.load_twin()
    assert insmods == ["/cache/twin/01b59b5/6.12/prism-v2-iosched.ko"]
    g.load_twin()
    assert len(insmods) == 1, "loaded once"
    insmods.clear()
    monkeypatch.setenv("PRISM_TWIN_KO", "/cache/build/6.12/prism-iosched.ko")
    with pytest.raises(RuntimeError, match="not prism-v2-iosched.ko"):
        g.load_twin()
    monkeypatch.delenv("PRISM_TWIN_KO")
    with pytest.raises(RuntimeError, match="PRISM_TWIN_KO is not set"):
        g.load_twin()
    assert insmods == []


def test_selecting_the_twin_loads_it_like_any_module_scheduler(insmods, monkeypatch):
    offered = ["mq-deadline", "none"]
    monkeypatch.setattr(g, "schedulers", lambda dev: (
        offered + (["prism-v2"] if insmods else []), "none"))
    assert "prism-v2" in g.offered_schedulers("vda", "prism-v2")
    assert insmods == ["/cache/twin/01b59b5/6.12/prism-v2-iosched.ko"]
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


def test_a_boot_with_the_twin_builds_it_and_hands_it_over(tmp_path, monkeypatch):
    """run_in_vm builds the twin beside prism for the boot's kernel and
    hands both to the guest (plan.json and PRISM_TWIN_KO); the plan says
    which commit the twin's name stood for."""
    from prism.bench import plan as bench
    from prism.host import build, vm

    args = _bench_args(tmp_path)
    plan = bench.make_plan(args)
    assert plan["twin"] == {"scheduler": "prism-v2", "module": "prism-v2-iosched",
                            "rev": twin.TWIN_REV, "commit": twin.commit()}
    built, booted = [], {}
    monkeypatch.setattr(build, "build", lambda k: tmp_path / "prism-iosched.ko")
    monkeypatch.setattr(twin, "build_twin", lambda k: built.append(k.series) or (
        tmp_path / "prism-v2-iosched.ko"))
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


def test_the_report_names_the_twin_and_pairs_prism_with_it(tmp_path):
    from prism.bench import report

    data = Path(__file__).resolve().parent / "data" / "fio-run"
    raw = tmp_path / "raw"
    metas = []
    for s in ["prism", "prism-v2", "none"]:
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
            "schedulers": ["prism", "prism-v2", "none"],
            "twin": {"scheduler": "prism-v2", "module": "prism-v2-iosched",
                     "rev": "01b59b5", "commit": "01b59b511d7082208463e37e33dda5669e8f3ea5"}}
    out = tmp_path / "out"
    out.mkdir()
    report.write_all(out, "prism bench run test", plan, report.collect(raw, "6.12"))
    md = (out / "report.md").read_text()
    assert "prism-v2 is prism at `01b59b511d70` (01b59b5)" in md
    assert "| vs prism-v2 | vs none |" in md
    assert "| prism-v2 | database_sim |" in md
    doc = json.loads((out / "results.json").read_text())
    assert {p["other"] for p in doc["paired"]} == {"prism-v2", "none"}
    assert (out / "6.12-database_backup-bars.png").read_bytes()[:4] == b"\x89PNG"
    # No twin, no line about it.
    assert report.twin_line({}) == ""


def test_prism_build_twin_checks_every_kernel_first(monkeypatch, capsys):
    from prism import cli
    from prism.host import build

    built = []
    monkeypatch.setattr(build, "build", lambda k, fetch=True: built.append(k.series))
    monkeypatch.setattr(twin, "build_twin", lambda k, fetch=True: built.append("twin " + k.series))
    assert cli.main(["build", "--twin", "--kernel", "6.12,7.3"]) == 2
    assert built == [] and "not 7.3" in capsys.readouterr().err
    assert cli.main(["build", "--twin", "--kernel", "6.1,6.12", "--no-fetch"]) == 0
    assert built == ["6.1", "twin 6.1", "6.12", "twin 6.12"]


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
    for spec in ("prism", "prism-v2", "prism-v2:latency_hist=0", "bfq"):
        benchrun.apply_scheduler("vda", spec, latency_hist=True)
    benchrun.apply_scheduler("vda", "prism-v2", latency_hist=False)
    # v3 keeps them on through debugfs, v2 through its tunable.
    assert writes == [("debugfs latency", True), ("latency_hist", 1), ("latency_hist", "0")]
