"""Producer queue selection over several brokers: round-robin over every writable queue, the
retry rules (another broker after a failure), latency fault avoidance (RocketMQ's
``MQFaultStrategy`` tables) and sends to a chosen queue, which never fail over.

The transport is a fake with brokers A (2 queues) and B (3 queues) whose failures the test
decides, so every assertion is about the producer's choices, not timing.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from rocketstore.client import Message, MessageQueue, Producer
from rocketstore.client.latency import (LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS,
                                        LatencyFaultTolerance, MQFaultStrategy,
                                        compute_not_available_duration)
from rocketstore.client.selector import TopicPublishInfo
from rocketstore.client.transport import Transport
from rocketstore.common.protocol import (QueueData, ResponseCode, SendMessageResponse,
                                         TopicRouteData)
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from cluster_support import ToBroker  # noqa: E402  (tests/cluster_support.py)

TOPIC = "T"


class FakeCluster(Transport):
    """Two brokers; ``dead`` ones raise TransportError, ``refuse[name]`` answers a code."""

    def __init__(self, queues: dict[str, int] | None = None) -> None:
        self.queues = queues or {"broker-a": 2, "broker-b": 3}
        self.dead: set[str] = set()
        self.refuse: dict[str, int] = {}
        self.sends: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def get_topic_route(self, topic: str) -> TopicRouteData | None:
        live = {n: q for n, q in self.queues.items()}
        return TopicRouteData(tuple(QueueData(n, q, q, 6, 0) for n, q in live.items()),
                              {n: {0: f"127.0.0.1:{10911 + i}"} for i, n in enumerate(live)},
                              None)

    def broker_names(self) -> list[str]:
        return sorted(self.queues)

    def heartbeat(self, broker_name, data, channel) -> None:
        pass

    def unregister_client(self, *a) -> None:
        pass

    def _answer(self, broker_name: str, request) -> SendMessageResponse:
        with self._lock:
            self.sends.append((broker_name, request.queue_id))
        if broker_name in self.dead:
            raise TransportError(broker_name, "connection refused")
        code = self.refuse.get(broker_name, ResponseCode.SUCCESS)
        return SendMessageResponse(code=code, remark=None if code == 0 else "refused",
                                   msg_id="0" * 32, queue_id=request.queue_id, queue_offset=0)

    def send_message(self, broker_name, request, timeout_ms=3000) -> SendMessageResponse:
        return self._answer(broker_name, request)

    def send_message_async(self, broker_name, request) -> Future:
        f: Future = Future()
        try:
            f.set_result(self._answer(broker_name, request))
        except TransportError as e:
            f.set_exception(e)
        return f

    def send_message_oneway(self, broker_name, request) -> None:
        self._answer(broker_name, request)


def _unused(self, *a, **k):
    raise NotImplementedError("not used by these tests")


for _name in Transport.__abstractmethods__:
    if _name not in FakeCluster.__dict__:
        setattr(FakeCluster, _name, _unused)
FakeCluster.__abstractmethods__ = frozenset()


@pytest.fixture
def fake():
    return FakeCluster()


def producer(fake: FakeCluster, **kw) -> Producer:
    return Producer("pg-failover", broker=fake, **kw).start()


def test_round_robin_covers_every_queue_of_every_broker(fake):
    p = producer(fake, poll_name_server_interval=100)
    res = []
    try:
        for i in range(50):
            res.append(p.send(Message(TOPIC, b"x")))
            if i % 10 == 9:
                time.sleep(0.15)      # the route is re-read: same queues, same positions
    finally:
        p.shutdown()
    queues = [(r.message_queue.broker_name, r.message_queue.queue_id) for r in res]
    # publish list, B-0, B-1, B-2: consecutive sends walk it in order
    order = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1), ("broker-b", 2)]
    start = order.index(queues[0])
    assert queues == [order[(start + i) % 5] for i in range(50)]
    assert sum(1 for q in queues if q[0] == "broker-a") == 20


def test_a_failed_attempt_is_retried_on_the_other_broker(fake):
    fake.dead.add("broker-b")
    p = producer(fake)
    try:
        res = [p.send(Message(TOPIC, b"x")) for _ in range(20)]
    finally:
        p.shutdown()
    assert all(r.message_queue.broker_name == "broker-a" for r in res)
    # every attempt on B was followed by one on A (lastBrokerName avoidance), never B again
    for i, (broker, _q) in enumerate(fake.sends):
        if broker == "broker-b":
            assert fake.sends[i + 1][0] == "broker-a"
    # without fault avoidance B keeps getting first attempts: 3 of every 5 sends try it
    assert sum(1 for b, _ in fake.sends if b == "broker-b") >= 8


@pytest.mark.parametrize("code", [ResponseCode.SYSTEM_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE,
                                  ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST])
def test_retry_response_codes_move_to_another_broker(fake, code):
    fake.refuse["broker-b"] = code
    p = producer(fake)
    try:
        res = [p.send(Message(TOPIC, b"x")) for _ in range(10)]
    finally:
        p.shutdown()
    assert all(r.message_queue.broker_name == "broker-a" for r in res)


def test_other_broker_errors_are_not_retried(fake):
    fake.refuse["broker-b"] = ResponseCode.MESSAGE_ILLEGAL
    fake.refuse["broker-a"] = ResponseCode.MESSAGE_ILLEGAL
    p = producer(fake)
    try:
        with pytest.raises(MQBrokerError) as ei:
            p.send(Message(TOPIC, b"x"))
    finally:
        p.shutdown()
    assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL and len(fake.sends) == 1


def test_all_brokers_down_raises_after_the_retries(fake):
    fake.dead.update({"broker-a", "broker-b"})
    p = producer(fake, retry_times_when_send_failed=2)
    try:
        with pytest.raises(TransportError):
            p.send(Message(TOPIC, b"x"))
    finally:
        p.shutdown()
    assert len(fake.sends) == 3


def test_fault_avoidance_skips_a_failed_broker_on_first_attempts(fake):
    fake.dead.add("broker-b")
    p = producer(fake, send_latency_fault_enable=True)
    try:
        p.send(Message(TOPIC, b"warm"))      # may or may not have tried B
        while not any(b == "broker-b" for b, _ in fake.sends):
            p.send(Message(TOPIC, b"x"))     # until B failed once
        assert not p.fault_strategy.is_available("broker-b")
        item = p.fault_strategy.latency_fault_tolerance.items()["broker-b"]
        before = len(fake.sends)
        res = [p.send(Message(TOPIC, b"y")) for _ in range(30)]
    finally:
        p.shutdown()
    # isolated for 600 s: every later send goes straight to A, no failed attempt first
    assert fake.sends[before:] == [("broker-a", r.message_queue.queue_id) for r in res]
    # isolation: 30000 ms counts as 15000+, i.e. unavailable for 600 s from the failure
    assert item.start_timestamp > time.monotonic() * 1000 + 590_000


def test_fault_avoidance_off_by_default_and_switchable(fake):
    p = Producer("pg-x", broker=fake)
    assert p.send_latency_fault_enable is False
    p.send_latency_fault_enable = True
    assert p.fault_strategy.send_latency_fault_enable is True


def test_async_send_retries_on_the_other_broker(fake):
    fake.dead.add("broker-b")
    p = producer(fake)
    try:
        res = [p.send_async(Message(TOPIC, b"x")).result(5) for _ in range(10)]
    finally:
        p.shutdown()
    assert all(r.message_queue.broker_name == "broker-a" for r in res)


def test_orderly_send_to_a_dead_broker_raises_and_never_fails_over(fake):
    fake.dead.add("broker-b")
    p = producer(fake, send_latency_fault_enable=True)
    try:
        with pytest.raises(TransportError, match="never fail over"):
            p.send(Message(TOPIC, b"o"), selector=ToBroker("broker-b"), arg=1)
        with pytest.raises(TransportError, match="never fail over"):
            p.send(Message(TOPIC, b"o"), MessageQueue(TOPIC, "broker-b", 2))
        with pytest.raises(TransportError, match="never fail over"):
            p.send_batch([Message(TOPIC, b"o")], MessageQueue(TOPIC, "broker-b", 0))
        # a selector that finds no queue of the broker it wants is an error too
        fake.queues = {"broker-a": 2}
        p.publish_info(TOPIC, refresh=True)
        with pytest.raises(MQClientError, match="select message queue return null"):
            p.send(Message(TOPIC, b"o"), selector=ToBroker("broker-b"), arg=1)
        ok = p.send(Message(TOPIC, b"o"), selector=ToBroker("broker-a"), arg=1)
    finally:
        p.shutdown()
    assert fake.sends[:3] == [("broker-b", 1), ("broker-b", 2), ("broker-b", 0)]
    assert ok.message_queue == MessageQueue(TOPIC, "broker-a", 1)


# -- the fault tables -------------------------------------------------------------------------

@pytest.mark.parametrize("latency,duration", [
    (0, 0), (49, 0), (50, 0), (99, 0), (100, 0), (549, 0), (550, 30000), (999, 30000),
    (1000, 60000), (1999, 60000), (2000, 120000), (3000, 180000), (14999, 180000),
    (15000, 600000), (30000, 600000)])
def test_not_available_duration_table(latency, duration):
    assert compute_not_available_duration(latency) == duration


def test_tables_are_rocketmqs():
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION_MS == (0, 0, 30000, 60000, 120000, 180000, 600000)


def test_update_fault_item_only_when_enabled():
    off = MQFaultStrategy(False)
    off.update_fault_item("b", 5000, True)
    assert off.latency_fault_tolerance.items() == {} and off.is_available("b")
    on = MQFaultStrategy(True)
    on.update_fault_item("fast", 10, False)          # < 550 ms: available at once
    on.update_fault_item("slow", 600, False)         # 30 s
    on.update_fault_item("failed", 1, True)          # isolation: 600 s
    assert on.is_available("fast") and not on.is_available("slow")
    assert not on.is_available("failed")
    items = on.latency_fault_tolerance.items()
    assert items["failed"].start_timestamp - items["slow"].start_timestamp > 500_000


def test_pick_one_at_least_prefers_available_then_lower_latency():
    lft = LatencyFaultTolerance()
    assert lft.pick_one_at_least() is None
    lft.update_fault_item("only", 100, 60000)
    assert lft.pick_one_at_least() == "only"
    lft.update_fault_item("worse", 900, 60000)
    lft.update_fault_item("ok-now", 5000, 0)         # available: sorts first
    lft.update_fault_item("worst", 2000, 600000)
    # better half of [ok-now, only, worse, worst] = the first two
    picks = {lft.pick_one_at_least() for _ in range(10)}
    assert picks == {"ok-now", "only"}


def test_all_brokers_unavailable_falls_back_to_the_least_bad():
    route = TopicRouteData((QueueData("a", 2, 2, 6, 0), QueueData("b", 3, 3, 6, 0)),
                           {"a": {0: "x:1"}, "b": {0: "x:2"}}, None)
    info = TopicPublishInfo.from_route(TOPIC, route)
    s = MQFaultStrategy(True)
    s.latency_fault_tolerance.update_fault_item("a", 100, 60000)
    s.latency_fault_tolerance.update_fault_item("b", 3000, 600000)
    mq = s.select_one_message_queue(info, None)
    assert mq.broker_name == "a" and 0 <= mq.queue_id < 2
    # a broker the route no longer has is dropped from the table, then plain round-robin
    s2 = MQFaultStrategy(True)
    s2.latency_fault_tolerance.update_fault_item("gone", 1, 600000)
    s2.latency_fault_tolerance.update_fault_item("a", 1, 600000)
    s2.latency_fault_tolerance.update_fault_item("b", 1, 600000)
    for _ in range(20):
        assert s2.select_one_message_queue(info, None) in info.message_queues
    assert "gone" not in s2.latency_fault_tolerance.items()


# -- client timers ----------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{"poll_name_server_interval": 0},
                                {"poll_name_server_interval": 99},
                                {"heartbeat_broker_interval": "30000"},
                                {"heartbeat_broker_interval": True}])
def test_bad_timer_intervals_are_refused_naming_the_value(fake, kw):
    from rocketstore.client import PullConsumer, PushConsumer
    (name, value), = kw.items()
    for make in (lambda: Producer("pg", broker=fake, **kw),
                 lambda: PushConsumer("cg", broker=fake, **kw),
                 lambda: PullConsumer("cg", broker=fake, **kw)):
        with pytest.raises(MQClientError, match=f"{name}={value!r}"):
            make()


def test_the_publish_list_is_reread_after_the_poll_interval(fake):
    p = producer(fake, poll_name_server_interval=100)
    try:
        assert {r.message_queue.broker_name for r in
                (p.send(Message(TOPIC, b"x")) for _ in range(10))} == {"broker-a", "broker-b"}
        fake.queues = {"broker-a": 2}          # B left the route
        deadline = time.monotonic() + 10
        while p.publish_info(TOPIC).message_queues != [MessageQueue(TOPIC, "broker-a", 0),
                                                       MessageQueue(TOPIC, "broker-a", 1)]:
            assert time.monotonic() < deadline, "the publish list never dropped broker-b"
            time.sleep(0.02)
    finally:
        p.shutdown()
