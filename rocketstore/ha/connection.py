"""The master's side of one slave connection (RocketMQ 4.9.8 ``HAConnection``, docs/replication.md §3.3).

Two threads per connection. The reader takes the slave's 8-byte reports (only the latest
complete, stream-aligned one of a read counts): the first is where to start sending, every one
is an acknowledgement (``HAService.notify_transfer_some``). It closes the connection after
``haHousekeepingInterval`` without a byte, and when a later report is beyond this log's end.
The writer sends frames ``[int64 offset][int32 size][raw bytes]`` of at most
``haTransferBatchSize`` bytes, never across a file, as read-only views of the mapped commit-log
files (``sendmsg``: several frames per call, no bytes joined or copied in Python), and an
empty heartbeat frame after ``haSendHeartbeatInterval`` idle.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from rocketstore.ha.wire import HEADER, REPORT, REPORT_SIZE

if TYPE_CHECKING:
    from rocketstore.ha.service import HAService

log = logging.getLogger("rocketstore.ha")

# bytes gathered into one sendmsg (many 32 KiB frames): fewer system calls at full speed
_SEND_GATHER = 1 << 20
_SEND_MAX_PARTS = 512
# caught up: look for new bytes this often (4.9.8 waits 100 ms; SYNC_MASTER puts wake the
# writer at once either way). 10 ms bounds an ASYNC_MASTER slave's lag for ~100 wake-ups/s
POLL_S = 0.01


def send_parts(sock: socket.socket, parts: list, stopped: threading.Event) -> None:
    """Write every buffer of ``parts`` (``sendmsg``, resumed after partial writes). A full
    socket buffer (a slow or paused slave) is waited out until ``stopped``."""
    while parts:
        try:
            n = sock.sendmsg(parts[:_SEND_MAX_PARTS])
        except (socket.timeout, BlockingIOError):
            if stopped.is_set():
                raise ConnectionAbortedError("HA connection closing")
            continue
        while n:
            head = parts[0]
            if n >= len(head):
                n -= len(head)
                parts.pop(0)
            else:
                parts[0] = memoryview(head)[n:]
                n = 0


class HAConnection:
    """One slave, seen from the master."""

    def __init__(self, service: HAService, sock: socket.socket, peer: str) -> None:
        self.service = service
        self.sock = sock
        self.peer = peer
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(1.0)
        self.slave_request_offset = -1      # the first report: where sending starts
        self.slave_ack_offset = -1          # the latest report
        self.next_transfer_from = -1
        self.last_read = time.monotonic()
        self.bytes_sent = 0
        self._stopped = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"HAConnection-read-{peer}")
        self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                        name=f"HAConnection-write-{peer}")

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    # -- slave -> master ---------------------------------------------------------------------

    def _read_loop(self) -> None:
        cfg = self.service.config
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        pending = b""                   # a report's first bytes (stream alignment is by 8)
        try:
            while not self._stopped.is_set():
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    if time.monotonic() - self.last_read > housekeeping:
                        log.warning("HA connection %s: nothing read for %d ms, closing",
                                    self.peer, cfg.ha_housekeeping_interval)
                        break
                    continue
                if not chunk:
                    break
                self.last_read = time.monotonic()
                data = pending + chunk if pending else chunk
                whole = len(data) - len(data) % REPORT_SIZE
                pending = data[whole:]
                if whole and not self._on_report(REPORT.unpack_from(data, whole - REPORT_SIZE)[0]):
                    break
        except OSError as e:
            if not self._stopped.is_set():
                log.info("HA connection %s: read failed: %s", self.peer, e)
        finally:
            self.close()
            if self._writer.is_alive():
                self._writer.join()
            self.sock.close()           # only now: no thread uses the descriptor any more
            self.service.connection_gone(self)

    def _on_report(self, offset: int) -> bool:
        self.slave_ack_offset = offset
        top = self.service.commit_log.get_max_offset()
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset      # no check, as 4.9.8
        elif offset > top:
            log.warning("HA connection %s: slave reports offset %d beyond this commit log's end "
                        "%d, closing (a slave ahead of its master: wipe the slave's store)",
                        self.peer, offset, top)
            return False
        if offset <= top:
            # unlike 4.9.8, a report past this log's end acknowledges nothing: bytes this
            # master writes there later were never sent, so no SYNC_MASTER put may count them
            self.service.notify_transfer_some(offset)
        return True

    # -- master -> slave ---------------------------------------------------------------------

    def _start_offset(self) -> int:
        req = self.slave_request_offset
        if req != 0:
            return req
        # a new, empty slave gets the last file only (4.9.8)
        end = self.service.commit_log.get_max_offset()
        return max(0, end - end % self.service.file_size)

    def _gather(self, parts: list) -> int:
        """Frames from ``next_transfer_from`` on, appended to ``parts``; their byte count."""
        mfq = self.service.commit_log_queue
        batch = self.service.config.ha_transfer_batch_size
        total = 0
        while total < _SEND_GATHER and len(parts) < _SEND_MAX_PARTS - 1:
            at = self.next_transfer_from
            mf = mfq.find_mapped_file_by_offset(at)
            if mf is None:
                break
            try:
                view = mf.select(at - mf.file_from_offset)
            except Exception:   # noqa: BLE001 - a file retired under us: nothing there now
                break
            if view is None or len(view) == 0:
                break
            size = min(len(view), batch)
            parts.append(HEADER.pack(at, size))
            parts.append(view[:size] if size < len(view) else view)
            self.next_transfer_from = at + size
            total += size
        return total

    def _write_loop(self) -> None:
        svc = self.service
        heartbeat = svc.config.ha_send_heartbeat_interval / 1000.0
        last_write = time.monotonic()
        try:
            while not self._stopped.is_set():
                if self.slave_request_offset < 0:
                    self._stopped.wait(0.01)        # nothing before the first report
                    continue
                if self.next_transfer_from < 0:
                    self.next_transfer_from = self._start_offset()
                    log.info("HA connection %s: slave asked for %d, sending from %d", self.peer,
                             self.slave_request_offset, self.next_transfer_from)
                parts: list = []
                n = self._gather(parts)
                if parts:
                    send_parts(self.sock, parts, self._stopped)
                    self.bytes_sent += n
                    last_write = time.monotonic()
                    continue
                if time.monotonic() - last_write > heartbeat:
                    send_parts(self.sock, [HEADER.pack(self.next_transfer_from, 0)], self._stopped)
                    last_write = time.monotonic()
                    continue
                svc.wait_for_data(POLL_S)
        except OSError as e:
            if not self._stopped.is_set():
                log.info("HA connection %s: write failed: %s", self.peer, e)
        finally:
            self.close()

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop both threads: the socket is shut down at once (the slave sees the close);
        the reader closes the descriptor once the writer is gone. Idempotent, any thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stopped.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def join(self, timeout: float = 5.0) -> None:
        for t in (self._reader, self._writer):
            if t.is_alive() and t is not threading.current_thread():
                t.join(timeout)
