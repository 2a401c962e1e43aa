"""CommitLog.put_columns: rows of Arrow-layout columns appended as one batch (the Spark
writer's path, no Message per row) -- the same records put_messages writes."""
from __future__ import annotations

import numpy as np
import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import InvalidMessageError

from pulling import pull_all

CFG = StoreConfig(mapped_file_size_commit_log=1 << 20)


def _layout(bodies: list[bytes]) -> tuple[bytes, np.ndarray]:
    offsets = np.zeros(len(bodies) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(b) for b in bodies])
    return b"".join(bodies), offsets


def _fields(m) -> tuple:
    props = {k: v for k, v in m.properties.items()
             if k not in ("UNIQ_KEY", "__CRC32#")}      # store-made
    return (m.topic, m.queue_id, m.queue_offset, bytes(m.body), m.body_crc, props, m.flag,
            m.sys_flag, m.born_host, m.store_size, len(m.properties["UNIQ_KEY"]))


def test_rows_are_stored_as_put_messages_stores_them(store_dir):
    bodies = [b"", b"a", b"\x00" * 300, "é€".encode(), b"x" * 64]
    props = [b"TAGS\x01A\x02", b"", b"KEYS\x01k1 k2\x02TAGS\x01B\x02", b"TAGS\x01A\x02", b""]
    rows = np.array([4, 0, 2, 1, 3], dtype=np.int64)        # any order: appended as listed
    bdata, boffs = _layout(bodies)
    pdata, poffs = _layout(props)
    with MessageStore.open(store_dir, CFG) as store:
        r = store.commit_log.put_columns("C", 1, rows, bdata, boffs, pdata, poffs)
        assert r.ok and r.msg_count == 5 and r.queue_offset == 0
        ref = []
        for i in rows.tolist():
            tags = {b"TAGS\x01A\x02": "A", b"KEYS\x01k1 k2\x02TAGS\x01B\x02": "B"}.get(props[i])
            keys = ["k1", "k2"] if i == 2 else None
            ref.append(Message("R", bodies[i], tags=tags, keys=keys))
        store.put_messages(ref, 1)
        assert store.wait_dispatched(10)
        got = pull_all(store, "C", 1)
        want = pull_all(store, "R", 1)
        assert [bytes(m.body) for m in got] == [bodies[i] for i in rows.tolist()]
        assert list(r.commitlog_offsets) == [m.commitlog_offset for m in got]
        for g, w in zip(got, want):
            assert _fields(g)[1:] == _fields(w)[1:]
            assert g.tags == w.tags and g.keys == w.keys
        # the same properties bytes for every row, and a store-made UNIQ_KEY each
        r = store.commit_log.put_columns("C", 1, np.array([1, 1], dtype=np.int64), bdata, boffs,
                                         const_props=b"SPARK_SINK_BATCH\x01s:1\x02")
        assert store.wait_dispatched(10, until=r)
        got = pull_all(store, "C", 1, start=5)
        assert [m.queue_offset for m in got] == [5, 6]
        assert all(m.properties["SPARK_SINK_BATCH"] == "s:1" for m in got)
        assert len({m.uniq_key for m in got}) == 2


@pytest.mark.parametrize("rows, boffs, error", [
    ([0, 5], None, "rows[1]"),
    ([0, -1], None, "rows[1]"),
    ([1], [0, 1, 99], "body_offsets[1]"),
    ([1], [0, 2, 1], "body_offsets[1]"),
    ([], None, "rows"),
])
def test_bad_rows_or_offsets_write_nothing(store_dir, rows, boffs, error):
    bdata, offsets = _layout([b"a", b"b"])
    if boffs is not None:
        offsets = np.array(boffs, dtype=np.int32)
    with MessageStore.open(store_dir, CFG) as store:
        store.put_message(Message("C", b"first"))
        end = store.get_max_phy_offset()
        with pytest.raises(InvalidMessageError, match=error.replace("[", r"\[")):
            store.commit_log.put_columns("C", 0, np.array(rows, dtype=np.int64), bdata, offsets)
        assert store.get_max_phy_offset() == end


def test_limits_are_those_of_put_messages(store_dir):
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=1 << 20,
                                                  max_message_size=1000)) as store:
        bdata, boffs = _layout([b"a", b"b" * 1001])
        with pytest.raises(InvalidMessageError, match="max_message_size"):
            store.commit_log.put_columns("C", 0, np.array([0, 1], dtype=np.int64), bdata, boffs)
        with pytest.raises(InvalidMessageError) as ei:
            store.commit_log.put_columns("C", 0, np.array([0], dtype=np.int64), bdata, boffs,
                                         const_props=b"p\x01" + b"v" * 32760 + b"\x02")
        assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
        with pytest.raises(InvalidMessageError, match="topic"):
            store.commit_log.put_columns("bad topic", 0, np.array([0], dtype=np.int64), bdata, boffs)
        assert store.get_max_phy_offset() == 0
