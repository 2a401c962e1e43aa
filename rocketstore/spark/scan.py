"""Planning and reading of a store for the Spark source, with no Spark in it.

``ScanOptions`` holds what a read selects (topics, queues, offsets, store times, tags);
``plan`` turns it into ``Split``s, one per (topic, queue, offset range), large queues cut
into ranges of ``max_rows_per_split`` units; ``read_split`` yields pyarrow RecordBatches of
one split, decoded by ``_columns.decode_units`` from the consume-queue units on.

Stores are opened read-only (``open_reader``): no lock, nothing written, so a writer in
another process keeps running; a split reads only units the writer has published, each
pointing at a record written before it, so a read sees a consistent prefix of every queue.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from rocketstore.store import _columns, _scan, storedir
from rocketstore.store._codec import java_hash
from rocketstore.store.config import StoreConfig
from rocketstore.store.consumequeue import unit_runs
from rocketstore.errors import CorruptionError, InvalidOptionError
from rocketstore.store.paths import commitlog_dir
from rocketstore.spark.arrow import fields_mask, to_record_batch
from rocketstore.store import MessageStore

#: The delay service's topic: its units carry the delivery time as tags code, not a tags hash.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
MAX_TAGS = 8
COUNT_BATCH_ROWS = 1 << 18
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Split:
    """Queue offsets [start, end) of one queue: the unit of work of one Spark task."""
    topic: str
    queue_id: int
    start: int
    end: int


@dataclass
class ScanStats:
    """Work a read did: consume-queue units scanned, commit-log records parsed, rows out,
    body bytes copied into columns (0 when the projection has no body)."""
    units: int = 0
    records: int = 0
    rows: int = 0
    body_bytes: int = 0


@dataclass
class ScanOptions:
    """What a read selects; every field None means "no restriction"."""
    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    start_offsets: dict[str, int] | int | None = None    # per "topic/queue", or one for all
    end_offsets: dict[str, int] | int | None = None
    min_ts: int | None = None               # store time, ms, inclusive
    max_ts: int | None = None
    tags: frozenset[str] | None = None
    max_rows_per_split: int = 1 << 20
    num_partitions: int | None = None       # a batch read's target (None: this machine's cores)
    batch_rows: int = 1 << 15
    commit_log_file_size: int | None = None
    consume_queue_file_size: int | None = None
    columns: tuple[str, ...] | None = None  # the projection (None: every column), in order
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "ScanOptions":
        """Parse the reader options (keys are case-insensitive in Spark; lower-cased here)."""
        o = {str(k).lower(): v for k, v in options.items()}
        topics = _str_set(o, "topics")
        qids = _int_set(o, "queueids")
        tags = _str_set(o, "tags", seps=("||", ","))
        if tags is not None and len(tags) > MAX_TAGS:
            raise InvalidOptionError("tags", o["tags"], f"at most {MAX_TAGS} tags")
        return cls(
            topics=topics, queue_ids=qids,
            start_offsets=_offsets(o, "startoffset"), end_offsets=_offsets(o, "endoffset"),
            min_ts=_int(o, "starttimestamp"), max_ts=_int(o, "endtimestamp"), tags=tags,
            max_rows_per_split=_int(o, "maxrowsperpartition", 1 << 20, minimum=1) or 1 << 20,
            num_partitions=_int(o, "numpartitions", minimum=1),
            batch_rows=_int(o, "batchrows", 1 << 15, minimum=1) or 1 << 15,
            commit_log_file_size=_int(o, "commitlogfilesize", minimum=1024),
            consume_queue_file_size=_int(o, "consumequeuefilesize", minimum=20))

    def narrowed(self, **changes: Any) -> "ScanOptions":
        return replace(self, **changes)


def _int(o: Mapping[str, str], name: str, default: int | None = None,
         minimum: int | None = None) -> int | None:
    v = o.get(name)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise InvalidOptionError(name, v, "expected an integer") from None
    if minimum is not None and n < minimum:
        raise InvalidOptionError(name, v, f"must be at least {minimum}")
    return n


def _str_set(o: Mapping[str, str], name: str, seps: tuple[str, ...] = (",",)) -> frozenset[str] | None:
    v = o.get(name)
    if v is None:
        return None
    s = str(v)
    for sep in seps[1:]:
        s = s.replace(sep, seps[0])
    items = frozenset(x.strip() for x in s.split(seps[0]) if x.strip())
    if not items:
        raise InvalidOptionError(name, v, "names no value")
    return items


def _int_set(o: Mapping[str, str], name: str) -> frozenset[int] | None:
    items = _str_set(o, name)
    if items is None:
        return None
    try:
        return frozenset(int(x) for x in items)
    except ValueError:
        raise InvalidOptionError(name, o[name], "expected integers separated by commas") from None


def _offsets(o: Mapping[str, str], name: str) -> dict[str, int] | int | None:
    """An int for every queue, or JSON {"topic/queue": offset}."""
    v = o.get(name)
    if v is None:
        return None
    s = str(v).strip()
    if s.startswith("{"):
        try:
            d = json.loads(s)
            return {str(k): int(x) for k, x in d.items()}
        except (ValueError, TypeError, AttributeError):
            raise InvalidOptionError(name, v, 'expected JSON {"topic/queue": offset}') from None
    return _int(o, name)


def queue_key(topic: str, queue_id: int) -> str:
    """The offset key of a queue in streaming offsets and offset options."""
    return f"{topic}/{queue_id}"


def parse_queue_key(key: str) -> tuple[str, int]:
    topic, sep, qid = key.rpartition("/")
    if not sep or not topic:
        raise InvalidOptionError("offset key", key, 'expected "topic/queueId"')
    try:
        return topic, int(qid)
    except ValueError:
        raise InvalidOptionError("offset key", key, 'expected "topic/queueId"') from None


# -- the store -------------------------------------------------------------------------------

def detect_config(root: str, opts: ScanOptions | None = None) -> StoreConfig:
    """A StoreConfig whose file sizes are the store's own (a broker's store may use any),
    unless the options give them; the index is not read here."""
    return storedir.detect_config(
        root, commit_log_file_size=opts.commit_log_file_size if opts is not None else None,
        cq_file_size=opts.consume_queue_file_size if opts is not None else None, index=False)


def open_reader(root: str, opts: ScanOptions | None = None) -> MessageStore:
    """The store at ``root`` opened read-only (no lock taken, nothing written)."""
    if not os.path.isdir(commitlog_dir(root)):
        raise FileNotFoundError(2, "not a store directory (no commitlog/)", root)
    return MessageStore.open(root, detect_config(root, opts), read_only=True)


def selected_queues(root: str, opts: ScanOptions) -> list[tuple[str, int]]:
    return [(t, q) for t, q in storedir.list_queues(root)
            if (opts.topics is None or t in opts.topics)
            and (opts.queue_ids is None or q in opts.queue_ids)]


def _option_offset(value: dict[str, int] | int | None, key: str) -> int | None:
    if isinstance(value, dict):
        return value.get(key)
    return value


def queue_range(store: MessageStore, topic: str, queue_id: int, opts: ScanOptions) -> tuple[int, int]:
    """Queue offsets [lo, hi) the options select: offset options, then the store-time range
    narrowed by binary search over the queue's store times (offset by time)."""
    lo = store.get_min_offset_in_queue(topic, queue_id)
    hi = store.get_max_offset_in_queue(topic, queue_id)
    key = queue_key(topic, queue_id)
    s = _option_offset(opts.start_offsets, key)
    e = _option_offset(opts.end_offsets, key)
    if s is not None:
        lo = max(lo, s)
    if e is not None:
        hi = min(hi, e)
    if lo < hi and opts.min_ts is not None:
        lo = max(lo, store.get_offset_in_queue_by_time(topic, queue_id, opts.min_ts, "LOWER"))
    if lo < hi and opts.max_ts is not None:
        last = store.get_offset_in_queue_by_time(topic, queue_id, opts.max_ts, "UPPER")
        ts = store.get_message_store_timestamp(topic, queue_id, last)
        hi = min(hi, last + 1) if 0 <= ts <= opts.max_ts else lo
    return lo, max(lo, hi)


def plan(root: str, opts: ScanOptions, store: MessageStore | None = None) -> list[Split]:
    """The splits of a read: one per (topic, queue, range of at most max_rows_per_split)."""
    own = store is None
    store = open_reader(root, opts) if store is None else store
    try:
        out = []
        for topic, qid in selected_queues(root, opts):
            lo, hi = queue_range(store, topic, qid, opts)
            for start in range(lo, hi, opts.max_rows_per_split):
                out.append(Split(topic, qid, start, min(hi, start + opts.max_rows_per_split)))
        return out
    finally:
        if own:
            store.close()


def plan_partitions(root: str, opts: ScanOptions,
                    store: MessageStore | None = None) -> list[tuple[Split, ...]]:
    """A batch read's partitions: its queues' ranges laid end to end and cut into partitions
    of ``cap = min(ceil(rows / num_partitions), max_rows_per_split)`` rows (the last one
    less), a queue's range split where a partition fills. Many small queues then make a few
    tasks, not one task each (a task of a Spark Python source costs a worker round trip),
    and one big queue still feeds every core. ``num_partitions`` defaults to the cores of
    the machine planning the read (Spark's driver: its local[N] tasks share them)."""
    ranges = [(s.topic, s.queue_id, s.start, s.end)
              for s in plan(root, replace(opts, max_rows_per_split=INT64_MAX), store)]
    total = sum(e - b for _, _, b, e in ranges)
    target = opts.num_partitions or os.cpu_count() or 1
    cap = max(1, min(opts.max_rows_per_split, -(-total // target)))
    parts: list[tuple[Split, ...]] = []
    cur: list[Split] = []
    room = cap
    for topic, qid, lo, hi in ranges:
        while lo < hi:
            take = min(hi - lo, room)
            cur.append(Split(topic, qid, lo, lo + take))
            lo += take
            room -= take
            if room == 0:
                parts.append(tuple(cur))
                cur, room = [], cap
    if cur:
        parts.append(tuple(cur))
    return parts


def read_split(store: MessageStore, split: Split, opts: ScanOptions,
               stats: ScanStats | None = None) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the split's messages that pass the options' tags and store times.

    The tags filter scans the consume-queue units' tags codes in one vectorized pass (hash
    codes of the wanted tags) and decodes only the matching records, where the real TAGS is
    compared (a hash collision is dropped). Units not yet published end the split early.
    Only the columns of ``opts.columns`` are decoded (a count: none); every record is parsed
    and checked all the same, so a projection yields the same rows as the whole read.
    """
    topic, qid = split.topic, split.queue_id
    store.get_max_offset_in_queue(topic, qid)           # read-only: follow the writer
    cq = store.consume_queues.find(topic, qid)
    if cq is None:
        return
    clq = store.commit_log_queue
    topic_b = topic.encode("utf-8")
    tagset = codes = None
    if opts.tags is not None:
        tagset = _columns.tag_set(sorted(opts.tags))
        if topic != SCHEDULE_TOPIC:
            codes = [java_hash(t) for t in sorted(opts.tags)]
    min_ts = INT64_MIN if opts.min_ts is None else opts.min_ts
    max_ts = INT64_MAX if opts.max_ts is None else opts.max_ts
    first = max(split.start, cq.get_min_offset_in_queue())
    fields = fields_mask(opts.columns)

    def decompress(commitlog_offset: int) -> bytes:
        m = store.look_message_by_offset(commitlog_offset)
        if m is None:
            raise CorruptionError("commitlog", commitlog_offset, "record vanished while decoding")
        return bytes(m.body)

    # a count's batches carry no column: larger runs, fewer round trips per split
    runs = opts.batch_rows if opts.columns != () else max(opts.batch_rows, COUNT_BATCH_ROWS)
    for off, view in unit_runs(cq, first, split.end, runs):
        n = len(view) // 20
        positions = _scan.match_indices(view, codes) if codes is not None else None
        cols, records = _columns.decode_units(view, positions, clq, topic_b, qid, off,
                                              tagset, min_ts, max_ts, fields)
        if stats is not None:
            stats.units += n
            stats.records += records
            stats.rows += cols["rows"]
            if "body" in cols:
                stats.body_bytes += int(cols["body"][0][-1])
        if cols["rows"]:
            yield to_record_batch(cols, topic, qid, decompress, opts.columns)
