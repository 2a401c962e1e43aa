"""Consumer and producer registries, notifications and expiry (MESSAGING.md 2.3-2.5), the
orderly lock table (6.2), and the in-process transport."""
from __future__ import annotations

import time

import pytest

from rocketstore import Message, StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker.lock_manager import RebalanceLockManager
from rocketstore.broker.pull import build_subscription_data
from rocketstore.broker.subscription_group import SubscriptionGroupConfig
from rocketstore.client.inprocess import InProcessTransport
from rocketstore.common.protocol import (ConsumeFromWhere, ConsumerData, ConsumeType,
                                         HeartbeatData, MessageModel, MessageQueue,
                                         PullMessageRequest, ResponseCode, SendMessageRequest)
from rocketstore.errors import MQBrokerError, TransportError

SC = StoreConfig(mapped_file_size_commit_log=1 << 20)


class Channel:
    def __init__(self, client_id, active=True, writable=True):
        self.client_id = client_id
        self.notified: list[str] = []
        self.checks: list = []
        self.active = active
        self.writable = writable

    def notify_consumer_ids_changed(self, group):
        self.notified.append(group)

    def check_transaction_state(self, broker_name, request, msg):
        self.checks.append((broker_name, request, msg))

    def is_active(self):
        return self.active

    def is_writable(self):
        return self.writable


def hb(b, ch, group="cg", topics=("T",), producers=()):
    subs = [build_subscription_data(t, "*", 1) for t in topics]
    consumers = [ConsumerData(group, ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
                              ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subs)] if group else []
    b.heartbeat(HeartbeatData(ch.client_id, list(producers), consumers), ch)


@pytest.fixture
def broker(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        yield b


def test_heartbeat_registers_and_notifies_every_member_on_change(broker):
    a, c = Channel("a"), Channel("c")
    hb(broker, a)
    assert a.notified == ["cg"]                     # a new channel is a change
    assert broker.topic_manager.select("%RETRY%cg").perm == 6
    hb(broker, a)
    assert a.notified == ["cg"]                     # a refresh is not
    hb(broker, c)
    assert a.notified == ["cg", "cg"] and c.notified == ["cg"]
    assert sorted(broker.get_consumer_list_by_group("cg").value) == ["a", "c"]
    broker.unregister_client("c", None, "cg")
    assert a.notified == ["cg", "cg", "cg"] and c.notified == ["cg"]
    assert broker.get_consumer_list_by_group("cg").value == ["a"]
    broker.unregister_client("a", None, "cg")
    r = broker.get_consumer_list_by_group("cg")
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert broker.consumer_manager.get_consumer_group_info("cg") is None


def test_subscription_table_is_last_writer_wins(broker):
    a, c = Channel("a"), Channel("c")
    hb(broker, a, topics=("T1", "T2"))
    hb(broker, c, topics=("T1",))               # drops T2 for the whole group
    g = broker.consumer_manager.get_consumer_group_info("cg")
    assert set(g.subscription_table) == {"T1"}
    assert a.notified[-1] == "cg" and len(a.notified) == 2
    # a present topic is replaced only by a newer sub_version, without a notification
    broker.heartbeat(HeartbeatData("a", [], [ConsumerData(
        "cg", ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [build_subscription_data("T1", "X", 0)])]), a)
    assert g.find_subscription_data("T1").sub_string == "*"
    broker.heartbeat(HeartbeatData("a", [], [ConsumerData(
        "cg", ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [build_subscription_data("T1", "X", 9)])]), a)
    assert g.find_subscription_data("T1").sub_string == "X"
    assert len(a.notified) == 2


def test_notification_disabled_by_the_group_or_the_broker(store_dir):
    with Broker.open(store_dir, BrokerConfig(notify_consumer_ids_changed_enable=False), SC) as b:
        a = Channel("a")
        hb(b, a)
        hb(b, Channel("c"))
        assert a.notified == []
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        b.subscription_groups.update(SubscriptionGroupConfig("quiet",
                                                             notify_consumer_ids_changed_enable=False))
        a = Channel("a")
        hb(b, a, group="quiet")
        hb(b, Channel("c"), group="quiet")
        assert a.notified == []


def test_channels_expire_without_notification(store_dir):
    cfg = BrokerConfig(channel_expired_timeout=300, scan_not_active_channel_interval=100)
    with Broker.open(store_dir, cfg, SC) as b:
        a, c = Channel("a"), Channel("c")
        hb(b, a)
        hb(b, c, producers=["pg"])
        before = list(a.notified)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            hb(b, a)                    # a keeps beating, c goes silent
            if b.get_consumer_list_by_group("cg").value == ["a"]:
                break
            time.sleep(0.05)
        assert b.get_consumer_list_by_group("cg").value == ["a"]
        assert a.notified == before     # expiry tells nobody
        assert b.producer_manager.group_channels("pg") == []


def test_channel_close_removes_from_every_group_and_notifies(broker):
    a, c = Channel("a"), Channel("c")
    hb(broker, a)
    hb(broker, c, producers=["pg"])
    n = len(a.notified)
    broker.channel_closed(c)
    assert broker.get_consumer_list_by_group("cg").value == ["a"]
    assert len(a.notified) == n + 1
    assert broker.producer_manager.get_available_channel("pg") is None


def test_producer_available_channel_rule(broker):
    p1, p2, p3, p4 = (Channel(f"p{i}") for i in range(1, 5))
    for p in (p1, p2, p3, p4):
        broker.heartbeat(HeartbeatData(p.client_id, ["pg"], []), p)
    picks = {broker.producer_manager.get_available_channel("pg").client_id for _ in range(8)}
    assert picks == {"p1", "p2", "p3", "p4"}                  # round robin
    p1.writable = p2.writable = p3.writable = p4.writable = False
    got = broker.producer_manager.get_available_channel("pg")
    assert got is not None and got.active                    # the last active one seen
    for p in (p1, p2, p3, p4):
        p.active = False
    assert broker.producer_manager.get_available_channel("pg") is None
    p4.active = p4.writable = True
    # start anywhere, look at up to 3 more: with 4 channels the one live producer is found
    assert broker.check_transaction_state("pg", "req", None) is True
    assert p4.checks == [("broker-a", "req", None)]
    assert broker.check_transaction_state("nobody", "req", None) is False


def test_lock_table_rules():
    lm = RebalanceLockManager(max_live_time_ms=200)
    q0, q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    assert lm.try_lock_batch("g", {q0, q1}, "c1") == {q0, q1}
    assert lm.try_lock_batch("g", {q0, q1}, "c2") == set()           # held by c1
    assert lm.try_lock_batch("other", {q0}, "c2") == {q0}             # per group
    lm.unlock_batch("g", {q0}, "c2")                                  # not its lock: untouched
    assert lm.is_locked("g", q0, "c1")
    lm.unlock_batch("g", {q0}, "c1")
    assert lm.try_lock_batch("g", {q0}, "c2") == {q0}
    time.sleep(0.3)                                                   # c1's lock of q1 expires
    assert not lm.is_locked("g", q1, "c1")
    assert lm.try_lock_batch("g", {q1}, "c2") == {q1}
    assert lm.try_lock_batch("g", {q1}, "c1") == set()


def test_locks_are_memory_only(store_dir):
    q = MessageQueue("T", "broker-a", 0)
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        assert b.lock_batch_mq("g", "c1", {q}) == {q}
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        assert b.lock_batch_mq("g", "c2", {q}) == {q}


def test_in_process_transport(broker):
    t = InProcessTransport(broker)
    ch = Channel("client-1")
    t.heartbeat("broker-a", HeartbeatData("client-1", ["pg"], [ConsumerData(
        "cg", ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [build_subscription_data("TT", "*", 1)])]), ch)
    assert t.broker_names() == ["broker-a"]
    route = t.get_topic_route("TBW102")
    assert route.queue_datas[0].write_queue_nums == 8 and route.queue_datas[0].perm == 7
    assert t.get_topic_route("TT") is None
    r = t.send_message("broker-a", SendMessageRequest("pg", "TT", 0, [Message("TT", b"zero-copy")]))
    assert r.code == ResponseCode.SUCCESS
    route = t.get_topic_route("TT")
    assert route.queue_datas[0].write_queue_nums == 4
    assert route.broker_addrs == {"broker-a": {0: "127.0.0.1:10911"}}
    f = t.send_message_async("broker-a", SendMessageRequest("pg", "TT", 0, [Message("TT", b"2")]))
    assert f.result(5).queue_offset == 1
    resp = t.pull_message("broker-a", PullMessageRequest("cg", "TT", 0, 0, sys_flag=0x2,
                                                         suspend_timeout_millis=5000)).result(5)
    assert resp.code == ResponseCode.SUCCESS
    assert isinstance(resp.messages[0].body, memoryview)            # zero copy
    assert t.get_consumer_id_list("broker-a", "cg") == ["client-1"]
    with pytest.raises(MQBrokerError):
        t.get_consumer_id_list("broker-a", "none")
    with pytest.raises(TransportError):
        t.get_max_offset("broker-b", "TT", 0)
    mq = MessageQueue("TT", "broker-a", 0)
    assert t.lock_batch_mq("broker-a", "cg", "client-1", {mq}) == {mq}
    t.close()
    assert broker.consumer_manager.get_consumer_group_info("cg") is None   # channel closed
    with pytest.raises(TransportError):
        t.get_max_offset("broker-a", "TT", 0)
