"""Timing models of a hard disk and of an SSD, for the emulated devices
that make media-aware scheduling measurable (null_blk has no seek cost).

The models are pure arithmetic over a clock the caller supplies: a server
passes wall-clock time, tests pass virtual time. All times in seconds.

HDD (defaults: a 7200 rpm 3.5" SATA disk of about 1 TB):
- geometry: cylinders x heads, zoned recording: sectors per track fall
  linearly from the outer zone to the inner one, so the media rate falls
  from about 200 MB/s to about half;
- seek time from cylinder distance d: track-to-track at d = 1, a square
  root curve for short seeks joined (same value and slope) to a straight
  line for long ones, reaching full stroke at the last cylinder; the join
  is placed so that the mean over uniformly random seeks is the average
  seek time (the three figures the model is calibrated from);
- rotation: the platter's angle follows the clock, so the wait after a
  seek is the angle from where the head lands to the first sector wanted;
- transfer at the zone's rate, a head switch for each track crossed, and a
  fixed command overhead per request; one actuator, requests served in
  the order given; a request contiguous with the last one continues its
  transfer (read-ahead, write-behind), as a streaming drive does.
SSD: N channels, each serving one request at a time with a fixed read or
program latency plus transfer; the channel is the least busy one.
Cloud volume (defaults: a general-purpose provisioned network volume's
baseline, 3,000 IOPS and 125 MiB/s): every command the volume accepts (up
to its queue depth) is served at once, in a base latency plus a
size-dependent transfer, as a network volume replicated behind a fast
fabric behaves; its IOPS and bandwidth limits are token buckets metered
by QEMU itself (throttling.*, see vm.ModelDisk), in front of the model.
"""

from __future__ import annotations

import dataclasses
import math

SECTOR = 512


@dataclasses.dataclass(frozen=True)
class HddProfile:
    rpm: int = 7200
    capacity_bytes: int = 1_000_204_886_016    # a "1 TB" disk
    heads: int = 4
    zones: int = 16
    outer_rate_mb: float = 200.0    # MB/s (1e6 bytes) in the outermost zone
    inner_rate_mb: float = 100.0    # ... and in the innermost
    track_to_track_ms: float = 1.0
    average_seek_ms: float = 8.5
    full_stroke_ms: float = 16.0
    head_switch_ms: float = 0.8
    overhead_ms: float = 0.2
    queue_depth: int = 1            # what the emulated device advertises
    ncq: int = 0                    # reorder window (0: serve in arrival order)
    write_cache: bool = True
    write_cache_mb: float = 8.0     # MiB of dirty data the cache holds before writes go through
    interface_rate_mb: float = 600.0    # SATA 3: how fast a cached write is taken in


@dataclasses.dataclass(frozen=True)
class HddNcqProfile(HddProfile):
    """The same disk with NCQ on, as a SATA disk behind AHCI: 32 commands
    queued, the drive choosing among all of them."""
    queue_depth: int = 32
    ncq: int = 32


@dataclasses.dataclass(frozen=True)
class CloudProfile:
    capacity_bytes: int = 100 * 2**30
    iops_limit: int = 3000          # I/Os per second (QEMU throttling.iops-total)
    bandwidth_mib: float = 125.0    # MiB/s (QEMU throttling.bps-total)
    iops_size_kib: int = 256        # a larger I/O counts as several (throttling.iops-size)
    latency_ms: float = 1.0         # base service time of any request
    transfer_mb: float = 500.0      # MB/s of one request's transfer: the size-dependent part
    queue_depth: int = 64


@dataclasses.dataclass(frozen=True)
class SsdProfile:
    capacity_bytes: int = 512_110_190_592
    channels: int = 8
    read_us: float = 80.0
    program_us: float = 200.0
    channel_rate_mb: float = 400.0
    queue_depth: int = 32


class SeekCurve:
    """t(d) = t2t + a (sqrt(d) - 1) for d <= d0, then a straight line with
    the same value and slope at d0, calibrated to t(1), t(max) and the mean
    over random seeks."""

    def __init__(self, max_distance: int, t2t: float, average: float, full: float):
        if not t2t < average < full:
            raise ValueError("need track-to-track < average < full stroke")
        self.max = max_distance
        self.t2t = t2t
        # Bisect on the join point: a later join gives a longer sqrt part,
        # a larger mean; the full-stroke condition fixes a for each d0.
        lo, hi = 1.0, float(max_distance)
        for _ in range(100):
            mid = (lo + hi) / 2
            self._set(mid, full)
            if self.mean() < average:
                lo = mid
            else:
                hi = mid
        self._set((lo + hi) / 2, full)

    def _set(self, d0: float, full: float) -> None:
        # t(max) = t2t + a (sqrt(d0) - 1) + a / (2 sqrt(d0)) (max - d0) = full
        k = (math.sqrt(d0) - 1) + (self.max - d0) / (2 * math.sqrt(d0))
        self.d0 = d0
        self.a = (full - self.t2t) / k

    def __call__(self, d: float) -> float:
        if d <= 0:
            return 0.0
        if d <= self.d0:
            return self.t2t + self.a * (math.sqrt(d) - 1)
        return (self.t2t + self.a * (math.sqrt(self.d0) - 1)
                + self.a / (2 * math.sqrt(self.d0)) * (d - self.d0))

    def mean(self, steps: int = 2000) -> float:
        """Mean seek time over two independent uniform positions: the
        distance has density 2 (max - d) / max^2."""
        total = 0.0
        h = self.max / steps
        for i in range(steps):
            d = (i + 0.5) * h
            total += self(d) * 2 * (self.max - d) / self.max ** 2 * h
        return total


class HddModel:
    def __init__(self, profile: HddProfile = HddProfile()):
        p = self.profile = profile
        self.parallel = 1       # one actuator
        self.rev = 60.0 / p.rpm
        # Sectors per track per zone, outer (zone 0) to inner.
        outer = p.outer_rate_mb * 1e6 * self.rev / SECTOR
        inner = p.inner_rate_mb * 1e6 * self.rev / SECTOR
        self.zone_spt = [int(round(outer + (inner - outer) * z / max(1, p.zones - 1)))
                         for z in range(p.zones)]
        total = p.capacity_bytes // SECTOR
        # Equal cylinder counts per zone, enough to hold the capacity.
        per_cyl = sum(self.zone_spt) / p.zones * p.heads
        self.cyls_per_zone = int(math.ceil(total / per_cyl / p.zones))
        self.cylinders = self.cyls_per_zone * p.zones
        self.zone_start = []            # first LBA of each zone
        lba = 0
        for spt in self.zone_spt:
            self.zone_start.append(lba)
            lba += spt * p.heads * self.cyls_per_zone
        self.sectors = total
        self.seek = SeekCurve(self.cylinders - 1, p.track_to_track_ms / 1000,
                              p.average_seek_ms / 1000, p.full_stroke_ms / 1000)
        self.cyl = 0
        self.head = 0
        self.free_at = 0.0
        # Where the head would be streaming to after the last request: the
        # drive reads ahead (and writes behind through its cache), so the
        # next contiguous request continues the transfer rather than
        # missing a turn while its command is decoded.
        self.stream_lba = -1
        self.stream_t = 0.0

    def locate(self, lba: int) -> tuple[int, int, int, int]:
        """(cylinder, head, sector in track, sectors per track) of @lba."""
        z = max(i for i, start in enumerate(self.zone_start) if start <= lba)
        spt = self.zone_spt[z]
        off = lba - self.zone_start[z]
        cyl_in_zone, rest = divmod(off, spt * self.profile.heads)
        head, sector = divmod(rest, spt)
        return z * self.cyls_per_zone + cyl_in_zone, head, sector, spt

    def media_rate(self, lba: int) -> float:
        """Bytes per second under the head at @lba."""
        return self.locate(lba)[3] * SECTOR / self.rev

    def angle(self, t: float) -> float:
        """Platter angle at time @t, as a fraction of a turn."""
        return (t / self.rev) % 1.0

    def position(self, lba: int, start: float) -> float:
        """When the transfer for @lba could begin if its command started
        at @start: command overhead, seek, head switch, then the wait for
        the sector to come round. The shortest-positioning-time-first
        choice of the NCQ mode ranks requests by this."""
        p = self.profile
        if lba == self.stream_lba:
            # Contiguous: the transfer goes on from where the last ended.
            return self.stream_t
        cyl, head, sector, spt = self.locate(lba)
        t = start + p.overhead_ms / 1000
        t += self.seek(abs(cyl - self.cyl))
        if cyl == self.cyl and head != self.head:
            t += p.head_switch_ms / 1000
        wait = (sector / spt - self.angle(t)) % 1.0
        return t + wait * self.rev

    def service(self, lba: int, nsect: int, now: float) -> tuple[float, float]:
        """Serve one request arriving at @now: returns (start, end). The
        actuator is busy until end; requests are served one at a time."""
        p = self.profile
        start = max(now, self.free_at)
        t = self.position(lba, start)
        # Transfer, track by track.
        left = nsect
        pos = lba
        while left > 0:
            c, h, s, spt = self.locate(pos)
            n = min(left, spt - s)
            t += n / spt * self.rev
            left -= n
            pos += n
            if left > 0:
                t += p.head_switch_ms / 1000
        self.cyl, self.head = self.locate(min(pos, self.sectors - 1))[:2]
        self.stream_lba, self.stream_t = pos, t
        # A contiguous request that arrives after the stream passed is
        # served from the read-ahead buffer: it still costs the command.
        t = max(t, start + p.overhead_ms / 1000)
        self.free_at = t
        return start, t

    def expected_random_iops(self, nsect: int = 8) -> float:
        """1 / (average seek + half a turn + transfer + overhead), the
        textbook figure for uniformly random requests at depth 1."""
        p = self.profile
        mean_rate = sum(self.zone_spt) / len(self.zone_spt)
        per = (p.average_seek_ms / 1000 + self.rev / 2 + nsect / mean_rate * self.rev
               + p.overhead_ms / 1000)
        return 1.0 / per


class SsdModel:
    def __init__(self, profile: SsdProfile = SsdProfile()):
        self.profile = profile
        self.sectors = profile.capacity_bytes // SECTOR
        self.parallel = profile.channels
        self.free_at = [0.0] * profile.channels

    def duration(self, nsect: int, write: bool) -> float:
        """A channel's time for one request: the flash read or program
        latency plus the transfer; where the data lies does not matter."""
        p = self.profile
        lat = (p.program_us if write else p.read_us) / 1e6
        return lat + nsect * SECTOR / (p.channel_rate_mb * 1e6)

    def service(self, lba: int, nsect: int, now: float, write: bool = False) -> tuple[float, float]:
        """Serve one request on the channel that frees first."""
        ch = min(range(self.profile.channels), key=lambda i: self.free_at[i])
        start = max(now, self.free_at[ch])
        end = start + self.duration(nsect, write)
        self.free_at[ch] = end
        return start, end


class CloudModel:
    """Every accepted command in service at once (the volume's depth is
    the only limit on parallelism); the rate limits are QEMU's."""

    def __init__(self, profile: CloudProfile = CloudProfile()):
        self.profile = profile
        self.sectors = profile.capacity_bytes // SECTOR
        self.parallel = profile.queue_depth

    def duration(self, nsect: int, write: bool) -> float:
        p = self.profile
        return p.latency_ms / 1000 + nsect * SECTOR / (p.transfer_mb * 1e6)

    def qemu_throttling(self) -> dict[str, int]:
        """QEMU -drive throttling.* options metering the volume."""
        p = self.profile
        return {"iops-total": p.iops_limit,
                "bps-total": int(p.bandwidth_mib * 2**20),
                "iops-size": p.iops_size_kib * 1024}

    def expected(self, bs: int, depth: int) -> tuple[float, float]:
        """(IOPS, seconds per request) that fio should measure with
        requests of @bs bytes at @depth on a fully busy volume: the least
        of the depth-bound rate and the two limits."""
        p = self.profile
        per = self.duration(bs // SECTOR, False)
        units = max(1, math.ceil(bs / (p.iops_size_kib * 1024)))
        iops = min(depth / per, p.iops_limit / units, p.bandwidth_mib * 2**20 / bs)
        return iops, per


# The emulated devices by the names the CLI and the bench profiles use.
PROFILES = {"hdd": HddProfile, "hdd-ncq": HddNcqProfile, "ssd-model": SsdProfile,
            "cloud": CloudProfile}
Profile = HddProfile | SsdProfile | CloudProfile


def load_profile(name: str, params: dict | None = None) -> Profile:
    """Profile @name with the fields in @params (from a parameter file)
    in place of the defaults. ValueError says what is wrong."""
    if name not in PROFILES:
        raise ValueError(f"unknown disk profile {name!r} (profiles: {', '.join(PROFILES)})")
    cls = PROFILES[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    params = dict(params or {})
    if params.pop("profile", name) != name:
        raise ValueError(f"the parameter file is for another profile than {name!r}")
    values = {}
    for key, val in params.items():
        if key not in fields:
            raise ValueError(f"{name}: no parameter {key!r} (parameters: {', '.join(fields)})")
        kind = type(fields[key].default)
        if kind is bool:
            ok = isinstance(val, bool)
        elif kind is float:
            ok = isinstance(val, (int, float)) and not isinstance(val, bool)
            val = float(val) if ok else val
        else:
            ok = isinstance(val, int) and not isinstance(val, bool)
        if not ok:
            raise ValueError(f"{name}: {key} must be {kind.__name__}, not {val!r}")
        values[key] = val
    profile = cls(**values)
    _check(profile)
    return profile


def _check(p: Profile) -> None:
    for f in dataclasses.fields(p):
        val = getattr(p, f.name)
        if isinstance(val, bool) or f.name == "ncq":
            continue
        if val <= 0:
            raise ValueError(f"{f.name} must be positive, not {val}")
    if isinstance(p, HddProfile):
        if not p.track_to_track_ms < p.average_seek_ms < p.full_stroke_ms:
            raise ValueError("need track_to_track_ms < average_seek_ms < full_stroke_ms")
        if p.ncq < 0 or p.ncq > p.queue_depth:
            raise ValueError(f"ncq (the reorder window) must be 0..queue_depth "
                             f"({p.queue_depth}), not {p.ncq}")
        if p.inner_rate_mb > p.outer_rate_mb:
            raise ValueError("inner_rate_mb must not exceed outer_rate_mb")


def make_model(profile: Profile) -> HddModel | SsdModel | CloudModel:
    if isinstance(profile, HddProfile):
        return HddModel(profile)
    if isinstance(profile, CloudProfile):
        return CloudModel(profile)
    return SsdModel(profile)


def profile_name(profile: Profile) -> str:
    # Exact type: hdd-ncq's profile is an HddProfile too.
    return next(n for n, cls in PROFILES.items() if type(profile) is cls)


PARAM_DOCS = {
    "rpm": "spindle speed; one turn takes 60 / rpm seconds",
    "capacity_bytes": "size the guest sees (the backing file is sparse)",
    "heads": "recording surfaces; a track switch within a cylinder costs head_switch_ms",
    "zones": "recording zones, equal numbers of cylinders each",
    "outer_rate_mb": "media rate of the outermost zone, MB/s (1e6 bytes)",
    "inner_rate_mb": "media rate of the innermost zone, MB/s (1e6 bytes)",
    "track_to_track_ms": "seek over one cylinder",
    "average_seek_ms": "mean seek between two uniformly random cylinders",
    "full_stroke_ms": "seek from the first cylinder to the last",
    "head_switch_ms": "moving to the next surface or track during a transfer",
    "overhead_ms": "fixed command processing time per request",
    "queue_depth": "commands the device accepts at once (virtio_blk.queue_depth in the guest)",
    "ncq": "reorder window: 0 serves in arrival order; N picks the shortest "
           "positioning time among the N oldest",
    "write_cache": "true: writes complete once in the cache and reach the media later",
    "write_cache_mb": "MiB of dirty data the cache holds; a write that does not fit goes "
                      "to the media",
    "interface_rate_mb": "link speed at which the cache takes a write in, MB/s (1e6 bytes)",
    "channels": "flash channels serving requests in parallel",
    "read_us": "flash read latency per request",
    "program_us": "flash program (write) latency per request",
    "channel_rate_mb": "transfer rate of one channel, MB/s (1e6 bytes)",
    "iops_limit": "I/Os per second the volume allows (metered by QEMU)",
    "bandwidth_mib": "MiB/s the volume allows (metered by QEMU)",
    "iops_size_kib": "an I/O larger than this counts as several against iops_limit",
    "latency_ms": "base service time of every request",
    "transfer_mb": "MB/s (1e6 bytes) of one request's transfer, the size-dependent part "
                   "of its time",
}


def to_toml(profile: Profile) -> str:
    """A parameter file holding @profile, for `prism disk params`."""
    lines = ["# prism disk model parameters; edit and pass with --disk-params FILE",
             f'profile = "{profile_name(profile)}"']
    for f in dataclasses.fields(profile):
        val = getattr(profile, f.name)
        lines.append(f"{f.name} = {str(val).lower() if isinstance(val, bool) else val}"
                     f"    # {PARAM_DOCS[f.name]}")
    return "\n".join(lines) + "\n"
