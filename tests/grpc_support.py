"""Shared by the gRPC proxy tests: the official 5.x client's venv (session), a NameServer +
broker + ``rocketstore proxy`` per module, raw gRPC stubs built from our own protocol tables."""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest

from grpc_client import CLIENT_VERSION, ClientVenv
from servers import ServerProcess, start_broker, start_namesrv


TOPICS = ("t_normal", "t_fifo", "t_tx", "t_delay", "t_dlq", "t_cross", "t_inval", "t_async",
          "t_orphan", "t_restart", "t_raw", "t_push", "t_cpp", "t_race",
          "t_txc", "t_dl")
TYPES = {"t_fifo": "FIFO", "t_tx": "TRANSACTION", "t_orphan": "TRANSACTION", "t_delay": "DELAY"}


@pytest.fixture(scope="session")
def client_venv(request, tmp_path_factory) -> ClientVenv:
    where = os.environ.get("ROCKETSTORE_GRPC_CLIENT_VENV")
    name = f"rocketmq-python-client-{CLIENT_VERSION}"
    cache = getattr(request.config, "cache", None)     # absent under -p no:cacheprovider
    root = Path(where) if where else cache.mkdir(name) if cache is not None else \
        tmp_path_factory.mktemp(name)
    venv = ClientVenv(root)
    venv.ensure()
    return venv


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from rocketstore.remoting.admin_client import AdminClient
    tmp = tmp_path_factory.mktemp("grpc")
    state: dict = {}
    ns = start_namesrv(tmp)
    # the check service looks at half messages 3 s old every second (orphan recovery test)
    broker = start_broker(tmp / "store", ns.addr, conf={"transactionCheckInterval": "1000",
                                                        "transactionTimeOut": "3000"})
    proxy = None
    try:
        with AdminClient(ns.addr) as admin:
            for t in TOPICS:
                # RocketMQ 5's topic attribute, kept by the broker (no proxy option)
                kind = TYPES.get(t)
                admin.update_topic(t, read_queue_nums=4, write_queue_nums=4,
                                   broker_addr=broker.addr,
                                   attributes=kind and f"+message.type={kind}")
        proxy = start_proxy(ns.addr, tmp / "proxy")
        state = {"ns": ns, "broker": broker, "proxy": proxy, "tmp": tmp}
        yield state
    finally:
        for p in (state.get("proxy", proxy), broker, ns):
            if p is not None:
                assert p.stop() == 0, p.output[-3000:]


def start_proxy(ns: str, data_dir: Path) -> ServerProcess:
    return ServerProcess(["proxy", "--namesrv", ns, "--listen", "127.0.0.1:0", "--data-dir",
                          str(data_dir), "--fifo-group", "g_fifo", "--group-max-attempts",
                          "g_dlq=2"])


def run(client_venv, cluster, script: str, **kw) -> dict:
    return client_venv.run(script, cluster["proxy"].addr, cluster["tmp"] / "home", **kw)


def _pull_all(ns: str, topic: str, queue_id: int = 0):
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.common.protocol import PullMessageRequest, ResponseCode
    t = TcpTransport(ns)
    try:
        r = t.pull_message("broker-a", PullMessageRequest(
            consumer_group="g_check", topic=topic, queue_id=queue_id, queue_offset=0,
            max_msg_nums=32, sys_flag=0x4, subscription="*")).result(10)
        return r.messages if r.code == ResponseCode.SUCCESS else []
    finally:
        t.close()


def _stub(addr: str, rpc: str, req_cls: str, resp_cls: str, stream: bool = False):
    from rocketstore.proxy import protocol as pb
    ch = grpc.insecure_channel(addr)
    kind = ch.unary_stream if stream else ch.unary_unary
    call = kind(f"/{pb.SERVICE}/{rpc}", request_serializer=pb.CLASSES[req_cls].SerializeToString,
                response_deserializer=pb.CLASSES[resp_cls].FromString)
    return ch, call


META = (("x-mq-client-id", "raw@1@0@test"), ("x-mq-language", "PYTHON"))


def md(cid: str) -> tuple:
    """The metadata of a 5.x client call under client id ``cid``."""
    return (("x-mq-client-id", cid), ("x-mq-language", "PYTHON"))


def status_code(name: str) -> int:
    """A 5.x ``Code`` by name."""
    from rocketstore.proxy import protocol as pb
    return pb.enum_value("Code", name)


@contextlib.contextmanager
def local_proxy(tmp: Path, topics: dict[str, str], **config: Any) -> Iterator[tuple[Any, Any]]:
    """A NameServer and a broker (processes) with ``topics`` (name -> message.type, "" for
    none; two queues each) and the proxy serving gRPC on its own thread (``LocalProxy``, as in
    the broker), so a test can look at its tables: ``(local proxy, NameServer)``."""
    from rocketstore.proxy.local import LocalProxy
    from rocketstore.proxy.service import ProxyConfig
    from rocketstore.remoting.admin_client import AdminClient
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    local = None
    try:
        with AdminClient(ns.addr) as admin:
            for topic, kind in topics.items():
                admin.update_topic(topic, read_queue_nums=2, write_queue_nums=2,
                                   broker_addr=broker.addr,
                                   attributes=f"+message.type={kind}" if kind else None)
        local = LocalProxy("127.0.0.1", 0, ProxyConfig(ns.addr, str(tmp / "proxy"), **config))
        local.start()
        yield local, ns
    finally:
        if local is not None:
            local.stop()
        for p in (broker, ns):
            assert p.stop() == 0, p.output[-3000:]


class Telemetry:
    """One client's Telemetry stream, kept open until ``close()``."""

    def __init__(self, addr: str, cid: str, extra: tuple = ()) -> None:
        """``extra``: metadata sent besides the client id (e.g. an authorization)."""
        from rocketstore.proxy import protocol as pb
        self.ch = grpc.insecure_channel(addr)
        call = self.ch.stream_stream(f"/{pb.SERVICE}/Telemetry",
                                     request_serializer=pb.TelemetryCommand.SerializeToString,
                                     response_deserializer=pb.TelemetryCommand.FromString)
        self._out: list = []
        self._ready = threading.Condition()
        self._closing = False
        self.replies = call(self._commands(), metadata=md(cid) + tuple(extra), timeout=60)

    def _commands(self):
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._out or self._closing)
                if self._closing:
                    return
                cmd = self._out.pop(0)
            yield cmd

    def settings(self, *, topics=(), group: str | None = None):
        """Send producer settings (``topics``) or consumer settings (``group``); the reply."""
        from rocketstore.proxy import protocol as pb
        cmd = pb.TelemetryCommand()
        if group is None:
            cmd.settings.client_type = pb.enum_value("ClientType", "PRODUCER")
            for t in topics:
                cmd.settings.publishing.topics.add(name=t)
        else:
            cmd.settings.client_type = pb.enum_value("ClientType", "SIMPLE_CONSUMER")
            cmd.settings.subscription.group.name = group
            for t in topics:
                cmd.settings.subscription.subscriptions.add().topic.name = t
        with self._ready:
            self._out.append(cmd)
            self._ready.notify()
        return next(self.replies)

    def close(self) -> None:
        with self._ready:
            self._closing = True
            self._ready.notify()
        self.replies.cancel()
        self.ch.close()
