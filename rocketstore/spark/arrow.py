"""The source's schema and the column buffers of ``_columns.decode_units`` as pyarrow arrays.

No row is touched here: every array is built from the decoder's offsets and data buffers
(``pa.Array.from_buffers``, ``ListArray``/``MapArray.from_arrays``); only bodies stored
compressed are replaced, one by one, with their decompressed bytes. A projection (a subset
of the columns) builds only its columns, from a decode that filled only those.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rocketstore.store import _columns

#: Spark schema of a read (DDL), one row per stored message.
SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, msg_id string, "
    "tags string, keys array<string>, properties map<string,string>, body binary, "
    "born_timestamp timestamp, store_timestamp timestamp, born_host string, store_host string, "
    "reconsume_times int, sys_flag int"
)

#: The schema of a read over the wire (``rocketstore.spark.wire``): the broker's name added.
WIRE_SCHEMA_DDL = SCHEMA_DDL + ", broker_name string"

TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()), ("msg_id", pa.string()), ("tags", pa.string()),
    ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string())),
    ("body", pa.binary()), ("born_timestamp", TIMESTAMP), ("store_timestamp", TIMESTAMP),
    ("born_host", pa.string()), ("store_host", pa.string()), ("reconsume_times", pa.int32()),
    ("sys_flag", pa.int32()),
])


def _strings(pair: tuple[np.ndarray, np.ndarray], n: int, typ: pa.DataType = pa.string(),
             validity: np.ndarray | None = None) -> pa.Array:
    offsets, data = pair
    vbuf = None
    nulls = 0
    if validity is not None and not validity.all():
        vbuf = pa.py_buffer(np.packbits(validity, bitorder="little"))
        nulls = n - int(np.count_nonzero(validity))
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _constant_string(value: str, n: int) -> pa.Array:
    b = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(b * n)])


def _replace_rows(pair: tuple[np.ndarray, np.ndarray], rows: np.ndarray,
                  values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and data of a binary column with ``rows`` (ascending) set to ``values``."""
    offsets, data = pair
    lens = np.diff(offsets).astype(np.int64)
    lens[rows] = [len(v) for v in values]
    new_offsets = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(lens, out=new_offsets[1:])
    if new_offsets[-1] > 0x7FFFFFFF:
        raise OverflowError("decompressed bodies of one batch pass 2 GiB: lower batchRows")
    parts: list[Any] = []
    prev = 0
    for r, v in zip(rows.tolist(), values):
        parts.append(data[offsets[prev]:offsets[r]])
        parts.append(np.frombuffer(v, dtype=np.uint8))
        prev = r + 1
    parts.append(data[offsets[prev]:])
    return new_offsets.astype(np.int32), np.concatenate(parts)


def fields_mask(columns: Sequence[str] | None) -> int:
    """``decode_units``' ``fields`` bits for a projection (None: every column). A body needs
    the commit-log offsets too (to decompress bodies stored compressed)."""
    if columns is None:
        return _columns.ALL_FIELDS
    mask = 0
    for name in columns:
        mask |= _columns.FIELD_BITS.get(name, 0)
    if mask & _columns.FIELD_BITS["body"]:
        mask |= _columns.FIELD_BITS["commitlog_offset"]
    return mask


def projected_schema(columns: Sequence[str] | None) -> pa.Schema:
    """``ARROW_SCHEMA`` cut down to ``columns`` in their order (None: all of it)."""
    if columns is None:
        return ARROW_SCHEMA
    return pa.schema([ARROW_SCHEMA.field(c) for c in columns])


def _empty_batch(n: int) -> pa.RecordBatch:
    """A batch of ``n`` rows and no column (a count): Arrow keeps the length of a
    field-less struct array."""
    one = pa.array([{}], type=pa.struct([]))
    return pa.RecordBatch.from_struct_array(one.take(pa.array(np.zeros(n, dtype=np.int32))))


def to_record_batch(cols: dict[str, Any], topic: str, queue_id: int,
                    decompress: Callable[[int], bytes] | None = None,
                    columns: Sequence[str] | None = None) -> pa.RecordBatch:
    """A RecordBatch of ``ARROW_SCHEMA`` (or of its ``columns``, in that order) from
    ``decode_units``' arrays, which must hold those columns (``fields_mask(columns)``).

    ``decompress(commitlog_offset)`` gives the decompressed body of a row stored compressed
    (None keeps the stored bytes)."""
    n = cols["rows"]
    names = ARROW_SCHEMA.names if columns is None else list(columns)
    if not names:
        return _empty_batch(n)
    arrays = [_COLUMN[name](cols, n, topic, queue_id, decompress) for name in names]
    return pa.RecordBatch.from_arrays(arrays, schema=projected_schema(columns))


def _body(cols: dict[str, Any], n: int, decompress: Callable[[int], bytes] | None) -> pa.Array:
    body = cols["body"]
    compressed = cols["compressed_rows"]
    if decompress is not None and len(compressed):
        offs = cols["commitlog_offset"][compressed]
        body = _replace_rows(body, compressed, [decompress(int(o)) for o in offs])
    return _strings(body, n, pa.binary())


def _list(offsets: np.ndarray, pair: tuple[np.ndarray, np.ndarray]) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets), _strings(pair, len(pair[0]) - 1))


def _map(cols: dict[str, Any]) -> pa.Array:
    keys = _strings(cols["prop_keys"], len(cols["prop_keys"][0]) - 1)
    vals = _strings(cols["prop_values"], len(cols["prop_values"][0]) - 1)
    return pa.MapArray.from_arrays(pa.array(cols["props_offsets"]), keys, vals)


# column name -> its array, from (decoded columns, rows, topic, queue id, decompress)
_COLUMN: dict[str, Callable[..., pa.Array]] = {
    "topic": lambda c, n, t, q, d: _constant_string(t, n),
    "queue_id": lambda c, n, t, q, d: pa.array(np.full(n, q, dtype=np.int32)),
    "queue_offset": lambda c, n, t, q, d: pa.array(c["queue_offset"]),
    "commitlog_offset": lambda c, n, t, q, d: pa.array(c["commitlog_offset"]),
    "msg_id": lambda c, n, t, q, d: _strings(c["msg_id"], n),
    "tags": lambda c, n, t, q, d: _strings(c["tags"], n, validity=c["tags_valid"]),
    "keys": lambda c, n, t, q, d: _list(c["keys_offsets"], c["keys"]),
    "properties": lambda c, n, t, q, d: _map(c),
    "body": lambda c, n, t, q, d: _body(c, n, d),
    "born_timestamp": lambda c, n, t, q, d: pa.array(c["born_timestamp"]).view(TIMESTAMP),
    "store_timestamp": lambda c, n, t, q, d: pa.array(c["store_timestamp"]).view(TIMESTAMP),
    "born_host": lambda c, n, t, q, d: _strings(c["born_host"], n),
    "store_host": lambda c, n, t, q, d: _strings(c["store_host"], n),
    "reconsume_times": lambda c, n, t, q, d: pa.array(c["reconsume_times"]),
    "sys_flag": lambda c, n, t, q, d: pa.array(c["sys_flag"]),
}
