"""The in-process pull lane (issue 22 item 4): a push consumer's pull that finds messages is
answered from the store by the broker's ``PullLane`` (its checks made once per
configuration), with no request, response or future. It must answer what the full pull path
answers and leave every other case -- and every change of what the checks read -- to it."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from rocketstore.common import ResponseCode
from rocketstore.common.protocol import MessageModel, PullMessageRequest
from rocketstore.remoting._wire import PullFound
from rocketstore.store._codec import as_client_messages

TOPIC = "LaneTopic"
GROUP = "cg_lane"
COMMIT, SUSPEND, SUBSCRIPTION = 0x1, 0x2, 0x4


@pytest.fixture
def broker(inproc_broker):
    return inproc_broker


def fill(broker: Broker, n: int, queues: int = 2, tags: str | None = None) -> None:
    with Producer("pg_lane", broker=broker, default_topic_queue_nums=queues) as p:
        for i in range(n):
            p.send(Message(TOPIC, b"m%d" % i, tags=tags if tags else ("A" if i // 2 % 2 else "B"),
                           keys=f"k{i}", properties={"i": str(i)}))
    broker.store.wait_dispatched()


def member(broker: Broker, expression: str = "*") -> PushConsumer:
    """A registered member of GROUP (heartbeat sent), its own pulls suspended."""
    c = PushConsumer(GROUP, broker=broker)
    c.subscribe(TOPIC, expression)
    c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    c.start()
    c.suspend()
    return c


def full(broker: Broker, queue_id: int, offset: int, n: int = 32, flag: int = 0,
         commit: int = 0):
    """The full path's answer, its messages as the in-process transport hands them out."""
    r = broker.pull_message(PullMessageRequest(GROUP, TOPIC, queue_id, offset, n, flag,
                                               commit, 0, None, 0)).result(5)
    as_client_messages(r.messages)
    return r


def view(m) -> tuple:
    return (m.msg_id, m.queue_id, m.queue_offset, m.commitlog_offset, bytes(m.body), m.tags,
            m.keys, m.properties, m.born_timestamp, m.store_timestamp, m.reconsume_times)


def test_a_lane_pull_answers_what_the_full_pull_answers(broker):
    """Same messages (as a consumer is handed them: msg_id is the UNIQ_KEY), offsets and
    next offset as ``Broker.pull_message``; the commit flag's offset is committed; the
    broker's pull counters count it exactly once."""
    fill(broker, 40)
    c = member(broker)
    try:
        lane = broker.pull_lane(GROUP, TOPIC)
        got = lane.pull(0, 3, 8, SUSPEND | COMMIT, 2, 0)
        ref = full(broker, 0, 3, 8)
        assert type(got) is PullFound and ref.code == ResponseCode.SUCCESS
        assert [view(m) for m in got.messages] == [view(m) for m in ref.messages]
        assert got.messages[0].msg_id == got.messages[0].properties["UNIQ_KEY"]
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == \
            (ref.next_begin_offset, ref.min_offset, ref.max_offset) == (11, 0, 20)
        assert broker.store.query_offset(GROUP, TOPIC, 0) == 2
        _, _, _, gets, get_bytes = broker.metrics.counters()
        assert gets[(GROUP, TOPIC)] == 16         # the lane's 8 and the full pull's 8
        assert get_bytes[(GROUP, TOPIC)] == 2 * sum(m.store_size for m in ref.messages)
    finally:
        c.shutdown()


def test_a_lane_leaves_what_it_does_not_find_to_the_full_path(broker):
    """At the queue's head, past it, below its minimum: None, and nothing committed (the
    full path answers, parks or moves the offset)."""
    fill(broker, 10)
    c = member(broker)
    try:
        lane = broker.pull_lane(GROUP, TOPIC)
        for offset in (5, 6, 1000):
            assert lane.pull(0, offset, 32, SUSPEND | COMMIT, 4, 0) is None
        assert broker.store.query_offset(GROUP, TOPIC, 0) == -1
        assert lane.pull(0, 0, 32, SUBSCRIPTION, 0, 0) is None     # its own subscription
        assert lane.pull(7, 0, 32, 0, 0, 0) is None                 # no such queue
        assert lane.pull(0, 0, 32, 0, 0, 1 << 62) is None           # a newer subscription
        assert len(lane.pull(0, 0, 32, 0, 0, 0).messages) == 5
    finally:
        c.shutdown()


def test_a_lane_follows_topic_group_and_registration_changes(broker):
    """Each object the checks read, changed, sends the next pull to the full path, which
    then refuses as 4.9.8 does: the topic made unreadable, the group's consumption
    disabled, the group gone broadcasting without permission, the member gone."""
    fill(broker, 10)
    c = member(broker)
    try:
        lane = broker.pull_lane(GROUP, TOPIC)
        assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound
        tc = broker.topic_manager.select(TOPIC)
        broker.topic_manager.update(dataclasses.replace(tc, perm=2))        # write only
        assert lane.pull(0, 0, 32, 0, 0, 0) is None
        assert full(broker, 0, 0).code == ResponseCode.NO_PERMISSION
        broker.topic_manager.update(tc)
        assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound

        sgc = broker.subscription_groups.find(GROUP)
        broker.subscription_groups.update(dataclasses.replace(sgc, consume_enable=False))
        assert lane.pull(0, 0, 32, 0, 0, 0) is None
        assert full(broker, 0, 0).code == ResponseCode.NO_PERMISSION
        broker.subscription_groups.update(sgc)
        assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound

        broker.subscription_groups.update(dataclasses.replace(sgc, consume_broadcast_enable=False))
        assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound
        info = broker.consumer_manager.get_consumer_group_info(GROUP)
        info.message_model = MessageModel.BROADCASTING          # updated in place by heartbeats
        assert lane.pull(0, 0, 32, 0, 0, 0) is None
        assert full(broker, 0, 0).code == ResponseCode.NO_PERMISSION
        info.message_model = MessageModel.CLUSTERING
        assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound
    finally:
        c.shutdown()
    deadline = time.monotonic() + 5
    while broker.consumer_manager.get_consumer_group_info(GROUP) is not None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lane.pull(0, 0, 32, 0, 0, 0) is None
    assert full(broker, 0, 0).code == ResponseCode.SUBSCRIPTION_NOT_EXIST


def test_a_lane_filters_by_the_current_subscription(broker):
    """A member re-subscribing with a tag filter replaces the registration's subscription:
    the lane's next pull filters by it (the store's tag filter, as the full path)."""
    fill(broker, 20)
    c = member(broker)
    lane = broker.pull_lane(GROUP, TOPIC)
    assert len(lane.pull(0, 0, 32, 0, 0, 0).messages) == 10
    c.shutdown()
    c = member(broker, "A")
    try:
        got = lane.pull(0, 0, 32, 0, 0, 0)
        assert got is not None and got.messages and {m.tags for m in got.messages} == {"A"}
        ref = full(broker, 0, 0)
        assert [view(m) for m in got.messages] == [view(m) for m in ref.messages]
    finally:
        c.shutdown()


def test_a_lane_declines_on_a_slave_and_a_closed_broker(tmp_path):
    b = Broker.open(tmp_path / "s", BrokerConfig(broker_role="SLAVE", broker_id=1),
                    StoreConfig(mapped_file_size_commit_log=4 << 20))
    try:
        assert b.pull_lane(GROUP, TOPIC).pull(0, 0, 32, 0, 0, 0) is None
    finally:
        b.close()
    b = Broker.open(tmp_path / "m", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20))
    fill(b, 4)
    c = member(b)
    lane = b.pull_lane(GROUP, TOPIC)
    assert type(lane.pull(0, 0, 32, 0, 0, 0)) is PullFound
    c.shutdown()
    b.close()
    assert lane.pull(0, 0, 32, 0, 0, 0) is None
    assert b.pull_lane is not None and broker_refuses_bad_names(tmp_path)


def broker_refuses_bad_names(tmp_path) -> bool:
    b = Broker.open(tmp_path / "n", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20))
    try:
        return b.pull_lane("bad group!", TOPIC) is None and b.pull_lane(GROUP, "a/b") is None
    finally:
        b.close()


def test_a_push_consumer_in_process_pulls_through_the_lane(broker):
    """Every message consumed once, in queue order per queue, the committed offsets at the
    queue ends; the full pull path served only the pulls that found nothing (the first
    ones while the consumer started, the parked ones at the end): with 64 pulls' worth of
    messages, far fewer than 64."""
    fill(broker, 2048, queues=2)
    calls = []
    orig = broker.pull_message

    def counted(req, *a, **k):
        calls.append(req.queue_offset)
        return orig(req, *a, **k)
    broker.pull_message = counted
    seen: dict[int, list[int]] = {0: [], 1: []}
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            for m in msgs:
                seen[m.queue_id].append(m.queue_offset)
            if sum(map(len, seen.values())) >= 2048:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer(GROUP, broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     consume_thread_nums=1)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    c.start()
    try:
        assert done.wait(30)
    finally:
        c.shutdown()            # persists the consumed offsets
    assert seen == {0: list(range(1024)), 1: list(range(1024))}
    assert all(broker.store.query_offset(GROUP, TOPIC, q) == 1024 for q in (0, 1))
    assert len(calls) < 16, calls
    _, _, _, gets, _ = broker.metrics.counters()
    assert gets[(GROUP, TOPIC)] == 2048


# -- over the wire: the broker's pull handler takes the same lane -----------------------------

def _wire_pull(proc, queue_id: int, offset: int, flag: int = SUSPEND | COMMIT, commit: int = 0,
               group: str = GROUP, subscription: str | None = None):
    from rocketstore.remoting import requests
    from rocketstore.remoting.command import RemotingCommand
    fields = {"consumerGroup": group, "topic": TOPIC, "queueId": str(queue_id),
              "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(flag),
              "commitOffset": str(commit), "suspendTimeoutMillis": "0", "subVersion": "0",
              "expressionType": "TAG"}
    if subscription is not None:
        fields["subscription"] = subscription
    cmd = RemotingCommand(11, opaque=5, ext_fields=fields)
    return proc.pull(None, cmd, requests.decode(cmd, "127.0.0.1:1"))


def test_a_wire_pull_that_finds_messages_takes_the_lane(broker):
    """PULL_MESSAGE over the wire for a registered group: answered by the lane (no
    ``pull_message`` call) with the full path's header and the stored records as views of
    the mapped commit log; the commit flag's offset committed; a pull carrying its own
    subscription other than the registered one, and one that finds nothing, go the full
    way."""
    from rocketstore.remoting import headers
    from rocketstore.remoting.broker_processor import BrokerProcessor
    from rocketstore.remoting.command import RemotingCommand
    from rocketstore.remoting.zerocopy import RecordBody
    from rocketstore.store._mapped import MappedFile
    fill(broker, 40)
    c = member(broker)
    proc = BrokerProcessor(broker)
    full_calls = []
    orig = broker.pull_message

    def counted(req, *a, **k):
        full_calls.append(req)
        return orig(req, *a, **k)
    try:
        broker.pull_message = counted
        got = _wire_pull(proc, 1, 2, commit=2)
        assert full_calls == []
        broker.pull_message = orig
        ref = headers.encode_pull_response(RemotingCommand(11, opaque=5), full(broker, 1, 2))
        assert got.code == ref.code == ResponseCode.SUCCESS
        assert got.ext_fields == ref.ext_fields
        assert isinstance(got.body, RecordBody) and bytes(got.body) == bytes(ref.body)
        assert all(isinstance(p.obj, MappedFile) for p in got.body.parts)
        assert broker.store.query_offset(GROUP, TOPIC, 1) == 2
        broker.pull_message = counted
        _wire_pull(proc, 1, 0, subscription="A", flag=SUSPEND | SUBSCRIPTION)
        _wire_pull(proc, 1, 20, flag=0)                 # at the head: PULL_NOT_FOUND
        assert len(full_calls) == 2
    finally:
        broker.pull_message = orig
        c.shutdown()


def test_a_pull_carrying_the_registered_subscription_takes_the_lane(broker, monkeypatch):
    """The C++ client (and a Java client with postSubscriptionWhenPull) sends its
    subscription with every pull (flag 0x4). 4.9.8 then filters by the request's expression
    and skips the registration's checks; when the expression is the registered one the
    lane's filter is the same, so the lane answers (it keeps the registration's checks,
    stricter). Another expression goes the full way and is filtered by the request's."""
    from rocketstore.remoting.broker_processor import BrokerProcessor
    fill(broker, 40)
    c = member(broker, "A || B")
    proc = BrokerProcessor(broker)
    full_calls: list = []
    orig = broker.pull_message
    monkeypatch.setattr(broker, "pull_message",
                        lambda req, *a, **k: full_calls.append(req) or orig(req, *a, **k))
    try:
        got = _wire_pull(proc, 0, 0, flag=SUSPEND | COMMIT | SUBSCRIPTION, commit=3,
                         subscription="A || B")
        assert full_calls == [] and got.code == ResponseCode.SUCCESS
        assert broker.store.query_offset(GROUP, TOPIC, 0) == 3
        lane = broker.pull_lane(GROUP, TOPIC)
        assert lane.pull(0, 0, 8, SUSPEND | SUBSCRIPTION, 0, 0, expr="A || B") is not None
        assert lane.pull(0, 0, 8, SUSPEND | SUBSCRIPTION, 0, 0, expr="A") is None
        assert lane.pull(0, 0, 8, SUSPEND | SUBSCRIPTION, 0, 0) is None
        only_a = _wire_pull(proc, 0, 0, flag=SUSPEND | SUBSCRIPTION, subscription="A")
        assert len(full_calls) == 1 and only_a.code == ResponseCode.SUCCESS
        from rocketstore.remoting.records import decode_records
        assert {m.tags for m in decode_records(bytes(only_a.body))} == {"A"}
    finally:
        c.shutdown()


def test_the_wire_lane_table_is_bounded(broker, monkeypatch):
    """A client naming ever new (group, topic) pairs only refills the broker's lane table."""
    from rocketstore.broker import pull
    from rocketstore.remoting.broker_processor import BrokerProcessor
    monkeypatch.setattr(pull, "MAX_PULL_LANES", 8)
    fill(broker, 4)
    proc = BrokerProcessor(broker)
    for i in range(30):
        r = _wire_pull(proc, 0, 0, group=f"g{i}")
        assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST     # no such member: full path
        assert len(broker.pull_processor._lanes) <= 8


def test_a_deleted_and_recreated_topic_counts_its_pulls_afresh(broker):
    """Deleting a topic drops its pull counters (the lane's included); the lane, warmed
    again by the re-created topic, counts into the new counter: the metrics show only the
    new topic's pulls."""
    fill(broker, 10)
    c = member(broker)
    try:
        lane = broker.pull_lane(GROUP, TOPIC)
        assert len(lane.pull(0, 0, 32, 0, 0, 0).messages) == 5
        assert broker.metrics.counters()[3][(GROUP, TOPIC)] == 5
        broker.delete_topic(TOPIC)
        assert (GROUP, TOPIC) not in broker.metrics.counters()[3]
        assert lane.pull(0, 0, 32, 0, 0, 0) is None
        fill(broker, 4)
        assert len(lane.pull(0, 0, 32, 0, 0, 0).messages) == 2
        assert broker.metrics.counters()[3][(GROUP, TOPIC)] == 2
    finally:
        c.shutdown()


def test_a_lane_that_raises_leaves_the_pull_to_the_request_path(broker, monkeypatch):
    """Whatever a lane raises (here every pull), the consumer sends its request as before
    and consumes everything; the pull service's thread is not lost to the exception."""
    class Broken:
        def pull(self, *a):
            raise RuntimeError("lane broke")
    monkeypatch.setattr(broker, "pull_lane", lambda group, topic: Broken())
    fill(broker, 200)
    got = []
    done = threading.Event()

    def listener(msgs, ctx):
        got.extend(m.queue_offset for m in msgs)
        if len(got) >= 200:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer(GROUP, broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    c.start()
    try:
        assert done.wait(20)
    finally:
        c.shutdown()
    assert sorted(got) == sorted(list(range(100)) * 2)


def test_a_wire_pull_whose_lane_raises_is_answered_by_the_full_path(broker):
    from rocketstore.remoting.broker_processor import BrokerProcessor

    class Broken:
        def pull(self, *a):
            raise RuntimeError("lane broke")
    fill(broker, 10)
    c = member(broker)
    try:
        proc = BrokerProcessor(broker)
        broker.pull_processor._lanes[(GROUP, TOPIC)] = Broken()
        r = _wire_pull(proc, 0, 0)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["nextBeginOffset"] == "5"
    finally:
        c.shutdown()


def test_a_held_pull_woken_by_an_arrival_is_answered_by_the_lane(broker):
    """A pull parked at the queue's head and woken by new messages: answered by the lane
    (no full ``process``) with what arrived, counted once (by the waiter's future), its
    offset committed once (when it parked); the in-process consumer gets it as always."""
    from rocketstore.broker.pull import PullMessageProcessor
    fill(broker, 4)
    c = member(broker)
    processed = []
    orig = PullMessageProcessor.process

    def counted(self, req, allow_suspend, future=None):
        processed.append(allow_suspend)
        return orig(self, req, allow_suspend, future)
    try:
        PullMessageProcessor.process = counted
        fut = broker.pull_message(PullMessageRequest(GROUP, TOPIC, 0, 2, 32, SUSPEND | COMMIT,
                                                     1, 5000, None, 0))
        assert not fut.done() and processed == [True]             # parked at the head
        fill(broker, 4)
        r = fut.result(5)
        assert r.code == ResponseCode.SUCCESS and [m.queue_offset for m in r.messages] == [2, 3]
        assert processed == [True]                                # the lane answered
        assert broker.store.query_offset(GROUP, TOPIC, 0) == 1
        assert broker.metrics.counters()[3][(GROUP, TOPIC)] == 2
    finally:
        PullMessageProcessor.process = orig
        c.shutdown()
