"""The emulated drive: what sits between the commands a host sends and the
timing model of the media (prism.drives.diskmodel).

A Drive keeps the queue of commands the device has accepted and decides
what its actuator (HDD) or channels (SSD) serve next, in an event order
that follows a clock the caller supplies: the NBD server passes the wall
clock, tests pass virtual time. The rules:

- an HDD has one actuator: commands are served one at a time in arrival
  order, or, with an NCQ window of N, the one among the N oldest queued
  whose transfer can start soonest (shortest positioning time first);
- an SSD has N channels; a free channel takes the oldest queued command;
  a cloud volume serves every command it accepted at once (one server
  per queue slot);
- an HDD write cache (when on, and not full) takes a write in at interface
  speed and completes it at once; the data goes to the media later, when
  the actuator has nothing queued or a FLUSH waits for it (a write-back
  frees its room in the cache when it starts). A FUA write, or one that
  finds the cache full, is served by the actuator like a read;
- FLUSH completes when the cache holds nothing that is not on the media.

Callers must pass times that never go backwards: advance(now) settles
everything that happened up to @now before submit(now) adds to the queue,
so no decision at an earlier time sees a later arrival.
"""

from __future__ import annotations

import dataclasses
import heapq

from .diskmodel import SECTOR, CloudModel, HddModel, SsdModel

READ, WRITE, FLUSH = "read", "write", "flush"


@dataclasses.dataclass
class Command:
    op: str                  # READ, WRITE or FLUSH
    lba: int = 0             # in 512-byte sectors
    nsect: int = 0
    arrival: float = 0.0
    fua: bool = False
    tag: object = None       # the caller's handle, returned untouched
    start: float = 0.0       # when the media (or cache) began on it
    end: float = 0.0         # when the device reports it complete
    cached: bool = False     # a write the cache took in


class Drive:
    def __init__(self, model: HddModel | SsdModel | CloudModel):
        self.model = model
        # The HDD's actuator, or the flash channels / volume slots.
        self.disk = model if isinstance(model, HddModel) else None
        self.flash = None if isinstance(model, HddModel) else model
        self.hdd = self.disk is not None
        self.servers = [0.0] * model.parallel  # free-at times
        hp = self.disk.profile if self.disk else None
        self.ncq = hp.ncq if hp else 0
        self.cache_bytes = int(hp.write_cache_mb * 2**20) if hp and hp.write_cache else 0
        self.overhead = hp.overhead_ms / 1000 if hp else 0.0
        self.interface_rate = hp.interface_rate_mb * 1e6 if hp else 0.0
        self.queue: list[Command] = []           # waiting for the media, arrival order
        self.dirty: list[tuple[int, int]] = []   # (lba, nsect) cached, not on media
        self.dirty_bytes = 0
        self.destage_end = 0.0                   # the last destage ends then
        self.flushes: list[Command] = []         # waiting for the cache to drain
        self._done: list[tuple[float, int, Command]] = []
        self._seq = 0
        self.destages: list[Command] = []        # cache write-backs, for the trace

    # -- the caller's side -------------------------------------------------

    def submit(self, cmd: Command, now: float) -> None:
        """@cmd arrives at @now (call advance(now) first)."""
        cmd.arrival = now
        if cmd.op == FLUSH:
            if self.dirty:
                self.flushes.append(cmd)
            else:
                self._complete(cmd, now, max(now, self.destage_end) + self.overhead)
        elif (cmd.op == WRITE and not cmd.fua and self.cache_bytes
              and self.dirty_bytes + cmd.nsect * SECTOR <= self.cache_bytes):
            cmd.cached = True
            self.dirty.append((cmd.lba, cmd.nsect))
            self.dirty_bytes += cmd.nsect * SECTOR
            self._complete(cmd, now,
                           now + self.overhead + cmd.nsect * SECTOR / self.interface_rate)
        else:
            self.queue.append(cmd)
        self.advance(now)

    def advance(self, now: float) -> None:
        """Make every decision the device would have made up to @now."""
        while True:
            i = min(range(len(self.servers)), key=self.servers.__getitem__)
            free = self.servers[i]
            if self.dirty and (self.flushes or not self.queue):
                if free > now:
                    break
                self._destage(free)
                continue
            if not self.queue:
                break
            t = max(free, self.queue[0].arrival)
            if t > now:
                break
            cmd = self._pick(t)
            self.queue.remove(cmd)
            self._serve(i, cmd, t)

    def next_event(self) -> float | None:
        """The earliest time something is due: a completion to report or
        a decision to make. None when the device is idle and empty."""
        times = []
        if self._done:
            times.append(self._done[0][0])
        if self.queue or self.dirty:
            times.append(min(self.servers))
        return min(times) if times else None

    def completed(self, now: float) -> list[Command]:
        """Commands whose completion time has come, in completion order."""
        self.advance(now)
        out = []
        while self._done and self._done[0][0] <= now:
            out.append(heapq.heappop(self._done)[2])
        return out

    @property
    def busy(self) -> bool:
        return bool(self._done or self.queue or self.dirty or self.flushes)

    # -- inside the device -------------------------------------------------

    def _pick(self, t: float) -> Command:
        if not self.ncq or self.disk is None:
            return self.queue[0]
        disk = self.disk
        window = [c for c in self.queue[:self.ncq] if c.arrival <= t]
        return min(window, key=lambda c: disk.position(c.lba, t))

    def _media(self, server: int, lba: int, nsect: int, write: bool,
               t: float) -> float:
        if self.disk is not None:
            _, end = self.disk.service(lba, nsect, t)
        else:
            assert self.flash is not None
            end = t + self.flash.duration(nsect, write)
        self.servers[server] = end
        return end

    def _serve(self, server: int, cmd: Command, t: float) -> None:
        end = self._media(server, cmd.lba, cmd.nsect, cmd.op == WRITE, t)
        self._complete(cmd, t, end)

    def _destage(self, t: float) -> None:
        """Write one cached extent to the media, nearest ahead of the head
        first (the drive sorts its own cache), then wrap round."""
        assert self.disk is not None        # only an HDD has a write cache
        head = self.disk.stream_lba
        ahead = [d for d in self.dirty if d[0] >= head]
        lba, nsect = min(ahead or self.dirty)
        self.dirty.remove((lba, nsect))
        self.dirty_bytes -= nsect * SECTOR
        end = self._media(0, lba, nsect, True, t)
        self.destages.append(Command("destage", lba, nsect, arrival=t, start=t, end=end))
        self.destage_end = end
        if not self.dirty:
            for f in self.flushes:
                self._complete(f, f.arrival, end + self.overhead)
            self.flushes = []

    def _complete(self, cmd: Command, start: float, end: float) -> None:
        cmd.start, cmd.end = start, end
        self._seq += 1
        heapq.heappush(self._done, (end, self._seq, cmd))
