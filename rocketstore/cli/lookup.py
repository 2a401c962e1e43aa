"""``rocketstore stat``, ``get`` and ``query``: read-only looks at a store.

Each opens the store read-only (no lock, nothing written), so it works on a directory a broker
or an application holds open, and on a RocketMQ broker's own store directory.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rocketstore.cli._common import (CommandError, add_store_options, delay_levels_source,
                                     fmt_ts, message_row, message_table, open_store, parse_time,
                                     table)


# -- what a read-only store knows ------------------------------------------------------------

def commit_log_end(store) -> tuple[int, int]:
    """(end of data, messages in the newest file): the last file is walked to its end of data,
    since a read-only open cannot know the writer's position otherwise."""
    files = store.commit_log_queue.files
    for mf in reversed(files):
        end_pos, count, blank = store.commit_log.scan_file(mf, False, False)
        if blank:
            return mf.file_from_offset + mf.file_size, count
        if end_pos > 0 or mf is files[0]:
            return mf.file_from_offset + end_pos, count
    return 0, 0


def list_queues(store) -> list[tuple[str, int]]:
    """Every (topic, queue id) with a consume-queue directory, including ones a writer
    created after the store was opened."""
    from rocketstore.store.storedir import list_queues as queues_of
    return queues_of(store.root)


def topic_queues(store, topic: str, queue: int | None) -> list[int]:
    """The queue ids of ``topic`` a command works on: ``queue`` alone, or all of them;
    CommandError when there is none."""
    queues = [q for t, q in list_queues(store) if t == topic]
    if queue is not None:
        if queue not in queues:
            raise CommandError(f"topic {topic}: no queue {queue} in {store.root} "
                               f"(queues: {', '.join(map(str, queues)) or 'none'})")
        return [queue]
    if not queues:
        raise CommandError(f"topic {topic}: no consume queue in {store.root}")
    return queues


def queue_phy_end(store, topic: str, queue_id: int) -> int:
    """End (offset + size) of the record the queue's last unit points at, or -1 (read from
    the unit: a read-only open does not recover queues, so it has no cached value)."""
    hi = store.get_max_offset_in_queue(topic, queue_id)
    cq = store.consume_queues.find(topic, queue_id)
    if cq is None or hi <= store.get_min_offset_in_queue(topic, queue_id):
        return -1
    unit = cq.get_unit(hi - 1)
    if unit is None or unit[1] == 0x7FFFFFFF:
        return -1
    return unit[0] + unit[1]


def queue_rows(store) -> list[dict[str, Any]]:
    rows = []
    for topic, qid in list_queues(store):
        lo = store.get_min_offset_in_queue(topic, qid)
        hi = store.get_max_offset_in_queue(topic, qid)
        cq = store.consume_queues.find(topic, qid)
        files = len(cq.mapped_file_queue.files) if cq is not None else 0
        last_ts = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > lo else -1
        rows.append({"topic": topic, "queue_id": qid, "min_offset": lo, "max_offset": hi,
                     "messages": hi - lo, "files": files,
                     "max_phy_offset": queue_phy_end(store, topic, qid),
                     "last_store_timestamp": last_ts})
    return rows


def _allocated(path: str) -> int:
    """Bytes the file takes on disk (st_blocks are 512-byte units); 0 when it is gone."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:        # retention deleted it after the listing
        return 0


def _apparent(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _stat(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        cfg = store.config
        files = store.commit_log_queue.files
        end, _ = commit_log_end(store)
        min_phy = store.get_min_phy_offset()
        queues = queue_rows(store)
        dispatched = max((q["max_phy_offset"] for q in queues), default=-1)
        lag = max(0, end - max(dispatched, min_phy))
        # the newest dispatched store time (each queue knows its own; no commit-log walk)
        newest_ts = max((q["last_store_timestamp"] for q in queues), default=-1)
        cp = store.checkpoint.as_dict()
        index = [{"name": f.file_name, "begin_timestamp": f.begin_timestamp,
                  "end_timestamp": f.end_timestamp, "begin_phy_offset": f.begin_phy_offset,
                  "end_phy_offset": f.end_phy_offset, "hash_slots_used": f.hash_slot_count,
                  "entries": max(0, f.index_count - 1)}
                 for f in store.index_service.files]
        groups = store.consumer_offset_manager.table()
        topics = store.topic_config_manager.all()
        info = {
            "store": os.path.abspath(store.root),
            "abort_file": not store.last_exit_ok,
            "commit_log": {"files": len(files), "file_size": cfg.mapped_file_size_commit_log,
                           # allocated, as du counts it: files are sparse past what the
                           # writer allocated (allocation_extent), RocketMQ's are whole
                           "bytes_on_disk": sum(_allocated(mf.path) for mf in files),
                           "file_bytes": sum(_apparent(mf.path) for mf in files),
                           "min_phy_offset": min_phy, "max_phy_offset": end,
                           "first_file": files[0].file_name if files else None,
                           "last_file": files[-1].file_name if files else None},
            "dispatch": {"dispatched_to": dispatched, "lag_bytes": lag},
            "flush": {"checkpoint_physic_msg_timestamp": cp["physicMsgTimestamp"],
                      "newest_dispatched_store_timestamp": newest_ts,
                      "unflushed_ms_at_last_checkpoint": (max(0, newest_ts - cp["physicMsgTimestamp"])
                                                          if newest_ts > 0 else 0)},
            "checkpoint": cp,
            "delay_levels": {"levels": cfg.message_delay_level,
                             "source": delay_levels_source(store.root, args)},
            "queues": queues,
            "index_files": index,
            "consumer_offsets": {k: {str(q): o for q, o in v.items()} for k, v in groups.items()},
            "topics_in_config": sorted(topics),
        }
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    cl = info["commit_log"]
    print(f"store       {info['store']}")
    print(f"state       {'abort file present: a writer holds it open, or it did not close cleanly' if info['abort_file'] else 'closed cleanly (no abort file)'}")
    print(f"commit log  {cl['files']} file(s) of {cl['file_size']:,} bytes "
          f"({cl['first_file']} .. {cl['last_file']}), {cl['bytes_on_disk']:,} bytes on disk "
          f"(allocated, as du counts)")
    print(f"            offsets {min_phy:,} .. {end:,} ({end - min_phy:,} bytes of records)")
    print(f"dispatch    consume queues reach {max(dispatched, 0):,}; lag {lag:,} bytes")
    print(f"checkpoint  physic {fmt_ts(cp['physicMsgTimestamp'])}  logics "
          f"{fmt_ts(cp['logicsMsgTimestamp'])}  index {fmt_ts(cp['indexMsgTimestamp'])}")
    dl = info["delay_levels"]
    print(f"delays      {dl['levels']} ("
          + {"--delay-levels": "as given by --delay-levels",
             "config/broker.properties": "from config/broker.properties"}.get(
              dl["source"], "RocketMQ's default: the store does not record its own; if its "
                            "broker had another messageDelayLevel, pass --delay-levels")
          + ")")
    if newest_ts > 0:
        print(f"flush       checkpoint's flushed store time is "
              f"{info['flush']['unflushed_ms_at_last_checkpoint']:,} ms behind the newest "
              f"dispatched message ({fmt_ts(newest_ts)})")
    print()
    table([(q["topic"], q["queue_id"], q["min_offset"], q["max_offset"], q["messages"],
            q["files"], q["max_phy_offset"], fmt_ts(q["last_store_timestamp"])) for q in queues],
          ("topic", "queue", "min offset", "max offset", "messages", "files", "phy end",
           "newest stored"))
    total = sum(q["messages"] for q in queues)
    print(f"{len(queues)} queue(s), {total:,} message(s)")
    if index:
        print()
        table([(f["name"], fmt_ts(f["begin_timestamp"]), fmt_ts(f["end_timestamp"]),
                f["begin_phy_offset"], f["end_phy_offset"], f["hash_slots_used"], f["entries"])
               for f in index],
              ("index file", "begin", "end", "begin phy", "end phy", "slots used", "entries"))
    if groups:
        print()
        table([(k.split("@", 1)[1] if "@" in k else k, k.split("@", 1)[0], q, o)
               for k, v in sorted(groups.items()) for q, o in sorted(v.items())],
              ("group", "topic", "queue", "offset"))
    return 0


# -- get / query -----------------------------------------------------------------------------

def _print_messages(msgs: list, args: argparse.Namespace) -> None:
    if args.format == "jsonl" or args.json:
        for m in msgs:
            sys.stdout.write(json.dumps(message_row(m), ensure_ascii=False) + "\n")
    else:
        message_table(msgs)


def _get(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.phy is not None:
            m = store.look_message_by_offset(args.phy)
            if m is None:
                bad = dict(store.bad_records()).get(args.phy)
                if bad is not None:
                    raise CommandError(f"commit-log offset {args.phy}: the record there fails "
                                       f"its integrity check ({bad}): not shown")
                raise CommandError(f"commit-log offset {args.phy}: no record starts there "
                                   f"(offsets {store.get_min_phy_offset():,} .. "
                                   f"{commit_log_end(store)[0]:,})")
            _print_messages([m], args)
            return 0
        if args.topic is None or args.queue is None or args.offset is None:
            raise CommandError("give TOPIC QUEUE OFFSET, or --phy OFFSET")
        msgs: list = []
        offset = args.offset
        status = None
        while len(msgs) < args.count:
            r = store.get_message(args.group, args.topic, args.queue, offset,
                                  min(32, args.count - len(msgs)), tags=args.tags)
            status = r.status
            msgs.extend(m.copy() for m in r.messages)
            if r.next_begin_offset <= offset or (not r.messages and r.next_begin_offset >= r.max_offset):
                break
            offset = r.next_begin_offset
        if not msgs:
            lo = store.get_min_offset_in_queue(args.topic, args.queue)
            hi = store.get_max_offset_in_queue(args.topic, args.queue)
            raise CommandError(f"{args.topic} queue {args.queue} offset {args.offset}: "
                               f"{status.value if status else 'nothing'} (queue holds offsets "
                               f"{lo} .. {hi - 1})" if hi > lo else
                               f"{args.topic} queue {args.queue}: no messages in that queue")
        _print_messages(msgs, args)
    return 0


def _query(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.id is not None:
            m = None
            if len(args.id) in (32, 40) and all(c in "0123456789abcdefABCDEF" for c in args.id):
                try:
                    m = store.look_message_by_id(args.id)
                except ValueError:
                    m = None
            msgs = [m] if m is not None else []
            if not msgs and args.topic:
                # a producer's UNIQ_KEY (what RocketMQ's console calls the message id)
                msgs = store.query_message_by_uniq_key(args.topic, args.id)
            if not msgs:
                hint = "" if args.topic else " (for a client UNIQ_KEY, also give --topic)"
                raise CommandError(f"message id {args.id}: not found{hint}")
            _print_messages(msgs, args)
            return 0
        if args.key is None or args.topic is None:
            raise CommandError("give --topic and --key, or --id")
        begin = parse_time(args.begin, "--begin") if args.begin else 0
        # no upper bound by default: a store copied from another machine may be "ahead"
        end = parse_time(args.end, "--end") if args.end else (1 << 62)
        msgs = store.query_message(args.topic, args.key, args.limit, begin, end)
        if not msgs:
            raise CommandError(f"topic {args.topic} key {args.key!r}: no message stored "
                               f"between {fmt_ts(begin) if begin else 'the start'} and "
                               f"{fmt_ts(end) if args.end else 'now'}")
        _print_messages([m.copy() for m in msgs], args)
    return 0


def register(sub) -> None:
    p = sub.add_parser("stat", help="files, sizes, offsets per queue, dispatch lag, checkpoint")
    add_store_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=_stat)

    p = sub.add_parser("get", help="messages of a queue from a queue offset, or at a commit-log offset")
    add_store_options(p)
    p.add_argument("topic", nargs="?", help="topic of the queue (not with --phy)")
    p.add_argument("queue", nargs="?", type=int, help="queue id within the topic")
    p.add_argument("offset", nargs="?", type=int,
                   help="queue offset of the first message (0 is the queue's first ever)")
    p.add_argument("-n", "--count", type=int, default=1, help="how many messages (default 1)")
    p.add_argument("--tags", help="tag filter, e.g. 'TagA || TagB'")
    p.add_argument("--phy", type=int, metavar="OFFSET", help="the record at this commit-log offset")
    p.add_argument("--group", default="rocketstore-cli", help=argparse.SUPPRESS)
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="a table (default) or one JSON object per message")
    p.add_argument("--json", action="store_true", help="the same as --format jsonl")
    p.set_defaults(func=_get)

    p = sub.add_parser("query", help="messages by key (time range, limit) or by message id")
    add_store_options(p)
    p.add_argument("--topic", help="topic to search (needed with --key, and for a UNIQ_KEY --id)")
    p.add_argument("--key", help="a KEYS token or UNIQ_KEY")
    p.add_argument("--id", help="an offset message id (or, with --topic, a UNIQ_KEY)")
    p.add_argument("--begin", help="stored at or after (ms since the epoch or ISO 8601)")
    p.add_argument("--end", help="stored at or before (default: no limit)")
    p.add_argument("--limit", type=int, default=32,
                   help="at most this many (default 32): the newest matches, as the index is "
                        "searched newest first; printed oldest first")
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="a table (default) or one JSON object per message")
    p.add_argument("--json", action="store_true", help="the same as --format jsonl")
    p.set_defaults(func=_query)
