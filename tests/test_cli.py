"""The CLI's contract with a person at a terminal, on the host (no VM,
no build): usage errors exit 2, make nothing, name options as the person
typed them; scheduler variants are checked before anything is built."""

import re
from pathlib import Path

import pytest

from prism import cli
from prism.bench import plan
from prism.guest import selftest
from prism.host import build, kernels

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "docs" / "results" / "demo-hdd-6.12"


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
    checked = 0
    for series in kernels.KERNELS:
        block = kernels.block_dir(kernels.get(series))
        if not (block / "bfq-iosched.c").exists():
            continue
        for sched, name in files.items():
            found = set(re.findall(r"\b\w*ATTR\w*\((\w+)", (block / name).read_text()))
            for t in plan.IN_TREE_TUNABLES[sched]:
                # kyber's are KYBER_LAT_ATTR(read) -> read_lat_nsec.
                assert t in found or t.removesuffix("_lat_nsec") in found, (series, sched, t)
                checked += 1
    if not checked:
        pytest.skip("no kernel source fetched (prism fetch)")
