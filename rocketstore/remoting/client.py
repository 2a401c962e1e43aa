"""A RocketMQ remoting client: one connection per address, calls from any thread.

The connections live on a ``LoopThread``; ``invoke`` waits for the response, ``invoke_async``
returns a ``concurrent.futures.Future`` completed by the loop (no thread waits per call), and
``invoke_oneway`` sends without an answer. Requests a server pushes over a connection
(CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED) go to the client's ``processor``.
As RocketMQ's client does, a call that times out closes its connection (the next call
reconnects).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from rocketstore.errors import TransportError
from rocketstore.remoting.command import FLAG_ONEWAY, RemotingCommand
from rocketstore.remoting.connection import Connection, Processor
from rocketstore.remoting.direct import ClientConnection
from rocketstore.remoting.server import LoopThread

log = logging.getLogger("rocketstore.remoting")

CONNECT_TIMEOUT = 3.0


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port); a clear error for anything else."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TransportError(addr, "address is not host:port")
    return host, int(port)


class RemotingClient:
    """Connections to brokers and NameServers, shared by a client instance's producers and
    consumers."""

    def __init__(self, processor: Processor | None = None, *, loop: LoopThread | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 rpc_hook: Callable[[dict[str, str], bytes | memoryview], None] | None = None
                 ) -> None:
        """``rpc_hook(ext_fields, body)`` may add header fields to every request before it is
        encoded (ACL signing)."""
        self.processor = processor
        self.rpc_hook = rpc_hook
        self._own_loop = loop is None
        self._loop = loop or LoopThread("rocketstore-client")
        self.connect_timeout = connect_timeout
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False
        self._opaques = itertools.count(1)
        self._outbox: list[tuple[str, bytes, int, Any, float]] = []
        self._outbox_lock = threading.Lock()
        self._flush_scheduled = False
        self._flushing = False      # the loop is writing frames it took from the outbox
        self._connect_waiting = 0   # frames waiting for their connection to open

    async def _connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Connection] = loop.create_future()
        self._connecting[addr] = fut
        try:
            host, port = split_addr(addr)
            try:
                _, made = await asyncio.wait_for(
                    loop.create_connection(lambda: ClientConnection(self.processor), host, port),
                    self.connect_timeout)
                conn = cast(Connection, made)
            except (OSError, asyncio.TimeoutError) as e:
                raise TransportError(addr, f"connect failed: {e or 'timed out'}") from None
            self._conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()        # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            self._connecting.pop(addr, None)

    def _live(self, addr: str) -> Connection | None:
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    def _enqueue(self, addr: str, cmd: RemotingCommand,
                 fut: concurrent.futures.Future[RemotingCommand] | None, timeout: float) -> None:
        # the frame is encoded on the caller's thread; the loop only writes. Frames queued
        # while the loop is busy go out in one writelines per connection (one wake-up).
        if self.rpc_hook is not None:
            self.rpc_hook(cmd.ext_fields, cmd.body)
        frame = cmd.encode()
        item = (addr, frame, cmd.opaque, fut, timeout)
        with self._outbox_lock:
            if not self._outbox and not self._flushing and not self._connect_waiting:
                # nothing queued ahead: this thread writes it (no loop wake-up, rocketstore.
                # remoting.direct); else behind the queued frames, in order
                conn = self._conns.get(addr)
                if (type(conn) is ClientConnection
                        and conn.write_direct(frame, cmd.opaque, fut, timeout)):
                    return
            self._outbox.append(item)
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        self._loop.call(self._flush)

    def _flush(self) -> None:
        with self._outbox_lock:
            items, self._outbox = self._outbox, []
            self._flush_scheduled = False
            self._flushing = True
        try:
            self._write_outbox(items)
        finally:
            with self._outbox_lock:
                self._flushing = False

    def _write_outbox(self, items: list[tuple[str, bytes, int, Any, float]]) -> None:
        by_conn: dict[Connection, list[bytes]] = {}
        for addr, frame, opaque, fut, timeout in items:
            conn = self._live(addr)
            if conn is None:
                # first use of the address (or it dropped): connect, then send
                with self._outbox_lock:
                    self._connect_waiting += 1
                asyncio.ensure_future(self._connect_and_send(addr, frame, opaque, fut, timeout))
                continue
            if fut is not None:
                conn.expect(opaque, fut, timeout)
            by_conn.setdefault(conn, []).append(frame)
        for conn, frames in by_conn.items():
            conn.write_frames(frames)

    async def _connect_and_send(self, addr: str, frame: bytes, opaque: int,
                                fut: concurrent.futures.Future[RemotingCommand] | None,
                                timeout: float) -> None:
        try:
            try:
                conn = await self._connection(addr)
            except BaseException as e:
                if fut is not None and not fut.done():
                    fut.set_exception(e if isinstance(e, TransportError)
                                      else TransportError(addr, f"connect failed: {e}"))
                return
            if fut is not None:
                conn.expect(opaque, fut, timeout)
            conn.write_frames([frame])
        finally:
            with self._outbox_lock:
                self._connect_waiting -= 1

    def invoke_async(self, addr: str, cmd: RemotingCommand,
                     timeout: float = 3.0) -> concurrent.futures.Future[RemotingCommand]:
        """Send a request; the future completes with the response or a ``TransportError``
        (and, as RocketMQ's client does, a timed-out call closes its connection)."""
        self._check_open(addr)
        fut: concurrent.futures.Future[RemotingCommand] = concurrent.futures.Future()
        cmd.opaque = next(self._opaques)
        self._enqueue(addr, cmd, fut, timeout)
        return fut

    def on_io_thread(self) -> bool:
        """Whether the calling thread is the one that reads every response."""
        return self._loop.is_current()

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response. Raises ``TransportError`` at once on
        the I/O thread: the response could only come through that thread, so waiting there
        would last the whole timeout (a callback run on it must not make such a call)."""
        if self.on_io_thread():
            raise TransportError(addr, "a synchronous call on the client's I/O thread would "
                                       "wait for that thread itself")
        return self.invoke_async(addr, cmd, timeout).result()

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send a request that gets no response."""
        self._check_open(addr)
        cmd.flag |= FLAG_ONEWAY
        cmd.opaque = next(self._opaques)
        self._enqueue(addr, cmd, None, 0.0)

    def _check_open(self, addr: str) -> None:
        if self._closed:
            raise TransportError(addr, "client is closed")

    def close(self) -> None:
        """Close every connection (and the loop, if this client made it)."""
        if self._closed:
            return
        self._closed = True

        async def _close_all() -> None:
            for conn in list(self._conns.values()):
                conn.close()
            self._conns.clear()

        try:
            self._loop.run(_close_all(), timeout=5)
        except (RuntimeError, concurrent.futures.TimeoutError):
            pass
        if self._own_loop:
            self._loop.stop()
