"""Pulls (MESSAGING.md 4.4): check order, statuses, long polling woken by arrivals and by its
time limit, commit piggy-back, offsets (3.7, 8)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from rocketstore import StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker.subscription_group import SubscriptionGroupConfig
from rocketstore.common.protocol import (ConsumeFromWhere, ConsumerData, ConsumeType,
                                         HeartbeatData, MessageModel, PullMessageRequest,
                                         ResponseCode, SubscriptionData)
from rocketstore.broker.pull import build_subscription_data
from rocketstore.store.topics import TopicConfig

from brokering import send, wait_dispatched

SC = StoreConfig(mapped_file_size_commit_log=1 << 20)
SUB, SUSPEND, COMMIT = 0x4, 0x2, 0x1


@pytest.fixture
def broker(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        yield b


def pull(b, topic, qid, offset, flags=SUB, sub="*", group="cg", timeout_ms=15000, **kw):
    return b.pull_message(PullMessageRequest(group, topic, qid, offset, sys_flag=flags,
                                             subscription=sub, suspend_timeout_millis=timeout_ms,
                                             **kw))


def test_statuses(broker):
    for i in range(3):
        send(broker, "TP", b"m%d" % i, 0, tags="A")
    wait_dispatched(broker)
    r = pull(broker, "TP", 0, 0).result(5)
    assert r.code == ResponseCode.SUCCESS and [bytes(m.body) for m in r.messages] == [b"m0", b"m1", b"m2"]
    assert (r.next_begin_offset, r.min_offset, r.max_offset) == (3, 0, 3)
    assert pull(broker, "TP", 0, 3).result(5).code == ResponseCode.PULL_NOT_FOUND
    r = pull(broker, "TP", 0, 0, sub="B").result(5)     # everything filtered out
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.next_begin_offset == 3
    # empty queue: offset 0 -> not found, another offset -> moved
    assert pull(broker, "TP", 1, 0).result(5).code == ResponseCode.PULL_NOT_FOUND
    assert pull(broker, "TP", 1, 5).result(5).code == ResponseCode.PULL_OFFSET_MOVED
    r = pull(broker, "TP", 0, 10).result(5)
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.next_begin_offset == 3
    wait_dispatched(broker)
    events = broker.store.get_message("x", "OFFSET_MOVED_EVENT", 0, 0).messages
    assert len(events) == 2
    e = events[-1]
    assert e.properties == {"TAGS": "cg", "KEYS": "cg", "DELAY": "0"}
    assert json.loads(bytes(e.body)) == {"consumerGroup": "cg", "offsetNew": 3, "offsetRequest": 10,
                                          "messageQueue": {"brokerName": "broker-a", "queueId": 0,
                                                           "topic": "TP"}}


def test_refusals_in_order(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        assert pull(b, "Nope", 0, 0).result(5).code == ResponseCode.TOPIC_NOT_EXIST
        b.topic_manager.update(TopicConfig("WriteOnly", 1, 1, perm=2))
        r = pull(b, "WriteOnly", 0, 0).result(5)
        assert r.code == ResponseCode.NO_PERMISSION and "pulling message is forbidden" in r.remark
        send(b, "TP", queue_id=0)
        r = pull(b, "TP", 8, 0).result(5)
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[8] is illegal" in r.remark
        # without the subscription flag the consumer manager's table is used
        r = pull(b, "TP", 0, 0, flags=0).result(5)
        assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        b.subscription_groups.update(SubscriptionGroupConfig("off", consume_enable=False))
        assert pull(b, "TP", 0, 0, group="off").result(5).code == ResponseCode.NO_PERMISSION
    with Broker.open(store_dir, BrokerConfig(broker_permission=2), SC) as b:
        assert pull(b, "TP", 0, 0).result(5).code == ResponseCode.NO_PERMISSION
    with Broker.open(store_dir, BrokerConfig(auto_create_subscription_group=False), SC) as b:
        r = pull(b, "TP", 0, 0, group="unknown").result(5)
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert pull(b, "TP", 0, 0, group="CID_RMQ_SYS_X").result(5).code == ResponseCode.SUCCESS


class Channel:
    def __init__(self, client_id):
        self.client_id = client_id
        self.notified = []

    def notify_consumer_ids_changed(self, group):
        self.notified.append(group)

    def check_transaction_state(self, broker_name, request, msg):
        pass


def heartbeat(b, channel, group, subs, model=MessageModel.CLUSTERING):
    b.heartbeat(HeartbeatData(channel.client_id, consumers=[ConsumerData(
        group, ConsumeType.CONSUME_PASSIVELY, model,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subs)]), channel)


def test_subscription_from_the_consumer_manager(broker):
    send(broker, "TP", b"a", 0, tags="A")
    send(broker, "TP", b"b", 0, tags="B")
    wait_dispatched(broker)
    heartbeat(broker, Channel("c1"), "cg", [build_subscription_data("TP", "B", 100)])
    r = pull(broker, "TP", 0, 0, flags=0).result(5)
    assert r.code == ResponseCode.SUCCESS and [bytes(m.body) for m in r.messages] == [b"b"]
    r = pull(broker, "TP", 0, 0, flags=0, sub_version=200).result(5)
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    broker.subscription_groups.update(SubscriptionGroupConfig("bc", consume_broadcast_enable=False))
    heartbeat(broker, Channel("c2"), "bc", [build_subscription_data("TP", "*")],
              MessageModel.BROADCASTING)
    assert pull(broker, "TP", 0, 0, flags=0, group="bc").result(5).code == ResponseCode.NO_PERMISSION



def test_a_registered_sql92_subscription_is_refused_not_served_unfiltered(broker):
    """4.9.8 (enablePropertyFilter=false) refuses a pull whose subscription -- the pull's own
    or, without the subscription flag, the registered one -- is not TAG. A client that
    registered SQL92 and pulls without the flag (the header's type then defaults to TAG) was
    given every message of the queue unfiltered; a pull whose header says SQL92 but whose
    group registered TAG is served by the registration, as 4.9.8 serves it."""
    send(broker, "TP", b"a", 0, tags="A")
    wait_dispatched(broker)
    # as the Java client's heartbeat carries it: the expression, no tags
    sql = SubscriptionData("TP", "a > 5", sub_version=100, expression_type="SQL92")
    heartbeat(broker, Channel("c1"), "cg", [sql])
    for _ in range(3):          # and again: the pull lane, once warm, must not serve it
        r = pull(broker, "TP", 0, 0, flags=0).result(5)
        assert r.code == ResponseCode.SYSTEM_ERROR, r
        assert r.remark == "The broker does not support consumer to filter message by SQL92"
        assert not r.messages
    r = pull(broker, "TP", 0, 0, flags=SUB, sub="a > 5", expression_type="SQL92").result(5)
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.endswith("by SQL92")
    heartbeat(broker, Channel("c2"), "tg", [build_subscription_data("TP", "A", 100)])
    r = pull(broker, "TP", 0, 0, flags=0, group="tg", expression_type="SQL92").result(5)
    assert r.code == ResponseCode.SUCCESS and [bytes(m.body) for m in r.messages] == [b"a"]

def test_tag_hash_collision_passes_the_broker_filter_only_by_hash(broker):
    # "Aa" and "BB" share a Java hashCode: RocketMQ's broker filter cannot tell them apart;
    # our store drops the wrong tag by its string, so a consumer never sees it
    send(broker, "TC", b"bb", 0, tags="BB")
    send(broker, "TC", b"aa", 0, tags="Aa")
    wait_dispatched(broker)
    r = pull(broker, "TC", 0, 0, sub="Aa").result(5)
    assert r.code == ResponseCode.SUCCESS and [m.tags for m in r.messages] == ["Aa"]


def test_long_poll_is_woken_by_an_arrival(broker):
    send(broker, "LP", b"first", 0)
    wait_dispatched(broker)
    fut = pull(broker, "LP", 0, 1, flags=SUB | SUSPEND, timeout_ms=20000)
    time.sleep(0.1)
    assert not fut.done()
    assert broker.pull_processor.hold.parked_count() == 1
    threads_before = threading.active_count()
    t0 = time.monotonic()
    send(broker, "LP", b"second", 0)
    r = fut.result(10)
    assert time.monotonic() - t0 < 5            # the arrival, not the 20 s limit or the 5 s check
    assert r.code == ResponseCode.SUCCESS and [bytes(m.body) for m in r.messages] == [b"second"]
    assert threading.active_count() == threads_before     # no thread per parked pull
    # many parked pulls on one queue: one arrival answers them all
    futs = [pull(broker, "LP", 0, 2, flags=SUB | SUSPEND, group=f"g{i}") for i in range(50)]
    assert threading.active_count() == threads_before
    send(broker, "LP", b"third", 0)
    assert all(f.result(10).code == ResponseCode.SUCCESS for f in futs)


def test_long_poll_ignores_non_matching_arrivals_and_times_out(broker):
    send(broker, "LP", b"x", 0, tags="A")
    wait_dispatched(broker)
    t0 = time.monotonic()
    fut = pull(broker, "LP", 0, 1, flags=SUB | SUSPEND, sub="B", timeout_ms=800)
    send(broker, "LP", b"not mine", 0, tags="A")
    time.sleep(0.3)
    assert not fut.done()
    r = fut.result(10)
    elapsed = time.monotonic() - t0
    assert 0.7 < elapsed < 5
    # answered after its time: the pull ran again; the non-matching message is passed over
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.next_begin_offset == 2


def test_short_polling_and_no_suspend_flag(store_dir):
    with Broker.open(store_dir, BrokerConfig(long_polling_enable=False,
                                             short_polling_time_mills=300), SC) as b:
        send(b, "SP", queue_id=0)
        wait_dispatched(b)
        t0 = time.monotonic()
        r = pull(b, "SP", 0, 1, flags=SUB | SUSPEND, timeout_ms=20000).result(10)
        assert r.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 < 5
        f = pull(b, "SP", 0, 1, flags=SUB)
        assert f.done() and f.result().code == ResponseCode.PULL_NOT_FOUND


def test_commit_piggy_back_even_when_parked(broker):
    send(broker, "PB", queue_id=0)
    wait_dispatched(broker)
    fut = pull(broker, "PB", 0, 1, flags=SUB | SUSPEND | COMMIT, commit_offset=1, timeout_ms=5000)
    assert broker.query_consumer_offset("cg", "PB", 0).value == 1
    assert not fut.done()
    pull(broker, "PB", 0, 0, flags=SUB | COMMIT, commit_offset=0).result(5)
    assert broker.query_consumer_offset("cg", "PB", 0).value == 0   # overwritten, not max
    broker.close()
    assert fut.done()       # close answers parked pulls


def test_query_consumer_offset_special_case_and_offset_calls(broker):
    r = broker.query_consumer_offset("new", "QO", 0)
    assert (r.code, r.value) == (ResponseCode.SUCCESS, 0)        # no unit: "in memory"
    for i in range(3):
        send(broker, "QO", b"%d" % i, 0)
    wait_dispatched(broker)
    r = broker.query_consumer_offset("new", "QO", 0)
    assert (r.code, r.value) == (ResponseCode.SUCCESS, 0)        # min 0, first unit in memory
    broker._memory_limit = -1                                     # as if the head were on disk
    assert broker.query_consumer_offset("new", "QO", 0).code == ResponseCode.QUERY_NOT_FOUND
    broker.update_consumer_offset("new", "QO", 0, 2)
    assert broker.query_consumer_offset("new", "QO", 0).value == 2
    assert (broker.get_min_offset("QO", 0), broker.get_max_offset("QO", 0)) == (0, 3)
    m1 = broker.store.get_message("x", "QO", 0, 1).messages[0]
    assert broker.search_offset("QO", 0, m1.store_timestamp) <= 1
    assert bytes(broker.view_message(m1.commitlog_offset).body) == b"1"


def test_offsets_and_configs_survive_reopen(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        send(b, "RO", queue_id=0)
        wait_dispatched(b)
        b.update_consumer_offset("g", "RO", 0, 1)
        b.subscription_groups.update(SubscriptionGroupConfig("g", retry_max_times=3))
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        assert b.query_consumer_offset("g", "RO", 0).value == 1
        assert b.subscription_groups.get("g").retry_max_times == 3
        assert b.topic_manager.select("RO").write_queue_nums == 4
        assert b.get_max_offset("RO", 0) == 1


def test_a_cancelled_parked_pull_is_skipped(broker):
    send(broker, "CX", b"first", 0)
    wait_dispatched(broker)
    fut = pull(broker, "CX", 0, 1, flags=SUB | SUSPEND, timeout_ms=10000)
    other = pull(broker, "CX", 0, 1, flags=SUB | SUSPEND, group="g2", timeout_ms=10000)
    assert fut.cancel()                 # its waiter went away
    send(broker, "CX", b"m", 0)
    assert other.result(10).code == ResponseCode.SUCCESS
    assert broker.pull_processor.hold.parked_count() == 0
    assert fut.cancelled()
