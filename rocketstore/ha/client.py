"""The slave's side (RocketMQ 4.9.8 ``HAService.HAClient``, docs/replication.md §3.4).

Connects to the master's HA address, reports its commit log's end (at once after connecting,
which a real master accepts; then at least every ``haSendHeartbeatInterval``, and after every
frame that moved it), reads frames into a 4 MiB buffer and appends each body into its own commit
log at the offset the master names (``CommitLog.append_replicated``: one copy, from the
receive buffer into the mapped file). A frame whose offset is not its end closes the
connection; it reconnects at once and reports again. The master being silent for
``haHousekeepingInterval`` (masters send heartbeat frames every 5 s) closes it too, as 5.x does.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from rocketstore.ha.wire import HEADER, HEADER_SIZE, REPORT, SLAVE_BUFFER, parse_host_port

if TYPE_CHECKING:
    from rocketstore.ha.service import HAService

log = logging.getLogger("rocketstore.ha")

RETRY_S = 5.0           # no address / connect failed: as 4.9.8
_COMPACT_BELOW = 1 << 20    # room left in the receive buffer below which it is compacted


class HAClient:
    """Replicates the master's commit log into this slave's."""

    def __init__(self, service: HAService, master_address: str = "") -> None:
        self.service = service
        self.commit_log = service.commit_log
        self.master_address = master_address or ""
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="HAClient")
        self.reported = -1
        self.frames = 0
        self.bytes_received = 0
        self.reconnects = 0

    def start(self) -> None:
        self._thread.start()

    def set_master_address(self, addr: str) -> None:
        """Use ``addr`` from the next connection on (a live one is kept, as 4.9.8)."""
        if addr and addr != self.master_address:
            log.info("HA client: master address %s -> %s", self.master_address or "-", addr)
            self.master_address = addr
            self._wake.set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join()

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        buf = bytearray(SLAVE_BUFFER)
        while not self._stopped.is_set():
            addr = self.master_address
            if not addr:
                self._wake.wait(RETRY_S)
                self._wake.clear()
                continue
            try:
                sock = socket.create_connection(parse_host_port(addr), timeout=5.0)
            except (OSError, ValueError) as e:
                log.info("HA client: cannot connect to master %s: %s", addr, e)
                self._wake.wait(RETRY_S)
                self._wake.clear()
                continue
            self._sock = sock
            self.reconnects += 1
            try:
                self._serve(sock, buf)
            except (ConnectionError, TimeoutError) as e:
                if not self._stopped.is_set():
                    log.info("HA client: connection to %s failed: %s", addr, e)
            except Exception as e:  # noqa: BLE001 - e.g. a full disk: retry later, as 4.9.8
                if not self._stopped.is_set():
                    log.error("HA client: replication from %s failed: %s", addr, e)
                    self._stopped.wait(RETRY_S)
            finally:
                self._sock = None
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _report(self, sock: socket.socket, offset: int) -> None:
        sock.sendall(REPORT.pack(offset))
        self.reported = offset
        self._last_write = time.monotonic()

    def _serve(self, sock: socket.socket, buf: bytearray) -> None:
        cfg = self.service.config
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(1.0)
        mv = memoryview(buf)
        start = end = 0                 # unprocessed bytes: buf[start:end]
        self._report(sock, self.commit_log.get_max_offset())
        last_read = time.monotonic()
        while not self._stopped.is_set():
            try:
                n = sock.recv_into(mv[end:])
            except socket.timeout:
                n = -1
            if n == 0:
                return                  # the master closed
            now = time.monotonic()
            if n > 0:
                end += n
                last_read = now
                start = self._dispatch(mv, start, end)
                if start < 0:
                    return
                if start == end:
                    start = end = 0
                elif len(buf) - end < _COMPACT_BELOW:
                    # little room left: move the unfinished frame to the front (at most one
                    # frame's bytes, about once per 3 MiB received; through a copy, as the
                    # two ranges may overlap)
                    buf[:end - start] = bytes(mv[start:end])
                    start, end = 0, end - start
                top = self.commit_log.get_max_offset()
                if top > self.reported:
                    self._report(sock, top)     # the acknowledgement
            elif now - last_read > housekeeping:
                log.warning("HA client: nothing from master for %d ms, reconnecting",
                            cfg.ha_housekeeping_interval)
                return
            if time.monotonic() - self._last_write > heartbeat:
                self._report(sock, self.reported)

    def _dispatch(self, mv: memoryview, start: int, end: int) -> int:
        """Append every complete frame in ``mv[start:end]``; where the unfinished one starts,
        or -1 to drop the connection (offset mismatch)."""
        cl = self.commit_log
        while end - start >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(mv, start)
            top = cl.get_max_offset()
            if top != 0 and top != offset:
                log.warning("HA client: master pushed offset %d, this slave's end is %d: "
                            "reconnecting", offset, top)
                return -1
            if size < 0 or size > len(mv) - HEADER_SIZE:
                log.warning("HA client: frame of %d bytes cannot be read, reconnecting", size)
                return -1
            if end - start - HEADER_SIZE < size:
                break
            if size:
                body = start + HEADER_SIZE
                if cl.append_replicated(offset, mv[body:body + size]) < 0:
                    log.warning("HA client: cannot append %d bytes at %d (end %d), reconnecting",
                                size, offset, top)
                    return -1
                self.bytes_received += size
            self.frames += 1
            start += HEADER_SIZE + size
        return start
