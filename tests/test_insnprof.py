"""prism profile: the QEMU plugin builds and exports what QEMU loads, the
host's attribution of counted blocks to functions, the guest's marks, and
(VM) one short profile of mq-deadline and prism end to end."""

import collections
import subprocess
import threading
import time

import pytest

from prism import cli
from prism.common.errors import PrismError
from prism.guest import insnprof as guest
from prism.host import insnprof

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000100 T dd_dispatch_request
ffffffff81000200 t dd_insert_requests
ffffffff81000300 T blk_mq_end_request
ffffffffc0000000 t prism_dispatch_request\t[prism_iosched]
ffffffffc0000400 t prism_insert_requests\t[prism_iosched]
"""


def test_plugin_builds_and_exports_qemus_entry_points():
    so = insnprof.plugin()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                          text=True, check=True).stdout
    assert "qemu_plugin_install" in syms and "qemu_plugin_version" in syms
    # Everything else stays hidden: QEMU resolves only those two.
    assert "snapshot" not in syms and "translated" not in syms


def test_blocks_are_charged_to_their_functions(tmp_path):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    syms = insnprof.Symbols.load(tmp_path / "kallsyms")
    assert syms.name(0xffffffffc0000010) == "prism_dispatch_request [prism_iosched]"
    assert syms.name(0xffffffff81000250) == "dd_insert_requests"
    assert syms.start("prism_insert_requests") == 0xffffffffc0000400
    with pytest.raises(PrismError):
        syms.start("bfq_dispatch_request")

    (tmp_path / "snap-1").write_text("ffffffffc0000010 5 100\nffffffff81000300 7 50\n")
    # A block run again (+10), one translated since (+3), one unchanged, and a
    # retranslation of the first (same address and size): counted together.
    (tmp_path / "snap-2").write_text("ffffffffc0000010 5 105\nffffffffc0000400 4 3\n"
                                     "ffffffff81000300 7 50\nffffffffc0000010 5 5\n")
    delta = insnprof.block_delta(insnprof.load_snapshot(tmp_path / "snap-1"),
                                 insnprof.load_snapshot(tmp_path / "snap-2"))
    assert delta == {(0xffffffffc0000010, 5): 10, (0xffffffffc0000400, 4): 3}
    funcs = insnprof.per_function(delta, syms)
    assert funcs == collections.Counter({"prism_dispatch_request [prism_iosched]": 50,
                                         "prism_insert_requests [prism_iosched]": 12})


def test_report_compares_with_the_first_scheduler(tmp_path):
    syms = insnprof.Symbols([0], ["x"])
    base = insnprof.Profile("mq-deadline", 100000, 1000,
                            collections.Counter({"dd_dispatch_request": 200.0, "common": 9000.0}),
                            {}, syms)
    other = insnprof.Profile("prism", 95000, 1000,
                             collections.Counter({"prism_dispatch_request": 450.0,
                                                  "common": 9010.0}), {}, syms)
    text = insnprof.report(1, [base, other], top=2)
    assert "| prism | 1000 | 95,000 | 9,460 | +260 (0.950x IOPS) |" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    # The two largest differences, largest first; "common" (+10) is cut.
    assert rows == ["| `prism_dispatch_request` | 0.0 | 450.0 | +450.0 |",
                    "| `dd_dispatch_request` | 200.0 | 0.0 | -200.0 |"]


def test_guest_mark_waits_for_the_plugins_answer(tmp_path, monkeypatch):
    """A mark returns when the plugin answers, however far the guest's
    clock jumps meanwhile (under icount it skips ahead while the vCPU
    waits for the host)."""
    marks = guest.Marks(tmp_path)

    def plugin(n, delay):
        while not (tmp_path / f"mark-{n}").exists():
            time.sleep(0.005)
        time.sleep(delay)
        (tmp_path / f"done-{n}").touch()

    t = threading.Thread(target=plugin, args=(1, 0))
    t.start()
    assert marks.mark() == 1
    t.join()
    warped = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(guest.time, "monotonic", lambda: float(next(warped)))
    t = threading.Thread(target=plugin, args=(2, 0.2))
    t.start()
    assert marks.mark() == 2
    t.join()


def test_profile_refuses_bad_arguments(capsys):
    assert cli.main(["profile", "--schedulers", "prism,prism"]) == 2
    assert cli.main(["profile", "--ios", "10"]) == 2
    assert cli.main(["profile", "--kernel", "6.1,6.12"]) == 2
    assert cli.main(["profile", "--schedulers", "mq-deadline,bfq",
                     "--lines", "prism_dispatch_request"]) == 2


@pytest.mark.vm
def test_profile_counts_each_schedulers_own_functions(request, tmp_path):
    """One short boot: each scheduler's instructions land in its own
    functions, and the totals are those of a whole I/O path."""
    if request.config.getoption("--no-vm"):
        pytest.skip("--no-vm")
    from test_vm import newest_kernel

    out = tmp_path / "out"
    rc = cli.main(["profile", "--kernel", newest_kernel(request.config), "--ios", "2000",
                   "--top", "400", "--out", str(out)])
    assert rc == 0
    text = (out / "report.md").read_text()
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = (float(cells[1]), float(cells[2]))
    dd = rows["dd_dispatch_request"]
    pr = rows["prism_dispatch_request [prism_iosched]"]
    assert dd[0] > 10 and dd[1] == 0          # mq-deadline's own, not run under prism
    assert pr[0] == 0 and pr[1] > 10
    assert rows["prism_insert_requests [prism_iosched]"][1] > 10
    totals = [line for line in text.splitlines()
              if line.startswith("| mq-deadline |") or line.startswith("| prism |")]
    assert len(totals) == 2
    for line in totals:
        per_io = float(line.split("|")[4].replace(",", ""))
        assert 2000 < per_io < 100000     # a whole submission and completion path
