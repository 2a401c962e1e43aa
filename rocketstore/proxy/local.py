"""Local mode: the proxy inside ``rocketstore broker`` (``grpcServerPort`` in broker.conf).

RocketMQ 5 can embed its proxy in the broker process. Here the same service runs on its own
thread and asyncio loop beside the broker's (grpc.aio wants asyncio's own loop; the broker's may
be uvloop) and reaches the broker as in cluster mode, through the broker's NameServers, so
the two modes behave alike. Its journal lives in ``<store dir>/proxy``.
"""
from __future__ import annotations

import asyncio
import threading

from rocketstore.proxy.server import ProxyServer
from rocketstore.proxy.service import ProxyConfig


class LocalProxy:
    """A ``ProxyServer`` on a thread of its own; ``start()`` returns once it listens."""

    def __init__(self, host: str, port: int, cfg: ProxyConfig) -> None:
        self.server = ProxyServer(host, port, cfg)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def addr(self) -> str:
        return self.server.addr

    def start(self, timeout: float = 30.0) -> None:
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._stop = asyncio.Event()
            try:
                loop.run_until_complete(self.server.start())
            except BaseException as e:        # noqa: BLE001 - handed to start()'s caller
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self._stop.wait())
            finally:
                loop.run_until_complete(self.server.stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="rocketstore-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the local proxy did not start in {timeout} s")
        if error:
            raise error[0]

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
