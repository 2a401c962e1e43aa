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
        w.write_batch(W.stage_batch(batch.slice(1)))   # a slice: buffers with an offset
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


def _groups(staged: pa.RecordBatch) -> list[list[int]]:
    order = staged.column("group_order").to_pylist()
    ends = [i + 1 for i, last in enumerate(staged.column("group_last").to_pylist()) if last]
    return [order[s:e] for s, e in zip([0] + ends, ends)]


def test_tasks_stage_the_rows_grouped_per_queue_in_row_order_with_encoded_properties():
    rows = ROWS[1:]
    staged = W.stage_batch(_staged_batch(rows))
    assert staged.schema == W.FILE_SCHEMA
    assert staged.column("body").to_pylist() == [r["body"] for r in rows]   # rows as they came
    groups = _groups(staged)
    # A/0, A/1, B/0, B/1 (the order groups come in is free; each group's row order is not)
    assert sorted((rows[g[0]]["topic"], rows[g[0]]["queue_id"]) for g in groups) == \
        [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    for g in groups:
        topic, qid = rows[g[0]]["topic"], rows[g[0]]["queue_id"]
        assert g == [i for i, r in enumerate(rows) if (r["topic"], r["queue_id"]) == (topic, qid)]
    for r, enc in zip(rows, staged.column("encoded_props").to_pylist()):
        tags = f"TAGS\x01{r['tags']}\x02" if r["tags"] else ""
        keys = f"KEYS\x01{' '.join(r['keys'])}\x02" if r["keys"] else ""
        assert enc == (tags + keys).encode()


def test_tasks_leave_rows_with_user_properties_to_the_message_path():
    rows = [{"topic": "A", "queue_id": i % 2, "body": b"x", "tags": "t",
             "properties": {"p": str(i)} if i == 3 else None} for i in range(6)]
    staged = W.stage_batch(_staged_batch(rows))
    assert staged.column("encoded_props").null_count == 6
    assert _groups(staged) == [[0, 2, 4], [1, 3, 5]]
    one_queue = W.stage_batch(_staged_batch([dict(r, queue_id=0) for r in rows[:3]]))
    assert one_queue.column("encoded_props").to_pylist() == [b"TAGS\x01t\x02"] * 3
    assert _groups(one_queue) == [[0, 1, 2]]
    assert W.stage_batch(_staged_batch(rows).slice(0, 0)).num_rows == 0


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


def test_the_drivers_store_flushes_as_the_append_goes(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore.open(root, CFG) as store:
        W.append_staged(store, [_staged(tmp_path, ROWS)])
    with W._open_writer(root, W.ScanOptions()) as store:
        assert store.config.flush_interval_commit_log == W.BULK_FLUSH_INTERVAL_MS
        assert store.config.flush_commit_log_least_pages == W.BULK_FLUSH_LEAST_PAGES
        assert store.config.mapped_file_size_commit_log == 1 << 20     # the store's own
