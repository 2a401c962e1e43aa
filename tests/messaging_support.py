"""Test helpers for the messaging tests: a broker on a tmp store, waits, a recording listener."""
from __future__ import annotations

import collections
import threading
import time

from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.namesrv import NameServer
from rocketstore.remoting.broker_server import BrokerServer, free_port_pair
from rocketstore.remoting.server import LoopThread
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, MessageQueue, PushConsumer,
                                SendStatus)

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
# short delay levels: level 1..4 = 1 s, 2 s, 1 s, 1 s (retry levels 3 + n stay short)
SHORT_LEVELS = "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


def open_broker(path, transport="inprocess", **broker_cfg):
    """A Broker on ``path`` with short delay levels; with ``transport="tcp"`` it is also served
    by a BrokerServer registered with a NameServer of its own (both on a loop thread), and
    its ``close()`` stops them first."""
    port = free_port_pair() if transport == "tcp" else 10911
    store_cfg = StoreConfig(mapped_file_size_commit_log=4 * 1024 * 1024,
                            mapped_file_size_consume_queue=6000 * 20,
                            message_delay_level=SHORT_LEVELS, store_host=f"127.0.0.1:{port}")
    cfg = dict(transaction_check_interval=500, transaction_time_out=300, listen_port=port)
    cfg.update(broker_cfg)
    broker = Broker.open(path, BrokerConfig(**cfg), store_cfg)
    if transport == "tcp":
        _serve(broker)
    return broker


_SERVED: dict[int, tuple] = {}


def _serve(broker) -> None:
    loop = LoopThread("test-servers", use_uvloop=False)
    ns = NameServer("127.0.0.1", 0)
    loop.run(ns.start())
    server = BrokerServer(str(broker.store.root), broker.config, broker.store_config,
                          namesrv_addrs=[ns.addr], broker=broker)
    loop.run(server.start())
    _SERVED[id(broker)] = (loop, ns, server)
    close = broker.close

    def close_served() -> None:
        served = _SERVED.pop(id(broker), None)
        if served is not None:
            lt, n, srv = served
            lt.run(srv.stop())
            lt.run(n.stop())
            lt.stop()
        close()
    broker.close = close_served


def client_kw(broker, transport):
    if transport == "tcp":
        return {"namesrv_addr": _SERVED[id(broker)][1].addr}
    assert transport == "inprocess"
    return {"broker": broker}


def wait_until(cond, timeout=20.0, what="condition"):
    """Poll ``cond`` until true; ``what`` (a str, or a callable giving one at the deadline)
    names what was awaited in the failure."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    desc = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout}s waiting for {desc}")


def until(fn, what: str, timeout: float = 20.0):
    """Poll ``fn`` until it returns something truthy and return that (registration and
    dispatch are asynchronous); the deadline only bounds a hang, nothing here is timed."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


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
