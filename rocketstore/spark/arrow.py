"""The source's schema and the column buffers of ``_columns.decode_units`` as pyarrow arrays.

No row is touched here: every array is built from the decoder's offsets and data buffers
(``pa.Array.from_buffers``, ``ListArray``/``MapArray.from_arrays``); only bodies stored
compressed are replaced, one by one, with their decompressed bytes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

#: Spark schema of a read (DDL), one row per stored message.
SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, msg_id string, "
    "tags string, keys array<string>, properties map<string,string>, body binary, "
    "born_timestamp timestamp, store_timestamp timestamp, born_host string, store_host string, "
    "reconsume_times int, sys_flag int"
)

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


def to_record_batch(cols: dict[str, Any], topic: str, queue_id: int,
                    decompress: Callable[[int], bytes] | None = None) -> pa.RecordBatch:
    """A RecordBatch of ``ARROW_SCHEMA`` from ``decode_units``' arrays.

    ``decompress(commitlog_offset)`` gives the decompressed body of a row stored compressed
    (None keeps the stored bytes)."""
    n = cols["rows"]
    body = cols["body"]
    compressed = cols["compressed_rows"]
    if decompress is not None and len(compressed):
        offs = cols["commitlog_offset"][compressed]
        body = _replace_rows(body, compressed, [decompress(int(o)) for o in offs])
    keys_child = _strings(cols["keys"], len(cols["keys"][0]) - 1)
    prop_keys = _strings(cols["prop_keys"], len(cols["prop_keys"][0]) - 1)
    prop_vals = _strings(cols["prop_values"], len(cols["prop_values"][0]) - 1)
    arrays = [
        _constant_string(topic, n),
        pa.array(np.full(n, queue_id, dtype=np.int32)),
        pa.array(cols["queue_offset"]),
        pa.array(cols["commitlog_offset"]),
        _strings(cols["msg_id"], n),
        _strings(cols["tags"], n, validity=cols["tags_valid"]),
        pa.ListArray.from_arrays(pa.array(cols["keys_offsets"]), keys_child),
        pa.MapArray.from_arrays(pa.array(cols["props_offsets"]), prop_keys, prop_vals),
        _strings(body, n, pa.binary()),
        pa.array(cols["born_timestamp"]).view(TIMESTAMP),
        pa.array(cols["store_timestamp"]).view(TIMESTAMP),
        _strings(cols["born_host"], n),
        _strings(cols["store_host"], n),
        pa.array(cols["reconsume_times"]),
        pa.array(cols["sys_flag"]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
