"""`prism kernels update`: move each pin of kernels.py to the newest ABI of
its series that Debian's archive offers, and say what changed.

Debian keeps only the latest few ABIs of a series in its archive (a
security update of 6.1 is a new package name, linux-image-6.1.0-N-amd64),
so pins age out: fetching from an empty cache then fails, naming this
command (kernels.check_offered). The archive is read with apt, through the
host's lists for the host's release and the private lists of
kernels.apt_options() for another one, as `apt-cache madison` prints it;
newest() and rewrite() work on that text alone, so the test runs on a
recorded listing (tests/data/kernels/), without the network.

A pin moves only to an ABI whose image, headers and linux-source are all
offered at one version (the private headers must match the image).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

from ..common.errors import PrismError
from . import kernels


@dataclasses.dataclass(frozen=True)
class Change:
    series: str           # the Linux series, first on the pin's line
    old_abi: str
    old_version: str
    new_abi: str
    new_version: str
    still_offered: bool   # whether the archive still has the old pin
    name: str = ""        # the pin's name, if not its series ("6.12-rt")

    def __str__(self) -> str:
        gone = "" if self.still_offered else " (the old one has left the archive)"
        return (f"{self.name or self.series}: {self.old_abi} ({self.old_version}) -> "
                f"{self.new_abi} ({self.new_version}){gone}")


# Debian version order (deb-version(7)): epoch, then upstream version and
# revision compared piecewise, "~" before anything, even the end.
def _order(c: str) -> int:
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _cmp_part(a: str, b: str) -> int:
    while a or b:
        na = re.match(r"[^0-9]*", a).group()  # type: ignore[union-attr]
        nb = re.match(r"[^0-9]*", b).group()  # type: ignore[union-attr]
        for i in range(max(len(na), len(nb))):
            ca = _order(na[i]) if i < len(na) else 0
            cb = _order(nb[i]) if i < len(nb) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a, b = a[len(na):], b[len(nb):]
        da = re.match(r"[0-9]*", a).group()  # type: ignore[union-attr]
        db = re.match(r"[0-9]*", b).group()  # type: ignore[union-attr]
        ia, ib = int(da or 0), int(db or 0)
        if ia != ib:
            return -1 if ia < ib else 1
        a, b = a[len(da):], b[len(db):]
    return 0


def version_cmp(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian orders package versions @a and @b."""
    def split(v: str) -> tuple[int, str, str]:
        epoch, _, rest = v.rpartition(":") if ":" in v else ("0", "", v)
        up, _, rev = rest.rpartition("-") if "-" in rest else (rest, "", "0")
        return int(epoch or 0), up, rev
    ea, ua, ra = split(a)
    eb, ub, rb = split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _cmp_part(ua, ub) or _cmp_part(ra, rb)


def abi_pattern(k: kernels.Kernel) -> str:
    """A regex for the ABIs of @k's series and flavour: the pin's ABI with
    each number after the series free, except those of a word ("deb12",
    "amd64"): 6.1.0-56-amd64 -> 6\\.1\\.\\d+-\\d+-amd64."""
    assert k.abi.startswith(k.series + "."), k
    out = re.escape(k.series)
    for i, piece in enumerate(re.split(r"(\d+)", k.abi[len(k.series):])):
        if i % 2 and not (out[-1:].isalpha()):
            out += r"\d+"
        else:
            out += re.escape(piece)
    return out


def parse_madison(text: str) -> dict[str, set[str]]:
    """`apt-cache madison` output: package -> the versions offered."""
    offered: dict[str, set[str]] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[0] and fields[1]:
            offered.setdefault(fields[0], set()).add(fields[1])
    return offered


def newest(k: kernels.Kernel, offered: dict[str, set[str]]) -> tuple[str, str] | None:
    """The newest (abi, version) of @k's series whose image, headers and
    source are all offered at that version; None if there is none."""
    pat = re.compile("linux-image-(" + abi_pattern(k) + ")")
    best: tuple[str, str] | None = None
    for pkg, versions in offered.items():
        m = pat.fullmatch(pkg)
        if not m:
            continue
        abi = m.group(1)
        for v in versions:
            if (v in offered.get(f"linux-headers-{abi}", ())
                    and v in offered.get(k.source_pkg, ())
                    and (best is None or version_cmp(v, best[1]) > 0)):
                best = (abi, v)
    return best


def changes(pins: Iterable[kernels.Kernel], offered: dict[str, set[str]]) -> list[Change]:
    """What moves, for each of @pins; PrismError if a series has no
    complete ABI at all in the listing."""
    out = []
    for k in pins:
        found = newest(k, offered)
        if found is None:
            raise PrismError(f"the archive offers no {k.name} kernel matching "
                             f"linux-image-{abi_pattern(k)} with its headers and "
                             f"{k.source_pkg} at one version")
        abi, version = found
        if (abi, version) != (k.abi, k.version):
            still = (k.version in offered.get(k.image_pkg, ())
                     and k.version in offered.get(k.source_pkg, ()))
            out.append(Change(k.series, k.abi, k.version, abi, version, still,
                              name=k.name))
    return out


def rewrite(text: str, moves: Iterable[Change]) -> str:
    """kernels.py's text with each moved pin's line rewritten."""
    for c in moves:
        old = f'Kernel("{c.series}", "{c.old_abi}", "{c.old_version}"'
        if text.count(old) != 1:
            raise PrismError(f"kernels.py: expected one line starting {old}, "
                             f"found {text.count(old)}")
        text = text.replace(old, f'Kernel("{c.series}", "{c.new_abi}", "{c.new_version}"')
    return text


def listing(release: str, pins: list[kernels.Kernel]) -> str:
    """`apt-cache madison` of every image, headers and source package of
    @pins' series in @release's archive, after apt-get update (the host's
    lists for the host's release, else the private ones)."""
    kernels.apt_update(release)
    opts = kernels.apt_options(release)
    names: set[str] = set()
    for prefix in ("linux-image-", "linux-headers-"):
        out = kernels._run(["apt-cache"] + opts + ["pkgnames", prefix]).stdout
        for name in out.split():
            if any(re.fullmatch(prefix + abi_pattern(k), name) for k in pins):
                names.add(name)
    names.update(k.source_pkg for k in pins)
    r = kernels._run(["apt-cache"] + opts + ["madison"] + sorted(names))
    if r.returncode:
        raise PrismError(f"apt-cache madison ({release}) failed: {r.stderr.strip()[-500:]}")
    return r.stdout


KERNELS_PY = Path(kernels.__file__)


def update(pins: list[kernels.Kernel], listings: dict[str, str] | None = None,
           path: Path = KERNELS_PY, write: bool = True) -> list[Change]:
    """Move @pins to the newest ABI of their series and rewrite @path;
    @listings: release -> recorded madison text (else read from apt)."""
    moves: list[Change] = []
    for release in sorted({k.release for k in pins}):
        group = [k for k in pins if k.release == release]
        text = listings[release] if listings is not None else listing(release, group)
        moves += changes(group, parse_madison(text))
    if moves and write:
        path.write_text(rewrite(path.read_text(), moves))
    return moves
