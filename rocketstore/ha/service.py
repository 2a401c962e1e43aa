"""``HAService``: replication for one broker (RocketMQ 4.9.8 ``HAService``, docs/replication.md §1, §3).

Every role binds the HA port (``listen_port + 1``) and accepts slaves there; a SLAVE also runs
the ``HAClient`` towards its master; a SYNC_MASTER's waiting puts go through
``ReplicaAckService``. ``push2slave_max_offset`` is the highest offset any slave acknowledged
(never lowered, as 4.9.8); ``is_slave_ok`` is what a SYNC_MASTER put checks first.
"""
from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from rocketstore.ha.connection import HAConnection

log = logging.getLogger("rocketstore.ha")


class HAService:
    """The HA side of a broker over its store.

    Parameters
    ----------
    store : MessageStore
        The broker's store (its commit log is sent from and appended to).
    config : BrokerConfig
        ``broker_role``, ``ha_*``, ``slave_timeout``.
    """

    def __init__(self, store: Any, config: Any) -> None:
        from rocketstore.ha.acks import ReplicaAckService
        from rocketstore.ha.client import HAClient
        self.store = store
        self.config = config
        self.commit_log = store.commit_log
        self.commit_log_queue = store.commit_log_queue
        self.file_size = store.config.mapped_file_size_commit_log
        self.push2slave_max_offset = 0
        self._acked = threading.Condition()         # acks raise push2slave_max_offset
        self._data = threading.Condition()          # SYNC_MASTER puts wake the writers
        self._conns: list[HAConnection] = []
        self._conns_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.client = HAClient(self, config.ha_master_address) \
            if config.broker_role == "SLAVE" else None
        self.acks = ReplicaAckService(self) if config.broker_role == "SYNC_MASTER" else None
        self.address = ""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, host: str, port: int) -> None:
        """Bind ``host:port`` (the HA port), start accepting, start the client and the
        replica acknowledgements."""
        ls = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((host, port))
            ls.listen(16)
            ls.settimeout(0.5)
        except BaseException:
            ls.close()
            raise
        self._listener = ls
        self.address = f"{host}:{ls.getsockname()[1]}"
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name="HAService-accept")
        self._accept_thread.start()
        if self.acks is not None:
            self.acks.start()
        if self.client is not None:
            self.client.start()
        log.info("HA service (%s) listening on %s", self.config.broker_role, self.address)

    def _accept_loop(self) -> None:
        ls = self._listener
        assert ls is not None
        while not self._stopped.is_set():
            try:
                sock, peer = ls.accept()
            except socket.timeout:
                continue
            except OSError:
                if not self._stopped.is_set():
                    log.exception("HA accept failed")
                    self._stopped.wait(0.1)
                continue
            conn = HAConnection(self, sock, f"{peer[0]}:{peer[1]}")
            with self._conns_lock:
                if self._stopped.is_set():
                    sock.close()
                    break
                self._conns.append(conn)
            log.info("HA: slave %s connected", conn.peer)
            conn.start()

    def shutdown(self) -> None:
        """Stop accepting, close every connection and the client, complete every waiting put."""
        self._stopped.set()
        if self.client is not None:
            self.client.shutdown()
        if self._accept_thread is not None:
            self._accept_thread.join()
        if self._listener is not None:
            self._listener.close()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        for c in conns:
            c.join()
        with self._acked:
            self._acked.notify_all()
        if self.acks is not None:
            self.acks.shutdown()

    # -- connections -------------------------------------------------------------------------

    def connection_gone(self, conn: HAConnection) -> None:
        with self._conns_lock:
            if conn in self._conns:
                self._conns.remove(conn)
        log.info("HA: slave %s disconnected", conn.peer)

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    def connections(self) -> list[HAConnection]:
        with self._conns_lock:
            return list(self._conns)

    # -- acknowledgements --------------------------------------------------------------------

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset``: raise ``push2slave_max_offset`` and wake the
        waiting puts."""
        if offset > self.push2slave_max_offset:
            with self._acked:
                if offset > self.push2slave_max_offset:
                    self.push2slave_max_offset = offset
                    self._acked.notify_all()

    def wait_acked(self, end: int, timeout: float) -> int:
        """Wait until a slave acknowledged ``end`` (or ``timeout`` s, or shutdown); returns the
        acknowledged offset."""
        if self.push2slave_max_offset < end and timeout > 0:
            with self._acked:
                self._acked.wait_for(lambda: self.push2slave_max_offset >= end
                                     or self._stopped.is_set(), timeout)
        return self.push2slave_max_offset

    def is_slave_ok(self, end: int) -> bool:
        """``HAService.isSlaveOK``: a slave is connected and within ``haSlaveFallbehindMax``."""
        return (len(self._conns) > 0
                and end - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def slave_fall_behind(self) -> int:
        """Bytes written here that no slave has acknowledged yet."""
        return max(0, self.commit_log.get_max_offset() - self.push2slave_max_offset)

    # -- writers -----------------------------------------------------------------------------

    def wakeup_writers(self) -> None:
        """New bytes a put waits to see replicated: the writers send now, not at their
        next 100 ms poll."""
        with self._data:
            self._data.notify_all()

    def wait_for_data(self, timeout: float) -> None:
        with self._data:
            self._data.wait(timeout)

    def set_master_address(self, addr: str) -> None:
        """The slave's master HA address (from the configuration or the NameServer)."""
        if self.client is not None:
            self.client.set_master_address(addr)
