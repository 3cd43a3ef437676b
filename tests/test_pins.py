"""`prism kernels update` on recorded archive listings (tests/data/kernels/:
`apt-cache madison` of bookworm's 6.1 and 6.12 packages and trixie's 7.3,
taken on 2026-12-03; tests/data/kernels-build-only/: the build-only
set's, bookworm's, trixie's and sid's, taken on 2026-12-04): no network.
And a pin that has left the archive stops setup with a message naming
the updater, before any download."""

import dataclasses
from pathlib import Path

import pytest

from prism import cli
from prism.common.errors import PrismError
from prism.host import kernels, pins

DATA = Path(__file__).resolve().parent / "data" / "kernels"
DATA_BUILD_ONLY = DATA.with_name("kernels-build-only")

# The pins as they were when the listings were recorded.
OLD = [kernels.Kernel("6.1", "6.1.0-56-amd64", "6.1.192-2"),
       kernels.Kernel("6.12", "6.12.117+deb12-amd64", "6.12.117-1~deb12u1"),
       kernels.Kernel("7.3", "7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", root="trixie",
                      vm_tested=False)]
OLD_PY = '''KERNELS = {
    "6.1": Kernel("6.1", "6.1.0-56-amd64", "6.1.192-2"),
    "6.12": Kernel("6.12", "6.12.117+deb12-amd64", "6.12.117-1~deb12u1"),
    "7.3": Kernel("7.3", "7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", root="trixie",
                  vm_tested=False),
}
'''


def listings() -> dict[str, str]:
    return {rel: (DATA / f"madison-{rel}.txt").read_text() for rel in ("bookworm", "trixie")}


@pytest.mark.parametrize("a,b,order", [
    ("6.1.192-3", "6.1.192-2", 1), ("6.1.192-2", "6.1.192-2", 0),
    ("6.12.118-1~deb12u1", "6.12.117-1~deb12u1", 1), ("6.1.170-3", "6.1.176-1", -1),
    ("7.3.4-1~bpo13+1", "7.3.4-1", -1), ("7.3.4-1~bpo13+2", "7.3.4-1~bpo13+1", 1),
    ("6.12.115-2~deb12u1", "6.12.115-10~deb12u1", -1), ("1:6.1-1", "7.3-1", 1),
    ("7.3~rc7-1~exp1", "7.3.1-1", -1),
])
def test_debian_version_order(a, b, order):
    assert pins.version_cmp(a, b) == order
    assert pins.version_cmp(b, a) == -order


def test_a_series_pattern_takes_its_own_abis_only():
    import re
    p61, p612, p73 = (re.compile("linux-image-" + pins.abi_pattern(k)) for k in OLD)
    assert p61.fullmatch("linux-image-6.1.0-57-amd64")
    assert not p61.fullmatch("linux-image-6.12.118+deb12-amd64")
    assert not p61.fullmatch("linux-image-6.1.0-57-cloud-amd64")
    assert p612.fullmatch("linux-image-6.12.118+deb12-amd64")
    assert not p612.fullmatch("linux-image-6.12.118+deb13-amd64")   # trixie's own 6.12
    assert not p612.fullmatch("linux-image-6.12.118+deb12-rt-amd64")
    assert p73.fullmatch("linux-image-7.3.5+deb13-amd64")
    assert not p73.fullmatch("linux-image-7.3.4+deb13-amd64-unsigned")


def test_update_moves_each_pin_to_the_newest_complete_abi(tmp_path):
    py = tmp_path / "kernels.py"
    py.write_text(OLD_PY)
    moves = pins.update(OLD, listings(), path=py)
    assert [str(c) for c in moves] == [
        "6.1: 6.1.0-56-amd64 (6.1.192-2) -> 6.1.0-57-amd64 (6.1.192-3)",
        "6.12: 6.12.117+deb12-amd64 (6.12.117-1~deb12u1) -> "
        "6.12.118+deb12-amd64 (6.12.118-1~deb12u1)"]
    text = py.read_text()
    assert 'Kernel("6.1", "6.1.0-57-amd64", "6.1.192-3")' in text
    assert 'Kernel("6.12", "6.12.118+deb12-amd64", "6.12.118-1~deb12u1")' in text
    # 7.3.4 is the newest in trixie-backports: its line, flags and all, stays.
    assert OLD_PY.splitlines()[3:5] == text.splitlines()[3:5]
    # Once more: nothing left to move.
    new = [kernels.Kernel("6.1", "6.1.0-57-amd64", "6.1.192-3"),
           kernels.Kernel("6.12", "6.12.118+deb12-amd64", "6.12.118-1~deb12u1"), OLD[2]]
    assert pins.update(new, listings(), path=py) == []


def test_an_abi_without_its_headers_or_source_is_not_a_pin():
    """The private headers must be of the image's own version: an ABI
    whose headers or linux-source is missing at that version is passed over."""
    offered = pins.parse_madison(listings()["bookworm"])
    offered["linux-source-6.1"].discard("6.1.192-3")
    assert pins.newest(OLD[0], offered) == ("6.1.0-56-amd64", "6.1.192-2")
    # 6.1.0-48 (6.1.172-1) is offered as an image only in the recording.
    assert "linux-headers-6.1.0-48-amd64" not in offered
    offered = {k: v for k, v in offered.items() if k != "linux-image-6.1.0-57-amd64"}
    assert pins.newest(OLD[0], offered)[0] == "6.1.0-56-amd64"  # type: ignore[index]


def test_a_pin_that_left_the_archive_says_so():
    text = "\n".join(line for line in listings()["bookworm"].splitlines()
                     if "6.1.192-2" not in line)
    moves = pins.changes(OLD[:1], pins.parse_madison(text))
    assert str(moves[0]).endswith("(the old one has left the archive)")


def test_no_abi_at_all_is_an_error():
    with pytest.raises(PrismError, match="offers no 7.3 kernel"):
        pins.changes(OLD[2:], pins.parse_madison(listings()["bookworm"]))


def test_the_command_prints_the_changes_and_dry_run_writes_nothing(capsys):
    before = pins.KERNELS_PY.read_text()
    assert cli.main(["kernels", "update", "--kernel", "all", "--dry-run",
                     "--listing", str(DATA)]) == 0
    out = capsys.readouterr().out
    expected = pins.update(list(kernels.KERNELS.values()), listings(), write=False)
    assert out.splitlines()[:len(expected)] == [str(c) for c in expected]
    assert "dry run" in out or "nothing changed" in out
    assert pins.KERNELS_PY.read_text() == before


def test_setup_of_a_root_kernel_whose_pin_left_stops_before_mmdebstrap(monkeypatch, tmp_path):
    """From an empty cache: the message names the updater, not apt's error,
    and nothing is downloaded or made."""
    monkeypatch.setenv("PRISM_ROOTS", str(tmp_path))
    monkeypatch.setattr(kernels, "_ensure_apt_lists", lambda pkg, release: ["7.3.9-1~bpo13+1"])
    monkeypatch.setattr(kernels, "_apt_updated", {"bookworm", "trixie"})
    monkeypatch.setattr(kernels.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    ran = []
    monkeypatch.setattr(kernels, "_run", lambda cmd, **kw: ran.append(cmd))
    with pytest.raises(PrismError) as e:
        kernels.fetch(kernels.get("7.3"))
    assert "is not offered by Debian's archive (trixie) any more" in str(e.value)
    assert "offered: 7.3.9-1~bpo13+1" in str(e.value)
    assert "Run 'prism kernels update'" in str(e.value)
    assert ran == [] and not (tmp_path / "trixie-root").exists()


def test_the_build_only_pins_move_too(capsys, tmp_path):
    """The build-only set (kernels.BUILD_ONLY) is pinned like the tested
    one: each flavour and release keeps to its own ABIs (an -rt pin never
    moves to a -cloud or a Debian 13 ABI), named by its own name; its
    line in kernels.py is rewritten as the tested pins' are."""
    import re
    current = kernels.build_only()
    for k in current:
        pat = re.compile("linux-image-" + pins.abi_pattern(k))
        assert pat.fullmatch(k.image_pkg), k
        assert [o.name for o in current if pat.fullmatch(o.image_pkg)] == [k.name]
    # The set as it was when the listings were recorded (bookworm's
    # flavours at 6.12.117), whatever kernels.py pins today.
    bo = [dataclasses.replace(k, abi=k.abi.replace("6.12.118+deb12", "6.12.117+deb12"),
                              version="6.12.117-1~deb12u1")
          if k.abi.startswith("6.12.118+deb12-") else k for k in current]
    listings = {rel: (DATA_BUILD_ONLY / f"madison-{rel}.txt").read_text()
                for rel in ("bookworm", "trixie", "sid")}
    moves = pins.update(bo, listings, write=False)
    # The recording's newest: bookworm's flavours 6.12.118; the rest are
    # the pins themselves.
    assert [str(c) for c in moves] == [
        "6.12-cloud: 6.12.117+deb12-cloud-amd64 (6.12.117-1~deb12u1) -> "
        "6.12.118+deb12-cloud-amd64 (6.12.118-1~deb12u1)",
        "6.12-rt: 6.12.117+deb12-rt-amd64 (6.12.117-1~deb12u1) -> "
        "6.12.118+deb12-rt-amd64 (6.12.118-1~deb12u1)"]
    py = tmp_path / "kernels.py"
    py.write_text(pins.KERNELS_PY.read_text().replace("6.12.118+deb12-", "6.12.117+deb12-")
                  .replace('"6.12.118-1~deb12u1", root="bookworm"',
                           '"6.12.117-1~deb12u1", root="bookworm"'))
    pins.update(bo, listings, path=py)
    assert ('Kernel("6.12", "6.12.118+deb12-rt-amd64", "6.12.118-1~deb12u1", root="bookworm"'
            in py.read_text())
    # Against today's pins the command names what would move, if anything.
    assert cli.main(["kernels", "update", "--kernel", "build-only", "--dry-run",
                     "--listing", str(DATA_BUILD_ONLY)]) == 0
    today = [str(c) for c in pins.update(current, listings, write=False)]
    assert capsys.readouterr().out.splitlines()[:len(today)] == today
