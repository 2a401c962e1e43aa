"""Spark reads of a column subset (option ``columns`` / a user schema) and the packing of a
batch read's splits into partitions (``numPartitions``): the same rows as the whole read and
as Parquet holding the same data, and no body copied when the query has no body."""
from __future__ import annotations

import os

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.spark.scan import ScanOptions, ScanStats, open_reader, plan_partitions, read_split

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(mapped_file_size_commit_log=64 * 1024,
                     mapped_file_size_consume_queue=100 * 20)
ALL = ("topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "keys",
       "properties", "body", "born_timestamp", "store_timestamp", "born_host", "store_host",
       "reconsume_times", "sys_flag")


def _store(path: str, rand, n: int = 240, queues: int = 3) -> None:
    with MessageStore.open(path, CONFIG) as store:
        for i in range(n):
            body = b"" if i % 13 == 0 else rand.randbytes(rand.randint(1, 200))
            tags = None if i % 11 == 0 else ["TagA", "TagB", "标签"][i % 3]
            keys = None if i % 5 == 0 else [f"k{i}", "ключ"]
            props = {"n": str(i)} if i % 4 == 0 else None
            m = Message("Orders" if i % 4 else "PayLog", body, tags=tags, keys=keys,
                        properties=props, flag=i)
            assert store.put_message(m, i % queues).status.name == "PUT_OK"


def _sorted(rows) -> list:
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.fixture
def with_parquet(spark, store_dir, rand, tmp_path):
    """The store, and the same rows written to Parquet from a whole read."""
    _store(store_dir, rand)
    pq = str(tmp_path / "pq")
    spark.read.format("rocketstore").load(store_dir).write.parquet(pq)
    return store_dir, spark.read.parquet(pq)


def test_projections_read_what_parquet_holds(spark, with_parquet):
    store_dir, pq = with_parquet
    from pyspark.sql import functions as F
    for cols in (["tags"], ["tags", "body"], ["body", "topic", "queue_offset"],
                 ["keys", "properties", "msg_id", "born_host", "store_host", "born_timestamp",
                  "store_timestamp", "reconsume_times", "sys_flag", "commitlog_offset",
                  "queue_id"]):
        df = spark.read.format("rocketstore").option("columns", ", ".join(cols)).load(store_dir)
        assert df.columns == cols
        assert _sorted(df.collect()) == _sorted(pq.select(*cols).collect()), cols
    # a user schema naming a subset does the same
    df = spark.read.format("rocketstore").schema("body binary, tags string").load(store_dir)
    assert _sorted(df.collect()) == _sorted(pq.select("body", "tags").collect())
    # the benchmark's queries
    agg = [F.sum(F.length("body")).alias("s"), F.count("*").alias("n")]
    got = spark.read.format("rocketstore").option("columns", "tags,body").load(store_dir)
    assert _sorted(got.groupBy("tags").agg(*agg).collect()) == \
        _sorted(pq.groupBy("tags").agg(*agg).collect())
    none = spark.read.format("rocketstore").option("columns", "").load(store_dir)
    assert none.columns == [] and none.count() == pq.count() == 240


def test_a_count_skips_what_the_whole_read_skips(spark, store_dir, rand):
    # a damaged record is skipped by every projection alike: the records are still checked
    _store(store_dir, rand, n=60, queues=1)
    phy = next(r["commitlog_offset"] for r in _whole(store_dir)
               if (r["topic"], r["queue_offset"]) == ("Orders", 5))
    size = CONFIG.mapped_file_size_commit_log
    with open(os.path.join(store_dir, "commitlog", "%020d" % (phy // size * size)), "r+b") as f:
        f.seek(phy % size + 20)                 # the record's QUEUEOFFSET field
        f.write((999_999).to_bytes(8, "big"))
    whole = spark.read.format("rocketstore").load(store_dir).collect()
    assert len(whole) == 59 and phy not in {r["commitlog_offset"] for r in whole}
    assert spark.read.format("rocketstore").option("columns", "").load(store_dir).count() == 59
    tags = spark.read.format("rocketstore").option("columns", "tags").load(store_dir)
    assert _sorted(tags.collect()) == _sorted((r["tags"],) for r in whole)


def _whole(store_dir: str) -> list[dict]:
    opts = ScanOptions()
    with open_reader(store_dir, opts) as store:
        return [r for p in plan_partitions(store_dir, opts, store) for sp in p
                for b in read_split(store, sp, opts) for r in b.to_pylist()]


def test_a_count_or_tags_only_read_copies_no_body(store_dir, rand):
    _store(store_dir, rand)
    got = {}
    for cols in ((), ("tags",), ("tags", "body"), None):
        opts = ScanOptions(columns=cols)
        stats = ScanStats()
        batches = []
        with open_reader(store_dir, opts) as store:
            for p in plan_partitions(store_dir, opts, store):
                for sp in p:
                    batches.extend(read_split(store, sp, opts, stats))
        assert stats.rows == sum(b.num_rows for b in batches) == 240
        assert all(b.schema.names == list(cols if cols is not None else ALL) for b in batches)
        got[cols] = stats.body_bytes
    assert got[()] == got[("tags",)] == 0
    assert got[("tags", "body")] == got[None] > 0


def test_bad_projection_names_the_column(spark, store_dir, rand):
    _store(store_dir, rand, n=10)
    with pytest.raises(Exception, match="rocketstore option columns=.*no column 'nope'"):
        spark.read.format("rocketstore").option("columns", "tags,nope").load(store_dir).collect()
    with pytest.raises(Exception, match="rocketstore option schema='tags'.*declared int"):
        spark.read.format("rocketstore").schema("tags int").load(store_dir).collect()


def test_splits_are_packed_into_partitions_and_cut_to_fill_them(spark, store_dir, rand):
    _store(store_dir, rand, n=240, queues=3)        # Orders 0-2 (60 rows each), PayLog 0-2 (20)
    for target in (1, 2, 3, 4, 7, 64):
        parts = plan_partitions(store_dir, ScanOptions(num_partitions=target))
        cap = -(-240 // target)
        assert len(parts) == -(-240 // cap)
        assert all(sum(s.end - s.start for s in p) <= cap for p in parts)
        covered = sorted((s.topic, s.queue_id, o) for p in parts for s in p
                         for o in range(s.start, s.end))
        assert len(covered) == len(set(covered)) == 240
    # maxRowsPerPartition still bounds a partition
    parts = plan_partitions(store_dir, ScanOptions(num_partitions=1, max_rows_per_split=50))
    assert max(sum(s.end - s.start for s in p) for p in parts) <= 50
    df = spark.read.format("rocketstore").option("numPartitions", "3").load(store_dir)
    assert df.rdd.getNumPartitions() == 3
    assert _sorted(df.collect()) == _sorted(
        spark.read.format("rocketstore").option("numPartitions", "64").load(store_dir).collect())


def test_a_stream_reads_the_columns_asked_for(spark, store_dir, rand):
    _store(store_dir, rand, n=30)
    q = (spark.readStream.format("rocketstore").option("columns", "tags,queue_offset")
         .load(store_dir).writeStream.format("memory").queryName("pruned_stream")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    got = spark.sql("select * from pruned_stream")
    whole = spark.read.format("rocketstore").load(store_dir).select("tags", "queue_offset")
    assert got.columns == ["tags", "queue_offset"]
    assert _sorted(got.collect()) == _sorted(whole.collect()) and got.count() == 30
