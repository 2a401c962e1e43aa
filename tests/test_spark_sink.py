"""The streaming sink's exactly-once across a driver crash mid-append (no SparkSession
needed: the sink's commit runs on the driver, so it is called here as Spark would)."""
from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType  # noqa: E402

from rocketstore import MessageStore, StoreConfig  # noqa: E402
from rocketstore.spark import writer as sink_writer  # noqa: E402
from rocketstore.spark.writer import SINK_PROPERTY, RocketStoreStreamWriter  # noqa: E402

from pulling import pull_all  # noqa: E402

OPTIONS = {"sinkId": "crash", "commitLogFileSize": "1048576", "consumeQueueFileSize": "60000"}
CONFIG = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=60000)
SCHEMA = StructType([StructField("topic", StringType()), StructField("queue_id", IntegerType()),
                     StructField("body", BinaryType())])


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(["S"] * n), pa.array([i % 2 for i in range(n)], pa.int32()),
                            pa.array([b"row-%05d" % i for i in range(n)], pa.binary())],
                           names=["topic", "queue_id", "body"])


def _bodies(root: str, qid: int) -> list[bytes]:
    with MessageStore.open(root, CONFIG, read_only=True) as store:
        return [bytes(m.body) for m in pull_all(store, "S", qid)]


class Crash(Exception):
    pass


def test_replay_after_a_crash_mid_append_appends_each_row_once(store_dir, monkeypatch):
    rows = _batch(5000)                   # 2500 a queue: three put_messages calls each
    MessageStore.open(store_dir, CONFIG).close()
    w = RocketStoreStreamWriter(store_dir, OPTIONS, SCHEMA)
    real_put, calls = sink_writer._put, []

    def dying_put(store, msgs, qid):
        if len(calls) == 3:
            raise Crash()                 # the driver dies after three of six appends
        calls.append(qid)
        real_put(store, msgs, qid)

    monkeypatch.setattr(sink_writer, "_put", dying_put)
    with pytest.raises(Crash):
        w.commit([w.write(iter([rows]))], 4)
    assert w.last_batch_id() == -1
    partial = _bodies(store_dir, 0) + _bodies(store_dir, 1)
    assert 0 < len(partial) < 5000
    monkeypatch.setattr(sink_writer, "_put", real_put)
    # Spark replays batch 4 with the same rows: only the missing ones are appended
    w2 = RocketStoreStreamWriter(store_dir, OPTIONS, SCHEMA)
    w2.commit([w2.write(iter([rows]))], 4)
    assert w2.last_batch_id() == 4
    for q in (0, 1):
        assert _bodies(store_dir, q) == [b"row-%05d" % i for i in range(q, 5000, 2)]
    with MessageStore.open(store_dir, CONFIG, read_only=True) as store:
        m = store.get_message("g", "S", 0, 0, 1).messages[0]
        assert m.properties[SINK_PROPERTY] == "crash:4"


def test_a_crash_after_the_append_but_before_the_record_does_not_duplicate(store_dir, monkeypatch):
    rows = _batch(300)
    MessageStore.open(store_dir, CONFIG).close()
    w = RocketStoreStreamWriter(store_dir, OPTIONS, SCHEMA)
    real_record = w._record

    def dying_record(state):
        if "pending" not in state:
            raise Crash()                 # everything appended, "done" never written
        real_record(state)

    monkeypatch.setattr(w, "_record", dying_record)
    with pytest.raises(Crash):
        w.commit([w.write(iter([rows]))], 0)
    w2 = RocketStoreStreamWriter(store_dir, OPTIONS, SCHEMA)
    w2.commit([w2.write(iter([rows]))], 0)
    w2.commit([w2.write(iter([_batch(10)]))], 1)
    assert [len(_bodies(store_dir, q)) for q in (0, 1)] == [155, 155]
