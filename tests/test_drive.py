"""The emulated drive's queueing (arrival order, NCQ, write cache, flush,
SSD channels) in virtual time; and the parameter files."""

import itertools
import random
import tomllib

import pytest

from prism.drives import diskmodel
from prism.drives.diskmodel import (
    CloudModel,
    CloudProfile,
    HddModel,
    HddNcqProfile,
    HddProfile,
    SsdModel,
    SsdProfile,
)
from prism.drives.drive import FLUSH, READ, WRITE, Command, Drive


def hdd_drive(**kw) -> Drive:
    return Drive(HddModel(HddProfile(**kw)))


def run_closed_loop(drive: Drive, depth: int, total: int, rng, op=READ, nsect=8) -> float:
    """Keep @depth random requests outstanding until @total completed;
    returns completions per second of virtual time."""
    sectors = drive.model.sectors
    now = 0.0
    for _ in range(depth):
        drive.submit(Command(op, rng.randrange(0, sectors - nsect), nsect), now)
    done = 0
    while done < total:
        now = drive.next_event()
        for _ in drive.completed(now):
            done += 1
            drive.submit(Command(op, rng.randrange(0, sectors - nsect), nsect), now)
    return done / now


def test_depth_one_random_reads_match_the_formula():
    drive = hdd_drive()
    iops = run_closed_loop(drive, 1, 1500, random.Random(1))
    assert iops == pytest.approx(drive.model.expected_random_iops(8), rel=0.10)


def test_without_ncq_commands_are_served_in_arrival_order():
    drive = hdd_drive(queue_depth=32)
    rng = random.Random(2)
    cmds = [Command(READ, rng.randrange(0, drive.model.sectors - 8), 8, tag=i)
            for i in range(16)]
    for c in cmds:
        drive.submit(c, 0.0)
    done = drive.completed(10.0)
    assert [c.tag for c in done] == list(range(16))
    # One actuator: each starts when the one before it ended.
    for a, b in itertools.pairwise(done):
        assert b.start == pytest.approx(a.end)


def test_ncq_window_reorders_for_shorter_positioning():
    fifo = run_closed_loop(hdd_drive(queue_depth=32), 32, 1500, random.Random(3))
    ncq = run_closed_loop(hdd_drive(queue_depth=32, ncq=32), 32, 1500, random.Random(3))
    assert ncq >= 1.5 * fifo
    # A window of 1 is arrival order.
    one = run_closed_loop(hdd_drive(queue_depth=32, ncq=1), 32, 500, random.Random(3))
    again = run_closed_loop(hdd_drive(queue_depth=32), 32, 500, random.Random(3))
    assert one == pytest.approx(again)


def test_write_cache_takes_writes_in_and_flush_waits_for_the_media():
    drive = hdd_drive()
    rng = random.Random(4)
    for i in range(50):
        drive.submit(Command(WRITE, rng.randrange(0, drive.model.sectors - 8), 8, tag=i), 0.0)
    done = drive.completed(0.01)
    assert len(done) == 50 and all(c.cached for c in done)
    assert max(c.end for c in done) < 0.01
    flush = Command(FLUSH, tag="f")
    drive.submit(flush, 0.01)
    drive.completed(100.0)
    # The cache went to the media first: 50 write-backs, each at least a
    # transfer plus the command; sorted by the drive, so quicker than 50
    # random requests in arrival order.
    assert len(drive.destages) == 50
    assert flush.end == pytest.approx(max(d.end for d in drive.destages) + 0.0002)
    assert 50 * 0.001 < flush.end - flush.arrival < 50 / drive.model.expected_random_iops()
    assert not drive.busy


def test_cache_destages_when_idle_and_reads_go_first():
    drive = hdd_drive()
    rng = random.Random(5)
    for _ in range(20):
        drive.submit(Command(WRITE, rng.randrange(0, drive.model.sectors - 8), 8), 0.0)
    drive.completed(0.001)
    # A read arriving while the cache destages waits for one write-back
    # at most, not for all of them.
    read = Command(READ, 12345, 8)
    drive.submit(read, 0.002)
    drive.completed(100.0)
    assert read.end - read.arrival < 0.060
    assert len(drive.destages) == 20 and not drive.dirty


def test_write_through_when_cache_off_full_or_fua():
    off = hdd_drive(write_cache=False)
    w = Command(WRITE, 10_000_000, 8)
    off.submit(w, 0.0)
    off.completed(1.0)
    assert not w.cached and w.end > 0.002
    small = hdd_drive(write_cache_mb=0.01)      # room for two 4 KiB writes
    cmds = [Command(WRITE, 1_000_000 * (i + 1), 8) for i in range(4)]
    for c in cmds:
        small.submit(c, 0.0)
    small.completed(1.0)
    # The first starts going to the media at once (the drive is idle),
    # which frees its room; two more fit; the fourth does not.
    assert [c.cached for c in cmds] == [True, True, True, False]
    fua = Command(WRITE, 5_000_000, 8, fua=True)
    drive = hdd_drive()
    drive.submit(fua, 0.0)
    drive.completed(1.0)
    assert not fua.cached and fua.end > 0.002
    flush = Command(FLUSH)
    off.submit(flush, 2.0)
    assert off.completed(2.01) == [flush]


def test_ssd_channels_serve_in_parallel_and_order_buys_nothing():
    drive = Drive(SsdModel())
    p = drive.model.profile
    cmds = [Command(READ, i * 1000, 8) for i in range(p.channels)]
    for c in cmds:
        drive.submit(c, 0.0)
    done = drive.completed(1.0)
    assert len(done) == p.channels
    assert max(c.end for c in done) == pytest.approx(drive.model.duration(8, False))
    rng_a, rng_b = random.Random(6), random.Random(6)
    random_order = run_closed_loop(Drive(SsdModel()), 32, 2000, rng_a)
    sorted_drive = Drive(SsdModel())
    sorted_order = run_closed_loop(sorted_drive, 32, 2000, rng_b)
    assert sorted_order == pytest.approx(random_order, rel=0.05)
    assert random_order == pytest.approx(p.channels / drive.model.duration(8, False), rel=0.05)


def test_parameter_files_round_trip_and_refuse_bad_values():
    for profile in (HddProfile(), SsdProfile(), HddProfile(ncq=8, queue_depth=32),
                    HddNcqProfile(), CloudProfile(), CloudProfile(iops_limit=500)):
        text = diskmodel.to_toml(profile)
        name = diskmodel.profile_name(profile)
        assert diskmodel.load_profile(name, tomllib.loads(text)) == profile
    bad = [({"rpm": 0}, "positive"), ({"rpmm": 1}, "no parameter 'rpmm'"),
           ({"ncq": 4}, "ncq"), ({"rpm": "fast"}, "must be int"),
           ({"write_cache": 1}, "must be bool"), ({"profile": "ssd-model"}, "another profile"),
           ({"average_seek_ms": 20.0}, "average_seek_ms")]
    for params, msg in bad:
        with pytest.raises(ValueError, match=msg):
            diskmodel.load_profile("hdd", params)
    with pytest.raises(ValueError, match="unknown disk profile"):
        diskmodel.load_profile("floppy")
    # Integers are fine where a float is expected.
    assert diskmodel.load_profile("hdd", {"average_seek_ms": 9}).average_seek_ms == 9.0


def test_ssd_sequential_buys_nothing_either():
    """Issue 3's three checks on the SSD: depth-1 random reads at the
    model's 1 / duration, and sequential or sorted order no faster."""
    model = SsdModel()
    one = model.duration(8, False)
    drive = Drive(SsdModel())
    rand = run_closed_loop(drive, 1, 2000, random.Random(8))
    assert rand == pytest.approx(1 / one, rel=0.01)
    seq = Drive(SsdModel())
    now, lba = 0.0, 0
    for _ in range(2000):
        c = Command(READ, lba, 8)
        seq.submit(c, now)
        now = seq.next_event()
        seq.completed(now)
        lba += 8
    assert 2000 / now == pytest.approx(rand, rel=0.01)


def test_hdd_ncq_is_the_hdd_with_ncq_on():
    p = diskmodel.load_profile("hdd-ncq")
    assert isinstance(p, HddProfile) and (p.queue_depth, p.ncq) == (32, 32)
    assert diskmodel.profile_name(p) == "hdd-ncq"
    assert diskmodel.profile_name(HddProfile(ncq=32, queue_depth=32)) == "hdd"
    # Deep random reads: NCQ's shortest-positioning-first beats arrival order.
    ncq = run_closed_loop(Drive(HddModel(p)), 32, 1500, random.Random(3))
    fifo = run_closed_loop(hdd_drive(queue_depth=32), 32, 1500, random.Random(3))
    assert ncq > 1.5 * fifo


def test_cloud_latency_at_depth_one_is_base_plus_transfer():
    p = CloudProfile()
    for nsect in (8, 256, 2048):
        drive = Drive(CloudModel(p))
        drive.submit(Command(READ, 0, nsect), 0.0)
        (cmd,) = drive.completed(drive.next_event())
        assert cmd.end == pytest.approx(p.latency_ms / 1000 + nsect * 512 / (p.transfer_mb * 1e6))
    # 1 ms + 4 KiB at 500 MB/s; 1 ms + 1 MiB at 500 MB/s
    assert CloudModel(p).duration(8, False) == pytest.approx(0.0010082, rel=1e-4)
    assert CloudModel(p).duration(2048, True) == pytest.approx(0.0030972, rel=1e-4)


def test_cloud_serves_its_whole_queue_at_once():
    p = CloudProfile(queue_depth=64)
    drive = Drive(CloudModel(p))
    iops = run_closed_loop(drive, 64, 6400, random.Random(4))
    # Without QEMU's meter in front, depth / service time.
    assert iops == pytest.approx(64 / CloudModel(p).duration(8, False), rel=0.01)
    shallow = run_closed_loop(Drive(CloudModel(p)), 4, 400, random.Random(4))
    assert shallow == pytest.approx(4 / CloudModel(p).duration(8, False), rel=0.01)


def test_cloud_limits_and_what_fio_should_see():
    m = CloudModel(CloudProfile())
    assert m.qemu_throttling() == {"iops-total": 3000, "bps-total": 125 * 2**20,
                                   "iops-size": 256 * 1024}
    # 4 KiB at depth 64: IOPS-bound; at depth 1: latency-bound.
    assert m.expected(4096, 64)[0] == pytest.approx(3000)
    assert m.expected(4096, 1)[0] == pytest.approx(1 / m.duration(8, False))
    # 1 MiB: bandwidth-bound (4 IOPS units each would allow 750/s).
    assert m.expected(2**20, 16)[0] == pytest.approx(125)
    # 512 KiB counts twice against the IOPS limit.
    small = CloudModel(CloudProfile(iops_limit=100, bandwidth_mib=1000))
    assert small.expected(512 * 1024, 64)[0] == pytest.approx(50)
