"""A minimal NBD client for the tests: the fixed newstyle handshake with
NBD_OPT_GO, then pipelined simple requests (what QEMU's client does)."""

from __future__ import annotations

import socket
import struct

from prism.drives import nbd


class Client:
    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        magic, opt, flags = struct.unpack(">QQH", self._recv(18))
        assert (magic, opt) == (nbd.NBDMAGIC, nbd.IHAVEOPT)
        assert flags & nbd.FLAG_FIXED_NEWSTYLE
        self.sock.sendall(struct.pack(">I", nbd.FLAG_FIXED_NEWSTYLE | nbd.FLAG_NO_ZEROES))
        # An option the server does not know first: it must say so and go on.
        self._option(8, b"")          # NBD_OPT_STRUCTURED_REPLY
        assert self._opt_reply()[0] == nbd.REP_ERR_UNSUP
        self._option(nbd.OPT_GO, struct.pack(">I", 0) + struct.pack(">H", 0))
        self.size = self.flags = None
        while True:
            rep, data = self._opt_reply()
            if rep == nbd.REP_ACK:
                break
            assert rep == nbd.REP_INFO
            if struct.unpack(">H", data[:2])[0] == nbd.INFO_EXPORT:
                _, self.size, self.flags = struct.unpack(">HQH", data)
        self.handle = 0

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "server closed the connection"
            buf += chunk
        return buf

    def _option(self, opt: int, data: bytes) -> None:
        self.sock.sendall(struct.pack(">QII", nbd.IHAVEOPT, opt, len(data)) + data)

    def _opt_reply(self) -> tuple[int, bytes]:
        magic, opt, rep, length = struct.unpack(">QIII", self._recv(20))
        assert magic == nbd.OPT_REPLY_MAGIC
        return rep, self._recv(length)

    def send(self, typ: int, offset: int = 0, length: int = 0, data: bytes = b"",
             flags: int = 0) -> int:
        self.handle += 1
        self.sock.sendall(struct.pack(">IHHQQI", nbd.REQUEST_MAGIC, flags, typ, self.handle,
                                      offset, length) + data)
        return self.handle

    def reply(self, read_len: int = 0) -> tuple[int, int, bytes]:
        """(handle, error, data): @read_len bytes follow a read's reply
        (simple replies carry no length; the client must know it)."""
        magic, error, handle = struct.unpack(">IIQ", self._recv(16))
        assert magic == nbd.SIMPLE_REPLY_MAGIC
        return handle, error, self._recv(read_len) if read_len and not error else b""

    def read(self, offset: int, length: int) -> bytes:
        self.send(nbd.CMD_READ, offset, length)
        _, err, data = self.reply(length)
        assert err == 0
        return data

    def write(self, offset: int, data: bytes, fua: bool = False) -> int:
        self.send(nbd.CMD_WRITE, offset, len(data), data, nbd.CMD_FLAG_FUA if fua else 0)
        return self.reply()[1]

    def flush(self) -> int:
        self.send(nbd.CMD_FLUSH)
        return self.reply()[1]

    def close(self) -> None:
        self.send(nbd.CMD_DISC)
        self.sock.close()
