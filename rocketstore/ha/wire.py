"""The HA socket's two byte layouts (docs/replication.md §3.1, §3.2); big-endian, as Java's ByteBuffer."""
from __future__ import annotations

import struct

REPORT = struct.Struct(">q")        # slave -> master: its commit log's max offset
HEADER = struct.Struct(">qi")       # master -> slave: offset of body[0], body size
REPORT_SIZE = REPORT.size           # 8
HEADER_SIZE = HEADER.size           # 12
# a 4.9.8 slave reads into 4 MiB buffers: a bigger frame could never complete there
SLAVE_BUFFER = 4 * 1024 * 1024


def parse_host_port(addr: str) -> tuple[str, int]:
    """``host:port`` (haMasterAddress, haServerAddr) as a socket address."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{addr!r} is not host:port")
    return host.strip("[]"), int(port)
