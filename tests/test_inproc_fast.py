"""The in-process fast paths (issue 22 item 4): ``Producer.send`` through
``Transport.send_one`` / ``Broker.send_one`` (no request object, no future), and what a
consumer is handed. Each fast path must keep the semantics of the path it shortcuts."""
from __future__ import annotations

import threading

import pytest

from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, MessageQueue, Producer,
                                PushConsumer, SendStatus)
from rocketstore.common import ResponseCode
from rocketstore.common.protocol import SendMessageRequest
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.types import PutMessageResult

TOPIC = "FastTopic"


@pytest.fixture
def broker(inproc_broker):
    return inproc_broker


def stored(broker: Broker, res) -> object:
    ext = broker.store.look_message_by_offset(int(res.offset_msg_id[-16:], 16))
    assert ext is not None
    return ext


def test_fast_send_stores_what_the_request_path_stores(broker):
    """The same stamped message through ``Producer.send`` (fast path) and through
    ``Broker.send_message`` with a request: the same properties string (Java order, CLUSTER
    added, WAIT dropped), body, flag, tags and keys."""
    with Producer("pg_fast", broker=broker) as p:
        msg = Message(TOPIC, b"payload", tags="TagA", keys=["k1", "k2"], flag=7,
                      properties={"a": "1", "zz": "2"})
        r1 = p.send(msg)
        prepared, _ = p._prepare(msg)
        resp = broker.send_message(SendMessageRequest(
            "pg_fast", TOPIC, r1.message_queue.queue_id, [prepared])).result(5)
    assert resp.code == ResponseCode.SUCCESS
    a = stored(broker, r1)
    b = broker.store.look_message_by_offset(int(resp.msg_id[-16:], 16))
    assert r1.status is SendStatus.SEND_OK
    assert r1.queue_offset == a.queue_offset and r1.message_queue.queue_id == a.queue_id
    # the two records differ only in UNIQ_KEY (each _prepare stamps a new one)
    pa, pb = a.properties, b.properties
    assert pa["UNIQ_KEY"] == r1.msg_id
    pa.pop("UNIQ_KEY"), pb.pop("UNIQ_KEY")
    assert pa == pb and "WAIT" not in pa and pa["CLUSTER"] == broker.config.broker_cluster_name
    keys_a = [k for k in a.properties_bytes.decode().split("\x02") if not k.startswith("UNIQ")]
    keys_b = [k for k in b.properties_bytes.decode().split("\x02") if not k.startswith("UNIQ")]
    assert keys_a == keys_b                  # byte order of the stored string too
    assert bytes(a.body) == bytes(b.body) == b"payload"
    assert a.flag == b.flag == 7 and a.tags == "TagA" and a.keys == ["k1", "k2"]


def test_a_refused_fast_send_is_retried_then_raised(tmp_path):
    """SYSTEM_ERROR is a retried answer: the fast path's refused first attempt goes through
    the retry rules (1 + retry_times_when_send_failed attempts, counted by the broker),
    then raises the broker's error; nothing is stored. (The topic was never created, so
    the refusals count under the metrics' shared ``NO_SUCH_TOPIC`` key.)"""
    from rocketstore.broker.metrics import NO_SUCH_TOPIC
    cfg = BrokerConfig(start_accept_send_request_time_stamp=Broker.now_ms() + 3_600_000)
    broker = Broker.open(tmp_path / "r", cfg, StoreConfig(mapped_file_size_commit_log=4 << 20))
    try:
        with Producer("pg_retry", broker=broker, retry_times_when_send_failed=2) as p:
            with pytest.raises(MQBrokerError) as ei:
                p.send(Message(TOPIC, b"refused"))
            assert ei.value.code == ResponseCode.SYSTEM_ERROR
            assert "unable to service" in str(ei.value)
            assert broker.metrics.put_failed[NO_SUCH_TOPIC] == 3
            p.retry_times_when_send_failed = 0
            with pytest.raises(MQBrokerError):
                p.send(Message(TOPIC, b"refused"))
            assert broker.metrics.put_failed[NO_SUCH_TOPIC] == 4
            # send_future runs the same rules without the fast path: the same count
            p.retry_times_when_send_failed = 2
            with pytest.raises(MQBrokerError):
                p.send_future(Message(TOPIC, b"refused")).result(5)
            assert broker.metrics.put_failed[NO_SUCH_TOPIC] == 7
        assert broker.store.commit_log.get_max_offset() == 0
    finally:
        broker.close()


def test_a_not_retried_refusal_raises_at_once(broker):
    """A broker-only property is MESSAGE_ILLEGAL: not retried, raised from the first
    attempt."""
    with Producer("pg_illegal", broker=broker) as p:
        p.send(Message(TOPIC, b"warm"))
        failed = broker.metrics.put_failed.get(TOPIC, 0)
        with pytest.raises(MQBrokerError) as ei:
            p.send(Message(TOPIC, b"x", properties={"REAL_TOPIC": "Other"}))
        assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert "REAL_TOPIC" in str(ei.value)
        assert broker.metrics.put_failed[TOPIC] == failed + 1


def test_a_closed_broker_fails_the_fast_send_as_the_retry_rules_do(broker):
    """The fast path's TransportError goes through the retry rules: after the failed attempt
    the route is read again, and that fails too (the only broker is gone): the same error
    as ``send_future``, which never takes the fast path."""
    with Producer("pg_closed", broker=broker) as p:
        p.send(Message(TOPIC, b"warm"))
        broker.close()
        with pytest.raises((MQClientError, TransportError)) as fast:
            p.send(Message(TOPIC, b"lost"))
        with pytest.raises((MQClientError, TransportError)) as slow:
            p.send_future(Message(TOPIC, b"lost")).result(5)
        assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


def test_fast_send_keeps_delay_and_retry_topic_rewrites(broker):
    """DELAY goes to SCHEDULE_TOPIC_XXXX through the fast path; a %RETRY% send (the
    reconsume properties moved into the header) still takes the request path."""
    with Producer("pg_delay", broker=broker) as p:
        r = p.send(Message(TOPIC, b"later", properties={"DELAY": "1"}))
        ext = stored(broker, r)
        assert ext.topic == "SCHEDULE_TOPIC_XXXX" and ext.properties["REAL_TOPIC"] == TOPIC
        assert ext.queue_id == 0
        q = MessageQueue(TOPIC, broker.broker_name, 3)
        r = p.send(Message(TOPIC, b"chosen"), message_queue=q)
        assert r.message_queue.queue_id == 3 and stored(broker, r).queue_id == 3


def test_fast_send_under_sync_flush_answers_after_the_sync(tmp_path):
    b = Broker.open(tmp_path / "s", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20, flush_disk_type="SYNC_FLUSH"))
    try:
        with Producer("pg_sync", broker=b) as p:
            r = p.send(Message(TOPIC, b"durable"))
            assert r.status is SendStatus.SEND_OK
            end = int(r.offset_msg_id[-16:], 16)
            assert b.store.commit_log.flushed_where > end
    finally:
        b.close()


def test_async_send_in_process_is_answered_at_once_and_stores_what_send_stores(broker):
    """``send_async`` takes the same one-message path as ``send`` (no request object): under
    ASYNC_FLUSH its future is already done when it returns, and the record is the one ``send``
    stores (Java order, CLUSTER added, WAIT dropped)."""
    with Producer("pg_async_fast", broker=broker) as p:
        f = p.send_async(Message(TOPIC, b"a", tags="T", keys=["ka"], properties={"x": "1"}))
        assert f.done()                         # no callback round, no thread
        r = f.result()
        s = p.send(Message(TOPIC, b"a", tags="T", keys=["ka"], properties={"x": "1"}))
    assert r.status is SendStatus.SEND_OK and r.msg_id
    a, b = stored(broker, r), stored(broker, s)
    assert a.properties["UNIQ_KEY"] == r.msg_id
    pa, pb = a.properties, b.properties
    pa.pop("UNIQ_KEY"), pb.pop("UNIQ_KEY")
    assert pa == pb and "WAIT" not in pa


def test_async_send_under_sync_flush_completes_after_the_sync(tmp_path):
    b = Broker.open(tmp_path / "s", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20, flush_disk_type="SYNC_FLUSH"))
    try:
        with Producer("pg_async_sync", broker=b) as p:
            futs = [p.send_async(Message(TOPIC, b"d%d" % i)) for i in range(50)]
            assert p.flush(10) == 0         # a future answered after its sync is tracked
            results = [f.result(10) for f in futs]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        # each answered only once its record was synced, and none twice
        assert b.store.commit_log.flushed_where > max(
            int(r.offset_msg_id[-16:], 16) for r in results)
        assert len({(r.message_queue.queue_id, r.queue_offset) for r in results}) == 50
    finally:
        b.close()


def test_async_sends_on_the_lane_complete_call_back_and_keep_order(broker):
    """``send_async`` on the warm lane: each future is done when returned and runs its
    callbacks at once, results come in send order (offsets rising per queue), flush has
    nothing to wait for, ``concurrent.futures.wait`` and asyncio take the futures; the cycle
    collector does not walk them (a caller keeping many futures pays no GC walk for them)."""
    import asyncio
    import gc
    from concurrent.futures import wait
    with Producer("pg_async_order", broker=broker) as p:
        p.send(Message(TOPIC, b"warm"))
        p.send(Message(TOPIC, b"warm"))     # the lane's first send: the lane is warm
        seen: list[int] = []
        futs = []
        for i in range(40):
            f = p.send_async(Message(TOPIC, b"m%d" % i))
            f.add_done_callback(lambda f, i=i: seen.append(i))
            futs.append(f)
        assert seen == list(range(40))
        assert p.flush(5) == 0 and not p._pending
        results = [f.result() for f in futs]
        offsets: dict[int, list[int]] = {}
        for r in results:
            offsets.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
        assert all(v == list(range(v[0], v[0] + len(v))) for v in offsets.values())
        assert [bytes(stored(broker, r).body) for r in results] == \
            [b"m%d" % i for i in range(40)]
        assert not any(gc.is_tracked(f) for f in futs)
        assert len(wait(futs, timeout=1).done) == 40

        async def gathered() -> list:
            return await asyncio.gather(*(asyncio.wrap_future(f) for f in futs))
        assert asyncio.run(gathered()) == results


def test_async_send_to_a_closed_broker_fails_its_future(broker):
    p = Producer("pg_async_closed", broker=broker, retry_times_when_send_async_failed=1).start()
    try:
        broker.close()
        f = p.send_async(Message(TOPIC, b"late"))
        with pytest.raises((TransportError, MQClientError)):
            f.result(5)
    finally:
        p.shutdown()


def test_unstamped_local_send_is_born_when_stored(broker):
    """A message handed to ``Broker.send_one`` without a born timestamp (a local send that
    was never stamped) is born at its store time, on the byte path as on the map path."""
    msg = Message(TOPIC, b"unstamped", tags="T", properties={"UNIQ_KEY": "AC11000100002A9F0000000000000001"})
    assert msg.born_timestamp is None
    r = broker.send_one("pg_unstamped", TOPIC, 0, msg)
    assert r.code == ResponseCode.SUCCESS
    ext = broker.store.look_message_by_offset(int(r.msg_id[-16:], 16))
    assert ext.born_timestamp == ext.store_timestamp > 0
    assert ext.properties["UNIQ_KEY"] == "AC11000100002A9F0000000000000001"


# -- the send lane: a producer's sends to one topic after the first (SendLane / FastSend) ----

def _code(answer):
    """A lane's answer as a response code: a send stored at once answers its
    ``PutMessageResult`` (PUT_OK), any other the broker's response."""
    if isinstance(answer, PutMessageResult):
        assert answer.status is PutMessageStatus.PUT_OK
        return ResponseCode.SUCCESS
    return answer.code


def _warm_lane(broker, group="pg_lane"):
    """A broker lane whose checks passed once (its state cached)."""
    lane = broker.send_lane(group, TOPIC)
    assert not lane.warm
    assert _code(lane.send(Message(TOPIC, b"first"), 0)) == ResponseCode.SUCCESS  # auto-creates
    assert not lane.warm        # the topic it created is taken from the next send on
    assert _code(lane.send(Message(TOPIC, b"second"), 0)) == ResponseCode.SUCCESS
    assert lane.warm
    assert isinstance(lane.send(Message(TOPIC, b"third"), 0), PutMessageResult)
    return lane


def test_lane_sends_store_what_the_request_path_stores(broker):
    """Sends after the first take the lane (``Producer._fast``); each shape stores the bytes
    the request path stores (properties string in Java order, CLUSTER added, WAIT dropped),
    only UNIQ_KEY differing."""
    shapes = [dict(tags="TagA", keys=["k1", "k2"], flag=7, properties={"a": "1", "zz": "2"}),
              dict(), dict(keys="one"), dict(properties={f"p{i}": str(i) for i in range(20)}),
              dict(tags="t", properties={"WAIT": "false", "x": "y"})]
    with Producer("pg_lane_bytes", broker=broker) as p:
        p.send(Message(TOPIC, b"warm"))
        assert TOPIC in p._fast
        for shape in shapes:
            msg = Message(TOPIC, b"payload", **shape)
            r1 = p.send(msg)
            prepared, _ = p._prepare(msg)
            resp = broker.send_message(SendMessageRequest(
                "pg_lane_bytes", TOPIC, r1.message_queue.queue_id, [prepared])).result(5)
            a = stored(broker, r1)
            b = broker.store.look_message_by_offset(int(resp.msg_id[-16:], 16))
            assert a.properties["UNIQ_KEY"] == r1.msg_id != b.properties["UNIQ_KEY"]
            strip = [k for k in a.properties_bytes.split(b"\x02") if not k.startswith(b"UNIQ")]
            assert strip == [k for k in b.properties_bytes.split(b"\x02")
                             if not k.startswith(b"UNIQ")], shape
            assert (a.flag, a.sys_flag, bytes(a.body)) == (b.flag, b.sys_flag, bytes(b.body))
            assert r1.queue_offset == a.queue_offset


def test_lane_follows_a_changed_topic(broker):
    """A lane caches its checks per topic configuration: once the topic shrinks to one
    queue, a send to queue 2 is refused as the full path refuses it, and nothing is stored."""
    from rocketstore.store.topics import TopicConfig
    lane = _warm_lane(broker)
    assert _code(lane.send(Message(TOPIC, b"q2"), 2)) == ResponseCode.SUCCESS
    before = broker.store.commit_log.get_max_offset()
    broker.topic_manager.update(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
    r = lane.send(Message(TOPIC, b"q2 after"), 2)
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in r.remark
    assert broker.store.commit_log.get_max_offset() == before
    assert _code(lane.send(Message(TOPIC, b"q0"), 0)) == ResponseCode.SUCCESS


def test_lane_follows_runtime_settings(broker):
    """UPDATE_BROKER_CONFIG replaces the settings: a warm lane obeys the new accept time."""
    from rocketstore.broker import runtime_config
    lane = _warm_lane(broker)
    code, _ = runtime_config.update(
        broker, {"startAcceptSendRequestTimeStamp": str(Broker.now_ms() + 3_600_000)})
    assert code == ResponseCode.SUCCESS
    before = broker.store.commit_log.get_max_offset()
    r = lane.send(Message(TOPIC, b"refused"), 0)
    assert r.code == ResponseCode.SYSTEM_ERROR and "unable to service" in r.remark
    assert broker.store.commit_log.get_max_offset() == before


def test_lane_leaves_delay_transactions_and_broker_properties_to_the_full_path(broker):
    """On a warm lane a DELAY still goes to SCHEDULE_TOPIC_XXXX, a broker-only property is
    still refused, and a prepared transaction message is still a half message."""
    lane = _warm_lane(broker)
    r = lane.send(Message(TOPIC, b"later", properties={"DELAY": "1"}), 1)
    assert _code(r) == ResponseCode.SUCCESS
    ext = broker.store.look_message_by_offset(int(r.msg_id[-16:], 16))
    assert ext.topic == "SCHEDULE_TOPIC_XXXX" and ext.properties["REAL_TOPIC"] == TOPIC
    r = lane.send(Message(TOPIC, b"x", properties={"REAL_TOPIC": "Other"}), 1)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "REAL_TOPIC" in r.remark
    r = lane.send(Message(TOPIC, b"half", properties={"TRAN_MSG": "true", "PGROUP": "pg_lane"},
                          sys_flag=0x4), 1)
    assert _code(r) == ResponseCode.SUCCESS
    ext = broker.store.look_message_by_offset(int(r.msg_id[-16:], 16))
    assert ext.topic == "RMQ_SYS_TRANS_HALF_TOPIC" and ext.properties["REAL_QID"] == "1"


def test_lane_sends_under_sync_flush_each_answer_after_its_sync(tmp_path):
    b = Broker.open(tmp_path / "s", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20, flush_disk_type="SYNC_FLUSH"))
    try:
        with Producer("pg_lane_sync", broker=b) as p:
            for i in range(20):
                r = p.send(Message(TOPIC, b"durable %d" % i))
                assert r.status is SendStatus.SEND_OK
                assert b.store.commit_log.flushed_where > int(r.offset_msg_id[-16:], 16)
            assert TOPIC in p._fast
        assert b.metrics.counters()[0][TOPIC] == 20     # answered later, counted once each
    finally:
        b.close()


def test_sends_from_threads_get_distinct_ids_and_offsets(broker):
    """The sync send stamps UNIQ_KEY without a lock: 4 threads x 3,000 sends, every message
    id and every (queue, offset) distinct, every message stored."""
    results: list = []
    with Producer("pg_lane_threads", broker=broker) as p:
        p.send(Message(TOPIC, b"warm"))

        def run() -> None:
            results.extend(p.send(Message(TOPIC, b"t")) for _ in range(3000))
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 12000
    assert len({r.msg_id for r in results}) == 12000
    assert len({(r.message_queue.queue_id, r.queue_offset) for r in results}) == 12000
    broker.store.wait_dispatched(10)
    assert sum(broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(4)) == 12001
    # the lane counts in C without a lock: none of the 12,001 puts lost in the metrics
    puts, put_bytes, failed, _, _ = broker.metrics.counters()
    assert (puts[TOPIC], put_bytes[TOPIC], failed.get(TOPIC, 0)) == (12001, 4 + 12000, 0)
    assert broker.metrics.stats_counters()[("TOPIC_PUT_NUMS", TOPIC)] == 12001


def test_async_sends_on_the_lane_keep_the_async_rules(tmp_path):
    """After a sync send installed the lane, ``send_async`` takes it too: under SYNC_FLUSH
    each future completes only once its record is on disk, and ``flush`` waits for them;
    on a closed broker the future fails as the request path's does (retried, then raised)."""
    b = Broker.open(tmp_path / "s", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20, flush_disk_type="SYNC_FLUSH"))
    try:
        with Producer("pg_lane_async", broker=b, retry_times_when_send_async_failed=1) as p:
            p.send(Message(TOPIC, b"warm"))
            assert TOPIC in p._fast
            futs = [p.send_async(Message(TOPIC, b"a%d" % i)) for i in range(50)]
            results = [f.result(10) for f in futs]
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert b.store.commit_log.flushed_where > max(
                int(r.offset_msg_id[-16:], 16) for r in results)
            assert len({r.msg_id for r in results}) == 50
            b.close()
            f = p.send_async(Message(TOPIC, b"late"))
            with pytest.raises((TransportError, MQClientError)):
                f.result(5)
    finally:
        if not b.closed:
            b.close()
