"""A ``Broker`` on the network: the main port, the VIP port and NameServer registration.

``BrokerServer`` binds ``listen_port`` and ``listen_port - 2`` (RocketMQ's "fast"/VIP port,
which serves everything but PULL_MESSAGE) before opening the broker, so the store host written
into every record is the advertised ``broker_ip1:listen_port`` that clients send to. It
registers the broker's topics with every NameServer at start, every
``register_name_server_period`` ms (30 s) and as soon as the topic table changes (a topic
auto-created by a send or a heartbeat), and unregisters at stop. A SLAVE takes its master's
address and HA address from the NameServer's answer and copies the master's topics, groups and
offsets every 10 s (``rocketstore.broker.slave_sync``, docs/replication.md). ``stop()`` closes the
listeners and connections, then the broker (which persists offsets and configs).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import socket
import zlib
from typing import Any

from rocketstore.broker.slave_sync import SlaveSynchronize
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import TransportError
from rocketstore.remoting import fastjson
from rocketstore.remoting.broker_processor import BrokerProcessor
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import ConnectionLimits
from rocketstore.remoting.executors import (RESERVE_BY_CODE, RESERVE_DEFAULT, BrokerExecutors,
                                            RoutingProcessor)
from rocketstore.remoting.server import LoopThread, RemotingServer

log = logging.getLogger("rocketstore.broker.remoting")

REGISTER_PERIOD_MS = 30_000
REGISTER_TIMEOUT_S = 6.0
_DEFAULT_IP = "127.0.0.1"        # BrokerConfig's broker_ip1 / broker_ip2 default


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port ``p`` with ``p``, ``p - 2`` (VIP) and ``p + 1`` (HA) free (tests run brokers
    on random ports)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        if p < 1026:
            continue
        try:
            with socket.socket() as a, socket.socket() as b, socket.socket() as c:
                a.bind((host, p))
                b.bind((host, p - 2))
                c.bind((host, p + 1))
            return p
        except OSError:
            continue
    raise OSError("no free port pair found")


def connection_limits(bc: Any) -> ConnectionLimits:
    """The per-connection limits a ``BrokerConfig`` sets (docs/protocol.md "Limits")."""
    return ConnectionLimits(max_in_flight=bc.server_max_in_flight_requests,
                            max_pending_bytes=bc.server_max_pending_response_bytes,
                            max_header=bc.server_max_header_bytes,
                            max_ext_fields=bc.server_max_ext_fields,
                            max_parked=bc.server_max_held_pulls,
                            reserve_by_code=RESERVE_BY_CODE, reserve_default=RESERVE_DEFAULT)


class _Deferred:
    """The processor the listeners use until the broker is open."""

    def __init__(self) -> None:
        self.target: BrokerProcessor | None = None

    def process(self, conn, cmd):
        if self.target is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "broker is starting")
        return self.target.process(conn, cmd)

    def connection_closed(self, conn) -> None:
        if self.target is not None:
            self.target.connection_closed(conn)


class BrokerServer:
    """Opens a broker on ``store_dir`` and serves it; ``start``/``stop`` run on an event loop."""

    def __init__(self, store_dir: str, broker_config: Any, store_config: Any, *,
                 namesrv_addrs: list[str] | None = None, host: str = "127.0.0.1",
                 register_period_ms: int = REGISTER_PERIOD_MS, broker: Any = None) -> None:
        """``broker``: serve an already open ``Broker`` (its store host must be the address
        given by ``broker_config``) instead of opening one; it is then not closed by ``stop``."""
        self.store_dir = store_dir
        self.broker_config = broker_config
        self.store_config = store_config
        self.namesrv_addrs = list(namesrv_addrs or [])
        self.host = host
        self.register_period_ms = register_period_ms
        self.broker: Any = broker
        self._own_broker = broker is None
        self._main = _Deferred()
        self._vip = _Deferred()
        self.server: RemotingServer | None = None
        self.vip_server: RemotingServer | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="broker-io")
        self.executors: BrokerExecutors | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ns_client: RemotingClient | None = None
        self._ns_loop: LoopThread | None = None
        self.acl: Any = None
        self.slave_sync: SlaveSynchronize | None = None

    @property
    def addr(self) -> str:
        return f"{self.broker_config.broker_ip1}:{self.broker_config.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        """``brokerIP2:listenPort+1``, sent as ``haServerAddr``. RocketMQ defaults both IPs to
        the machine's address; here an unset ``broker_ip2`` (127.0.0.1) follows
        ``broker_ip1``, so a broker listening on another address advertises a reachable HA
        port."""
        bc = self.broker_config
        if bc.broker_ip2 == _DEFAULT_IP and bc.broker_ip1 != _DEFAULT_IP:
            return f"{bc.broker_ip1}:{bc.listen_port + 1}"
        return bc.ha_server_addr

    async def start(self) -> None:
        from rocketstore.broker import Broker
        port = self.broker_config.listen_port
        if port == 0:
            port = free_port_pair(self.host)
        limits = connection_limits(self.broker_config)
        self.server = RemotingServer(self._main, self.host, port, limits=limits)
        await self.server.start()
        self.vip_server = RemotingServer(self._vip, self.host, port - 2, limits=limits)
        try:
            await self.vip_server.start()
        except OSError:
            await self.server.stop()
            raise
        bc = dataclasses.replace(self.broker_config, listen_port=port)
        sc = dataclasses.replace(self.store_config, store_host=f"{bc.broker_ip1}:{port}")
        self.broker_config, self.store_config = bc, sc
        loop = asyncio.get_running_loop()
        try:
            # before the broker opens: a plain_acl.yml that does not parse stops the start
            self.acl = self._open_acl(bc)
            if self._own_broker:
                self.broker = await loop.run_in_executor(self._executor, Broker.open,
                                                         self.store_dir, bc, sc)
                try:
                    # the HA port, listen port + 1, on every role (docs/replication.md)
                    self.broker.start_ha(self.host)
                except BaseException:
                    await loop.run_in_executor(self._executor, self.broker.close)
                    raise
        except BaseException:
            if self.acl is not None:
                self.acl.close()
            await self.vip_server.stop()
            await self.server.stop()
            raise
        # one set of executors for both ports, as RocketMQ registers the same pools on both
        ex = self.executors = BrokerExecutors(bc)
        self._main.target = RoutingProcessor(
            BrokerProcessor(self.broker, executor=ex.executor, acl=self.acl), ex)
        self._vip.target = RoutingProcessor(
            BrokerProcessor(self.broker, vip=True, executor=ex.executor, acl=self.acl), ex)
        if self.namesrv_addrs:
            self._ns_loop = LoopThread("rocketstore-broker-namesrv", use_uvloop=False)
            # one outbound client, signed as RocketMQ 5.3's BrokerOuterAPI signs (its
            # innerClientAuthenticationCredentials): registrations and the slave's sync alike
            creds = bc.inner_credentials
            self._ns_client = RemotingClient(loop=self._ns_loop,
                                             rpc_hook=creds.sign if creds else None)
            if self.broker.is_slave:
                self.slave_sync = SlaveSynchronize(self.broker, self._invoke_master, self.addr)
                self.broker.slave_sync = self.slave_sync
            await self._register_all()
            if self.slave_sync is not None:
                self.slave_sync.start()
            self._tasks.append(loop.create_task(self._register_periodically()))
            changed = asyncio.Event()
            self.broker.store.topic_config_manager.listeners.append(
                lambda: loop.call_soon_threadsafe(changed.set))
            self._tasks.append(loop.create_task(self._register_on_topic_change(changed)))
        log.info("broker %s serving %s (VIP %d), store %s", bc.broker_name, self.addr, port - 2,
                 self.store_dir)

    def _open_acl(self, bc: Any) -> Any:
        """The plain ACL validator when ``aclEnable`` (docs/acl.md), else None."""
        if not bc.acl_enable:
            return None
        from rocketstore.acl import PlainAccessValidator
        path = bc.acl_path(self.store_dir)
        log.info("ACL enabled: %s", path)
        return PlainAccessValidator(path)

    # -- NameServer registration --------------------------------------------------------------
    def register_body(self) -> bytes:
        table = self.broker.store.topic_config_manager
        bc = self.broker.config         # UPDATE_BROKER_CONFIG may change brokerPermission
        topics: dict[str, Any] = {}
        for name, tc in table.all().items():
            perm = tc.perm
            # a broker that lost read or write registers every topic with its own perm
            if bc.broker_permission & 6 != 6:
                perm = bc.broker_permission
            topics[name] = {"order": tc.order, "perm": perm, "readQueueNums": tc.read_queue_nums,
                            "topicFilterType": tc.topic_filter_type, "topicName": name,
                            "topicSysFlag": tc.topic_sys_flag, "writeQueueNums": tc.write_queue_nums}
        dv = table.data_version
        return fastjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": dv.counter, "timestamp": dv.timestamp},
            "topicConfigTable": topics}}).encode()

    def _register_command(self) -> RemotingCommand:
        bc = self.broker_config
        body = self.register_body()
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": bc.broker_name, "brokerAddr": self.addr,
            "clusterName": bc.broker_cluster_name,
            "haServerAddr": self.ha_server_addr, "brokerId": bc.broker_id,
            "compressed": False, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body)

    async def _register_all(self) -> None:
        assert self._ns_client is not None
        futs = [asyncio.wrap_future(self._ns_client.invoke_async(a, self._register_command(),
                                                                 REGISTER_TIMEOUT_S))
                for a in self.namesrv_addrs]
        first: RemotingCommand | None = None
        for addr, res in zip(self.namesrv_addrs, await asyncio.gather(*futs, return_exceptions=True)):
            if isinstance(res, BaseException):
                log.warning("register with NameServer %s failed: %s", addr, res)
            elif res.code != ResponseCode.SUCCESS:
                log.warning("NameServer %s refused registration: %s %s", addr, res.code, res.remark)
            elif first is None:
                first = res
        if first is not None:
            self._registered(first)

    def _registered(self, res: RemotingCommand) -> None:
        """``doRegisterBrokerAll`` with the first NameServer's answer: a slave takes its
        master's address (metadata sync) and HA address (replication, unless
        ``ha_master_address`` is configured) from it."""
        if not self.broker.is_slave:
            return
        master, ha = res.field("masterAddr") or None, res.field("haServerAddr") or None
        if self.slave_sync is not None:
            if master != self.slave_sync.master_addr:
                log.info("slave %s: master is %s (HA %s)", self.addr, master, ha)
            self.slave_sync.master_addr = master
        # RocketMQ uses a configured haMasterAddress of 6 characters or more as given
        if ha and len(self.broker_config.ha_master_address or "") < 6:
            setter = getattr(self.broker, "set_ha_master_address", None)
            if setter is not None:
                setter(ha)

    def _invoke_master(self, addr: str, code: int, timeout: float) -> tuple[int, bytes, str]:
        """A slave's metadata request to its master (no header, no body; signed when the
        broker has inner credentials)."""
        assert self._ns_client is not None
        r = self._ns_client.invoke(addr, RemotingCommand.request(code), timeout)
        return r.code, bytes(r.body) if r.body else b"", r.remark or ""

    async def _register_periodically(self) -> None:
        period = min(max(self.register_period_ms, 10_000), 60_000) / 1000   # RocketMQ's clamp
        while True:
            await asyncio.sleep(period)
            await self._register_all()

    async def _register_on_topic_change(self, changed: asyncio.Event) -> None:
        # RocketMQ re-registers right after a topic is created (oneway); so do we
        while True:
            await changed.wait()
            changed.clear()
            await self._register_all()

    async def _unregister_all(self) -> None:
        assert self._ns_client is not None
        bc = self.broker_config
        for addr in self.namesrv_addrs:
            try:
                await asyncio.wrap_future(self._ns_client.invoke_async(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
                        "brokerName": bc.broker_name, "brokerAddr": self.addr,
                        "clusterName": bc.broker_cluster_name, "brokerId": bc.broker_id}), 3.0))
            except TransportError as e:
                log.warning("unregister from NameServer %s failed: %s", addr, e)

    async def stop(self) -> None:
        """Unregister, stop listening, close every connection, then close the broker."""
        for t in self._tasks:
            t.cancel()
        if self.slave_sync is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor,
                                                             self.slave_sync.shutdown)
        if self._ns_client is not None:
            await self._unregister_all()
            self._ns_client.close()
            assert self._ns_loop is not None
            self._ns_loop.stop()
        for srv in (self.vip_server, self.server):
            if srv is not None:
                await srv.stop()
        if self.broker is not None and self._own_broker:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.broker.close)
            self.broker = None
        if self.acl is not None:
            self.acl.close()
        if self.executors is not None:
            self.executors.shutdown()
        self._executor.shutdown(wait=True)
        log.info("broker %s stopped", self.broker_config.broker_name)
