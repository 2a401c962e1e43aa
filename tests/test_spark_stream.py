"""The Spark source's streaming read and sink, and reads while another process writes.

A writer process appends to the store (it holds the store's lock) while the source reads it
read-only; every message's body is ``<topic>/<queue>/<queue offset>``, so each row read can be
checked against where it claims to come from.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import StoreLockedError
from rocketstore.spark.scan import ScanOptions, open_reader, plan, read_split
from rocketstore.spark.writer import RocketStoreStreamWriter

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
CONFIG = StoreConfig(mapped_file_size_commit_log=64 * 1024,
                     mapped_file_size_consume_queue=100 * 20)

# appends argv[2] messages round-robin over argv[3] queues of topic argv[4], a few ms apart
WRITER = r"""
import sys, time
from rocketstore import Message, MessageStore, StoreConfig
path, n, queues, topic = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20)
with MessageStore.open(path, cfg) as store:
    print("open", flush=True)
    nxt = [store.get_max_offset_in_queue(topic, q) for q in range(queues)]
    for i in range(n):
        q = i % queues
        off = nxt[q]
        nxt[q] += 1
        r = store.put_message(Message(topic, f"{topic}/{q}/{off}".encode(), tags=f"t{i % 2}"), q)
        assert r.status.name == "PUT_OK" and r.queue_offset == off, r
        if i % 20 == 0:
            time.sleep(0.01)
"""


def _start_writer(path: str, n: int, queues: int, topic: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", WRITER, path, str(n), str(queues), topic],
                         env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "open"
    return p


def _finish(writer: subprocess.Popen) -> None:
    rc = writer.wait(60)
    assert writer.stdout is not None
    writer.stdout.close()
    assert rc == 0, "the writer process failed"


def _put(path: str, topic: str, n: int, queues: int) -> None:
    with MessageStore.open(path, CONFIG) as store:
        nxt = [store.get_max_offset_in_queue(topic, q) for q in range(queues)]
        for i in range(n):
            q = i % queues
            off = nxt[q]
            nxt[q] += 1
            store.put_message(Message(topic, f"{topic}/{q}/{off}".encode(), tags=f"t{i % 2}"), q)


def _check_rows(rows) -> set[tuple[str, int, int]]:
    """Each row's body names its own (topic, queue, offset); returns those keys."""
    keys = set()
    for r in rows:
        k = (r["topic"], r["queue_id"], r["queue_offset"])
        assert bytes(r["body"]) == f"{k[0]}/{k[1]}/{k[2]}".encode(), k
        keys.add(k)
    return keys


def test_reads_a_consistent_prefix_while_another_process_writes(spark, store_dir):
    _put(store_dir, "Live", 30, 3)
    writer = _start_writer(store_dir, 1500, 3, "Live")
    try:
        # the writer holds the lock: the reads below never take it
        with pytest.raises(StoreLockedError):
            MessageStore.open(store_dir, CONFIG)
        sizes = []
        while writer.poll() is None and len(sizes) < 20:
            opts = ScanOptions()
            with open_reader(store_dir) as store:
                rows = [r for sp in plan(store_dir, opts, store)
                        for b in read_split(store, sp, opts) for r in b.to_pylist()]
            keys = _check_rows(rows)
            for q in range(3):
                offs = sorted(o for tp, qq, o in keys if qq == q)
                assert offs == list(range(len(offs))), f"queue {q}: a gap in what was read"
            sizes.append(len(keys))
        spark_keys = _check_rows(spark.read.format("rocketstore").load(store_dir).collect())
    finally:
        _finish(writer)
    assert sizes == sorted(sizes) and sizes[0] >= 30
    assert len(spark_keys) >= sizes[-1]
    final = _check_rows(spark.read.format("rocketstore").load(store_dir).collect())
    assert len(final) == 1530


def _run_available_now(spark, source: str, out: str, ckpt: str, max_rows: int) -> list[int]:
    q = (spark.readStream.format("rocketstore").option("maxRowsPerBatch", str(max_rows))
         .load(source)
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out))
    q.awaitTermination()
    assert q.exception() is None
    return [p["numInputRows"] for p in q.recentProgress]


def test_available_now_reads_every_message_once_across_restarts(spark, store_dir, tmp_path):
    _put(store_dir, "S", 90, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    batches = _run_available_now(spark, store_dir, out, ckpt, 40)
    assert sum(batches) == 90 and max(batches) <= 40 and len(batches) >= 3
    # another process appends (to a new queue too) while queries restart from the checkpoint
    writer = _start_writer(store_dir, 600, 3, "S")
    runs = 0
    try:
        while writer.poll() is None and runs < 4:
            batches = _run_available_now(spark, store_dir, out, ckpt, 200)
            assert max(batches, default=0) <= 200
            runs += 1
    finally:
        _finish(writer)
    _run_available_now(spark, store_dir, out, ckpt, 200)
    rows = spark.read.parquet(out).collect()
    keys = _check_rows(rows)
    assert len(rows) == len(keys) == 690, "a message read twice, or one missed"
    with MessageStore.open(store_dir, CONFIG, read_only=True) as store:
        assert {(q, store.get_max_offset_in_queue("S", q)) for q in range(3)} == \
            {(q, sum(1 for k in keys if k[1] == q)) for q in range(3)}


def test_stream_sink_appends_each_batch_id_once(spark, store_dir, tmp_path):
    from pyspark.sql.types import StructType
    sink_dir = str(tmp_path / "sink")
    _put(store_dir, "A", 50, 2)
    # store to store through the streaming sink, restarted once
    def run():
        q = (spark.readStream.format("rocketstore").option("maxRowsPerBatch", "30").load(store_dir)
             .selectExpr("topic", "queue_id", "body", "tags")
             .writeStream.format("rocketstore").option("commitLogFileSize", "65536")
             .option("consumeQueueFileSize", "2000").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(sink_dir))
        q.awaitTermination()
        assert q.exception() is None
    run()
    _put(store_dir, "A", 20, 2)
    run()
    copied = _check_rows(spark.read.format("rocketstore").load(sink_dir).collect())
    assert len(copied) == 70
    # a batch id replayed (Spark re-runs a batch whose commit it did not record) is skipped
    schema = StructType.fromDDL("topic string, body binary")
    w = RocketStoreStreamWriter(sink_dir, {"sinkId": "replay"}, schema)
    batch = pa.record_batch([pa.array(["B", "B"]), pa.array([b"B/0/0", b"B/0/1"], pa.binary())],
                            names=["topic", "body"])
    for _ in range(2):
        w.commit([w.write(iter([batch]))], 7)
    assert w.last_batch_id() == 7
    w.commit([w.write(iter([batch.slice(0, 0)]))], 8)       # an empty batch still counts
    assert w.last_batch_id() == 8
    with MessageStore.open(sink_dir, CONFIG, read_only=True) as store:
        assert store.get_max_offset_in_queue("B", 0) == 2
