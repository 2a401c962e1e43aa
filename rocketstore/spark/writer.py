"""Writes of DataFrames into a store: tasks stage, the driver appends once.

Columns: ``body`` (binary or string, required), ``topic`` (or the ``topic`` option), and
optionally ``tags`` (string), ``keys`` (array<string>, or a space-separated string),
``properties`` (map<string,string>), and the queue: a ``queue_id`` column, or a sharding key
column (option ``shardingKey``, default ``sharding_key``) mapped to one of ``queueNums``
queues (default 4) by xxhash64 of its UTF-8 bytes, which every process computes alike
(Python's ``hash`` of a str is salted per process). Rows with neither go to queue 0.

Each task writes its rows to an Arrow IPC file under ``<store>/.spark-staging/<job>/`` and
returns its name: validated, grouped per (topic, queue) in row order, their tags and keys
already encoded as the commit log stores properties (``stage_batch``), so that the per-row
work runs in the tasks, in parallel. The driver's ``commit()`` opens the store as its single
writer and appends the staged rows in task order straight from the memory-mapped files
(``CommitLog.put_columns``: no Message per row), then deletes them; ``abort()`` deletes
them, leaving the store untouched. The streaming sink does the same per micro-batch,
exactly once per batch id even across a crash: its progress file
(``config/sparkSink-<sinkId>.json``, written atomically) records a batch as *pending* with the commit-log offset where its append starts
before appending, and as done after the store closed (flushed); every message it appends
carries the property ``SPARK_SINK_BATCH`` = ``<sinkId>:<batchId>``. A batch id at or below the
done one is skipped; a replay of the pending one (the driver died mid-append) counts, per
(topic, queue), the messages of that batch already in the log after the recorded offset and
appends only the rest (Spark replays a batch with the same rows in the same order).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import xxhash
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import StructType

from rocketstore.store._codec import Message
from rocketstore.errors import InvalidOptionError, RocketStoreError
from rocketstore.spark.scan import ScanOptions, detect_config
from rocketstore.store import MessageStore

STAGING_DIR = ".spark-staging"
STAGED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("body", pa.binary()),
    ("tags", pa.string()), ("keys", pa.list_(pa.string())),
    ("properties", pa.map_(pa.string(), pa.string())),
])
# a staged file's batches: a task batch's STAGED_SCHEMA columns, as they came, plus
# - encoded_props: each row's TAGS/KEYS encoded as the commit log stores properties (null
#   in a batch with user properties: its rows are appended as Messages);
# - group_order / group_last: the batch's row indices grouped per (topic, queue), each group
#   in row order, and True at each group's last position (so the driver does no sort)
FILE_SCHEMA = STAGED_SCHEMA.append(pa.field("encoded_props", pa.binary())) \
    .append(pa.field("group_order", pa.int32())).append(pa.field("group_last", pa.bool_()))
BATCH_MESSAGES = 1024           # messages per put_messages call (one queue, one file)


def shard_queue(key: str | bytes, queue_nums: int) -> int:
    """The queue of a sharding key: xxhash64 of its UTF-8 bytes modulo ``queue_nums``."""
    b = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return xxhash.xxh64_intdigest(b) % queue_nums


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged: its Arrow file (None when it had no rows) and row count."""
    file: str | None
    rows: int


class _Plan:
    """How rows become staged messages (options checked at the driver)."""

    def __init__(self, path: str, options: Any, schema: StructType) -> None:
        o = {str(k).lower(): v for k, v in options.items()}
        self.path = path
        self.names = set(schema.fieldNames())
        if "body" not in self.names:
            raise InvalidOptionError("body", None, "the DataFrame needs a body column (binary or string)")
        self.topic = o.get("topic")
        if "topic" not in self.names and not self.topic:
            raise InvalidOptionError("topic", None, "give a topic column or the topic option")
        self.sharding = str(o.get("shardingkey", "sharding_key"))
        try:
            self.queue_nums = int(o.get("queuenums", 4))
        except ValueError:
            raise InvalidOptionError("queueNums", o.get("queuenums"), "expected an integer") from None
        if not 1 <= self.queue_nums <= 1 << 16:
            raise InvalidOptionError("queueNums", self.queue_nums, "must be in [1, 65536]")
        if "queue_id" in self.names and self.sharding in self.names:
            raise InvalidOptionError("shardingKey", self.sharding,
                                     "give either a queue_id column or a sharding key column, not both")
        self.scan = ScanOptions.from_options(options)
        self.max_message_size = detect_config(path, self.scan).max_message_size
        self.staging = os.path.join(str(o.get("stagingdir") or os.path.join(path, STAGING_DIR)),
                                    uuid.uuid4().hex)
        # made here, at planning: a task never re-creates it, so a task still running when
        # abort() removed it fails instead of leaving its file behind
        os.makedirs(self.staging)

    def stage(self, batches: Iterator[pa.RecordBatch]) -> Staged:
        """Write the task's rows to one Arrow file as ``stage_batch`` batches."""
        name = os.path.join(self.staging, f"task-{uuid.uuid4().hex}.arrow")
        rows = 0
        writer = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                out = self._convert(batch)
                _validate(out, self.max_message_size)
                if writer is None:
                    writer = ipc.new_file(name, FILE_SCHEMA)
                writer.write_batch(stage_batch(out))
                rows += out.num_rows
        finally:
            if writer is not None:
                writer.close()
        return Staged(name if rows else None, rows)

    def _convert(self, b: pa.RecordBatch) -> pa.RecordBatch:
        n = b.num_rows
        col = {name: b.column(i) for i, name in enumerate(b.schema.names)}
        m = message_columns(b, self.topic)
        if "queue_id" in col:
            qid = col["queue_id"].cast(pa.int32())
            if qid.null_count:
                raise InvalidOptionError("queue_id", None, "a row has a null queue_id")
        elif self.sharding in col:
            keys = col[self.sharding].cast(pa.string()).to_pylist()
            qid = pa.array([0 if k is None else shard_queue(k, self.queue_nums) for k in keys],
                           pa.int32())
        else:
            qid = pa.array(np.zeros(n, dtype=np.int32))
        return pa.RecordBatch.from_arrays([m["topic"], qid, m["body"], m["tags"], m["keys"],
                                           m["properties"]], schema=STAGED_SCHEMA)


def message_columns(b: pa.RecordBatch, topic_option: str | None) -> dict[str, pa.Array]:
    """A DataFrame batch's message fields as arrays of STAGED_SCHEMA's types: ``topic`` (the
    column, its nulls filled from ``topic_option``, or the option alone), ``body`` (binary),
    ``tags``, ``keys`` (a space-separated string column is split) and ``properties``, null
    where the DataFrame has no such column. A null topic or body raises InvalidOptionError."""
    n = b.num_rows
    col = {name: b.column(i) for i, name in enumerate(b.schema.names)}
    topic = col["topic"].cast(pa.string()) if "topic" in col else pa.array([topic_option] * n, pa.string())
    if "topic" in col and topic_option and col["topic"].null_count:
        topic = pc.fill_null(topic, topic_option)
    if topic.null_count:
        raise InvalidOptionError("topic", None, "a row has a null topic and no topic option is set")
    body = col["body"]
    if body.null_count:
        raise InvalidOptionError("body", None, "a row has a null body")
    if not pa.types.is_binary(body.type):
        body = body.cast(pa.binary())
    tags = col["tags"].cast(pa.string()) if "tags" in col else pa.nulls(n, pa.string())
    if "keys" in col:
        k = col["keys"]
        if pa.types.is_string(k.type) or pa.types.is_large_string(k.type):
            k = pc.split_pattern(k.cast(pa.string()), " ")
        keys = k.cast(pa.list_(pa.string()))
    else:
        keys = pa.nulls(n, pa.list_(pa.string()))
    props = (col["properties"].cast(STAGED_SCHEMA.field("properties").type)
             if "properties" in col else pa.nulls(n, STAGED_SCHEMA.field("properties").type))
    return {"topic": topic, "body": body, "tags": tags, "keys": keys, "properties": props}


def _validate(b: pa.RecordBatch, max_body: int) -> None:
    """Refuse, in the task, what the driver's append would refuse (so a bad row fails the job
    before anything is appended): each row must make a valid Message, and no body may pass
    the store's max_message_size. Columns are checked whole; only a row a check flags (or
    every row with user properties) is built into a ``Message``, which raises the error
    naming the field."""
    if b.num_rows == 0:
        return
    longest = pc.max(pc.binary_length(b.column(2))).as_py() or 0
    if longest > max_body:
        raise InvalidOptionError("body", f"<{longest} bytes>",
                                 f"longer than the store's max_message_size {max_body}")
    for topic in pc.unique(b.column(0)).to_pylist():
        Message(topic, b"")
    tags = b.column(3)
    keys = b.column(4)
    props = _column_list(b.column(5))
    flagged = np.zeros(b.num_rows, dtype=bool)
    if tags.null_count < len(tags):
        flagged |= _bad_text(tags, allow_space=True)
    if keys.null_count < len(keys):
        tokens = pc.list_flatten(keys)
        if len(tokens):
            bad = _bad_text(tokens, allow_space=False)
            if bad.any():
                rows = pc.list_parent_indices(keys).to_numpy(zero_copy_only=False)
                flagged[rows[bad]] = True
        # a property string near the 32 KiB limit: let Message count it exactly
        joined = pc.fill_null(pc.binary_length(pc.binary_join(keys, " ")), 0)
        flagged |= pc.greater(joined, 16 << 10).to_numpy(zero_copy_only=False)
    if tags.null_count < len(tags):
        flagged |= pc.greater(pc.fill_null(pc.binary_length(tags), 0), 16 << 10) \
            .to_numpy(zero_copy_only=False)
    rows_to_build = np.arange(b.num_rows) if props is not None else np.flatnonzero(flagged)
    if not len(rows_to_build):
        return
    topics = b.column(0).to_pylist()
    tag_list = _column_list(tags)
    key_list = _column_list(keys)
    for i in rows_to_build.tolist():
        Message(topics[i], b"", tags=tag_list[i] if tag_list else None,
                keys=(key_list[i] or None) if key_list else None,
                properties=dict(props[i]) if props and props[i] else None)


def _bad_text(col: pa.Array, allow_space: bool) -> np.ndarray:
    """Rows of a string column that Message would refuse: empty, or holding a property
    separator (or, for keys, a space). Nulls are not flagged."""
    bad = pc.equal(pc.binary_length(col), 0)
    for ch in ("\x01", "\x02") if allow_space else ("\x01", "\x02", " "):
        bad = pc.or_(bad, pc.match_substring(col, ch))
    return pc.fill_null(bad, False).to_numpy(zero_copy_only=False)


# The driver's append writes the whole job at once and its close() flushes all of it: with
# the default cadence (every 500 ms) most of the flush would wait for close(), after the
# append, while a 10 ms one msyncs 4 MiB steps as the append goes, on the core the tasks
# left idle. Only this process's flush timing changes; the files are the same.
BULK_FLUSH_INTERVAL_MS = 10
BULK_FLUSH_LEAST_PAGES = 1024


def _open_writer(path: str, scan: ScanOptions) -> MessageStore:
    config = detect_config(path, scan)
    if config.flush_disk_type == "ASYNC_FLUSH":
        config = dataclasses.replace(config, flush_interval_commit_log=BULK_FLUSH_INTERVAL_MS,
                                     flush_commit_log_least_pages=BULK_FLUSH_LEAST_PAGES)
    return MessageStore.open(path, config)


SINK_PROPERTY = "SPARK_SINK_BATCH"     # <sinkId>:<batchId> on every message a sink appends


def stage_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    """A validated STAGED_SCHEMA batch as a FILE_SCHEMA one: the per-row work of the append
    (grouping, encoding tags and keys), done in the tasks, in parallel, so that the
    driver's single writer only copies."""
    n = b.num_rows
    topic, qid = b.column(0), b.column(1)
    if n and pc.count_distinct(topic).as_py() == 1:
        group = qid.to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        codes = topic.dictionary_encode().indices.to_numpy(zero_copy_only=False)
        group = (codes.astype(np.int64) << 32) | qid.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(group, kind="stable")          # a group's rows keep their order
    last = np.ones(n, dtype=bool)
    if n:
        sorted_groups = group[order]
        last[:-1] = sorted_groups[1:] != sorted_groups[:-1]
    if b.column(5).null_count == n:
        encoded = _encode_props(b.column(3), b.column(4))
    else:
        encoded = pa.nulls(n, pa.binary())      # user properties: the Message path
    return pa.RecordBatch.from_arrays(
        b.columns + [encoded, pa.array(order.astype(np.int32)), pa.array(last)],
        schema=FILE_SCHEMA)


def _encode_props(tags: pa.Array, keys: pa.Array) -> pa.Array:
    """Each row's ``TAGS\x01..\x02KEYS\x01..\x02`` (as Message encodes them; empty when it
    has neither), as a binary array."""
    parts = []
    if tags.null_count < len(tags):
        parts.append(_prop_column("TAGS", tags))
    if keys.null_count < len(keys):
        parts.append(_prop_column("KEYS", pc.binary_join(keys, " ")))
    if not parts:
        return pa.repeat(pa.scalar(b"", pa.binary()), len(tags))
    joined = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
    return joined.cast(pa.binary())


def append_staged(store: MessageStore, files: list[str], marker: str | None = None,
                  skip: dict[tuple[str, int], int] | None = None) -> int:
    """Append the staged files' rows in order (``stage_batch`` batches), each run of one
    (topic, queue) as batches of consecutive queue offsets.
    ``marker`` becomes every message's ``SPARK_SINK_BATCH`` property; ``skip`` drops the
    first rows of a (topic, queue) (appended before a crash). Returns the rows appended.
    The files are memory-mapped: bodies go from the page cache into the commit log."""
    total = 0
    limit = max(1, store.config.mapped_file_size_commit_log // 4)
    skip = dict(skip or {})
    prefix = f"{SINK_PROPERTY}\x01{marker}\x02".encode() if marker is not None else None
    for name in files:
        with pa.memory_map(name) as source, ipc.open_file(source) as f:
            for i in range(f.num_record_batches):
                total += _append_batch(store, f.get_batch(i), limit, marker, prefix, skip)
    return total


def _column_list(col: pa.Array) -> list | None:
    """The column as Python objects, or None when every row is null (nothing to convert)."""
    return None if col.null_count == len(col) else col.to_pylist()


def _append_batch(store: MessageStore, b: pa.RecordBatch, byte_limit: int, marker: str | None,
                  prefix: bytes | None, skip: dict[tuple[str, int], int]) -> int:
    """Append one staged batch, group by group, less the rows ``skip`` says are in."""
    n = b.num_rows
    if n == 0:
        return 0
    order = b.column(7).to_numpy(zero_copy_only=False).astype(np.int64)
    ends = (np.flatnonzero(b.column(8).to_numpy(zero_copy_only=False)) + 1).tolist()
    topics, qids = b.column(0), b.column(1).to_numpy(zero_copy_only=False)
    encoded = b.column(6)
    bodies = b.column(2)
    # what a record may take, at most: its body and properties, plus (header, topic, UNIQ_KEY
    # and the marker) less than 512 bytes; to cut puts at the byte limit
    body_off = _binary_buffers(bodies)[1]
    size = (body_off[1:] - body_off[:-1]).astype(np.int64) + 512 + (len(prefix) if prefix else 0)
    if encoded.null_count == 0:
        rows_of: _Columns | _MessageRows = _Columns(bodies, encoded, prefix)
        if rows_of.props_offsets is not None:
            size += rows_of.props_offsets[1:] - rows_of.props_offsets[:-1]
    else:
        props = b.column(5).to_pylist()
        rows_of = _MessageRows(b, marker, props)
        size += np.array([sum(len(k) + len(v) + 2 for k, v in p or ()) for p in props],
                         dtype=np.int64) * 4
    cum = np.cumsum(size[order])        # in group order
    appended = start = 0
    for end in ends:
        first = int(order[start])
        topic, qid = topics[first].as_py(), int(qids[first])
        lo = start
        if skip:
            k = min(skip.get((topic, qid), 0), end - start)
            if k:
                skip[(topic, qid)] -= k
                lo += k
        appended += end - lo
        while lo < end:
            # the longest run from lo within BATCH_MESSAGES and the byte limit (at least one)
            hi = min(end, lo + BATCH_MESSAGES)
            cap = (cum[lo - 1] if lo else 0) + byte_limit
            if cum[hi - 1] > cap:       # rare: large bodies
                hi = lo + max(1, int(np.searchsorted(cum[lo:hi], cap, side="right")))
            _put(store, rows_of.batch(topic, order[lo:hi]), qid)
            lo = hi
        start = end
    return appended


class _Columns:
    """Rows of a staged batch as ``CommitLog.put_columns`` arguments (no Message per row):
    the Arrow buffers of the bodies and of the tasks' encoded properties, the sink's marker
    put in front."""

    def __init__(self, bodies: pa.Array, encoded: pa.Array, prefix: bytes | None) -> None:
        self.body_data, self.body_offsets = _binary_buffers(bodies)
        self.const_props = None
        self.props_data = self.props_offsets = None
        _, offs = _binary_buffers(encoded)
        if offs[-1] == offs[0]:             # no tags nor keys: the marker alone, or nothing
            self.const_props = prefix
        else:
            if prefix is not None:
                encoded = pc.binary_join_element_wise(pa.scalar(prefix, pa.binary()), encoded,
                                                      pa.scalar(b"", pa.binary()))
            self.props_data, self.props_offsets = _binary_buffers(encoded)

    def batch(self, topic: str, rows: np.ndarray) -> "_ColumnBatch":
        return _ColumnBatch(self, topic, np.ascontiguousarray(rows))


class _ColumnBatch:
    """One put of rows (what ``_put`` appends)."""

    def __init__(self, cols: _Columns, topic: str, rows: np.ndarray) -> None:
        self.cols, self.topic, self.rows = cols, topic, rows

    def __len__(self) -> int:
        return len(self.rows)

    def put(self, store: MessageStore, queue_id: int):
        c = self.cols
        return store.commit_log.put_columns(self.topic, queue_id, self.rows, c.body_data,
                                            c.body_offsets, c.props_data, c.props_offsets,
                                            c.const_props)


class _MessageRows:
    """Rows with user properties: a Message each (the rare case; Message applies the rules
    of tags and keys over TAGS and KEYS given as properties)."""

    def __init__(self, b: pa.RecordBatch, marker: str | None, props: list) -> None:
        self.bodies = b.column(2).to_pylist()
        self.tags = _column_list(b.column(3))
        self.keys = _column_list(b.column(4))
        self.props = props
        self.extra = {SINK_PROPERTY: marker} if marker is not None else {}

    def batch(self, topic: str, rows: np.ndarray) -> list[Message]:
        tags, keys, props, extra = self.tags, self.keys, self.props, self.extra
        return [Message(topic, self.bodies[i], tags=tags[i] if tags else None,
                        keys=(keys[i] or None) if keys else None,
                        properties={**dict(props[i] or ()), **extra})
                for i in rows.tolist()]


def _prop_column(name: str, values: pa.Array) -> pa.Array:
    """``name \x01 value \x02`` per row; empty where the value is null or empty."""
    wrapped = pc.binary_join_element_wise(f"{name}\x01", values, "\x02", "")
    return pc.if_else(pc.fill_null(pc.greater(pc.binary_length(values), 0), False), wrapped, "")


def _binary_buffers(col: pa.Array) -> tuple[Any, np.ndarray]:
    """(data buffer, int32 offsets of each row) of a binary/string array, zero-copy."""
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[col.offset:col.offset + len(col) + 1]
    return (bufs[2] if bufs[2] is not None else b""), offsets


def _put(store: MessageStore, batch, queue_id: int) -> None:
    """Append one batch (Messages, or rows of staged columns) to ``queue_id``."""
    if isinstance(batch, _ColumnBatch):
        r = batch.put(store, queue_id)
        topic = batch.topic
    else:
        r = store.put_messages(batch, queue_id)
        topic = batch[0].topic
    if r.status.name != "PUT_OK":
        raise RocketStoreError(f"appending {len(batch)} staged messages to {topic}/"
                               f"{queue_id} failed: {r.status.name}")


def _appended_before(store: MessageStore, start_phy: int, marker: str) -> dict[tuple[str, int], int]:
    """Messages of the sink batch ``marker`` already in the log from ``start_phy`` (a replay
    after the driver died mid-append), per (topic, queue). Walks only what was appended
    since the batch began, once, after a crash."""
    done: dict[tuple[str, int], int] = {}
    for m in store.iter_messages(start_phy):
        if m.properties.get(SINK_PROPERTY) == marker:
            done[(m.topic, m.queue_id)] = done.get((m.topic, m.queue_id), 0) + 1
    return done


def _files(messages: list[Any]) -> list[str]:
    return [m.file for m in messages if isinstance(m, Staged) and m.file]


class RocketStoreWriter(DataSourceArrowWriter):
    """Batch write: ``df.write.format("rocketstore").mode("append").save(path)``."""

    def __init__(self, path: str, options: Any, schema: StructType) -> None:
        self.plan = _Plan(path, options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:  # type: ignore[override]
        return self.plan.stage(iterator)

    def commit(self, messages: list[Any]) -> None:  # type: ignore[override]
        try:
            with _open_writer(self.plan.path, self.plan.scan) as store:
                append_staged(store, _files(messages))
        finally:
            shutil.rmtree(self.plan.staging, ignore_errors=True)

    def abort(self, messages: list[Any]) -> None:  # type: ignore[override]
        shutil.rmtree(self.plan.staging, ignore_errors=True)


class RocketStoreStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink, idempotent per batch id (option ``sinkId`` names its progress file)."""

    def __init__(self, path: str, options: Any, schema: StructType) -> None:
        self.plan = _Plan(path, options, schema)
        o = {str(k).lower(): v for k, v in options.items()}
        sink = str(o.get("sinkid", "default"))
        if not sink or not all(c.isalnum() or c in "-_." for c in sink):
            raise InvalidOptionError("sinkId", sink, "use letters, digits, '-', '_' and '.'")
        self.sink = sink
        self.state_file = os.path.join(path, "config", f"sparkSink-{sink}.json")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:  # type: ignore[override]
        return self.plan.stage(iterator)

    def _state(self) -> dict[str, Any]:
        try:
            with open(self.state_file) as f:
                return dict(json.load(f))
        except FileNotFoundError:
            return {"batchId": -1}

    def last_batch_id(self) -> int:
        """The last batch id appended by this sink, or -1."""
        return int(self._state()["batchId"])

    def commit(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        files = _files(messages)
        try:
            state = self._state()
            last = int(state["batchId"])
            if batchId <= last:
                return                  # a replay of a batch already appended
            marker = f"{self.sink}:{batchId}"
            with _open_writer(self.plan.path, self.plan.scan) as store:
                skip: dict[tuple[str, int], int] = {}
                if state.get("pending") == batchId:
                    skip = _appended_before(store, int(state["startPhy"]), marker)
                else:
                    self._record({"batchId": last, "pending": batchId,
                                  "startPhy": store.get_max_phy_offset()})
                append_staged(store, files, marker, skip)
            self._record({"batchId": batchId})  # after close() flushed what was appended
        finally:
            for name in files:
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass

    def _record(self, state: dict[str, Any]) -> None:
        os.makedirs(os.path.dirname(self.state_file), exist_ok=True)
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)
        fd = os.open(os.path.dirname(self.state_file), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def abort(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        for name in _files(messages):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
