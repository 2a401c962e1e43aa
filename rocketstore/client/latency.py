"""Producer fault avoidance: RocketMQ's ``MQFaultStrategy`` and ``LatencyFaultToleranceImpl``
(docs/cluster.md).

Off by default (``send_latency_fault_enable=False``), as in RocketMQ: a sync send then picks
the next queue round-robin and, on a retry, the first queue of a broker other than the one
that just failed. On, every attempt's duration marks its broker "not available" for a while:

====================  ====  ====  ====  ======  ======  =======  =======  =======
latency >= (ms)       0     50    100   550     1000    2000     3000     15000
not available (ms)    0     0     0     30000   60000   120000   180000   600000
====================  ====  ====  ====  ======  ======  =======  =======  =======

An attempt that failed counts as 30000 ms ("isolation"), so a broker that refused or could
not be reached is skipped for 10 minutes, unless every broker is. Selection then scans the
publish list from the next round-robin position for a queue of an available broker (the
failed broker of the previous attempt is not excluded by name, as in RocketMQ 4.9); when
none is available it falls back to the "least bad" broker of the fault table.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rocketstore.client.selector import ThreadLocalIndex, TopicPublishInfo
from rocketstore.common import MessageQueue

# MQFaultStrategy's tables: an attempt of latency >= LATENCY_MAX_MS[i] (the largest such i)
# makes its broker unavailable for NOT_AVAILABLE_DURATION_MS[i]; below 50 ms, for 0
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000     # what a failed attempt counts as


def _now_ms() -> float:
    return time.monotonic() * 1000


@dataclass(slots=True)
class FaultItem:
    """One broker's last attempt: its latency and when the broker is available again."""

    name: str
    current_latency: float
    start_timestamp: float        # monotonic ms from which the broker is available

    def is_available(self, now_ms: float | None = None) -> bool:
        return (now_ms if now_ms is not None else _now_ms()) >= self.start_timestamp

    def sort_key(self, now_ms: float) -> tuple[bool, float, float]:
        # available first, then lower latency, then the one available sooner
        return (not self.is_available(now_ms), self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    """Broker name -> ``FaultItem``; thread-safe."""

    def __init__(self) -> None:
        self._items: dict[str, FaultItem] = {}
        self._lock = threading.Lock()
        self._which_worst = ThreadLocalIndex()

    def update_fault_item(self, name: str, current_latency: float,
                          not_available_duration: float) -> None:
        with self._lock:
            self._items[name] = FaultItem(name, current_latency,
                                          _now_ms() + not_available_duration)

    def is_available(self, name: str) -> bool:
        with self._lock:
            item = self._items.get(name)
        return item is None or item.is_available()

    def remove(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """A broker of the better half of the fault table (round-robin), or None if empty."""
        now = _now_ms()
        with self._lock:
            items = sorted(self._items.values(), key=lambda it: it.sort_key(now))
        if not items:
            return None
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[self._which_worst.increment_and_get() % half].name

    def items(self) -> dict[str, FaultItem]:
        """A snapshot of the table (for inspection and tests)."""
        with self._lock:
            return {k: FaultItem(v.name, v.current_latency, v.start_timestamp)
                    for k, v in self._items.items()}


def compute_not_available_duration(latency_ms: float) -> int:
    """The not-available period (ms) an attempt of ``latency_ms`` earns its broker."""
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS)):
        if latency_ms >= limit:
            return duration
    return 0


class MQFaultStrategy:
    """Queue selection for a producer's sends, with or without latency fault avoidance."""

    def __init__(self, send_latency_fault_enable: bool = False) -> None:
        self.send_latency_fault_enable = bool(send_latency_fault_enable)
        self.latency_fault_tolerance = LatencyFaultTolerance()

    def select_one_message_queue(self, info: TopicPublishInfo,
                                 last_broker_name: str | None) -> MessageQueue:
        if not self.send_latency_fault_enable:
            return info.select_one_message_queue(last_broker_name)
        mqs = info.message_queues
        n = len(mqs)
        index = info.send_which_queue.increment_and_get()
        lft = self.latency_fault_tolerance
        for i in range(n):
            mq = mqs[(index + i) % n]
            if lft.is_available(mq.broker_name):
                return mq
        not_best = lft.pick_one_at_least()
        if not_best is not None:
            write_nums = _write_queue_nums(info, not_best)
            if write_nums > 0:
                return MessageQueue(info.topic, not_best,
                                    info.send_which_queue.increment_and_get() % write_nums)
            lft.remove(not_best)      # gone from the route: forget it
        return info.select_one_message_queue()

    def update_fault_item(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record an attempt's outcome (only when fault avoidance is on)."""
        if self.send_latency_fault_enable:
            duration = compute_not_available_duration(
                ISOLATION_LATENCY_MS if isolation else latency_ms)
            self.latency_fault_tolerance.update_fault_item(broker_name, latency_ms, duration)

    def is_available(self, broker_name: str) -> bool:
        """Whether sends may pick ``broker_name`` now (always True when the strategy is off)."""
        return not self.send_latency_fault_enable or \
            self.latency_fault_tolerance.is_available(broker_name)


def _write_queue_nums(info: TopicPublishInfo, broker_name: str) -> int:
    """``TopicPublishInfo.getQueueIdByBroker``: the broker's write queue count, -1 if absent."""
    route = info.route
    if route is None:
        return sum(1 for mq in info.message_queues if mq.broker_name == broker_name) or -1
    for qd in route.queue_datas:
        if qd.broker_name == broker_name:
            return qd.write_queue_nums
    return -1
