"""Which queue a send goes to (MESSAGING.md §1.2, §1.3, §1.5).

``TopicPublishInfo`` is a topic's publish list (queues of writable brokers, sorted by broker
name) with its ``ThreadLocalIndex``; the selectors are RocketMQ's ``MessageQueueSelector``s.
Java arithmetic is reproduced where it decides a queue: ``String.hashCode``, truncating
remainder, ``abs``.
"""
from __future__ import annotations

import random
from typing import Any, Protocol

from rocketstore.common import Message, MessageQueue, PermName, java_hash
from rocketstore.common.protocol import TopicRouteData
from rocketstore.remoting._wire import ThreadLocalIndex


class TopicPublishInfo:
    """The queues a producer may send a topic's messages to, and its round-robin index."""

    __slots__ = ("topic", "message_queues", "order_topic", "send_which_queue", "route")

    def __init__(self, topic: str, message_queues: list[MessageQueue],
                 order_topic: bool = False, route: TopicRouteData | None = None) -> None:
        self.topic = topic
        self.message_queues = message_queues
        self.order_topic = order_topic
        self.send_which_queue = ThreadLocalIndex()
        self.route = route

    @classmethod
    def from_route(cls, topic: str, route: TopicRouteData) -> TopicPublishInfo:
        """§1.2: ``orderTopicConf`` literally when present; else the write queues of every
        writable broker that has a master, brokers sorted by name."""
        mqs: list[MessageQueue] = []
        if route.order_topic_conf:
            for part in route.order_topic_conf.split(";"):
                name, _, nums = part.partition(":")
                mqs.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
            return cls(topic, mqs, order_topic=True, route=route)
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not qd.perm & PermName.PERM_WRITE:
                continue
            if 0 not in route.broker_addrs.get(qd.broker_name, {}):
                continue      # no live master
            mqs.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
        return cls(topic, mqs, route=route)

    def ok(self) -> bool:
        return bool(self.message_queues)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """§1.3 with latency fault off: the next position; on a retry, the first queue of
        another broker within one lap, else one more plain position."""
        mqs = self.message_queues
        n = len(mqs)
        if last_broker_name is None:
            return mqs[self.send_which_queue.increment_and_get() % n]
        for _ in range(n):
            mq = mqs[self.send_which_queue.increment_and_get() % n]
            if mq.broker_name != last_broker_name:
                return mq
        return mqs[self.send_which_queue.increment_and_get() % n]


class MessageQueueSelector(Protocol):
    """``select(mqs, msg, arg)`` returns one of ``mqs`` (the topic's publish list)."""

    def select(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue | None: ...


def java_remainder(a: int, b: int) -> int:
    """Java ``a % b`` for ints: the sign of the dividend (truncating division)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def java_hash_code(arg: Any) -> int:
    """``arg.hashCode()`` as Java computes it for the argument types a selector sees.

    str -> ``String.hashCode`` (UTF-16); int in the int32 range -> the value (``Integer``);
    other ints -> ``Long.hashCode`` ``(int)(v ^ (v >>> 32))``; bool -> 1231 / 1237.
    """
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -0x80000000 <= arg <= 0x7FFFFFFF:
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return h - 0x100000000 if h & 0x80000000 else h
    if isinstance(arg, str):
        return java_hash(arg)
    raise TypeError(f"SelectMessageQueueByHash needs a str or int arg (its Java hashCode), "
                    f"got {type(arg).__name__}")


class SelectMessageQueueByHash:
    """``v = arg.hashCode() % size`` (Java remainder); ``abs`` when negative; ``mqs[v]``."""

    def select(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        v = java_remainder(java_hash_code(arg), len(mqs))
        return mqs[abs(v)]


class SelectMessageQueueByRandom:
    """A uniformly random queue of the list."""

    def select(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return mqs[random.randrange(len(mqs))]
