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
import logging

from rocketstore.errors import TransportError
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import Connection, Processor
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
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.processor = processor
        self._own_loop = loop is None
        self._loop = loop or LoopThread("rocketstore-client")
        self.connect_timeout = connect_timeout
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False

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
                _, conn = await asyncio.wait_for(
                    loop.create_connection(lambda: Connection(self.processor), host, port),
                    self.connect_timeout)
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

    async def _invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        conn = await self._connection(addr)
        try:
            return await conn.request(cmd, timeout)
        except TransportError:
            conn.close()
            raise

    async def _oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self._connection(addr)
        conn.oneway(cmd)

    def invoke_async(self, addr: str, cmd: RemotingCommand,
                     timeout: float = 3.0) -> concurrent.futures.Future[RemotingCommand]:
        """Send a request; the future completes with the response or a ``TransportError``."""
        self._check_open(addr)
        return self._loop.submit(self._invoke(addr, cmd, timeout))

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response."""
        return self.invoke_async(addr, cmd, timeout).result()

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send a request that gets no response (waits only until it is written)."""
        self._check_open(addr)
        self._loop.submit(self._oneway(addr, cmd)).result(self.connect_timeout + 1)

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
