"""``rocketstore export`` (alias ``dump``) and ``import``: messages out to JSONL or Parquet, and
back into a store.

One row per message with every stored field (``_common.ROW_FIELDS``); the body is text when it
is UTF-8, else base64, as ``body_encoding`` says. Bodies stored compressed are exported as a
consumer sees them (decompressed); import therefore clears the compression bits of SYSFLAG.
Export opens the store read-only; import takes the store's lock (one writer).

Selection: a topic (every queue, or ``--queue``), a queue-offset range ``[--from-offset,
--to-offset)`` and a store-time range ``[--begin, --end]`` (found by binary search on the
consume queue, then checked per message). Without ``--topic`` the commit log is read in
order, every topic, with the time range only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from rocketstore.cli._common import (ROW_FIELDS, CommandError, add_store_options, decode_body,
                                     message_row, open_store, parse_time, progress)
from rocketstore.cli.lookup import commit_log_end, topic_queues

# SYSFLAG bits an imported message must not carry: the body is exported decompressed, and
# the host-v6 bits follow the hosts given (docs/format.md §1.3)
_CLEARED_SYSFLAG = 0x1 | 0x700 | 0x10 | 0x20
_BATCH_ROWS = 8192
# one encoder for every row: json.dumps(..., ensure_ascii=False) builds a new one per call
_to_json = json.JSONEncoder(ensure_ascii=False).encode


def _arrow_schema():
    import pyarrow as pa
    types = {"topic": pa.string(), "queue_id": pa.int32(), "queue_offset": pa.int64(),
             "commitlog_offset": pa.int64(), "msg_id": pa.string(), "store_size": pa.int32(),
             "body_crc": pa.int32(), "flag": pa.int32(), "sys_flag": pa.int32(),
             "born_timestamp": pa.int64(), "born_host": pa.string(),
             "store_timestamp": pa.int64(), "store_host": pa.string(),
             "reconsume_times": pa.int32(), "prepared_transaction_offset": pa.int64(),
             "tags": pa.string(), "keys": pa.string(), "uniq_key": pa.string(),
             "properties": pa.map_(pa.string(), pa.string()), "body": pa.string(),
             "body_encoding": pa.string()}
    return pa.schema([(name, types[name]) for name in ROW_FIELDS])


def _need_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise CommandError("Parquet needs pyarrow: pip install 'rocketstore[parquet]'") from None


# -- export ----------------------------------------------------------------------------------

def _selected(store, args: argparse.Namespace, bar) -> Iterator[Any]:
    """The messages the options select, in queue order (with --topic) or log order."""
    begin = parse_time(args.begin, "--begin") if args.begin else None
    end = parse_time(args.end, "--end") if args.end else None
    if args.topic is None:
        if args.queue is not None or args.from_offset is not None or args.to_offset is not None \
                or args.tags:
            raise CommandError("--queue, --from-offset, --to-offset and --tags need --topic")
        start = store.get_min_phy_offset()
        stop, _ = commit_log_end(store)
        bar.total = max(0, stop - start)
        bar.unit, bar.unit_scale = "B", True
        done = start
        for m in store.iter_messages(start):
            if m.commitlog_offset >= stop:
                break
            bar.update(m.commitlog_offset + m.store_size - done)
            done = m.commitlog_offset + m.store_size
            if (begin is None or m.store_timestamp >= begin) and (end is None or m.store_timestamp <= end):
                yield m
        return
    queues = topic_queues(store, args.topic, args.queue)
    ranges = []
    for q in queues:
        lo = store.get_min_offset_in_queue(args.topic, q)
        hi = store.get_max_offset_in_queue(args.topic, q)
        if args.from_offset is not None:
            lo = max(lo, args.from_offset)
        if args.to_offset is not None:
            hi = min(hi, args.to_offset)
        if begin is not None and lo < hi:
            lo = max(lo, store.get_offset_in_queue_by_time(args.topic, q, begin, "LOWER"))
        if end is not None and lo < hi:
            last = store.get_offset_in_queue_by_time(args.topic, q, end, "UPPER")
            # UPPER answers the last message at or before `end`; a queue whose first message
            # is later answers its first offset, which the per-message check drops
            hi = min(hi, last + 1)
        ranges.append((q, lo, hi))
    bar.total = sum(max(0, hi - lo) for _, lo, hi in ranges)
    for q, lo, hi in ranges:
        offset = lo
        while offset < hi:
            r = store.get_message("rocketstore-cli", args.topic, q, offset, min(32, hi - offset),
                                  tags=args.tags)
            for m in r.messages:
                if m.queue_offset >= hi:
                    break
                if (begin is None or m.store_timestamp >= begin) and (end is None or m.store_timestamp <= end):
                    yield m
            nxt = min(r.next_begin_offset, hi)
            if nxt <= offset:
                # a gap the reader cannot cross (units past the commit log's end, a removed file)
                raise CommandError(f"{args.topic} queue {q} offset {offset}: {r.status.value}; "
                                   f"cannot read on (run `rocketstore verify`)")
            bar.update(nxt - offset)
            offset = nxt


def _export(args: argparse.Namespace) -> int:
    fmt = args.format or ("parquet" if args.output and args.output.endswith(".parquet") else "jsonl")
    if fmt == "parquet":
        _need_pyarrow()
        if not args.output or args.output == "-":
            raise CommandError("Parquet output needs -o FILE")
    count = 0
    with open_store(args) as store, progress(desc="export", unit="msg") as bar:
        rows = _selected(store, args, bar)
        if fmt == "jsonl":
            out = sys.stdout if not args.output or args.output == "-" else \
                open(args.output, "w", encoding="utf-8")
            try:
                for m in rows:
                    out.write(_to_json(message_row(m)) + "\n")
                    count += 1
                    if args.limit is not None and count >= args.limit:
                        break
            finally:
                if out is not sys.stdout:
                    out.close()
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            schema = _arrow_schema()
            tmp = args.output + ".tmp"
            with pq.ParquetWriter(tmp, schema) as writer:
                batch: list[dict[str, Any]] = []
                for m in rows:
                    row = message_row(m)
                    row["properties"] = list(row["properties"].items())
                    batch.append(row)
                    count += 1
                    if len(batch) >= _BATCH_ROWS:
                        writer.write_table(pa.Table.from_pylist(batch, schema))
                        batch = []
                    if args.limit is not None and count >= args.limit:
                        break
                if batch or count == 0:
                    writer.write_table(pa.Table.from_pylist(batch, schema))
            os.replace(tmp, args.output)
    if args.output and args.output != "-":
        print(f"exported {count:,} message(s) to {args.output} ({fmt})", file=sys.stderr)
    return 0


# -- import ----------------------------------------------------------------------------------

def _read_rows(path: str, fmt: str, bar) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for every row of the file; `where` names the file and line or row."""
    if fmt == "jsonl":
        bar.total = os.path.getsize(path) if path != "-" else None
        bar.unit, bar.unit_scale = "B", True
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
        try:
            for n, line in enumerate(f, 1):
                bar.update(len(line.encode("utf-8")) if path != "-" else 0)
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CommandError(f"{path} line {n}: not JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(row, dict):
                    raise CommandError(f"{path} line {n}: expected a JSON object")
                yield f"{path} line {n}", row
        finally:
            if f is not sys.stdin:
                f.close()
        return
    _need_pyarrow()
    import pyarrow.parquet as pq
    pf = pq.ParquetFile(path)
    bar.total = pf.metadata.num_rows
    n = 0
    for batch in pf.iter_batches(batch_size=_BATCH_ROWS):
        for row in batch.to_pylist():
            n += 1
            bar.update(1)
            if isinstance(row.get("properties"), list):
                row["properties"] = dict(row["properties"])
            yield f"{path} row {n}", row


def _message(row: dict[str, Any], where: str, topic: str | None):
    from rocketstore import Message
    try:
        body = decode_body(row["body"], row.get("body_encoding") or "utf8", where)
        props = dict(row.get("properties") or {})
        tags = row.get("tags")
        keys = row.get("keys")
        return Message(topic or row["topic"], body, tags=tags,
                       keys=keys if keys else None, properties=props,
                       flag=int(row.get("flag") or 0),
                       sys_flag=int(row.get("sys_flag") or 0) & ~_CLEARED_SYSFLAG,
                       reconsume_times=int(row.get("reconsume_times") or 0),
                       prepared_transaction_offset=int(row.get("prepared_transaction_offset") or 0),
                       born_timestamp=row.get("born_timestamp"),
                       born_host=row.get("born_host"))
    except KeyError as e:
        raise CommandError(f"{where}: missing field {e.args[0]!r}") from None
    except (ValueError, TypeError) as e:
        raise CommandError(f"{where}: {' '.join(str(e).split())}") from None


def _import(args: argparse.Namespace) -> int:
    path = args.input
    fmt = args.format or ("parquet" if path.endswith(".parquet") else "jsonl")
    if path != "-" and not os.path.isfile(path):
        raise CommandError(f"{path}: no such file")
    # a store this command creates and then puts nothing into is removed again: a failed
    # import must not leave an empty store behind (the next import or open would take it)
    created = not os.path.exists(args.store)
    was_empty = not created and os.path.isdir(args.store) and not os.listdir(args.store)
    os.makedirs(args.store, exist_ok=True)
    count = 0
    try:
        with open_store(args, read_only=False) as store, \
                progress(desc="import", unit="msg") as bar:
            for where, row in _read_rows(path, fmt, bar):
                msg = _message(row, where, args.topic)
                qid = args.queue if args.queue is not None else int(row.get("queue_id") or 0)
                r = store.put_message(msg, qid)
                if not r.ok:
                    raise CommandError(f"{where}: put failed with {r.status.value}"
                                       + (f" ({r.error})" if r.error else ""))
                count += 1
            end = store.get_max_phy_offset()
    except BaseException as e:
        if count == 0 and (created or was_empty):
            _remove_contents(args.store, whole=created)
        elif count and isinstance(e, CommandError):
            raise CommandError(f"{e} ({count:,} message(s) before it were imported into "
                               f"{args.store})") from None
        raise
    print(f"imported {count:,} message(s) into {args.store} (commit log now ends at {end:,})",
          file=sys.stderr)
    return 0


def _remove_contents(root: str, whole: bool) -> None:
    import shutil
    if whole:
        shutil.rmtree(root, ignore_errors=True)
        return
    for name in os.listdir(root):
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def register(sub) -> None:
    p = sub.add_parser("export", aliases=["dump"],
                       help="messages of a topic, queue, offset or time range to JSONL or Parquet")
    add_store_options(p)
    p.add_argument("-o", "--output", help="output file (default stdout, JSONL)")
    p.add_argument("--format", choices=("jsonl", "parquet"),
                   help="default: parquet for *.parquet, else jsonl")
    p.add_argument("--topic", help="only this topic (default: every message, in log order)")
    p.add_argument("--queue", type=int, help="only this queue of --topic")
    p.add_argument("--from-offset", type=int, help="first queue offset (inclusive)")
    p.add_argument("--to-offset", type=int, help="last queue offset (exclusive)")
    p.add_argument("--begin", help="stored at or after (ms since the epoch or ISO 8601)")
    p.add_argument("--end", help="stored at or before")
    p.add_argument("--tags", help="tag filter, e.g. 'TagA || TagB'")
    p.add_argument("--limit", type=int, help="at most this many messages")
    p.set_defaults(func=_export)

    p = sub.add_parser("import", help="put the messages of a JSONL or Parquet export into a store")
    add_store_options(p)
    p.add_argument("input", help="file written by `rocketstore export` ('-' for JSONL on stdin)")
    p.add_argument("--format", choices=("jsonl", "parquet"),
                   help="default: parquet for *.parquet, else jsonl")
    p.add_argument("--topic", help="put every message into this topic instead of its own")
    p.add_argument("--queue", type=int, help="put every message into this queue instead of its own")
    p.set_defaults(func=_import)
