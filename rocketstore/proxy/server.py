"""``ProxyServer``: the gRPC listener around ``MessagingService`` (start/stop/addr like the
NameServer and broker servers, so ``rocketstore proxy`` runs it the same way)."""
from __future__ import annotations

import grpc  # type: ignore[import-untyped]

from rocketstore.proxy.service import MessagingService, ProxyConfig, generic_handler

# Large messages both ways (a 4 MiB body plus headers is over grpcio's 4 MiB default) and
# keepalive pings from idle clients (the Java client pings every 300 s without calls).
SERVER_OPTIONS = [("grpc.max_receive_message_length", 130 * 1024 * 1024),
                  ("grpc.max_send_message_length", 130 * 1024 * 1024),
                  ("grpc.keepalive_permit_without_calls", 1),
                  ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                  # grpc sets SO_REUSEPORT by default: a second proxy would share the port
                  ("grpc.so_reuseport", 0)]


class ProxyServer:
    """RocketMQ 5's ``MessagingService`` on ``host:port`` (port 0 picks one)."""

    def __init__(self, host: str, port: int, cfg: ProxyConfig) -> None:
        self.host, self.port, self.cfg = host, port, cfg
        self.service: MessagingService | None = None
        self._server: grpc.aio.Server | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self.service = MessagingService(self.cfg)
        self._server = grpc.aio.server(options=SERVER_OPTIONS)
        self._server.add_generic_rpc_handlers((generic_handler(self.service),))
        try:
            bound = self._server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as e:           # grpc's "Failed to bind to address ..."
            raise OSError(f"{e}".split(";")[0]) from None
        if not bound:
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        self.port = bound
        await self._server.start()
        await self.service.start()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1.0)
        if self.service is not None:
            await self.service.close()
