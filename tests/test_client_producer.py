"""Producer against a real Broker: results, UNIQ_KEY, compression bits, validation, batches,
async and oneway sends, selectors."""
import time
import zlib

import pytest

from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import (Message, MessageQueue, Producer, SelectMessageQueueByHash,
                                SendStatus)
from rocketstore.errors import MQClientError


@pytest.fixture
def broker(tmp_path):
    b = Broker.open(tmp_path / "s", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 * 1024 * 1024))
    yield b
    b.close()


@pytest.fixture
def producer(broker):
    with Producer("pg", broker=broker) as p:
        yield p


def stored(broker, result):
    return broker.store.look_message_by_offset(int(result.offset_msg_id[-16:], 16))


def test_send_result_names_the_stored_record(broker, producer):
    r = producer.send(Message("TopicA", b"hello", tags="TagA", keys=["k1"]))
    assert r.status is SendStatus.SEND_OK
    m = stored(broker, r)
    assert m.uniq_key == r.msg_id and len(r.msg_id) == 32
    assert m.msg_id == r.offset_msg_id
    assert (m.topic, m.queue_id, m.queue_offset) == ("TopicA", r.message_queue.queue_id,
                                                     r.queue_offset)
    assert r.message_queue.broker_name == broker.broker_name
    assert bytes(m.body) == b"hello" and m.tags == "TagA" and m.keys == ["k1"]
    # auto-created with min(producer's 4, TBW102's 8) queues
    qs = {producer.send(Message("TopicA", b"x")).message_queue.queue_id for _ in range(12)}
    assert qs == {0, 1, 2, 3}


def test_a_given_uniq_key_is_kept(broker, producer):
    r = producer.send(Message("TopicA", b"x", properties={"UNIQ_KEY": "MYKEY0001"}))
    assert r.msg_id == "MYKEY0001" and stored(broker, r).uniq_key == "MYKEY0001"


@pytest.mark.parametrize("kind,bits", [("ZLIB", 0x301), ("LZ4", 0x101), ("ZSTD", 0x201)])
def test_large_bodies_are_compressed_with_type_bits(broker, kind, bits):
    body = b"abcdefgh" * 1024                    # 8 KiB, compressible
    with Producer("pgz", broker=broker, compress_type=kind) as p:
        r = p.send(Message("TopicZ", body))
        small = p.send(Message("TopicZ", b"y" * 4095))
    m = stored(broker, r)
    assert m.sys_flag & 0x301 == bits
    assert len(m.stored_body) < len(body) and bytes(m.body) == body
    if kind == "ZLIB":
        assert zlib.decompress(bytes(m.stored_body)) == body
    assert stored(broker, small).sys_flag & 0x1 == 0      # below 4096: as is


def test_validation_errors_are_clear(producer):
    with pytest.raises(MQClientError, match="body length is zero"):
        producer.send(Message("TopicA", b""))
    with pytest.raises(MQClientError, match="over the max message size"):
        Producer("pg9", broker=object(), max_message_size=10)._prepare(Message("T", b"x" * 11))
    with pytest.raises(MQClientError, match="forbidden"):
        producer.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))
    with pytest.raises(MQClientError, match="not a rocketstore Message"):
        producer.send("hello")


def test_group_and_transport_arguments(broker):
    with pytest.raises(MQClientError, match="exactly one of broker"):
        Producer("pg")
    with pytest.raises(MQClientError, match="exactly one of broker"):
        Producer("pg", broker=broker, namesrv_addr="127.0.0.1:9876")
    with pytest.raises(MQClientError, match="expected 'host:port"):
        Producer("pg", namesrv_addr="")
    with pytest.raises(MQClientError, match="DEFAULT_PRODUCER is reserved"):
        Producer("DEFAULT_PRODUCER", broker=broker).start()
    with pytest.raises(MQClientError, match="illegal characters"):
        Producer("bad group!", broker=broker).start()
    with pytest.raises(MQClientError, match="not started"):
        Producer("pg", broker=broker).send(Message("TopicA", b"x"))
    with pytest.raises(MQClientError, match="compress_type 'BZ2'"):
        Producer("pg", broker=broker, compress_type="BZ2")


def test_batch_rules_and_results(broker, producer):
    r = producer.send_batch([Message("TopicB", b"m%d" % i) for i in range(5)])
    keys = r.msg_id.split(",")
    ids = r.offset_msg_id.split(",")
    assert len(keys) == len(set(keys)) == 5 and len(ids) == 5
    for i, (k, oid) in enumerate(zip(keys, ids)):
        m = broker.store.look_message_by_offset(int(oid[-16:], 16))
        assert m.uniq_key == k and bytes(m.body) == b"m%d" % i
        assert m.queue_offset == r.queue_offset + i
    with pytest.raises(MQClientError, match="should be the same"):
        producer.send_batch([Message("TopicB", b"a"), Message("TopicC", b"b")])
    with pytest.raises(MQClientError, match="TimeDelayLevel"):
        producer.send_batch([Message("TopicB", b"a", properties={"DELAY": "2"})])
    with pytest.raises(MQClientError, match="waitStoreMsgOK"):
        producer.send_batch([Message("TopicB", b"a"),
                             Message("TopicB", b"b", properties={"WAIT": "false"})])
    with pytest.raises(MQClientError, match="empty"):
        producer.send_batch([])


def test_async_send_futures_behave_as_futures_under_sync_flush(tmp_path):
    """Futures of sends in flight (SYNC_FLUSH: completed after the disk sync, by another
    thread) serve waiters, callbacks added before and after completion, wait() and asyncio."""
    import asyncio
    import concurrent.futures as cf
    import threading
    b = Broker.open(tmp_path / "sync", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 * 1024 * 1024,
                                flush_disk_type="SYNC_FLUSH"))
    try:
        with Producer("pg", broker=b) as p:
            mq = MessageQueue("TopicS", b.config.broker_name, 0)
            p.send(Message("TopicS", b"create"), message_queue=mq)
            early: list = []
            futs = []
            for i in range(300):
                f = p.send_async(Message("TopicS", b"m%d" % i), message_queue=mq)
                if i % 50 == 0:
                    f.add_done_callback(lambda f: early.append(f.result().queue_offset))
                futs.append(f)
            waited = []
            t = threading.Thread(target=lambda: waited.append(futs[-1].result(10)))
            t.start()
            done, not_done = cf.wait(futs, timeout=10)
            t.join(10)
            assert not not_done and len(done) == 300
            assert [f.result().queue_offset for f in futs] == list(range(1, 301))
            assert sorted(early) == list(range(1, 301, 50))
            assert waited[0].msg_id == futs[-1].result().msg_id
            late: list = []
            futs[7].add_done_callback(lambda f: late.append(f.result().queue_offset))
            assert late == [8]

            async def awaited():
                return await asyncio.wrap_future(futs[9])
            assert asyncio.run(awaited()).queue_offset == 10
    finally:
        b.close()


def test_async_oneway_selector_and_explicit_queue(broker, producer):
    fut = producer.send_async(Message("TopicA", b"async"))
    r = fut.result(10)
    assert r.status is SendStatus.SEND_OK and bytes(stored(broker, r).body) == b"async"
    bad = producer.send_async(Message("TopicA", b""))
    with pytest.raises(MQClientError):
        bad.result(10)
    producer.send_oneway(Message("TopicO", b"one", tags="O"))
    deadline = time.monotonic() + 10
    while True:          # dispatch makes it visible shortly after the put
        got = [m for q in range(4) for m in broker.store.get_message("g", "TopicO", q, 0, 32).messages]
        if got or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert [bytes(m.body) for m in got] == [b"one"]
    sel = SelectMessageQueueByHash()
    assert producer.send(Message("TopicA", b"s"), selector=sel, arg=-7).message_queue.queue_id \
        == 3                                          # abs(-7 rem 4) = 3
    mq = MessageQueue("TopicA", broker.broker_name, 2)
    assert producer.send(Message("TopicA", b"q"), message_queue=mq).message_queue == mq
    with pytest.raises(MQClientError, match="not the queue's topic"):
        producer.send(Message("TopicB", b"q"), message_queue=mq)


def test_two_producers_of_one_group_in_one_instance_are_refused(broker):
    with Producer("pgx", broker=broker, instance_name="same") as p1:
        with pytest.raises(MQClientError, match="has been created before"):
            Producer("pgx", broker=broker, instance_name="same").start()
        assert p1.send(Message("TopicA", b"x")).status is SendStatus.SEND_OK


def test_batch_checks_name_the_entry_that_breaks_a_rule(broker, producer):
    """The batch's checks run in C for a batch that passes them on its face; any entry that
    breaks a rule (however far into the batch) still gets the producer's own error, and a
    forbidden topic is refused though every entry looks plain."""
    ok = [Message("TopicB", b"fine") for _ in range(40)]
    with pytest.raises(MQClientError, match="body length is zero"):
        producer.send_batch(ok + [Message("TopicB", b"")])
    producer.max_message_size = 64
    with pytest.raises(MQClientError, match="over the max message size 64"):
        producer.send_batch(ok + [Message("TopicB", b"x" * 65)])
    with pytest.raises(MQClientError, match="forbidden"):
        producer.send_batch([Message("SCHEDULE_TOPIC_XXXX", b"a"),
                             Message("SCHEDULE_TOPIC_XXXX", b"b")])
    with pytest.raises(MQClientError, match="waitStoreMsgOK"):
        producer.send_batch(ok + [Message("TopicB", b"b", properties={"WAIT": "false"})])
    with pytest.raises(MQClientError, match="TimeDelayLevel"):
        producer.send_batch(ok + [Message("TopicB", b"later", delay_level=3)])
