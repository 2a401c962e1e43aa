"""The PySpark data source (rocketstore.spark): batch reads, pushdown, writes.

Spark tests share one local[2] session (conftest ``spark``); stores are small. Reads are
checked against what the core API (``MessageStore``) or RocketMQ itself (expected.jsonl)
reports for the same bytes.
"""
from __future__ import annotations

import collections
import datetime as dt
import json
import os
import time

import pyarrow as pa
import pytest

import refreader
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import InvalidOptionError
from rocketstore.spark.scan import (ScanOptions, ScanStats, open_reader, plan, plan_partitions,
                                    read_split)
from rocketstore.spark.writer import shard_queue

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(mapped_file_size_commit_log=64 * 1024,
                     mapped_file_size_consume_queue=100 * 20)
# what a test store's options must say for the writer to create files of those sizes
SIZES = {"commitLogFileSize": str(64 * 1024), "consumeQueueFileSize": str(100 * 20)}
UTC = dt.timezone.utc


def _ms(ts: dt.datetime) -> int:
    return round(ts.timestamp() * 1000)


def _rows(df) -> dict[tuple[str, int, int], dict]:
    return {(r["topic"], r["queue_id"], r["queue_offset"]): r.asDict(recursive=True)
            for r in df.collect()}


def _assert_row_is_message(r: dict, m) -> None:
    where = f"{m.topic}/{m.queue_id}@{m.queue_offset}"
    assert r["commitlog_offset"] == m.commitlog_offset, where
    assert r["msg_id"] == m.msg_id, where
    assert r["tags"] == m.tags, where
    assert r["keys"] == m.keys, where
    assert r["properties"] == m.properties, where
    assert r["body"] == bytes(m.body), where
    assert _ms(r["born_timestamp"]) == m.born_timestamp, where
    assert _ms(r["store_timestamp"]) == m.store_timestamp, where
    assert refreader.parse_host(r["born_host"]) == refreader.parse_host(m.born_host), where
    assert refreader.parse_host(r["store_host"]) == refreader.parse_host(m.store_host), where
    assert r["reconsume_times"] == m.reconsume_times, where
    assert r["sys_flag"] == m.sys_flag, where


# -- a real RocketMQ broker's store --------------------------------------------------------------

def test_rocketmq_fixture_reads_as_rocketmq_decoded_it(spark, rocketmq_store, fixture_root):
    with open(fixture_root / "expected.jsonl") as f:
        expected = [json.loads(line) for line in f]
    msgs = {e["physicalOffset"]: e for e in expected if e["type"] == "msg"}
    assert len(msgs) == 1000
    rows = spark.read.format("rocketstore").load(rocketmq_store).collect()
    assert len(rows) == 1000
    seen = set()
    for row in rows:
        r = row.asDict(recursive=True)
        e = msgs[r["commitlog_offset"]]
        where = f"msg at {e['physicalOffset']}"
        seen.add(r["commitlog_offset"])
        assert (r["topic"], r["queue_id"], r["queue_offset"]) == \
            (e["topic"], e["queueId"], e["queueOffset"]), where
        assert r["msg_id"] == e["msgId"], where
        assert r["tags"] == e.get("tags"), where
        assert " ".join(r["keys"]) == e["keys"], where
        assert r["properties"] == e["properties"], where
        assert r["body"] == bytes.fromhex(e.get("bodyDecompressedHex", e["bodyHex"])), where
        assert _ms(r["born_timestamp"]) == e["bornTimestamp"], where
        assert _ms(r["store_timestamp"]) == e["storeTimestamp"], where
        assert refreader.parse_host(r["born_host"]) == refreader.parse_host(e["bornHost"]), where
        assert refreader.parse_host(r["store_host"]) == refreader.parse_host(e["storeHost"]), where
        assert r["reconsume_times"] == e["reconsumeTimes"], where
        assert r["sys_flag"] == e["sysFlag"], where
    assert seen == set(msgs)
    # the fixture has zlib-compressed bodies and IPv6 born hosts: both were exercised
    assert any(e["sysFlag"] & 1 for e in msgs.values())
    assert any(":" in e["bornHost"].rsplit(":", 1)[0] for e in msgs.values())


# -- a store written by the core API ---------------------------------------------------------------

def _core_store(path: str, rand) -> list:
    """Messages of every shape on 2 topics x 3 queues; returns their PutMessageResults."""
    results = []
    with MessageStore.open(path, CONFIG) as store:
        for i in range(300):
            topic = "Orders" if i % 3 else "PayLog"
            body = b"" if i % 17 == 0 else rand.randbytes(rand.randint(1, 300))
            tags = None if i % 11 == 0 else ["TagA", "TagB", "标签"][i % 3]
            keys = None if i % 5 == 0 else [f"k{i}", "ключ"]
            props = {"n": str(i), "ü": "ß"} if i % 4 == 0 else None
            m = Message(topic, body, tags=tags, keys=keys, properties=props, flag=i,
                        born_host="[::1]:40001" if i % 7 == 0 else "10.1.2.3:5000",
                        born_timestamp=1_700_000_000_000 + i)
            if i % 50 == 0:
                time.sleep(0.003)       # store times spread over a few ms: time ranges select
            r = store.put_message(m, i % 3)
            assert r.status.name == "PUT_OK"
            results.append(r)
    return results


def test_core_api_store_reads_back_field_for_field(spark, store_dir, rand):
    results = _core_store(store_dir, rand)
    rows = _rows(spark.read.format("rocketstore").load(store_dir))
    assert len(rows) == len(results)
    with MessageStore.open(store_dir, CONFIG, read_only=True) as store:
        for res in results:
            m = store.look_message_by_offset(res.commitlog_offset)
            _assert_row_is_message(rows[(m.topic, m.queue_id, m.queue_offset)], m)


def test_options_select_topics_queues_offsets(spark, store_dir, rand):
    _core_store(store_dir, rand)
    df = (spark.read.format("rocketstore").option("topics", "Orders").option("queueIds", "1,2")
          .option("startOffset", "5").option("endOffset", json.dumps({"Orders/1": 20}))
          .option("maxRowsPerPartition", "7").load(store_dir))
    keys = sorted(_rows(df))
    with MessageStore.open(store_dir, CONFIG, read_only=True) as store:
        hi2 = store.get_max_offset_in_queue("Orders", 2)
    assert keys == [("Orders", 1, o) for o in range(5, 20)] + [("Orders", 2, o) for o in range(5, hi2)]


def test_a_read_that_selects_nothing_is_empty(spark, store_dir, rand):
    # no split planned: Spark still runs one task, with its own stand-in partition
    _core_store(store_dir, rand)
    df = spark.read.format("rocketstore").option("topics", "NoSuchTopic").load(store_dir)
    assert df.count() == 0 and df.collect() == []


def test_bad_options_name_the_option(spark, store_dir, rand):
    with pytest.raises(InvalidOptionError, match="queueids"):
        ScanOptions.from_options({"queueIds": "1,x"})
    with pytest.raises(InvalidOptionError, match="at most 8 tags"):
        ScanOptions.from_options({"tags": "||".join(f"T{i}" for i in range(9))})
    with pytest.raises(InvalidOptionError, match="startoffset"):
        ScanOptions.from_options({"startOffset": "{not json"})
    with pytest.raises(FileNotFoundError, match="not a store directory"):
        open_reader(store_dir)


# -- pushdown ----------------------------------------------------------------------------------

def test_pushdown_cuts_the_work_not_the_result(spark, store_dir, rand):
    _core_store(store_dir, rand)
    # the work: units scanned and records decoded, through the same planner and reader
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        msgs = list(s.iter_messages())
    assert len(msgs) == 300
    times = sorted(m.store_timestamp for m in msgs)
    mid = times[len(times) // 2]

    def work(opts: ScanOptions) -> tuple[ScanStats, int]:
        stats = ScanStats()
        with open_reader(store_dir) as store:
            rows = sum(b.num_rows for sp in plan(store_dir, opts, store)
                       for b in read_split(store, sp, opts, stats))
        return stats, rows

    full, n_all = work(ScanOptions())
    assert full.units == full.records == n_all == 300
    tagged, n_tag = work(ScanOptions(tags=frozenset({"TagA"})))
    assert tagged.units == 300 and tagged.records == n_tag < 300    # only matching records read
    assert n_tag == sum(1 for m in msgs if m.tags == "TagA")
    timed, n_time = work(ScanOptions(min_ts=mid))
    assert timed.units < 300 and n_time == sum(1 for m in msgs if m.store_timestamp >= mid)
    pruned, n_q = work(ScanOptions(topics=frozenset({"Orders"}), queue_ids=frozenset({1})))
    assert pruned.units == n_q == sum(1 for m in msgs if (m.topic, m.queue_id) == ("Orders", 1))

    # the result: the same rows with pushdown on and off, for filters it takes and others
    cutoff = dt.datetime.fromtimestamp(mid / 1000, UTC).replace(tzinfo=None)
    queries = [
        "tags = 'TagA'", "tags IN ('TagB', '标签') AND queue_id = 2",
        "topic = 'Orders' AND queue_id IN (0, 1)",
        f"store_timestamp >= timestamp'{cutoff}'", f"store_timestamp < timestamp'{cutoff}'",
        f"store_timestamp > timestamp'{cutoff}' AND tags = 'TagB' AND reconsume_times = 0",
        "tags IS NULL", "size(keys) = 2 AND topic = 'PayLog'",
    ]
    try:
        for q in queries:
            spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
            on = sorted(_rows(spark.read.format("rocketstore").load(store_dir).where(q)))
            spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
            off = sorted(_rows(spark.read.format("rocketstore").load(store_dir).where(q)))
            assert on == off, q
            assert on, f"{q} selects nothing: a useless check"
        # Spark plans a read with filters to push in its pushdown worker: the queues are
        # pruned there (the partitions cover the selected queues only)
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        pruned_df = spark.read.format("rocketstore").option("numPartitions", "64").load(
            store_dir).where("topic = 'Orders' AND queue_id IN (0, 1)")
        narrowed = ScanOptions(topics=frozenset({"Orders"}), queue_ids=frozenset({0, 1}),
                               num_partitions=64)
        assert pruned_df.rdd.getNumPartitions() == len(plan_partitions(store_dir, narrowed)) < \
            len(plan_partitions(store_dir, ScanOptions(num_partitions=64)))
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_tag_hash_collision_is_not_returned(store_dir):
    # "Aa" and "BB" share a Java hash code: the consume-queue scan matches both, the record check
    # drops the other
    with MessageStore.open(store_dir, CONFIG) as store:
        for i in range(10):
            store.put_message(Message("T", b"x", tags="Aa" if i % 2 else "BB"))
    stats = ScanStats()
    opts = ScanOptions(tags=frozenset({"Aa"}))
    with open_reader(store_dir) as store:
        t = pa.Table.from_batches([b for sp in plan(store_dir, opts, store)
                                   for b in read_split(store, sp, opts, stats)])
    assert t.column("tags").to_pylist() == ["Aa"] * 5
    assert stats.records == 10           # every unit's code matched: each record was checked


# -- writes ------------------------------------------------------------------------------------

def _write_rows(rand, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        rows.append({
            "topic": "W" if i % 4 else "W2",
            "queue_id": i % 3,
            "body": b"" if i % 9 == 0 else rand.randbytes(rand.randint(1, 200)),
            "tags": None if i % 5 == 0 else ["a", "ä€"][i % 2],
            "keys": [] if i % 6 == 0 else [f"k{i}", "キー"],
            "properties": {} if i % 3 == 0 else {"i": str(i), "ñ": "ü"},
        })
    return rows


SYSTEM_PROPS = {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "__CRC32#"}     # the store adds the last


def test_write_then_read_round_trip(spark, store_dir, rand):
    data = _write_rows(rand, 500)
    schema = ("topic string, queue_id int, body binary, tags string, keys array<string>, "
              "properties map<string,string>")
    df = spark.createDataFrame(data, schema).repartition(3)
    df.write.format("rocketstore").options(**SIZES).mode("append").save(store_dir)
    assert not os.listdir(os.path.join(store_dir, ".spark-staging"))
    got = spark.read.format("rocketstore").load(store_dir).collect()
    assert len(got) == len(data)

    def key(d):
        return (d["topic"], d["queue_id"], d["body"], d["tags"], tuple(d["keys"]),
                tuple(sorted(d["properties"].items())))
    back = []
    for r in got:
        r = r.asDict(recursive=True)
        user = {k: v for k, v in r["properties"].items() if k not in SYSTEM_PROPS}
        back.append(key(dict(r, properties=user)))
    assert collections.Counter(back) == collections.Counter(key(d) for d in data)
    # each queue's offsets are 0..n-1 with no gap
    by_q: dict = {}
    for r in got:
        by_q.setdefault((r["topic"], r["queue_id"]), []).append(r["queue_offset"])
    for offs in by_q.values():
        assert sorted(offs) == list(range(len(offs)))
    # the same store written again is appended to, and string bodies are UTF-8 bytes
    spark.createDataFrame([("W", 0, "héllo")], "topic string, queue_id int, body string") \
        .write.format("rocketstore").mode("append").save(store_dir)
    last = (spark.read.format("rocketstore").load(store_dir)
            .where("topic = 'W' AND queue_id = 0").orderBy("queue_offset").collect()[-1])
    assert last["body"] == "héllo".encode() and last["queue_offset"] == len(by_q[("W", 0)])


def test_sharding_key_maps_rows_with_xxhash(spark, store_dir):
    # xxh64(b"abc") is a published test vector: the mapping is the same in every process
    assert shard_queue("abc", 1 << 63) == 0x44BC2CF5AD770999
    rows = [(f"user-{i % 10}", f"b{i}") for i in range(60)]
    (spark.createDataFrame(rows, "sharding_key string, body string")
     .write.format("rocketstore").options(**SIZES).option("topic", "S").option("queueNums", "3")
     .mode("append").save(store_dir))
    got = spark.read.format("rocketstore").load(store_dir).collect()
    assert len(got) == 60
    for r in got:
        i = int(r["body"][1:])
        assert r["queue_id"] == shard_queue(f"user-{i % 10}", 3)
        assert r["topic"] == "S"
    # one key's rows keep their order within its queue
    for k in range(10):
        offs = [(r["queue_offset"], int(r["body"][1:])) for r in got if int(r["body"][1:]) % 10 == k]
        assert [b for _, b in sorted(offs)] == sorted(b for _, b in offs)


def test_failed_write_leaves_the_store_untouched(spark, store_dir):
    from pyspark.sql import functions as F
    spark.createDataFrame([("W", "first")], "topic string, body string") \
        .write.format("rocketstore").options(**SIZES).mode("append").save(store_dir)
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        before = s.get_max_phy_offset()

    # row 13 fails its task (after the other tasks may have staged their rows)
    body = F.when(F.col("id") == 13, F.raise_error(F.lit("task fails on row 13"))) \
        .otherwise(F.concat(F.lit("b"), F.col("id").cast("string")))
    df = spark.range(40).repartition(4).select(F.lit("W").alias("topic"), body.alias("body"))
    with pytest.raises(Exception, match="task fails on row 13"):
        df.write.format("rocketstore").mode("append").save(store_dir)
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        assert s.get_max_phy_offset() == before
        assert s.get_max_offset_in_queue("W", 0) == 1
    assert not os.listdir(os.path.join(store_dir, ".spark-staging"))
    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([("W", "x")], "topic string, body string") \
            .write.format("rocketstore").mode("overwrite").save(store_dir)
    with pytest.raises(Exception, match="needs a body column"):
        spark.createDataFrame([("W",)], "topic string") \
            .write.format("rocketstore").mode("append").save(store_dir)


def test_invalid_rows_fail_the_write_before_anything_is_appended(spark, store_dir):
    spark.createDataFrame([("W", "ok")], "topic string, body string") \
        .write.format("rocketstore").options(**SIZES).mode("append").save(store_dir)
    rows = [("W", f"b{i}") for i in range(30)] + [("bad topic!", "x")]
    with pytest.raises(Exception, match="topic"):
        spark.createDataFrame(rows, "topic string, body string").repartition(3) \
            .write.format("rocketstore").mode("append").save(store_dir)
    with pytest.raises(Exception, match="max_message_size"):
        spark.createDataFrame([("W", "x" * (4 * 1024 * 1024 + 1))], "topic string, body string") \
            .write.format("rocketstore").mode("append").save(store_dir)
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        assert s.get_max_offset_in_queue("W", 0) == 1
