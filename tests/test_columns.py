"""_columns.decode_units: consume-queue units -> column buffers (the Spark source's decode)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store import _columns
from rocketstore.spark.arrow import to_record_batch

CONFIG = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20)


def _units(store: MessageStore, topic: str, qid: int) -> bytes:
    cq = store.consume_queues.find(topic, qid)
    view = cq.units_view(0, cq.get_max_offset_in_queue())
    try:
        return bytes(view)
    finally:
        view.release()


@pytest.fixture
def store(store_dir):
    with MessageStore.open(store_dir, CONFIG) as s:
        for i in range(20):
            s.put_message(Message("T", f"body-{i}".encode(), tags=f"t{i % 2}",
                                  keys=[f"k{i}", "x"], properties={"p": "é"}), i % 2)
        s.put_message(Message("U", b"other"), 0)
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        yield s


def _decode(store, units, positions=None, **kw):
    return _columns.decode_units(units, positions, store.commit_log_queue, b"T", 0, 0, **kw)


def test_every_unit_decodes_to_its_message(store):
    units = _units(store, "T", 0)
    cols, records = _decode(store, units)
    assert records == cols["rows"] == 10
    b = to_record_batch(cols, "T", 0).to_pylist()
    for r in b:
        m = store.look_message_by_offset(r["commitlog_offset"])
        assert (r["queue_offset"], r["body"], r["tags"], r["keys"], r["msg_id"]) == \
            (m.queue_offset, bytes(m.body), m.tags, m.keys, m.msg_id)
        assert dict(r["properties"]) == m.properties


def test_units_that_are_not_this_queues_messages_are_skipped(store):
    units = bytearray(_units(store, "T", 0))
    other = _units(store, "U", 0)
    units[3 * 20:4 * 20] = other[0:20]             # unit 3 points at another topic's record
    units[5 * 20:5 * 20 + 8] = (1 << 40).to_bytes(8, "big")   # unit 5 points past the log
    cols, records = _decode(store, bytes(units))
    offsets = to_record_batch(cols, "T", 0).column("queue_offset").to_pylist()
    assert offsets == [o for o in range(10) if o not in (3, 5)]
    assert records == 9                             # the record past the log was never read


def test_positions_tags_and_times_select_rows(store):
    units = _units(store, "T", 0)
    cols, records = _decode(store, units, np.array([1, 4, 7], dtype=np.int64))
    assert records == 3
    assert to_record_batch(cols, "T", 0).column("queue_offset").to_pylist() == [1, 4, 7]
    cols, _ = _decode(store, units, tags=_columns.tag_set(["t0"]))
    assert set(to_record_batch(cols, "T", 0).column("tags").to_pylist()) == {"t0"}
    cols, _ = _decode(store, units, min_ts=1, max_ts=2)
    assert cols["rows"] == 0
    with pytest.raises(IndexError, match="outside the 10 units"):
        _decode(store, units, np.array([10], dtype=np.int64))
    with pytest.raises(ValueError, match="at most 8"):
        _columns.tag_set([f"t{i}" for i in range(9)])
    assert isinstance(to_record_batch(_decode(store, units[:0])[0], "T", 0), pa.RecordBatch)


def test_a_record_with_many_properties_keeps_them_all(store_dir):
    props = {f"p{i}": f"v{i}-ü" for i in range(100)}       # more than the decoder's table
    with MessageStore.open(store_dir, CONFIG) as s:
        s.put_message(Message("T", b"x", tags="t", properties=props))
    with MessageStore.open(store_dir, CONFIG, read_only=True) as s:
        cols, _ = _decode(s, _units(s, "T", 0))
        (r,) = to_record_batch(cols, "T", 0).to_pylist()
        m = s.look_message_by_offset(r["commitlog_offset"])
        assert dict(r["properties"]) == m.properties and len(r["properties"]) == len(m.properties)
        assert r["tags"] == "t"
