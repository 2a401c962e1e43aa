"""Queue selection: Java hashCode and remainder rules, publish lists, round robin."""
import collections
import threading

import pytest

from rocketstore.client.selector import (SelectMessageQueueByHash, SelectMessageQueueByRandom,
                                         ThreadLocalIndex, TopicPublishInfo, java_hash_code,
                                         java_remainder)
from rocketstore.common import Message, MessageQueue
from rocketstore.common.protocol import QueueData, TopicRouteData


def test_java_hash_codes():
    assert java_hash_code("Aa") == java_hash_code("BB") == 2112
    assert java_hash_code("hello") == 99162322
    assert java_hash_code("polygenelubricants") == -2147483648      # Integer.MIN_VALUE
    assert java_hash_code(7) == 7 and java_hash_code(-7) == -7
    assert java_hash_code(1 << 40) == 256                            # Long.hashCode
    assert java_hash_code(-1 << 40) == -256
    assert java_hash_code(True) == 1231


def test_java_remainder_truncates():
    assert java_remainder(-7, 5) == -2 and (-7 % 5) == 3
    assert java_remainder(7, 5) == 2


def test_hash_selector_java_semantics():
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    sel = SelectMessageQueueByHash()
    m = Message("T", b"x")
    assert sel.select(mqs, m, -7).queue_id == 2          # abs(-7 rem 5) = 2, not Python's 3
    assert sel.select(mqs, m, 12).queue_id == 2
    # "hello".hashCode() = 99162322 -> 2; MIN_VALUE rem 5 = -3 -> 3
    assert sel.select(mqs, m, "hello").queue_id == 99162322 % 5
    assert sel.select(mqs, m, "polygenelubricants").queue_id == 3
    assert sel.select(mqs, m, 1 << 40).queue_id == 256 % 5
    with pytest.raises(TypeError, match="str or int"):
        sel.select(mqs, m, 1.5)


def test_random_selector_spreads():
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    seen = collections.Counter(SelectMessageQueueByRandom().select(mqs, None, None).queue_id
                               for _ in range(400))
    assert set(seen) == {0, 1, 2, 3}


def test_publish_list_sorted_writable_with_master():
    route = TopicRouteData(
        (QueueData("broker-b", 4, 2, 6), QueueData("broker-a", 4, 3, 6),
         QueueData("broker-c", 4, 4, 4),            # read-only: no send
         QueueData("broker-d", 4, 4, 6)),           # no master address
        {"broker-a": {0: "a:1"}, "broker-b": {0: "b:1"}, "broker-c": {0: "c:1"},
         "broker-d": {1: "d:2"}})
    info = TopicPublishInfo.from_route("T", route)
    assert [(m.broker_name, m.queue_id) for m in info.message_queues] == \
        [("broker-a", 0), ("broker-a", 1), ("broker-a", 2), ("broker-b", 0), ("broker-b", 1)]
    ordered = TopicPublishInfo.from_route("T", TopicRouteData(
        route.queue_datas, route.broker_addrs, "broker-b:2;broker-a:1"))
    assert ordered.order_topic
    assert [(m.broker_name, m.queue_id) for m in ordered.message_queues] == \
        [("broker-b", 0), ("broker-b", 1), ("broker-a", 0)]


def test_round_robin_and_retry_on_another_broker():
    mqs = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(2)]
    info = TopicPublishInfo("T", mqs)
    first = [info.select_one_message_queue() for _ in range(8)]
    assert collections.Counter(m.queue_id + 2 * (m.broker_name == "b") for m in first) == \
        {0: 2, 1: 2, 2: 2, 3: 2}
    for _ in range(10):
        assert info.select_one_message_queue("a").broker_name == "b"
    single = TopicPublishInfo("T", [MessageQueue("T", "a", 0)])
    assert single.select_one_message_queue("a").broker_name == "a"   # nothing else: plain next


def test_thread_local_index_masks_and_is_per_thread():
    idx = ThreadLocalIndex()
    idx.set_current(0x7FFFFFFF)
    assert idx.increment_and_get() == 0            # Integer.MIN_VALUE & 0x7FFFFFFF
    assert idx.increment_and_get() == 1
    out = []
    t = threading.Thread(target=lambda: out.append(idx.increment_and_get()))
    t.start()
    t.join()
    assert 0 <= out[0] <= 0x7FFFFFFF
    assert idx.increment_and_get() == 2             # this thread's count went on alone
    idx.set_current(0xFFFFFFFF)
    assert idx.increment_and_get() == 0             # the int wraps


def test_thread_local_index_counts_on_per_thread_past_its_table():
    """Each thread's calls are consecutive, for more threads than the index's table holds
    (it starts afresh past 64) and with threads alive at once."""
    idx = ThreadLocalIndex()
    seen: list[tuple[int, int, int]] = []
    gate = threading.Barrier(8)

    def run() -> None:
        a = idx.increment_and_get()
        gate.wait()                 # 8 threads hold entries at once
        b = idx.increment_and_get()
        c = idx.increment_and_get()
        seen.append((a, b, c))
    for _ in range(25):             # 200 threads in all
        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(seen) == 200
    for a, b, c in seen:
        assert 0 <= a <= 0x7FFFFFFF and c == (b + 1) & 0x7FFFFFFF
