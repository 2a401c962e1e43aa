"""The Spark source's ``namesrv`` mode against a real cluster: one ``rocketstore namesrv`` and two
``rocketstore broker`` processes (broker-a, broker-b) with the tests' topics on both.

Every row read is checked against what the producer's send reported for it (broker, queue,
queue offset, offset msg id): a batch read, a streaming query restarted from its checkpoint
(a broker joining the topic in between) and DataFrame writes read back.
"""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from rocketstore.client import Message, Producer, SendStatus
from rocketstore.common import MessageQueue
from rocketstore.errors import InvalidOptionError
from rocketstore.spark.wire import WireOptions, offsets_from_json, offsets_to_json
from cluster_support import Cluster

pytestmark = pytest.mark.spark

TOPICS = {"WireRead": {"broker-a": 4, "broker-b": 2},
          "WireStream": {"broker-a": 2},                 # broker-b gets it mid-test
          "WireWrite": {"broker-a": 3, "broker-b": 3},
          "WireShard": {"broker-a": 2, "broker-b": 2},
          "WireCopy": {"broker-a": 2, "broker-b": 1},
          "WirePush": {"broker-a": 4, "broker-b": 2},
          "WireDown": {"broker-a": 2, "broker-b": 2}}


# small files: the stores of a test stay small on disk
BROKER_CONF = {"mappedFileSizeCommitLog": str(1 << 20),
               "mappedFileSizeConsumeQueue": str(1000 * 20)}


class _Cluster:
    """The module's cluster (tests/cluster_support.py) and its NameServer address."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.namesrv = c.namesrv_addr

    def wait_route(self, topic: str, brokers: set[str]) -> None:
        """Until the NameServer routes ``topic`` to every one of ``brokers``."""
        deadline = time.monotonic() + 30
        while not brokers <= set(self.c.queue_counts(topic)):
            assert time.monotonic() < deadline, f"route of {topic}: {self.c.queue_counts(topic)}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("wire")
    with Cluster(root, ("broker-a", "broker-b"), conf=BROKER_CONF) as c:
        for topic, queues in TOPICS.items():
            c.create_topic(topic, queues)
        c.start()
        for topic, queues in TOPICS.items():
            c.wait_route(topic, queues)
        yield _Cluster(c)
    shutil.rmtree(root, ignore_errors=True)     # the brokers' stores


def _send(namesrv: str, msgs: list[Message], queues: list[MessageQueue] | None = None) -> dict:
    """Send each message (to queues[i] when given); {body: (broker, queue, offset, msg id)}."""
    out = {}
    with Producer("wire-test-pg", namesrv_addr=namesrv) as p:
        for i, m in enumerate(msgs):
            r = p.send(m, queues[i] if queues else None)
            assert r.status is SendStatus.SEND_OK
            out[bytes(m.body)] = (r.message_queue.broker_name, r.message_queue.queue_id,
                                  r.queue_offset, r.offset_msg_id)
    return out


def _read(spark, namesrv: str, **options: str):
    reader = spark.read.format("rocketstore").option("namesrv", namesrv)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _where(rows) -> dict:
    return {bytes(r["body"]): (r["broker_name"], r["queue_id"], r["queue_offset"], r["msg_id"])
            for r in rows}


def test_batch_read_returns_every_message_of_both_brokers_once(spark, cluster):
    msgs = [Message("WireRead", b"WireRead/%d" % i, tags="A" if i % 3 else "B", keys=[f"k{i}"])
            for i in range(60)]
    sent = _send(cluster.namesrv, msgs)
    assert {b for b, *_ in sent.values()} == {"broker-a", "broker-b"}
    df = _read(spark, cluster.namesrv, topics="WireRead")
    assert df.columns[-1] == "broker_name" and "queue_offset" in df.columns
    rows = df.collect()
    assert len(rows) == 60
    assert _where(rows) == sent
    by_body = {bytes(r["body"]): r for r in rows}
    for m in msgs:
        r = by_body[bytes(m.body)]
        assert r["topic"] == "WireRead" and r["tags"] == m.tags and r["keys"] == m.keys
        assert dict(r["properties"])["UNIQ_KEY"] and r["store_timestamp"] is not None
    # a partition per queue of each broker (4 + 2), cut at maxRowsPerPartition
    assert _read(spark, cluster.namesrv, topics="WireRead").rdd.getNumPartitions() == 6
    small = _read(spark, cluster.namesrv, topics="WireRead", maxRowsPerPartition="4")
    assert small.rdd.getNumPartitions() > 6 and small.count() == 60

    tagged = _read(spark, cluster.namesrv, topics="WireRead", tags="B", pullBatchSize="3").collect()
    assert _where(tagged) == {b: w for b, w in sent.items() if int(b.split(b"/")[1]) % 3 == 0}

    # explicit offsets of one queue of broker-b: [2, 4)
    q1 = sorted((w[2], b) for b, w in sent.items() if w[:2] == ("broker-b", 1))
    ranged = _read(spark, cluster.namesrv, topics="WireRead", brokers="broker-b", queueIds="1",
                   startingOffsets=json.dumps({"WireRead": {"broker-b": {"1": 2}}}),
                   endingOffsets=json.dumps({"WireRead": {"broker-b": {"1": 4}}})).collect()
    assert sorted((r["queue_offset"], bytes(r["body"])) for r in ranged) == q1[2:4]
    assert _read(spark, cluster.namesrv, topics="WireRead", startingOffsets="latest").count() == 0

    # startTimestamp: the start found by time on each broker, then every row checked
    times = sorted(r["store_timestamp"] for r in rows)
    cut = times[len(times) // 2]
    ms = round(cut.timestamp() * 1000)
    late = _read(spark, cluster.namesrv, topics="WireRead", startTimestamp=str(ms)).collect()
    assert _where(late) == {bytes(r["body"]): _where([r])[bytes(r["body"])]
                            for r in rows if r["store_timestamp"] >= cut}


def test_pushdown_prunes_the_queues_planned_not_the_result(spark, cluster):
    sent = _send(cluster.namesrv, [Message("WirePush", b"p/%d" % i, tags="AB"[i % 2])
                                   for i in range(40)])
    df = _read(spark, cluster.namesrv, topics="WirePush")
    cut = sorted(r["store_timestamp"] for r in df.collect())[20]
    queries = {
        "broker_name = 'broker-b' AND queue_id = 1 AND tags = 'B'": 1,
        "broker_name IN ('broker-a') AND queue_id IN (0, 2)": 2,
        "tags = 'A' AND body <> X'00'": 6,
    }
    try:
        for on in (True, False):
            spark.conf.set("spark.sql.python.filterPushdown.enabled", str(on).lower())
            for where, parts in queries.items():
                got = _read(spark, cluster.namesrv, topics="WirePush").where(where)
                expect = {b: w for b, w in sent.items() if _matches(where, b, w)}
                assert _where(got.collect()) == expect, where
                if on:
                    assert got.rdd.getNumPartitions() == parts, where
            fresh = _read(spark, cluster.namesrv, topics="WirePush")
            late = fresh.where(fresh.store_timestamp >= cut).collect()
            assert len(late) == sum(1 for r in df.collect() if r["store_timestamp"] >= cut)
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def _matches(where: str, body: bytes, w: tuple) -> bool:
    broker, qid = w[0], w[1]
    tag = "AB"[int(body.split(b"/")[1]) % 2]
    if where.startswith("broker_name = 'broker-b'"):
        return broker == "broker-b" and qid == 1 and tag == "B"
    if where.startswith("broker_name IN"):
        return broker == "broker-a" and qid in (0, 2)
    return tag == "A"


def _stream(spark, namesrv: str, out: str, ckpt: str) -> list[int]:
    q = (spark.readStream.format("rocketstore").option("namesrv", namesrv)
         .option("topics", "WireStream").option("maxRowsPerBatch", "8").load()
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out))
    q.awaitTermination()
    assert q.exception() is None
    return [p["numInputRows"] for p in q.recentProgress]


def _last_offsets(ckpt: str) -> dict:
    d = os.path.join(ckpt, "offsets")
    last = max((f for f in os.listdir(d) if f.isdigit()), key=int)
    with open(os.path.join(d, last)) as f:
        return json.loads(f.read().splitlines()[-1])


def test_stream_restarts_from_its_checkpoint_and_reads_only_new_messages(spark, cluster, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first = _send(cluster.namesrv, [Message("WireStream", b"r1/%d" % i) for i in range(20)])
    batches = _stream(spark, cluster.namesrv, out, ckpt)
    assert sum(batches) == 20 and max(batches) <= 8
    a_max = {str(q): sum(1 for w in first.values() if w[1] == q) for q in range(2)}
    assert _last_offsets(ckpt) == {"WireStream": {"broker-a": a_max}}

    # round two: more on broker-a, and broker-b gets the topic (created by its first send)
    queues = [MessageQueue("WireStream", "broker-a", i % 2) for i in range(10)] + \
             [MessageQueue("WireStream", "broker-b", i % 2) for i in range(6)]
    second = _send(cluster.namesrv, [Message("WireStream", b"r2/%d" % i) for i in range(16)],
                   queues)
    cluster.wait_route("WireStream", {"broker-a", "broker-b"})
    batches = _stream(spark, cluster.namesrv, out, ckpt)
    assert sum(batches) == 16, "the restarted query read other than exactly the new messages"
    rows = spark.read.parquet(out).collect()
    assert len(rows) == 36
    assert _where(rows) == first | second
    assert sorted(w[2] for w in second.values() if w[0] == "broker-b") == [0, 0, 1, 1, 2, 2]
    ends = _last_offsets(ckpt)["WireStream"]
    assert ends["broker-a"] == {q: n + 5 for q, n in a_max.items()}
    assert {q: n for q, n in ends["broker-b"].items() if n} == {"0": 3, "1": 3}
    # a third run finds nothing new
    assert sum(_stream(spark, cluster.namesrv, out, ckpt)) == 0


def test_write_sends_to_both_brokers_and_reads_back(spark, cluster):
    rows = [(f"w{i}".encode(), "T1" if i % 2 else "T2", f"key{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "body binary, tags string, keys string")
    (df.repartition(2).write.format("rocketstore").option("namesrv", cluster.namesrv)
     .option("topic", "WireWrite").option("batchSize", "5").mode("append").save())
    back = _read(spark, cluster.namesrv, topics="WireWrite").collect()
    assert sorted((bytes(r["body"]), r["tags"], r["keys"]) for r in back) == \
        sorted((b, t, [k]) for b, t, k in rows)
    per_broker = {b: sum(1 for r in back if r["broker_name"] == b) for b in ("broker-a", "broker-b")}
    assert all(per_broker.values()), per_broker

    # a sharding key: the rows of one key land in one queue, in their order
    keyed = [(f"s{i}".encode(), f"user{i % 4}") for i in range(40)]
    (spark.createDataFrame(keyed, "body binary, sharding_key string").coalesce(1)
     .write.format("rocketstore").option("namesrv", cluster.namesrv).option("topic", "WireShard")
     .mode("append").save())
    back = _read(spark, cluster.namesrv, topics="WireShard").collect()
    assert len(back) == 40
    def index(r) -> int:
        return int(bytes(r["body"])[1:])
    where: dict[int, set] = {}
    for r in back:
        where.setdefault(index(r) % 4, set()).add((r["broker_name"], r["queue_id"]))
    assert all(len(w) == 1 for w in where.values()), where
    for user, (queue,) in where.items():
        order = [index(r) for r in sorted(back, key=lambda r: r["queue_offset"])
                 if (r["broker_name"], r["queue_id"]) == queue and index(r) % 4 == user]
        assert order == sorted(order) and len(order) == 10, "a key's rows out of order"


def test_stream_to_stream_copies_every_message_once(spark, cluster, tmp_path):
    sent = _send(cluster.namesrv, [Message("WireCopy", b"c/%d" % i, tags="X") for i in range(30)])
    assert {w[0] for w in sent.values()} == {"broker-a", "broker-b"}
    q = (spark.readStream.format("rocketstore").option("namesrv", cluster.namesrv)
         .option("topics", "WireCopy").option("maxRowsPerBatch", "12").load()
         .selectExpr("body", "tags", "'WireWrite' AS topic")
         .writeStream.format("rocketstore").option("namesrv", cluster.namesrv)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    copied = _read(spark, cluster.namesrv, topics="WireWrite").where("body LIKE 'c/%'").collect()
    assert sorted(bytes(r["body"]) for r in copied) == sorted(sent)
    assert {r["tags"] for r in copied} == {"X"}


def test_write_fails_the_task_naming_the_queue_a_send_failed_on(spark, cluster):
    df = spark.createDataFrame([(b"x", "broker-a", 99)], "body binary, broker_name string, queue_id int")
    with pytest.raises(Exception, match=r"rocketstore write: sending 1 rows of topic 'WireWrite' "
                                        r"to broker-a/99 failed"):
        (df.write.format("rocketstore").option("namesrv", cluster.namesrv)
         .option("topic", "WireWrite").mode("append").save())


def _stream_down(spark, namesrv: str, out: str, ckpt: str) -> int:
    q = (spark.readStream.format("rocketstore").option("namesrv", namesrv)
         .option("topics", "WireDown").load()
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out))
    q.awaitTermination()
    assert q.exception() is None
    return sum(p["numInputRows"] for p in q.recentProgress)


def test_stream_reads_on_while_a_broker_is_down_and_catches_up_after(spark, cluster, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    a = [MessageQueue("WireDown", "broker-a", i % 2) for i in range(8)]
    b = [MessageQueue("WireDown", "broker-b", i % 2) for i in range(8)]
    sent = _send(cluster.namesrv, [Message("WireDown", b"d1/%d" % i) for i in range(16)], a + b)
    assert _stream_down(spark, cluster.namesrv, out, ckpt) == 16
    cluster.c.kill("broker-b")          # still in the NameServer's route: unreachable
    try:
        sent |= _send(cluster.namesrv, [Message("WireDown", b"d2/%d" % i) for i in range(6)], a[:6])
        assert _stream_down(spark, cluster.namesrv, out, ckpt) == 6
    finally:
        cluster.c.restart("broker-b")
    cluster.wait_route("WireDown", {"broker-a", "broker-b"})
    sent |= _send(cluster.namesrv, [Message("WireDown", b"d3/%d" % i) for i in range(4)], b[:4])
    assert _stream_down(spark, cluster.namesrv, out, ckpt) == 4
    assert _where(spark.read.parquet(out).collect()) == sent


def test_wire_options_are_checked():
    with pytest.raises(InvalidOptionError, match="topics"):
        WireOptions.from_options({"namesrv": "127.0.0.1:9876"})
    with pytest.raises(InvalidOptionError, match="startingOffsets='soonest'"):
        WireOptions.from_options({"namesrv": "h:1", "topics": "T", "startingOffsets": "soonest"})
    with pytest.raises(InvalidOptionError, match="startOffset.*startingOffsets"):
        WireOptions.from_options({"namesrv": "h:1", "topics": "T", "startOffset": "5"})
    with pytest.raises(InvalidOptionError, match="tags"):
        WireOptions.from_options({"namesrv": "h:1", "topics": "T", "tags": "||".join("abcdefghi")})
    o = WireOptions.from_options({"NameSrv": "h:1", "topic": "T", "tags": "A||B",
                                  "startingOffsets": '{"T": {"b": {"3": 7}}}'})
    assert o.subscription == "A||B" and o.starting == {("T", "b", 3): 7}
    nested = {"T": {"a": {"0": 1, "10": 2, "2": 3}}, "U": {"b": {"1": 4}}}
    assert offsets_to_json(offsets_from_json(nested)) == nested
    assert list(offsets_to_json(offsets_from_json(nested))["T"]["a"]) == ["0", "2", "10"]


def test_wire_mode_refuses_a_path_too(spark):
    with pytest.raises(Exception, match="either a store directory or the namesrv option"):
        spark.read.format("rocketstore").option("namesrv", "127.0.0.1:1").option(
            "topics", "T").load("/nonexistent").collect()
