"""The JVM batch reader (format "rocketstore-jvm", rocketstore/spark/jvm/*.java): the same rows,
in the same partitions and order, as the Python source (format "rocketstore") and as a Parquet
copy; its options; damaged records skipped as the Python source skips them; its jar built once.

Stores are small; the session is conftest's ``spark`` (local[2]), which carries the jar.
"""
from __future__ import annotations

import os
import random
import zlib

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import JvmBuildError
from rocketstore.spark import jvmjar

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(mapped_file_size_commit_log=64 * 1024,
                     mapped_file_size_consume_queue=100 * 20, enabled_append_prop_crc=False)
SIZES = {"commitLogFileSize": str(64 * 1024), "consumeQueueFileSize": str(100 * 20)}
KEY = ["topic", "queue_id", "queue_offset"]


@pytest.fixture(scope="module")
def jvm(spark):
    jvmjar.jvm_jar()        # no JDK: fails here naming javac (conftest could not add the jar)
    return spark


def _mixed_store(path: str, n: int = 600) -> list:
    rand = random.Random(23)
    out = []
    with MessageStore.open(path, CONFIG) as store:
        for i in range(n):
            body = b"" if i % 13 == 0 else rand.randbytes(rand.randint(1, 300))
            tags = None if i % 11 == 0 else ["TagA", "TagB", "标签"][i % 3]
            keys = None if i % 5 == 0 else [f"k{i}", "ключ"]
            props = {"n": str(i), "dup": "x"} if i % 4 == 0 else None
            topic = ["Orders", "PayLog", "Audit"][i % 3]
            out.append(store.put_message(Message(topic, body, tags=tags, keys=keys,
                                                 properties=props, flag=i), queue_id=i % 4))
    return out


def _read(spark, fmt: str, path: str, **options):
    return spark.read.format(fmt).options(**SIZES, **{k: str(v) for k, v in options.items()}) \
        .load(path)


def _partitions(df) -> list[list[dict]]:
    return df.rdd.glom().map(lambda rows: [r.asDict(recursive=True) for r in rows]).collect()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("jvm") / "store")
    _mixed_store(path)
    return path


def test_same_rows_partitions_and_order_as_the_python_source_and_parquet(jvm, mixed, tmp_path):
    spark = jvm
    jv = _read(spark, "rocketstore-jvm", mixed, numPartitions=3)
    py = _read(spark, "rocketstore", mixed, numPartitions=3)
    parts = _partitions(jv)
    assert len(parts) == 3 and sum(map(len, parts)) == 600
    assert parts == _partitions(py)
    pq = str(tmp_path / "copy.parquet")
    py.write.parquet(pq)
    rows = sorted((r.asDict(recursive=True) for r in spark.read.parquet(pq).collect()),
                  key=lambda r: tuple(r[k] for k in KEY))
    assert sorted((r for p in parts for r in p), key=lambda r: tuple(r[k] for k in KEY)) == rows
    # the benchmark's queries, and a projection without body, agree with Parquet's
    q = "select tags, sum(length(body)) s, count(*) c from {} group by tags order by tags"
    jv.createOrReplaceTempView("jv")
    spark.read.parquet(pq).createOrReplaceTempView("pq")
    assert spark.sql(q.format("jv")).collect() == spark.sql(q.format("pq")).collect()
    assert jv.count() == 600
    assert jv.select("tags", "msg_id").orderBy("msg_id").collect() == \
        spark.read.parquet(pq).select("tags", "msg_id").orderBy("msg_id").collect()


def test_rocketmq_written_store_compressed_bodies_and_ipv6_hosts(jvm, rocketmq_store):
    jv = jvm.read.format("rocketstore-jvm").load(rocketmq_store)
    py = jvm.read.format("rocketstore").load(rocketmq_store)
    rows = [r.asDict(recursive=True) for r in jv.collect()]
    assert len(rows) == 1000
    assert rows == [r.asDict(recursive=True) for r in py.collect()]
    assert any(r["sys_flag"] & 1 for r in rows)                 # inflated like the Python's
    assert any(r["born_host"].startswith("[") for r in rows)


@pytest.mark.parametrize("options", [
    {"topics": "Orders,Audit"}, {"queueIds": "1,3"}, {"startOffset": 20, "endOffset": 40},
    {"tags": "TagA||标签"}, {"tags": "TagB", "topics": "PayLog", "queueIds": "2"},
    {"maxRowsPerPartition": 37},
])
def test_options_select_what_the_python_source_selects(jvm, mixed, options):
    jv = _partitions(_read(jvm, "rocketstore-jvm", mixed, **options))
    assert jv == _partitions(_read(jvm, "rocketstore", mixed, **options))
    assert sum(map(len, jv)) > 0


def test_store_time_range_selects_the_python_sources_rows(jvm, mixed):
    # the same rows in the same order; the JVM reader filters store times row by row where
    # the Python source narrows each queue's range first, so partition sizes may differ
    times = sorted(r[0] for r in _read(jvm, "rocketstore", mixed)
                   .selectExpr("unix_millis(store_timestamp)").collect())
    lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
    for options in ({"startTimestamp": lo, "endTimestamp": hi}, {"startTimestamp": hi + 1}):
        jv = [r for p in _partitions(_read(jvm, "rocketstore-jvm", mixed, **options)) for r in p]
        py = [r for p in _partitions(_read(jvm, "rocketstore", mixed, **options)) for r in p]
        assert jv == py
    assert 0 < sum(lo <= t <= hi for t in times)


@pytest.mark.parametrize("options, named", [
    ({"startOffset": '{"Orders/0": 3}'}, "startOffset"), ({"numPartitions": "x"}, "numPartitions"),
    ({"tags": ",".join(f"t{i}" for i in range(9))}, "tags"), ({"columns": "body"}, "columns"),
])
def test_an_option_it_cannot_take_is_an_error_naming_it(jvm, mixed, options, named):
    with pytest.raises(Exception, match=named):
        _read(jvm, "rocketstore-jvm", mixed, **options).count()


def test_damaged_records_are_skipped_as_the_python_source_skips_them(jvm, tmp_path):
    path = str(tmp_path / "store")
    results = _mixed_store(path, 120)
    hit = results[50]           # a body byte flipped: the body CRC no longer matches
    with MessageStore.open(path, CONFIG, read_only=True) as store:
        assert len(store.look_message_by_offset(hit.commitlog_offset).body) > 0
    f = os.path.join(path, "commitlog", "%020d" % (hit.commitlog_offset // (64 * 1024) * 64 * 1024))
    with open(f, "r+b") as fh:
        fh.seek(hit.commitlog_offset % (64 * 1024) + 88)       # the first body byte (§1.1)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    jv = _read(jvm, "rocketstore-jvm", path)
    py = _read(jvm, "rocketstore", path)
    assert jv.count() == py.count() == 119           # a count checks the record all the same
    rows = [r.asDict(recursive=True) for r in jv.collect()]
    assert rows == [r.asDict(recursive=True) for r in py.collect()]
    assert hit.commitlog_offset not in {r["commitlog_offset"] for r in rows}


def test_the_jar_is_built_once_and_no_javac_is_a_clear_error(jvm, tmp_path, monkeypatch):
    jar = jvmjar.jvm_jar()
    before = os.stat(jar).st_mtime_ns
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))       # no javac: the cached jar needs none
    assert jvmjar.jvm_jar() == jar and os.stat(jar).st_mtime_ns == before
    monkeypatch.setenv("ROCKETSTORE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(JvmBuildError, match="javac"):
        jvmjar.jvm_jar()


def test_pushed_filters_select_what_the_filters_select(jvm, mixed):
    times = sorted(r[0] for r in _read(jvm, "rocketstore", mixed)
                   .selectExpr("unix_micros(store_timestamp)").collect())
    lo, hi = times[100], times[400]
    where = (f"topic IN ('Orders', 'Audit') AND queue_id IN (1, 2) AND tags IN ('TagA', '标签') "
             f"AND store_timestamp > timestamp_micros({lo}) "
             f"AND store_timestamp <= timestamp_micros({hi})")
    for w in (where, "tags = 'TagB' AND tags = 'TagA'", "topic = 'Orders' AND topic = 'Nope'"):
        jv = _read(jvm, "rocketstore-jvm", mixed).where(w).orderBy("msg_id").collect()
        py = _read(jvm, "rocketstore", mixed).where(w).orderBy("msg_id").collect()
        assert jv == py
        assert len(jv) > 0 or w != where


def test_a_count_or_tags_read_never_inflates_a_body(jvm, rocketmq_store):
    # a zlib body replaced by bytes that do not inflate, its body CRC made to match: only a
    # read of the body column can notice, so a count or a tags query reads every row
    jv = jvm.read.format("rocketstore-jvm").load(rocketmq_store)
    hit = jv.where("sys_flag & 1 = 1").select("commitlog_offset", "sys_flag").first()
    off, sf = hit["commitlog_offset"], hit["sys_flag"]
    logs = sorted(int(n) for n in os.listdir(os.path.join(rocketmq_store, "commitlog")))
    start = max(s for s in logs if s <= off)
    at = off - start + 48 + (20 if sf & 0x10 else 8) + 8 + (20 if sf & 0x20 else 8) + 12
    with open(os.path.join(rocketmq_store, "commitlog", "%020d" % start), "r+b") as fh:
        fh.seek(at)
        n = int.from_bytes(fh.read(4), "big")
        junk = b"not zlib".ljust(n, b"!")[:n]
        fh.write(junk)
        fh.seek(off - start + 8)                                # BODYCRC (§1.1)
        fh.write((zlib.crc32(junk) & 0x7FFFFFFF).to_bytes(4, "big"))
    # the Python source decodes the columns its `columns` option names (all by default)
    py = jvm.read.format("rocketstore").option("columns", "tags").load(rocketmq_store)
    assert jv.count() == 1000
    assert jv.select("tags").collect() == py.select("tags").collect()
    with pytest.raises(Exception, match=f"offset {off} does not inflate"):
        jv.select("body").collect()
