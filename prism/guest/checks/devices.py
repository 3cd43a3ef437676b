"""The emulated drives and what prism learns of a device: the HDD and the
cloud volume look as their models say, cost_model=auto learns the
HDD's coefficients, and the device's depth is one hardware queue's."""

from __future__ import annotations

from pathlib import Path

from .. import system as g
from .helpers import (
    conservation,
    debugfs_kv,
    job,
    run_verify,
)
from .registry import check


@check("drive_hdd")
def check_drive_hdd(ctx) -> dict:
    """Protects against an emulated HDD that is not the depth-1 rotational disk it models.

    The emulated HDD (served from the host over NBD) looks like a
    one-command-at-a-time rotational disk, prism sorts on it, and data
    written through it reads back intact."""
    dev = ctx["hdd"]
    q = g.SYS_BLOCK / dev / "queue"
    rotational = q.joinpath("rotational").read_text().strip()
    tags = int((g.SYS_BLOCK / dev / "mq" / "0" / "nr_tags").read_text())
    hctxs = len(list((g.SYS_BLOCK / dev / "mq").iterdir()))
    g.set_scheduler(dev, "prism")
    # As bench does: room in the scheduler for requests to be sorted.
    q.joinpath("nr_requests").write_text("64\n")
    res = run_verify(dev, ctx["size_mb"]["hdd"], "hdd")
    order = g.prism_batch(dev).get("order")
    books = conservation(dev)
    ok = (rotational == "1" and tags == 1 and hctxs == 1 and order == "sector"
          and res["errors"] == 0 and books["balanced"])
    # Depth-1 random reads over the whole disk, for the host to compare
    # with the model's 1 / (average seek + half a turn + transfer +
    # overhead): the disk's time comes from the host, not from TCG.
    g.set_scheduler(dev, "none")
    rep = g.fio(args=["--name=qd1", f"--filename=/dev/{dev}", "--direct=1",
                      "--ioengine=psync", "--rw=randread", "--bs=4k", "--runtime=6",
                      "--time_based", "--randrepeat=0"], timeout=120)
    qd1 = job(rep, "qd1")
    return {"ok": ok, "device": dev, "rotational": rotational, "nr_tags": tags,
            "hw_queues": hctxs, "order": order, "qd1_randread_iops": qd1["iops"],
            **res, **books}


@check("drive_cloud")
def check_drive_cloud(ctx) -> dict:
    """Protects against an emulated cloud volume unlike its model (depth, IOPS, bandwidth).

    The emulated cloud volume looks like a 64-deep non-rotational disk,
    prism runs on it, data reads back intact; then, under none, the three
    figures the host compares with the model's arithmetic
    (tests/test_vm.py): depth-1 latency, and the IOPS and bandwidth QEMU's
    meter lets through at depth."""
    dev = ctx["cloud"]
    q = g.SYS_BLOCK / dev / "queue"
    rotational = q.joinpath("rotational").read_text().strip()
    tags = int((g.SYS_BLOCK / dev / "mq" / "0" / "nr_tags").read_text())
    g.set_scheduler(dev, "prism")
    res = run_verify(dev, ctx["size_mb"]["cloud"], "cloud")
    books = conservation(dev)
    ok = rotational == "0" and tags == 64 and res["errors"] == 0 and books["balanced"]
    g.set_scheduler(dev, "none")
    figures = {}
    for name, bs, depth in (("qd1", "4k", 1), ("iops", "4k", 64), ("bw", "1M", 16)):
        rep = g.fio(args=[f"--name={name}", f"--filename=/dev/{dev}", "--direct=1",
                          "--ioengine=libaio", "--rw=randread", f"--bs={bs}",
                          f"--iodepth={depth}", "--runtime=6", "--ramp_time=1",
                          "--time_based", "--randrepeat=0"], timeout=120)
        figures[name] = job(rep, name)
    return {"ok": ok, "device": dev, "rotational": rotational, "nr_tags": tags,
            "qd1_lat_mean_us": figures["qd1"]["lat_mean_us"],
            "randread_4k_qd64_iops": figures["iops"]["iops"],
            "read_1m_qd16_mib_s": figures["bw"]["bw_kib"] / 1024,
            **res, **books}


# cost_learn_hdd's sequential reads: (KiB, percent of the requests).
LEARN_SEQ_MIX = ((64, 30), (256, 40), (1024, 30))


# Where check_cost_learn_hdd reads one 4 KiB block just before and just
# after its sequential phase, in sectors from the disk's end: far from the
# phase's own reads, so the host finds the phase in the drive's trace
# between the two (tests/test_vm.py) and weighs the learned costs against
# the time the drive itself took.
LEARN_MARKS = (4096, 8192)


def learn_mark(dev: str, from_end: int) -> int:
    sector = int(Path(f"/sys/block/{dev}/size").read_text()) - from_end
    g.sh(f"dd if=/dev/{dev} of=/dev/null bs=4096 count=1 skip={sector // 8} "
         "iflag=direct status=none")
    return sector


@check("cost_learn_hdd")
def check_cost_learn_hdd(ctx) -> dict:
    """Protects against cost_model=auto failing to learn or apply the HDD's coefficients.

    cost_model=auto learns the emulated HDD's coefficients from its
    completion times: depth-1 random 4 KiB reads over the whole disk, then
    sequential reads of mixed sizes from its start. Here: the learner
    fitted both kinds, its fit is in force, and the books balance; the
    host compares the learned random IOPS with the disk model's
    arithmetic, and the learned costs of the sequential phase's commands
    with the time the drive's own trace says they took (tests/test_vm.py),
    since the disk's times come from the host, not from TCG."""
    dev = ctx["hdd"]
    g.set_scheduler(dev, "prism", {"cost_model": "auto"})
    common = [f"--filename=/dev/{dev}", "--direct=1", "--time_based", "--randrepeat=0"]
    before = g.prism_cost(dev)
    g.fio(args=["--name=rand", "--ioengine=psync", "--rw=randread", "--bs=4k",
                "--runtime=10"] + common, timeout=120)
    after_rand = g.prism_cost(dev)
    marks = [learn_mark(dev, LEARN_MARKS[0])]
    g.fio(args=["--name=seq", "--ioengine=libaio", "--iodepth=2", "--rw=read",
                "--bssplit=" + ":".join(f"{k}k/{p}" for k, p in LEARN_SEQ_MIX),
                "--runtime=8"] + common, timeout=120)
    marks.append(learn_mark(dev, LEARN_MARKS[1]))
    cost = g.prism_cost(dev)
    books = conservation(dev)
    learning, learned, model = cost["learning"], cost.get("learned", {}), cost["model"]
    g.set_scheduler(dev, "prism")
    ok = (before["learning"]["learning"] == "started"
          and learning["learning"] == "in_force"
          and int(learning["window_rrand"]) >= 32 and int(learning["window_rseq"]) >= 32
          and all(model[k] == learned.get(k) for k in ("rbps", "rrandiops", "rseqiops"))
          and books["balanced"])
    return {"ok": ok, "learning": learning, "learned": learned, "model": model,
            "after_random": after_rand.get("learned", {}), "seq_marks": marks, **books}


def driver_tags(dev: str) -> list[int]:
    """nr_tags of each hardware queue of @dev, from blk-mq's debugfs."""
    g.mount_debugfs()
    out = []
    for hctx in sorted((g.DEBUGFS / "block" / dev).glob("hctx*")):
        out.append(int(debugfs_kv(hctx / "tags")["nr_tags"]))
    return out


@check("device_depth")
def check_device_depth(ctx) -> dict:
    """Protects against a device's depth taken as all its hardware queues' tags together.

    prism takes the device's depth as what one hardware queue takes
    (no driver here sets a queue depth of its own, as SCSI does), not as
    that times the hardware queues: on QEMU's NVMe with two queues, the
    in-flight limiter and the direct lane work from one queue's tags, as
    debugfs "flight" shows (v2 counted 2 x 1,023)."""
    out = {}
    for key in ("nvme", "nullb_tags"):
        dev = ctx[key]
        g.set_scheduler(dev, "prism")
        g.sh(f"dd if=/dev/{dev} of=/dev/null bs=4k count=10 iflag=direct")
        tags = driver_tags(dev)
        out[key] = {"hctx_tags": tags, "device_depth": g.prism_flight(dev)["device_depth"]}
        g.set_scheduler(dev, "none")
    nvme = out["nvme"]
    ok = (len(nvme["hctx_tags"]) >= 2 and nvme["device_depth"] == nvme["hctx_tags"][0]
          and out["nullb_tags"]["device_depth"] == out["nullb_tags"]["hctx_tags"][0])
    return {"ok": ok, **out}
