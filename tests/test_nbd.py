"""The NBD server behind the emulated drives (`prism disk serve`), on the
host: protocol, data, errors, the trace, and that replies leave when the
model says (relative to the model's own service times, never absolute)."""

import csv
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbdclient import Client

from prism.drives import nbd

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(tmp_path):
    sock = tmp_path / "disk.sock"
    params = tmp_path / "params.toml"
    params.write_text('profile = "hdd"\nqueue_depth = 4\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "prism.cli", "disk", "serve", "--disk-params", str(params),
         "--socket", str(sock), "--backing", str(tmp_path / "disk.img"),
         "--trace", str(tmp_path / "trace.csv")],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    deadline = time.monotonic() + 20
    while not sock.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield proc, sock, tmp_path
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired as e:
        # Seen once in a full run (2026-11-28), never alone: say where the
        # server was, for whoever meets it next.
        state = server_state(proc.pid)
        proc.kill()
        proc.communicate()
        pytest.fail(f"the disk server ignored SIGTERM for 10 s: {state}; stderr: {e.stderr!r}")
    assert proc.returncode == 0, err
    return err


def server_state(pid: int) -> str:
    """The process's state, wait channel, scheduling policy and kernel
    stack, as far as /proc tells them."""
    out = []
    for name in ("status", "wchan", "stack", "sched"):
        try:
            text = Path(f"/proc/{pid}/{name}").read_text()
        except OSError as e:
            text = f"({e})"
        if name == "status":
            text = " ".join(line for line in text.splitlines()
                            if line.startswith(("State:", "SigBlk:", "SigCgt:", "SigPnd:",
                                                "ShdPnd:", "voluntary", "nonvoluntary")))
        elif name == "sched":
            text = " ".join(line.split()[0] + "=" + line.split()[-1]
                            for line in text.splitlines()
                            if line.startswith(("policy", "prio", "nr_switches")))
        out.append(f"{name}: {text.strip()}")
    return "; ".join(out)


def trace_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_data_round_trip_errors_and_trace(server):
    proc, sock, tmp = server
    c = Client(str(sock))
    assert c.size == 1_000_204_886_016
    assert c.flags & nbd.TFLAG_ROTATIONAL and c.flags & nbd.TFLAG_SEND_FLUSH
    pattern = bytes(random.Random(1).randrange(256) for _ in range(65536))
    assert c.write(1 << 30, pattern) == 0
    assert c.write(5 << 30, pattern[:4096], fua=True) == 0
    assert c.read(1 << 30, 65536) == pattern
    assert c.read(5 << 30, 4096) == pattern[:4096]
    assert c.read(7 << 30, 4096) == bytes(4096)         # never written: zeroes
    assert c.flush() == 0
    c.send(nbd.CMD_READ, c.size - 512, 4096)             # beyond the end
    assert c.reply()[1] == nbd.EINVAL
    c.send(9, 0, 0)                                      # no such command
    assert c.reply()[1] == nbd.EINVAL
    c.close()
    err = stop(proc)
    assert "6 commands served" in err
    assert not sock.exists()
    rows = trace_rows(tmp / "trace.csv")
    ops = [(r["op"], int(r["sector"]), int(r["sectors"]), r["cached"]) for r in rows
           if r["op"] != "destage"]
    assert ops == [("write", 1 << 21, 128, "1"), ("write", 5 << 21, 8, "0"),
                   ("read", 1 << 21, 128, "0"), ("read", 5 << 21, 8, "0"),
                   ("read", 7 << 21, 8, "0"), ("flush", 0, 0, "0")]
    # The cached write reached the media before the flush completed.
    destage = [r for r in rows if r["op"] == "destage"]
    assert [int(d["sector"]) for d in destage] == [1 << 21]
    flush = next(r for r in rows if r["op"] == "flush")
    assert float(flush["end_s"]) >= float(destage[0]["end_s"])
    # The file holds the data, sparsely.
    img = tmp / "disk.img"
    assert img.stat().st_size == c.size and img.stat().st_blocks * 512 < 1 << 24


def test_replies_leave_when_the_model_says(server):
    """Depth-1 random reads: the client waits about as long as the model's
    service times add up to: replies are never early and barely late."""
    proc, sock, tmp = server
    c = Client(str(sock))
    rng = random.Random(2)
    latencies = []
    t0 = time.monotonic()
    for _ in range(40):
        t = time.monotonic()
        c.read(rng.randrange(0, c.size // 4096) * 4096, 4096)
        latencies.append(time.monotonic() - t)
    elapsed = time.monotonic() - t0
    c.close()
    stop(proc)
    rows = [r for r in trace_rows(tmp / "trace.csv") if r["op"] == "read"]
    service = [float(r["service_ms"]) / 1000 for r in rows]
    assert len(service) == 40
    for lat, s in zip(latencies, service, strict=True):
        assert lat >= s * 0.999
    assert sum(service) <= elapsed <= 1.2 * sum(service)


def test_pipelined_requests_queue_in_the_drive(server):
    """Four requests at once on a one-actuator disk: served one after
    another in arrival order, each reply when its own service ends."""
    proc, sock, tmp = server
    c = Client(str(sock))
    offsets = [100 << 30, 900 << 30, 300 << 30, 700 << 30]
    handles = [c.send(nbd.CMD_READ, off, 4096) for off in offsets]
    got = [c.reply(4096)[0] for _ in offsets]
    assert got == handles
    c.close()
    stop(proc)
    rows = [r for r in trace_rows(tmp / "trace.csv") if r["op"] == "read"]
    assert [int(r["sector"]) * 512 for r in rows] == offsets
    for a, b in itertools.pairwise(rows):
        assert float(b["start_s"]) == pytest.approx(float(a["end_s"]), abs=1e-6)


def test_bad_parameter_file_is_refused(tmp_path):
    params = tmp_path / "p.toml"
    params.write_text("rpm = -1\n")
    r = subprocess.run([sys.executable, "-m", "prism.cli", "disk", "serve", "--disk-params",
                        str(params), "--socket", str(tmp_path / "s"), "--backing",
                        str(tmp_path / "img")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2
    assert "rpm must be positive" in r.stderr
    assert not (tmp_path / "img").exists()


# A stand-in for prism bench around its boot: it starts the emulated HDD's
# server as the CLI does (SIGTERM and SIGHUP handled as by prism.cli.main),
# says the server's pid, and waits to be killed.
_PARENT = """
import sys, time
from pathlib import Path
from prism import cli
from prism.drives import diskmodel
from prism.host import vm
cli.stop_on_signals()
disk = vm.ModelDisk(diskmodel.HddProfile(), Path(sys.argv[1]))
disk.start()
try:
    print(disk.proc.pid, flush=True)
    time.sleep(120)
finally:
    disk.stop()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; its parent (init) reaps it.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_disk_server_goes_when_prism_is_killed(tmp_path, sig):
    """kill (SIGTERM) runs prism's cleanup: the server is stopped and the
    image dropped; kill -9 leaves no cleanup, and the server still goes
    (it gets SIGTERM when its parent dies)."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert parent.stdout is not None
    server = int(parent.stdout.readline())
    assert _alive(server)
    parent.send_signal(sig)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)
    if sig == signal.SIGTERM:
        assert not (tmp_path / "disk.img").exists()


def test_model_disk_starts_and_stops_its_server(tmp_path):
    """What prism vm --device hdd does around the boot, without the boot."""
    from prism.drives import diskmodel
    from prism.host import vm

    disk = vm.ModelDisk(diskmodel.HddProfile(queue_depth=2), tmp_path, trace=True)
    disk.start()
    try:
        assert disk.socket.exists()
        opts = disk.qemu_opts(0)
        assert f"socket={disk.socket}" in opts and "format=raw" in opts
        assert "serial=prism-hdd" in opts and "num-queues=1" in opts
        assert disk.kernel_args() == ["virtio_blk.queue_depth=2"]
        assert "echo 1 > $d/queue/rotational" in disk.guest_setup()
        c = Client(str(disk.socket))
        assert c.write(0, b"x" * 4096) == 0 and c.read(0, 4096) == b"x" * 4096
        c.close()
    finally:
        disk.stop()
    assert disk.proc.returncode == 0
    assert not disk.backing.exists() and not disk.socket.exists()
    assert "2 commands served" in (tmp_path / "disk-server.log").read_text()
    assert len(trace_rows(disk.trace_path)) >= 2
    ssd = vm.ModelDisk(diskmodel.SsdProfile(), tmp_path)
    assert "echo 0 > $d/queue/rotational" in ssd.guest_setup()
    assert "serial=prism-ssd-model" in ssd.qemu_opts(1)
    assert "throttling" not in ssd.qemu_opts(1)
    cloud = vm.ModelDisk(diskmodel.CloudProfile(iops_limit=2000), tmp_path)
    opts = cloud.qemu_opts(2)
    assert "serial=prism-cloud" in opts and "echo 0 >" in cloud.guest_setup()
    assert ("throttling.iops-total=2000,throttling.bps-total=131072000,"
            "throttling.iops-size=262144 ") in opts
    assert cloud.kernel_args() == ["virtio_blk.queue_depth=64"]
    ncq = vm.ModelDisk(diskmodel.HddNcqProfile(), tmp_path)
    assert "serial=prism-hdd-ncq" in ncq.qemu_opts(3) and "echo 1 >" in ncq.guest_setup()


def test_closing_a_connection_twice_is_harmless(tmp_path):
    """SIGTERM raises Stop wherever the server is: once it came inside
    _close() for a client that had just left, and close() then closed
    that connection again (KeyError: not registered; exit code 1)."""
    import selectors
    import socket

    from prism.drives import diskmodel
    from prism.drives.drive import Drive

    srv = nbd.Server(Drive(diskmodel.make_model(diskmodel.HddProfile())),
                     tmp_path / "img", 1 << 20, tmp_path / "sock")
    a, b = socket.socketpair()
    srv.buffers[a] = bytearray()
    srv.sel.register(a, selectors.EVENT_READ)
    srv.sel.unregister(a)           # Stop arrived here, in the first _close
    srv.close()                     # closes what it still knows of: no error
    srv._close(a)
    b.close()


def test_disks_that_need_different_module_parameters_cannot_share_a_boot(tmp_path):
    from prism.common.errors import PrismError
    from prism.drives import diskmodel
    from prism.host import vm

    hdd = vm.ModelDisk(diskmodel.HddProfile(), tmp_path / "a")
    cloud = vm.ModelDisk(diskmodel.CloudProfile(), tmp_path / "b")
    assert vm.kernel_args([hdd, hdd]) == ["virtio_blk.queue_depth=1"]
    with pytest.raises(PrismError, match="virtio_blk.queue_depth=1 and virtio_blk.queue_depth=64"):
        vm.kernel_args([hdd, cloud])
