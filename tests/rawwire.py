"""A hostile client for the red-team tests: remoting frames built by hand, over a plain socket.

Our own client never sends what these tests send (long-named fields in a V2 header, path
names, broker-only properties, malformed JSON), so the frames are written here byte by byte:
``total length | header length (serialize type 0 = JSON in the top byte) | header | body``
(docs/protocol.md §1). Nothing here goes through ``rocketstore.remoting``.
"""
from __future__ import annotations

import itertools
import json
import socket
import struct
import time
from typing import Any

_opaques = itertools.count(1)


def frame(code: int, ext_fields: dict[str, Any] | None = None, body: bytes = b"", *,
          opaque: int | None = None, flag: int = 0, header: bytes | None = None) -> bytes:
    """One request frame; ``header`` replaces the JSON header bytes (for malformed ones)."""
    if header is None:
        doc = {"code": code, "language": "JAVA", "version": 395, "flag": flag,
               "opaque": next(_opaques) if opaque is None else opaque,
               "extFields": {k: str(v) for k, v in (ext_fields or {}).items()}}
        header = json.dumps(doc, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def recv_frame(conn: socket.socket, buf: bytes = b""
               ) -> tuple[dict[str, Any], bytes, bytes] | None:
    """One frame read from ``conn`` (a server side: a fake NameServer or master) after what
    ``buf`` holds already: (decoded JSON header, body, bytes left over), None when the peer
    closed first."""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
    total, hlen = struct.unpack(">ii", buf[:8])
    hlen &= 0xFFFFFF
    return json.loads(buf[8:8 + hlen]), buf[8 + hlen:4 + total], buf[4 + total:]


def props_string(props: dict[str, str]) -> str:
    """RocketMQ's properties string: name \\x01 value \\x02 ..."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


class RawClient:
    """One blocking socket to a server; ``call`` sends a frame and reads the next answer."""

    def __init__(self, addr: str, timeout: float = 10.0) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_frame(self) -> tuple[dict[str, Any], bytes]:
        """The next frame: (decoded JSON header, body)."""
        total, hlen = struct.unpack(">ii", self._read(8))
        hlen &= 0xFFFFFF
        header = json.loads(self._read(hlen))
        return header, self._read(total - 4 - hlen)

    def read_response(self, opaque: int | None = None) -> tuple[dict[str, Any], bytes]:
        """The next response (flag bit 0), skipping requests the server pushes."""
        while True:
            header, body = self.read_frame()
            if header.get("flag", 0) & 1 and (opaque is None or header.get("opaque") == opaque):
                return header, body

    def call(self, code: int, ext_fields: dict[str, Any] | None = None, body: bytes = b"",
             **kw: Any) -> tuple[dict[str, Any], bytes]:
        opaque = next(_opaques)
        self.send(frame(code, ext_fields, body, opaque=opaque, **kw))
        return self.read_response(opaque)

    def closed_by_server(self, within: float = 5.0) -> bool:
        """True when the server closes this connection within ``within`` seconds."""
        deadline = time.monotonic() + within
        self.sock.settimeout(0.2)
        try:
            while time.monotonic() < deadline:
                try:
                    if not self.sock.recv(1 << 16):
                        return True
                except socket.timeout:
                    continue
                except OSError:
                    return True
            return False
        finally:
            self.sock.settimeout(10.0)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
