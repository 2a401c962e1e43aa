"""Test helpers for the messaging tests: a broker on a tmp store, waits, a recording listener."""
from __future__ import annotations

import collections
import threading
import time

from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, MessageQueue, PushConsumer,
                                SendStatus)

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
# short delay levels: level 1..4 = 1 s, 2 s, 1 s, 1 s (retry levels 3 + n stay short)
SHORT_LEVELS = "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


def open_broker(path, store_host=None, **broker_cfg):
    store_cfg = StoreConfig(mapped_file_size_commit_log=4 * 1024 * 1024,
                            mapped_file_size_consume_queue=6000 * 20,
                            message_delay_level=SHORT_LEVELS,
                            **({"store_host": store_host} if store_host else {}))
    cfg = dict(transaction_check_interval=500, transaction_time_out=300)
    cfg.update(broker_cfg)
    return Broker.open(path, BrokerConfig(**cfg), store_cfg)


_CLIENT_KW: dict[int, dict] = {}     # id(broker) -> how clients reach it over TCP


class ServedBroker:
    """An in-process ``Broker`` on a tmp store; with transport ``tcp`` it is also served, in this
    process, by a NameServer and the broker's TCP server, and clients get ``namesrv_addr``."""

    def __init__(self, path, transport: str) -> None:
        self.transport = transport
        if transport == "inprocess":
            self.broker = open_broker(path)
            return
        assert transport == "tcp", transport
        from rocketstore.namesrv.server import NameServer
        from rocketstore.remoting.broker_server import BrokerServer, free_port_pair
        from rocketstore.remoting.server import LoopThread
        port = free_port_pair("127.0.0.1")
        self.broker = open_broker(path, store_host=f"127.0.0.1:{port}", listen_port=port)
        self.loop = LoopThread("test-servers", use_uvloop=False)
        self.ns = NameServer("127.0.0.1", 0)
        self.loop.run(self.ns.start(), 30)
        self.server = BrokerServer(str(path), self.broker.config, self.broker.store_config,
                                   namesrv_addrs=[self.ns.addr], broker=self.broker)
        self.loop.run(self.server.start(), 30)
        _CLIENT_KW[id(self.broker)] = {"namesrv_addr": self.ns.addr}

    def close(self) -> None:
        if self.transport == "tcp":
            _CLIENT_KW.pop(id(self.broker), None)
            self.loop.run(self.server.stop(), 60)
            self.loop.run(self.ns.stop(), 30)
            self.loop.stop()
        self.broker.close()


def client_kw(broker, transport):
    """How a client reaches ``broker`` over ``transport``."""
    if transport == "inprocess":
        return {"broker": broker}
    return _CLIENT_KW[id(broker)]


def wait_until(cond, timeout=20.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def make_topic(producer, topic, queues):
    """Auto-create ``topic`` with ``queues`` queues (first send) and return its queues."""
    p = producer
    saved = p.default_topic_queue_nums
    p.default_topic_queue_nums = queues
    try:
        r = p.send(Message(topic, b"create"))
    finally:
        p.default_topic_queue_nums = saved
    assert r.status is SendStatus.SEND_OK
    return [MessageQueue(topic, r.message_queue.broker_name, i) for i in range(queues)]


class Collector:
    """A listener that records what it consumed (by UNIQ_KEY) and can be told to fail."""

    def __init__(self, status=OK):
        self.lock = threading.Lock()
        self.seen = collections.Counter()
        self.msgs = []
        self.status = status
        self.cond = threading.Condition(self.lock)

    def __call__(self, msgs, ctx):
        with self.cond:
            for m in msgs:
                self.seen[m.uniq_key] += 1
                self.msgs.append(m.copy())
            self.cond.notify_all()
        return self.status

    def wait_keys(self, keys, timeout=30.0):
        keys = set(keys)
        with self.cond:
            ok = self.cond.wait_for(lambda: keys <= set(self.seen), timeout)
        assert ok, f"{len(keys - set(self.seen))} of {len(keys)} messages never consumed"


def push(group, broker, transport, listener, topic, expr="*", orderly=False, **kw):
    c = PushConsumer(group, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     **client_kw(broker, transport), **kw)
    c.subscribe(topic, expr)
    c.register_message_listener(listener, orderly=orderly)
    return c.start()
