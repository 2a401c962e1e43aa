"""The in-process batch lane (issue 22): ``Producer.send_batch`` of plain ``Message``s goes
from the producer's ``FastSend`` to the broker's ``SendLane`` and ``put_wire_batch_async``
with no stamped copy, batch body or request per batch. It must store the bytes the request
path stores, count what the request path counts, and leave every other shape and every
refusal to the path it shortcuts."""
from __future__ import annotations

import re

import pytest

import refreader
from rocketstore import StoreConfig
from rocketstore.broker import send as send_module
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import Message, MessageQueue, Producer, SendStatus
from rocketstore.client.fast_send import FastSend
from rocketstore.common import ResponseCode
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from rocketstore.store._codec import UniqIdGenerator, stamp_for_send

TOPIC = "BatchLane"
_UNIQ = re.compile(rb"UNIQ_KEY\x01[0-9A-F]{32}")


def _open(path, **store) -> Broker:
    return Broker.open(str(path), BrokerConfig(),
                       StoreConfig(mapped_file_size_commit_log=4 << 20, **store))


def _batch(i: int) -> list[Message]:
    """Entries with and without tags, keys, user properties, a user's own UNIQ_KEY, WAIT."""
    out = []
    for k in range(12):
        props = {f"p{j}": "v" * (j + 1) for j in range((i + k) % 6)}
        if k == 5:
            props["UNIQ_KEY"] = f"MINE{i:02d}"
        if i == 2:
            props["WAIT"] = "false"
        out.append(Message(TOPIC, b"b%d-%d" % (i, k) * (k + 1),
                           tags="TagA" if k % 2 else None,
                           keys=[f"k{k}", "x"] if k % 3 == 1 else None,
                           flag=k % 4, properties=props))
    return out


def _records(broker: Broker, r) -> list:
    offs = [int(m[-16:], 16) for m in r.offset_msg_id.split(",")]
    return [broker.store.look_message_by_offset(o) for o in offs]


def _run(path, lanes: bool, wire: bool, monkeypatch) -> tuple[list, list, list]:
    """Send the batches of ``_batch`` after a warm-up send; (stored fields, raw properties
    with the generated UNIQ_KEYs masked, request-path calls per batch)."""
    calls: list[int] = []
    real_send = Broker.send_message

    def counting(self, request):
        calls.append(len(request.messages))
        return real_send(self, request)
    monkeypatch.setattr(Broker, "send_message", counting)
    if not wire:
        monkeypatch.setattr(send_module.SendMessageProcessor, "_batch_as_wire",
                            lambda self, req: None)
    fields = []
    with _open(path) as b:
        with Producer("pg_batch", broker=b) as p:
            p.send(Message(TOPIC, b"warm"))
            p._lanes = lanes
            if not lanes:
                p._fast.clear()
            for i in range(4):
                batch = _batch(i)
                r = p.send_batch(batch)
                assert r.status is SendStatus.SEND_OK
                ids = r.msg_id.split(",")
                got = _records(b, r)
                assert r.offset_msg_id == ",".join(e.offset_msg_id for e in got)
                assert [e.properties["UNIQ_KEY"] for e in got] == ids
                assert ids[5] == f"MINE{i:02d}" and len(set(ids)) == len(ids)
                assert [e.queue_offset for e in got] == list(range(r.queue_offset,
                                                                   r.queue_offset + 12))
                assert all(e.born_timestamp == e.store_timestamp for e in got)
                assert {e.queue_id for e in got} == {r.message_queue.queue_id}
                fields.append([(e.flag, bytes(e.body), e.born_host, e.sys_flag, e.tags,
                                e.keys, {k: v for k, v in e.properties.items()
                                         if k != "UNIQ_KEY" or v.startswith("MINE")})
                               for e in got])
    monkeypatch.undo()
    raw = [_UNIQ.sub(b"UNIQ_KEY\x01" + b"#" * 32, rec["properties_raw"]) for _, _, _, rec in
           refreader.iter_commitlog(str(path / "commitlog")) if rec["kind"] == "msg"]
    return fields, raw, calls


def test_lane_batches_store_the_bytes_of_the_request_paths(tmp_path, monkeypatch):
    """The same batches by the lane, by the request path's byte path and by its map path:
    every stored byte but the times and the generated UNIQ_KEYs is the same; every entry's
    UNIQ_KEY is the result's id at its place. The lane's batches make no request."""
    lane = _run(tmp_path / "lane", True, True, monkeypatch)
    wire = _run(tmp_path / "wire", False, True, monkeypatch)
    maps = _run(tmp_path / "map", False, False, monkeypatch)
    assert lane[0] == wire[0] == maps[0]
    assert lane[1] == wire[1] == maps[1] and len(lane[1]) == 1 + 4 * 12
    assert all(p.endswith(b"\x02CLUSTER\x01DefaultCluster\x02WAIT\x01" +
                          (b"false" if 25 <= n < 37 else b"true"))
               for n, p in enumerate(lane[1]) if n)
    # the first batch warms the broker's lane through the request path; the rest take it
    assert lane[2] == [12] and wire[2] == maps[2] == [12] * 4


def test_lane_counts_each_batch_in_the_metrics(tmp_path):
    """The lane's stored batches are counted in the broker's put counters (messages and body
    bytes, exactly), a refused one as one failed send."""
    with _open(tmp_path / "m") as b:
        with Producer("pg_count", broker=b) as p:
            sizes = 0
            for i in range(5):
                batch = _batch(i)
                sizes += sum(len(m.body) for m in batch)
                p.send_batch(batch)
            assert p._fast[TOPIC].batch_lane.warm
            msgs, size, failed, _, _ = b.metrics.counters()
            assert (msgs[TOPIC], size[TOPIC]) == (60, sizes)
            assert b.metrics.stats_counters()[("TOPIC_PUT_NUMS", TOPIC)] == 60
            # 4 MB files: a batch of 5 MB does not fit one, and is refused as such
            big = [Message(TOPIC, b"x" * (1 << 20)) for _ in range(5)]
            with pytest.raises(MQBrokerError) as ei:
                p.send_batch(big)
            assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert b.metrics.counters()[2][TOPIC] == failed.get(TOPIC, 0) + 1
            assert b.metrics.counters()[0][TOPIC] == 60


def test_refused_batches_answer_as_the_request_path_does(tmp_path):
    """Too large for a file, a broker-only property, a body over the producer's limit, two
    topics, a topic the store refuses writes to: the same errors with and without the
    lane, nothing more stored."""
    errors = []
    for lanes in (True, False):
        with _open(tmp_path / str(lanes)) as b:
            with Producer("pg_refused", broker=b, max_message_size=2 << 20) as p:
                p.send_batch(_batch(0))
                p.send_batch(_batch(1))
                p._lanes = lanes
                if not lanes:
                    p._fast.clear()
                got = []
                for batch in ([Message(TOPIC, b"x" * (1 << 20)) for _ in range(5)],
                              [Message(TOPIC, b"a"), Message(TOPIC, b"b",
                                                             properties={"REAL_QID": "1"})],
                              [Message(TOPIC, b"a"), Message(TOPIC, b"x" * (3 << 20))],
                              [Message(TOPIC, b"a"), Message("Other", b"b")]):
                    with pytest.raises((MQBrokerError, MQClientError)) as ei:
                        p.send_batch(batch)
                    got.append((type(ei.value), str(ei.value)))
                # the store's topic rule (not the broker's config, which the lane follows)
                b.store.commit_log.set_topic_rule(TOPIC, (False, 4))
                with pytest.raises(MQBrokerError) as ei:
                    p.send_batch(_batch(2))
                got.append((ei.value.code, str(ei.value)))
                errors.append(got)
                assert b.metrics.counters()[0][TOPIC] == 24
    assert errors[0] == errors[1]
    assert errors[0][0][0] is MQBrokerError and "fit" in errors[0][0][1]
    assert "REAL_QID" in errors[0][1][1] and errors[0][4][0] == ResponseCode.NO_PERMISSION


def test_other_shapes_fall_back_and_store_what_they_stored(tmp_path):
    """Shapes the lane does not take -- a born host or sys flag of its own, verbatim
    properties, a tuple, a DELAY entry, an explicit queue -- go the producer's own way with
    its answers."""
    with _open(tmp_path / "f") as b:
        with Producer("pg_shapes", broker=b) as p:
            p.send_batch(_batch(0))
            p.send_batch(_batch(1))
            lane = p._fast[TOPIC].batch_lane
            assert lane.warm
            for batch in ([Message(TOPIC, b"h", born_host="10.0.0.1:9")],
                          [Message(TOPIC, b"s", sys_flag=0x2)],
                          [Message.from_properties_string(TOPIC, b"v", "a\x01b\x02")],
                          (Message(TOPIC, b"t"), Message(TOPIC, b"u"))):
                r = p.send_batch(batch)
                got = _records(b, r)
                assert [bytes(e.body) for e in got] == [bytes(m.body) for m in batch]
                assert [e.properties["UNIQ_KEY"] for e in got] == r.msg_id.split(",")
            assert _records(b, r)[0].properties["CLUSTER"] == "DefaultCluster"
            with pytest.raises(MQClientError, match="TimeDelayLevel"):
                p.send_batch([Message(TOPIC, b"d", delay_level=2)])
            with pytest.raises(MQClientError, match="empty"):
                p.send_batch([])
            r = p.send_batch([Message(TOPIC, b"q")], message_queue=MessageQueue(
                TOPIC, b.broker_name, 3))
            assert r.message_queue.queue_id == 3 and _records(b, r)[0].queue_id == 3


def test_a_refused_lane_batch_is_retried_with_its_ids(tmp_path, monkeypatch):
    """A lane put the store refuses with a retried code goes through the retry rules; the
    retry sends the entries stamped with the ids the first attempt made."""
    seen = []
    real = FastSend._batch_answered

    def spy(self, answer, msgs, ids, joined, *rest):
        seen.append((answer, ids, joined))
        return real(self, answer, msgs, ids, joined, *rest)
    monkeypatch.setattr(FastSend, "_batch_answered", spy)
    with _open(tmp_path / "r") as b:
        with Producer("pg_retry", broker=b) as p:
            p.send_batch(_batch(0))
            p.send_batch(_batch(1))
            cl = b.store.commit_log
            cl.set_not_writeable(OSError("disk full"))
            real_send = b.send_message

            def healed(request):            # the retry finds the store writable again
                cl.set_not_writeable(None)
                return real_send(request)
            monkeypatch.setattr(b, "send_message", healed)
            r = p.send_batch(_batch(3))
            (answer, ids, joined), = [s for s in seen if s[1] is not None]
            assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE and ids is not None
            assert r.msg_id == joined and r.status is SendStatus.SEND_OK
            got = [e.properties["UNIQ_KEY"] for e in _records(b, r)]
            assert got == joined.split(",") and got[5] == "MINE03"
            assert [k.encode() for k in got if k != "MINE03"] == \
                [ids[32 * i:32 * i + 32] for i in range(12) if i != 5]


def test_lane_batches_from_threads_get_distinct_ids_and_offsets(tmp_path):
    """4 threads x 100 batches of 16 on one producer: every id and (queue, offset) distinct,
    every batch's offsets consecutive, every message stored and counted."""
    import threading
    results: list = []
    with _open(tmp_path / "t") as b:
        with Producer("pg_threads", broker=b) as p:
            p.send_batch([Message(TOPIC, b"warm")])

            def run() -> None:
                results.extend(p.send_batch([Message(TOPIC, b"t%d" % i) for i in range(16)])
                               for _ in range(100))
            threads = [threading.Thread(target=run) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ids = [k for r in results for k in r.msg_id.split(",")]
            assert len(results) == 400 and len(set(ids)) == len(ids) == 6400
            slots = {(r.message_queue.queue_id, r.queue_offset + i)
                     for r in results for i in range(16)}
            assert len(slots) == 6400
            b.store.wait_dispatched(10)
            assert sum(b.store.get_max_offset_in_queue(TOPIC, q) for q in range(4)) == 6401
            assert b.metrics.counters()[0][TOPIC] == 6401


def test_restamp_stamps_as_the_producer_does():
    """``restamp`` with given ids makes the messages ``stamp_for_send`` makes."""
    from rocketstore.remoting._wire import restamp
    msgs = _batch(1)
    stamped, keys = stamp_for_send(msgs, UniqIdGenerator("127.0.0.1"))
    ids = b"".join(k.encode() if len(k) == 32 else b"0" * 32 for k in keys)
    again = restamp(tuple(msgs), ids)
    assert [m.properties for m in again] == [m.properties for m in stamped]
    assert [m.send_properties() for m in again] == [m.send_properties() for m in stamped]
    with pytest.raises(ValueError):
        restamp(tuple(msgs), ids[:-1])


def test_a_closed_broker_fails_a_lane_batch_as_the_retry_rules_do(tmp_path):
    b = _open(tmp_path / "c")
    with Producer("pg_closed", broker=b) as p:
        p.send_batch(_batch(0))
        p.send_batch(_batch(1))
        b.close()
        with pytest.raises((MQClientError, TransportError)) as fast:
            p.send_batch(_batch(2))
        p._fast.clear()
        with pytest.raises((MQClientError, TransportError)) as slow:
            p.send_batch(_batch(2))
        assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


def test_lane_batches_under_sync_flush_answer_after_their_sync(tmp_path):
    with _open(tmp_path / "s", flush_disk_type="SYNC_FLUSH") as b:
        with Producer("pg_sync", broker=b) as p:
            for i in range(4):
                r = p.send_batch(_batch(i))
                assert r.status is SendStatus.SEND_OK
                assert b.store.commit_log.flushed_where > \
                    int(r.offset_msg_id.split(",")[-1][-16:], 16)
            assert p._fast[TOPIC].batch_lane.warm
            assert b.metrics.counters()[0][TOPIC] == 48


def test_a_stale_fast_send_is_made_anew(tmp_path):
    """A publish list refreshed with the same queues keeps its object: the topic's
    ``FastSend`` is made anew once it is past its age, so later sends take it again."""
    import time
    with _open(tmp_path / "e") as b:
        with Producer("pg_stale", broker=b, poll_name_server_interval=100) as p:
            p.send(Message(TOPIC, b"warm"))
            first = p._fast[TOPIC]
            time.sleep(0.15)
            p.send(Message(TOPIC, b"after"))
            assert p._fast[TOPIC] is not first
            assert p._fast[TOPIC].expires > time.monotonic()
