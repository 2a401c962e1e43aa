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


def open_broker(path, **broker_cfg):
    store_cfg = StoreConfig(mapped_file_size_commit_log=4 * 1024 * 1024,
                            mapped_file_size_consume_queue=6000 * 20,
                            message_delay_level=SHORT_LEVELS)
    cfg = dict(transaction_check_interval=500, transaction_time_out=300)
    cfg.update(broker_cfg)
    return Broker.open(path, BrokerConfig(**cfg), store_cfg)


def client_kw(broker, transport):
    assert transport == "inprocess"
    return {"broker": broker}


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
