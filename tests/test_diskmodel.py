"""The disk and SSD timing models against their own arithmetic (issue 3's
checks, in virtual time; the emulated device serves the same model on the
wall clock)."""

import random

import pytest

from prism.drives.diskmodel import SECTOR, HddModel, HddProfile, SeekCurve, SsdModel


@pytest.fixture
def hdd():
    return HddModel()


def test_seek_curve_meets_its_three_figures(hdd):
    s = hdd.seek
    assert s(1) == pytest.approx(0.001)
    assert s(s.max) == pytest.approx(0.016)
    assert s.mean() == pytest.approx(0.0085, rel=1e-3)
    # Square root for short seeks, joined smoothly to a line for long ones.
    eps = 1e-3
    assert s(s.d0 - eps) == pytest.approx(s(s.d0 + eps), abs=1e-9)
    slope_left = (s(s.d0) - s(s.d0 - 100)) / 100
    slope_right = (s(s.d0 + 100) - s(s.d0)) / 100
    assert slope_left == pytest.approx(slope_right, rel=0.01)
    ts = [s(d) for d in range(1, s.max, 997)]
    assert ts == sorted(ts)
    with pytest.raises(ValueError):
        SeekCurve(1000, 0.010, 0.005, 0.016)


def test_zoned_recording_halves_the_rate_inside(hdd):
    assert hdd.media_rate(0) == pytest.approx(200e6, rel=0.02)
    assert hdd.media_rate(hdd.sectors - 1) == pytest.approx(100e6, rel=0.02)
    assert hdd.sectors * SECTOR == pytest.approx(1e12, rel=0.01)
    # The mapping walks sector, head, cylinder in order and stays inside.
    prev = (-1, 0, 0)
    for lba in range(0, hdd.sectors, hdd.sectors // 997):
        c, h, s, spt = hdd.locate(lba)
        assert 0 <= c < hdd.cylinders and 0 <= h < hdd.profile.heads and 0 <= s < spt
        assert (c, h, s) > prev
        prev = (c, h, s)


def test_random_reads_depth_one_match_the_formula(hdd):
    expected = hdd.expected_random_iops(8)
    assert 75 <= expected <= 80
    rng = random.Random(7)
    t = 0.0
    n = 3000
    for _ in range(n):
        _, t = hdd.service(rng.randrange(0, hdd.sectors - 8), 8, t)
    assert n / t == pytest.approx(expected, rel=0.10)


@pytest.mark.parametrize("where", ["outer", "inner"])
def test_sequential_reads_stream_at_the_media_rate(hdd, where):
    lba = 0 if where == "outer" else hdd.sectors - 600_000
    rate = hdd.media_rate(lba)
    t = 0.0
    start = None
    nsect = 256       # 128 KiB requests, back to back
    for i in range(2000):
        s, t = hdd.service(lba + i * nsect, nsect, t)
        start = s if start is None else start
    throughput = 2000 * nsect * SECTOR / (t - start)
    assert throughput == pytest.approx(rate, rel=0.10)


def _batches(model, order, rng, batches=60, depth=32, span=None):
    t = 0.0
    span = span or model.sectors
    for _ in range(batches):
        reqs = [rng.randrange(0, span - 8) for _ in range(depth)]
        if order == "clook":
            # Upwards from the head's cylinder, then wrap (an SSD: by LBA).
            head = getattr(model, "cyl", 0)
            pos = [(model.locate(r)[0] if hasattr(model, "locate") else r, r) for r in reqs]
            up = sorted(p for p in pos if p[0] >= head)
            down = sorted(p for p in pos if p[0] < head)
            reqs = [r for _, r in up + down]
        for r in reqs:
            _, t = model.service(r, 8, t)
    return batches * depth / t


def test_sorted_order_is_much_faster_on_the_disk():
    ordered = _batches(HddModel(), "clook", random.Random(3))
    arrival = _batches(HddModel(), "arrival", random.Random(3))
    assert ordered >= 1.5 * arrival


def test_rotation_follows_the_clock(hdd):
    # Read a sector, then the same one again at once: the platter has to
    # turn all the way round to bring it back under the head, so the second
    # read takes a revolution (its own transfer included).
    _, t1 = hdd.service(1000, 8, 0.0)
    s2, t2 = hdd.service(1000, 8, t1)
    assert t2 - s2 == pytest.approx(hdd.rev, rel=0.01)
    # Arriving half a turn later, it waits half a turn less.
    _, t3 = hdd.service(1000, 8, t2 + hdd.rev / 2)
    assert t3 - (t2 + hdd.rev / 2) == pytest.approx(hdd.rev / 2, rel=0.02)


def test_ssd_gains_nothing_from_order():
    ordered = _batches(SsdModel(), "clook", random.Random(5))
    arrival = _batches(SsdModel(), "arrival", random.Random(5))
    assert ordered == pytest.approx(arrival, rel=0.05)


def test_ssd_depth_one_and_parallel_channels():
    ssd = SsdModel()
    p = ssd.profile
    one = p.read_us / 1e6 + 8 * SECTOR / (p.channel_rate_mb * 1e6)
    _, end = ssd.service(0, 8, 0.0)
    assert end == pytest.approx(one)
    # N requests at once land on N channels and finish together.
    ends = [ssd.service(i * 8, 8, 1.0)[1] for i in range(p.channels)]
    assert max(ends) == pytest.approx(1.0 + one)
    _, later = ssd.service(0, 8, 1.0)      # the next one waits for a channel
    assert later == pytest.approx(1.0 + 2 * one)
    _, w = SsdModel().service(0, 8, 0.0, write=True)
    assert w > end


def test_profile_is_configurable():
    fast = HddModel(HddProfile(rpm=15000, average_seek_ms=3.5, full_stroke_ms=7.0,
                               track_to_track_ms=0.3, capacity_bytes=300_000_000_000))
    assert fast.expected_random_iops() > 2 * HddModel().expected_random_iops()
