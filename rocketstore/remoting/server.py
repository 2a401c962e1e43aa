"""An asyncio TCP server for RocketMQ remoting, and an event loop on its own thread.

``RemotingServer`` accepts connections and hands their requests to one ``Processor``; it
closes connections idle for ``idle_timeout`` (RocketMQ: 120 s) and, on ``stop()``, every
connection. uvloop is used when installed (``use_uvloop``).

``LoopThread`` runs an event loop on a thread of its own so that synchronous code (tests, the
client, an application embedding a broker) can start servers and make calls.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from typing import Any, Coroutine, TypeVar

from rocketstore.remoting.command import MAX_FRAME
from rocketstore.remoting.connection import Connection, ConnectionLimits, Processor

log = logging.getLogger("rocketstore.remoting")
T = TypeVar("T")

IDLE_TIMEOUT = 120.0


EVENT_LOOP_ENV = "ROCKETSTORE_EVENT_LOOP"


def new_event_loop(use_uvloop: bool = True) -> asyncio.AbstractEventLoop:
    """An event loop: uvloop's when installed and wanted, else asyncio's.

    The environment variable ``ROCKETSTORE_EVENT_LOOP`` decides for the loops that want
    uvloop: ``asyncio`` gives them asyncio's, ``uvloop`` insists on uvloop (``ImportError``
    when it is not installed). ``use_uvloop=False`` is always asyncio's loop.
    """
    choice = os.environ.get(EVENT_LOOP_ENV, "").strip().lower()
    if choice not in ("", "asyncio", "uvloop"):
        raise ValueError(f"{EVENT_LOOP_ENV}={choice!r}: expected asyncio or uvloop")
    if use_uvloop and choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ImportError(f"{EVENT_LOOP_ENV}=uvloop but uvloop is not installed "
                                  "(pip install 'rocketstore[server]')") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which implementation ``loop`` is (for the servers' log)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class RemotingServer:
    """Listens on ``host:port`` (port 0 picks one: see ``port`` after ``start``)."""

    def __init__(self, processor: Processor, host: str = "127.0.0.1", port: int = 0, *,
                 idle_timeout: float = IDLE_TIMEOUT, max_frame: int = MAX_FRAME,
                 limits: ConnectionLimits | None = None) -> None:
        """``limits``: what each connection may hold (``ConnectionLimits``' defaults)."""
        self.processor = processor
        self.limits = limits
        self.host = host
        self.port = port
        self.idle_timeout = idle_timeout
        self.max_frame = max_frame
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._make_connection, self.host, self.port,
                                                reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = loop.create_task(self._close_idle())
        log.info("accepting connections on %s:%d", self.host, self.port)

    def _make_connection(self) -> Connection:
        conn = Connection(self.processor, max_frame=self.max_frame,
                          on_close=self.connections.discard, limits=self.limits)
        self.connections.add(conn)
        return conn

    async def _close_idle(self) -> None:
        period = min(10.0, self.idle_timeout / 2)
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self.idle_timeout
            for conn in list(self.connections):
                if conn.last_active < limit:
                    log.info("closing %s: idle for %.0f s", conn.peer, self.idle_timeout)
                    conn.close()

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
        self._server = None


class LoopThread:
    """An event loop running on a thread; ``run`` submits a coroutine from any thread."""

    def __init__(self, name: str = "rocketstore-remoting", use_uvloop: bool = True) -> None:
        self.loop = new_event_loop(use_uvloop)
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return self.submit(coro).result(timeout)

    def call(self, fn: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def is_current(self) -> bool:
        """Whether the calling thread is this loop's."""
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Stop the loop (cancelling what still runs on it) and join the thread."""
        if not self._thread.is_alive():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(_cancel_all(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
