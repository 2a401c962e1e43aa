"""The driver's append of staged rows (no SparkSession needed): rows without user properties
go through CommitLog.put_columns straight from the Arrow buffers, and must be stored exactly
as the Message path stores them; the tasks' column-wise validation refuses what Message
refuses."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

pytest.importorskip("pyspark")

from rocketstore import MessageStore, StoreConfig  # noqa: E402
from rocketstore.errors import InvalidMessageError  # noqa: E402
from rocketstore.spark import writer as W  # noqa: E402

from pulling import pull_all  # noqa: E402

CFG = StoreConfig(mapped_file_size_commit_log=1 << 20)


def _staged(tmp_path, rows: list[dict], name: str = "t.arrow") -> str:
    cols = {f.name: [r.get(f.name) for r in rows] for f in W.STAGED_SCHEMA}
    batch = pa.record_batch([pa.array(cols[f.name], f.type) for f in W.STAGED_SCHEMA],
                            schema=W.STAGED_SCHEMA)
    path = str(tmp_path / name)
    with ipc.new_file(path, W.FILE_SCHEMA) as w:
        # a slice: buffers with a non-zero offset
        for group in W.stage_groups(batch.slice(1)):
            w.write_batch(group)
    return path


ROWS = [{"topic": "X", "queue_id": 0, "body": b"skipped by the slice"}] + [
    {"topic": "A" if i % 3 else "B", "queue_id": i % 2, "body": bytes([i]) * (i % 7),
     "tags": None if i % 4 == 0 else f"t{i % 3}",
     "keys": None if i % 5 == 0 else ([] if i % 5 == 1 else [f"k{i}", "kk"])}
    for i in range(40)]


def _stored(root: str) -> list[tuple]:
    out = []
    with MessageStore.open(root, CFG) as store:
        assert store.wait_dispatched(10)
        for topic in ("A", "B"):
            for q in (0, 1):
                for m in pull_all(store, topic, q):
                    props = {k: v for k, v in m.properties.items()
                             if k not in ("UNIQ_KEY", "__CRC32#")}      # store-made
                    out.append((topic, q, m.queue_offset, bytes(m.body), m.tags, m.keys,
                                sorted(props.items()), len(m.uniq_key)))
    return out


@pytest.mark.parametrize("marker", [None, "sink:7"])
def test_columns_path_stores_what_the_message_path_stores(tmp_path, marker):
    staged = _staged(tmp_path, ROWS)
    cols_root, msgs_root = str(tmp_path / "cols"), str(tmp_path / "msgs")
    with MessageStore.open(cols_root, CFG) as store:
        assert W.append_staged(store, [staged], marker) == 40
    # the Message path: the same rows with an (empty) user-properties map each
    staged_p = _staged(tmp_path, [dict(r, properties={}) for r in ROWS], "p.arrow")
    with MessageStore.open(msgs_root, CFG) as store:
        assert W.append_staged(store, [staged_p], marker) == 40
    got, want = _stored(cols_root), _stored(msgs_root)
    assert got == want and len(got) == 40
    tags = {r[4] for r in got}
    assert tags == {None, "t0", "t1", "t2"}
    assert any(r[5] == [f"k{i}", "kk"] for r in got for i in range(40))
    assert all((dict(r[6]).get(W.SINK_PROPERTY) == marker) for r in got)


@pytest.mark.parametrize("row, field", [
    ({"tags": "a\x01b"}, "tags"),
    ({"tags": ""}, "tags"),
    ({"keys": ["ok", "has space"]}, "keys"),
    ({"keys": ["k\x02"]}, "keys"),
    ({"keys": [""]}, "keys"),
])
def test_task_validation_refuses_what_message_refuses(row, field):
    rows = [{"topic": "A", "queue_id": 0, "body": b"x", "tags": "fine", "keys": ["k"]}] * 5
    rows = rows + [dict(rows[0], **row)]
    cols = {f.name: [r.get(f.name) for r in rows] for f in W.STAGED_SCHEMA}
    batch = pa.record_batch([pa.array(cols[f.name], f.type) for f in W.STAGED_SCHEMA],
                            schema=W.STAGED_SCHEMA)
    with pytest.raises(InvalidMessageError) as ei:
        W._validate(batch, 1 << 20)
    assert ei.value.field.startswith(field)
    W._validate(batch.slice(0, 5), 1 << 20)         # the good rows pass


def _staged_batch(rows: list[dict]) -> pa.RecordBatch:
    cols = {f.name: [r.get(f.name) for r in rows] for f in W.STAGED_SCHEMA}
    return pa.record_batch([pa.array(cols[f.name], f.type) for f in W.STAGED_SCHEMA],
                           schema=W.STAGED_SCHEMA)


def test_tasks_stage_one_batch_per_queue_in_row_order_with_encoded_properties():
    groups = W.stage_groups(_staged_batch(ROWS[1:]))
    # A/0, A/1, B/0, B/1 (the order groups come in is free; each group's row order is not)
    assert sorted((g.column(0)[0].as_py(), g.column(1)[0].as_py()) for g in groups) == \
        [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    assert sum(g.num_rows for g in groups) == 40
    for g in groups:
        assert g.schema == W.FILE_SCHEMA
        topic, qid = g.column(0)[0].as_py(), g.column(1)[0].as_py()
        want = [r for r in ROWS[1:] if r["topic"] == topic and r["queue_id"] == qid]
        assert g.column(0).to_pylist() == [topic] * len(want)
        assert g.column(1).to_pylist() == [qid] * len(want)
        assert g.column(2).to_pylist() == [r["body"] for r in want]
        for r, enc in zip(want, g.column(6).to_pylist()):
            tags = f"TAGS\x01{r['tags']}\x02" if r["tags"] else ""
            keys = f"KEYS\x01{' '.join(r['keys'])}\x02" if r["keys"] else ""
            assert enc == (tags + keys).encode()


def test_tasks_leave_rows_with_user_properties_to_the_message_path():
    rows = [{"topic": "A", "queue_id": i % 2, "body": b"x", "tags": "t",
             "properties": {"p": str(i)} if i == 3 else None} for i in range(6)]
    groups = W.stage_groups(_staged_batch(rows))
    assert len(groups) == 2 and all(g.column(6).null_count == g.num_rows for g in groups)
    one_queue = W.stage_groups(_staged_batch([dict(r, queue_id=0) for r in rows[:3]]))
    assert len(one_queue) == 1 and one_queue[0].column(6).to_pylist() == [b"TAGS\x01t\x02"] * 3
    assert W.stage_groups(_staged_batch(rows).slice(0, 0)) == []


def test_a_replay_skips_across_the_staged_groups_of_several_files(tmp_path):
    # rows appended before a crash are skipped per (topic, queue), across batches and files
    first = _staged(tmp_path, ROWS, "a.arrow")
    second = _staged(tmp_path, ROWS, "b.arrow")
    full_root, replay_root = str(tmp_path / "full"), str(tmp_path / "replay")
    with MessageStore.open(full_root, CFG) as store:
        assert W.append_staged(store, [first, second], "s:1") == 80
    skip = {("A", 0): 20, ("B", 1): 3}          # ("A", 0) has 13 rows a file: both files
    with MessageStore.open(replay_root, CFG) as store:
        assert W.append_staged(store, [first, second], "s:1", skip) == 80 - 23
    full, replay = _stored(full_root), _stored(replay_root)
    for topic, q, n in (("A", 0, 20), ("B", 1, 3), ("A", 1, 0), ("B", 0, 0)):
        f = [r[3:] for r in full if r[:2] == (topic, q)]
        got = [r[3:] for r in replay if r[:2] == (topic, q)]
        assert got == f[n:] and len(f) > n
