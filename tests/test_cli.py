"""The CLI's contract with a person at a terminal, on the host (no VM,
no build): usage errors exit 2, make nothing, name options as the person
typed them; scheduler variants are checked before anything is built."""

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest
import recorded

from prism import cli
from prism.bench import plan
from prism.guest import selftest
from prism.host import build, kernels, vm

REPO = Path(__file__).resolve().parent.parent


def recorded_report(where: Path) -> Path:
    """A report directory as prism bench run leaves it (results.json,
    report.md, plots, raw.tar.xz), from the recorded fio run as baseline
    and mix."""
    from prism.bench import plan as bench
    from prism.bench import report
    rep = where / "report"
    raw = rep / "raw" / "6.12"
    plan = {"profile": "nullb-ssd", "reps": 1, "runtime": 3, "ramp": 1,
            "workloads": ["database_alone", "database_backup"], "schedulers": ["prism"]}
    recorded.raw_runs(raw, plan)
    report.write_all(rep, "prism bench run recorded", plan, report.collect(raw, "6.12"))
    bench.archive_raw(rep)
    return rep


@pytest.mark.skipif(not shutil.which("fio"), reason="plan.validate needs fio")
@pytest.mark.parametrize("argv", [
    ["bench", "run", "--workload", "database_backup", "--device", "hdd", "--kernel", "5.4"],
    ["bench", "run", "--workload", "database_backup", "--device", "/dev/prism-nonexistent"],
    ["bench", "run", "--workload", "database_backup", "--device", "hdd",
     "--schedulers", "none,prism:lowshare=20"],
    ["bench", "run", "--workload", "database_backup", "--device", "hdd", "--reps", "0"],
    ["demo", "--device", "/dev/prism-nonexistent"],
    ["demo", "--kernel", "5.4"],
])
def test_a_usage_error_exits_2_and_leaves_no_directory(argv, tmp_path, nothing_boots, capsys):
    out = tmp_path / "report"
    assert cli.main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism: error: ")
    assert not out.exists()


def test_bench_report_on_a_missing_directory_exits_2(tmp_path, capsys):
    assert cli.main(["bench", "report", str(tmp_path / "missing")]) == 2
    assert "no such report directory" in capsys.readouterr().err
    assert cli.main(["bench", "report", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no raw runs" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_disk_serve_refuses_a_path_in_no_directory(tmp_path, capsys):
    backing = tmp_path / "backing"
    assert cli.main(["disk", "serve", "--socket", str(tmp_path / "no" / "s"),
                     "--backing", str(backing)]) == 2
    assert "--socket" in capsys.readouterr().err and not backing.exists()


def test_icount_with_an_emulated_drive_is_refused_before_the_build(nothing_boots, capsys):
    assert cli.main(["vm", "--accel", "icount", "--device", "hdd", "--", "true"]) == 2
    assert "--accel icount" in capsys.readouterr().err


def _parsers(ap: argparse.ArgumentParser):
    yield ap
    for a in ap._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _parsers(sub)


def test_no_internal_name_reaches_a_message(capsys):
    """argparse names a positional or a subcommand by its dest unless it
    has a metavar: every one has, and the errors that name them show it."""
    for p in _parsers(cli.parser()):
        for a in p._actions:
            if not a.option_strings and not isinstance(a, argparse._HelpAction):
                assert a.metavar and a.metavar != a.dest, (p.prog, a.dest)
    dests = {"cmd", "bench_cmd", "disk_cmd", "dir", "command", "func"}
    for argv in ([], ["bench"], ["disk"], ["bench", "report"], ["bench", "frob"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        words = set(re.findall(r"[a-z_]+", err.splitlines()[-1].split("error:", 1)[1]))
        assert not words & dests, (argv, err)


def test_force_and_allow_mounted_say_what_they_override():
    ap = cli.parser()
    for sub in (["demo"], ["bench", "run", "--workload", "x", "--out", "o"]):
        args = ap.parse_args(sub + ["--force"])
        assert args.force and not args.allow_mounted
        args = ap.parse_args(sub + ["--allow-mounted"])
        assert args.allow_mounted and not args.force
    helps = {a.dest: a.help for p in _parsers(ap) for a in p._actions
             if a.dest in ("force", "allow_mounted")}
    assert "filesystem" in helps["force"] and "overwrite" in helps["force"]
    assert "mounted" in helps["allow_mounted"]


# --- scheduler variants, checked against the module's tunables ----------

def test_module_tunables_are_read_from_its_source():
    """build.module_tunables reads prism_sysfs.c; the guest's checks
    (selftest.TUNABLES, compared with sysfs in the VM) list the same."""
    names = build.module_tunables()
    assert len(names) == len(set(names)) > 10
    assert set(names) == set(selftest.TUNABLES) | set(selftest.KEYWORD_TUNABLES)


def test_module_tunables_from_a_source_of_another_shape(tmp_path):
    src = tmp_path / "prism_sysfs.c"
    src.write_text("#define PRISM_ATTR_ENTRY(name) \\\n\t__ATTR(name, 0644, s, t)\n"
                   "struct elv_fs_entry prism_attrs[] = {\n\tPRISM_ATTR_ENTRY(hold_us),\n"
                   "\t__ATTR(quantum_us, 0644, a, b),\n\t__ATTR_NULL\n};\n")
    assert build.module_tunables(src) == ["hold_us", "quantum_us"]
    src.write_text("/* nothing */\n")
    with pytest.raises(cli.PrismError, match="no elv_fs_entry array"):
        build.module_tunables(src)


def test_a_misspelt_tunable_is_refused_on_the_host():
    assert plan.parse_schedulers("none,bfq:slice_idle=0,prism:low_share=20,"
                                 "mq-deadline:fifo_batch=1,kyber:read_lat_nsec=1000") == [
        "none", "bfq:slice_idle=0", "prism:low_share=20", "mq-deadline:fifo_batch=1",
        "kyber:read_lat_nsec=1000"]
    with pytest.raises(cli.UsageError, match=r"prism has no tunable 'lowshare' "
                                             r"\(did you mean 'low_share'\?\)"):
        plan.parse_schedulers("prism:lowshare=20")
    with pytest.raises(cli.UsageError, match="bfq has no tunable 'anticipate_us'"):
        plan.parse_schedulers("bfq:anticipate_us=0")
    with pytest.raises(cli.UsageError, match="none has no tunables"):
        plan.parse_schedulers("none:x=1")


def test_in_tree_tunables_exist_in_the_kernels_source():
    """IN_TREE_TUNABLES against block/ of each fetched kernel (CI fetches
    them; skipped where none is)."""
    files = {"mq-deadline": "mq-deadline.c", "kyber": "kyber-iosched.c",
             "bfq": "bfq-iosched.c"}
    # Linux 7.0 moved async_depth from the schedulers to the queue
    # (queue/async_depth): IN_TREE_TUNABLES is not per kernel yet, so a
    # bench variant mq-deadline:async_depth=N would fail in a 7.3 guest.
    moved_in_7 = {("mq-deadline", "async_depth")}
    checked = 0
    for series in kernels.KERNELS:
        block = kernels.block_dir(kernels.get(series))
        if not (block / "bfq-iosched.c").exists():
            continue
        for sched, name in files.items():
            found = set(re.findall(r"\b\w*ATTR\w*\((\w+)", (block / name).read_text()))
            for t in plan.IN_TREE_TUNABLES[sched]:
                if kernels.series_key(series) >= (7, 0) and (sched, t) in moved_in_7:
                    assert t not in found, (series, sched, t)
                    continue
                # kyber's are KYBER_LAT_ATTR(read) -> read_lat_nsec.
                assert t in found or t.removesuffix("_lat_nsec") in found, (series, sched, t)
                checked += 1
    if not checked:
        pytest.skip("no kernel source fetched (prism fetch)")


# --- prism bench report --out ---------------------------------------------

def test_a_committed_report_is_rebuilt_elsewhere_untouched(tmp_path):
    RECORDED = recorded_report(tmp_path)
    before = {p.name: p.read_bytes() for p in RECORDED.iterdir()}
    out = tmp_path / "again"
    assert cli.main(["bench", "report", str(RECORDED), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in RECORDED.iterdir()} == before
    assert (out / "report.md").exists() and (out / "results.json").exists()
    assert sorted(p.name for p in out.glob("*.png")) == sorted(
        p.name for p in RECORDED.glob("*.png"))
    md = (out / "report.md").read_text()
    assert "MB/s" not in md and "MiB/s" in md


def test_disk_params_say_which_megabyte(capsys):
    """MB/s in the parameter files is 1e6 bytes (a drive's data sheet);
    the write cache's size is in MiB: each says so."""
    for profile in ("hdd", "hdd-ncq", "ssd-model", "cloud"):
        assert cli.main(["disk", "params", "--profile", profile]) == 0
        for line in capsys.readouterr().out.splitlines():
            if "MB/s" in line:
                assert "(1e6 bytes)" in line, line
            if line.startswith("write_cache_mb"):
                assert "MiB" in line, line


# --- usage errors before any build or boot (issue 58) ----------------------

@pytest.mark.parametrize("argv, said", [
    (["bench", "run", "--workload", "database_backup", "--device", "hdd",
      "--schedulers", "none,prism:low_share=999", "--out", "o"],
     "999 is out of prism's range for low_share, 0 to 50"),
    (["bench", "run", "--workload", "database_backup", "--device", "hdd",
      "--schedulers", "prism:be_tiers=2", "--out", "o"],
     "2 is out of prism's range for be_tiers, 1 to 3 except 2"),
    (["bench", "run", "--workload", "database_backup", "--device", "hdd",
      "--schedulers", "prism:slice_idle_us=soon", "--out", "o"],
     "slice_idle_us takes a whole number, not 'soon'"),
    (["selftest", "--only", "nosuchcheck"], "no check nosuchcheck in the main suite"),
    (["selftest", "--only", "tunable"], "(did you mean tunables?)"),
    (["selftest", "--suite", "cloud", "--only", "tunables"],
     "no check tunables in the cloud suite"),
    (["blktests", "--tests", "nosuch"], "'block' (the whole group) or a comma list"),
    (["vm", "--kernel", "", "--", "true"], "--kernel '' names no kernel"),
    (["selftest", "--kernel", ","], "--kernel ',' names no kernel"),
    (["build", "--kernel", "", "--no-fetch"], "--kernel '' names no kernel"),
])
def test_out_of_range_values_exit_2_before_any_build(argv, said, nothing_boots, capsys,
                                                     tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism: error: ") and said in err[0], err
    assert not (tmp_path / "o").exists()


def test_an_unknown_blktests_test_exits_2(nothing_boots, capsys, monkeypatch):
    monkeypatch.setattr(cli.blktests, "available_tests", lambda: {"block/005", "block/031"})
    assert cli.main(["blktests", "--tests", "block/005,block/999"]) == 2
    assert "has no block/999" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["vm", "--cpus", "0", "--", "true"], "argument --cpus: '0' is not a whole number above 0"),
    (["selftest", "--memory", "lots"], "argument --memory: 'lots' is not a memory size"),
    (["bench", "run", "--workload", "database_backup", "--out", "o", "--timeout", "-5"],
     "argument --timeout: '-5' is not a number of seconds above 0"),
    (["profile", "--timeout", "0"], "argument --timeout: '0' is not a number of seconds"),
    (["stress", "--cpus", "two"], "argument --cpus: 'two' is not a whole number above 0"),
])
def test_vm_options_out_of_range_are_usage_errors(argv, said, nothing_boots, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_vm_options_in_range_parse():
    args = cli.parser().parse_args(["vm", "--cpus", "4", "--memory", "512M",
                                    "--timeout", "90.5", "--", "true"])
    assert (args.cpus, args.memory, args.timeout) == (4, "512M", 90.5)
    assert cli.parser().parse_args(["vm", "--memory", "4096", "--", "x"]).memory == "4096"


def test_the_harness_ranges_are_the_modules():
    """plan.check_value refuses what the module would, from the table the
    guest's checks use (selftest.TUNABLES): the same ranges as
    prism_attr_ranges in module/prism_sysfs.c, so they cannot drift."""
    src = (REPO / "module" / "prism_sysfs.c").read_text()
    defines = {"INT_MAX": str(2**31 - 1), "NSEC_PER_USEC": "1000", "USEC_PER_SEC": "1000000",
               "NSEC_PER_MSEC": "1000000"}
    for f in sorted((REPO / "module").glob("*.[ch]")):
        for name, val in re.findall(r"^#define\s+(PRISM_\w+)\s+([^/\n]+)", f.read_text(), re.M):
            defines.setdefault(name, val.strip())

    def value(expr: str) -> int:
        for _ in range(5):
            expr = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda m: f"({defines[m[0]]})", expr)
        return int(eval(re.sub(r"(\d+)U?L*L?\b", r"\1", expr)))

    ids = dict(re.findall(r"^PRISM_ATTR\((\w+), (\w+)\)", src, re.M))
    table = re.search(r"prism_attr_ranges\[\] = \{(.*?)\n\};", src, re.S)[1]
    ranges = {id_: (value(lo), value(hi)) for id_, lo, hi in
              re.findall(r"\[(\w+)\]\s*=\s*\{\s*([^,]+),\s*([^}]+?)\s*\}", table)}
    assert len(ranges) == len(ids) == len(selftest.TUNABLES)
    assert {name: ranges[id_] for name, id_ in ids.items()} == \
        {name: (lo, hi) for name, (_d, _g, lo, hi) in selftest.TUNABLES.items()}


def test_a_missing_fio_is_reported_after_the_usage_checks(nothing_boots, capsys, monkeypatch):
    monkeypatch.setattr(plan.shutil, "which", lambda name: None)
    assert cli.main(["bench", "run", "--workload", "database_backup", "--device", "hdd",
                     "--schedulers", "prism:low_share=999", "--out", "o"]) == 2
    assert "out of prism's range" in capsys.readouterr().err
    assert cli.main(["bench", "run", "--workload", "database_backup", "--device", "hdd",
                     "--out", "o"]) == 1
    assert "fio not found" in capsys.readouterr().err


# --- prism vm and prism profile keep to 0, 1 and 2 ----------------------

def _guest(returncode: int, dmesg: str = "", timed_out: bool = False):
    def run(*args, **kwargs):
        return vm.VmResult(returncode=returncode, output="", dmesg=dmesg,
                           rundir=Path("/run/x"), elapsed=3.0, timed_out=timed_out)
    return run


@pytest.mark.parametrize("rc, dmesg, timed_out, status, said", [
    (0, "", False, 0, None),
    (3, "", False, 1, "6.12: the guest's command exited 3"),
    (124, "", False, 1, "the guest's command exited 124"),
    (-1, "", True, 1, "never ended (killed after --timeout"),
    (-1, "", False, 1, "never ended (the guest died; see /run/x/console.txt)"),
    (0, "[  1.0] WARNING: CPU: 0 PID: 1 at block/x.c:1 f+0x1/0x2\n", False, 1,
     "exited 0, but the kernel log reports problems"),
])
def test_vm_maps_the_guests_exit_code(rc, dmesg, timed_out, status, said, monkeypatch, capsys):
    monkeypatch.setattr(build, "build", lambda k: Path("/x.ko"))
    monkeypatch.setattr(vm, "check_disks", lambda disks, accel: None)
    monkeypatch.setattr(vm, "new_rundir", lambda: Path("/run/x"))
    monkeypatch.setattr(vm, "run", _guest(rc, dmesg, timed_out))
    assert cli.main(["vm", "--kernel", "6.12", "--", "false"]) == status
    err = capsys.readouterr().err
    if said:
        assert "prism: error: " in err and said in err, err
    else:
        assert "error" not in err


def test_profile_maps_the_guests_exit_code(monkeypatch, capsys):
    monkeypatch.setattr(build, "build", lambda k: Path("/x.ko"))
    monkeypatch.setattr(vm, "new_rundir", lambda: Path("/run/x"))
    monkeypatch.setattr(cli.insnprof, "run", _guest(125))
    assert cli.main(["profile", "--kernel", "6.12"]) == 1
    assert "the guest's command exited 125" in capsys.readouterr().err


# --- help texts ---------------------------------------------------------

def test_every_subcommand_says_what_it_does_in_plain_words():
    for p in _parsers(cli.parser()):
        assert p.description, f"{p.prog} has no description"
        texts = [p.description] + [a.help or "" for a in p._actions]
        for text in texts:
            assert not re.search(r"\b[0-9a-f]{7,12}\b", text), (p.prog, text)
            assert "test suite" not in text, (p.prog, text)
            assert not re.search(r"seed \d{3}", text), (p.prog, text)


# --- Command: in a report -------------------------------------------------

def test_a_report_records_the_command_as_given(tmp_path, monkeypatch):
    """The arguments main() was given (not the process's sys.argv), and
    a report rebuilt elsewhere names where it now is."""
    seen = {}
    monkeypatch.setattr(plan, "run", lambda args, command=None: seen.setdefault(
        "command", command or plan.command_line(args)))
    monkeypatch.setattr(plan.sys, "argv", ["pytest", "-q"])
    cli.main(["bench", "run", "--workload", "database_backup", "--out", "results/sdx x"])
    assert seen["command"] == "prism bench run --workload database_backup --out 'results/sdx x'"
    assert plan.with_out("prism bench run --out /root/adhoc/r --timeout 3000",
                         "docs/results/r") == \
        "prism bench run --out docs/results/r --timeout 3000"
    # A run made in a scratch directory, rebuilt into its place.
    scratch = tmp_path / "scratch"
    shutil.copytree(recorded_report(tmp_path), scratch)
    doc = json.loads((scratch / "results.json").read_text())
    doc["command"] = "prism bench run --workload database_backup --out /root/adhoc/r --reps 3"
    (scratch / "results.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "report", str(scratch), "--out", "docs/results/r"]) == 0
    out = tmp_path / "docs" / "results" / "r"
    command = json.loads((out / "results.json").read_text())["command"]
    assert command == "prism bench run --workload database_backup --out docs/results/r --reps 3"
    assert f"Command: `{command}`" in (out / "report.md").read_text()
