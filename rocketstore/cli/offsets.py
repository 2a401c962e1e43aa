"""``rocketstore offsets show`` and ``offsets reset``: a consumer group's committed offsets
(``config/consumerOffset.json``, docs/format.md §10).

show opens the store read-only and prints each committed offset beside its queue's min and
max and the lag. reset takes the store's lock (a running writer would overwrite the file with
its own table) and commits, per queue: a given offset, the earliest or latest, or the offset of
a store time with RocketMQ's boundary rule (LOWER: first message stored at or after it; UPPER:
last message stored at or before it). Offsets are clamped into [min, max] of each queue.
"""
from __future__ import annotations

import argparse
import json
import sys

from rocketstore.cli._common import (CommandError, add_store_options, fmt_ts, open_store,
                                     parse_time, table)
from rocketstore.cli.lookup import topic_queues


def _show(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        rows = []
        for key, queues in sorted(store.consumer_offset_manager.table().items()):
            topic, _, group = key.partition("@")
            if (args.group and group != args.group) or (args.topic and topic != args.topic):
                continue
            for q, off in sorted(queues.items()):
                lo = store.get_min_offset_in_queue(topic, q)
                hi = store.get_max_offset_in_queue(topic, q)
                rows.append((group, topic, q, off, lo, hi, max(0, hi - max(off, lo))))
    if not rows:
        what = " ".join(x for x in (f"group {args.group}" if args.group else "",
                                    f"topic {args.topic}" if args.topic else "") if x)
        raise CommandError(f"{args.store}: no committed offsets{' for ' + what if what else ''}")
    headers = ("group", "topic", "queue", "offset", "min", "max", "lag")
    if args.json:
        _json(rows, headers)
    else:
        table(rows, headers)
    return 0


def _json(rows: list, headers: tuple[str, ...]) -> None:
    """The table's rows as one JSON array of objects (header names as keys)."""
    keys = [h.replace(" ", "_") for h in headers]
    json.dump([dict(zip(keys, r)) for r in rows], sys.stdout, indent=2)
    print()


def _reset(args: argparse.Namespace) -> int:
    targets = [x is not None and x is not False
               for x in (args.to_offset, args.to_time, args.to_earliest or None, args.to_latest or None)]
    if sum(targets) != 1:
        raise CommandError("give exactly one of --to-offset, --to-time, --to-earliest, --to-latest")
    ts = parse_time(args.to_time, "--to-time") if args.to_time is not None else None
    with open_store(args, read_only=False) as store:
        queues = topic_queues(store, args.topic, args.queue)
        rows = []
        for q in queues:
            lo = store.get_min_offset_in_queue(args.topic, q)
            hi = store.get_max_offset_in_queue(args.topic, q)
            if args.to_offset is not None:
                new = args.to_offset
            elif args.to_earliest:
                new = lo
            elif args.to_latest:
                new = hi
            else:
                new = store.get_offset_in_queue_by_time(args.topic, q, ts, args.boundary)
            new = min(max(new, lo), hi)
            old = store.query_offset(args.group, args.topic, q)
            at = store.get_message_store_timestamp(args.topic, q, new) if new < hi else -1
            if not args.dry_run:
                store.commit_offset(args.group, args.topic, q, new)
            rows.append((args.group, args.topic, q, old if old >= 0 else None, new, lo, hi,
                         fmt_ts(at) if at > 0 else "(end)"))
    headers = ("group", "topic", "queue", "old", "new", "min", "max", "new offset stored")
    if args.json:
        _json(rows, headers)
    else:
        table(rows, headers)
    if args.dry_run:
        print("dry run: nothing committed", file=sys.stderr if args.json else sys.stdout)
    return 0


def register(sub) -> None:
    p = sub.add_parser("offsets", help="show or reset a consumer group's offsets")
    osub = p.add_subparsers(dest="offsets_command", required=True, metavar="ACTION")
    s = osub.add_parser("show", help="committed offsets, queue min/max and lag")
    add_store_options(s)
    s.add_argument("--group", help="only this consumer group")
    s.add_argument("--topic", help="only this topic")
    s.add_argument("--json", action="store_true", help="print one JSON array")
    s.set_defaults(func=_show)

    r = osub.add_parser("reset", help="commit new offsets for a group on a topic")
    add_store_options(r)
    r.add_argument("--group", required=True, help="the consumer group whose offsets move")
    r.add_argument("--topic", required=True, help="the topic whose queues move")
    r.add_argument("--queue", type=int, help="only this queue (default every queue of the topic)")
    r.add_argument("--to-offset", type=int, help="this queue offset (clamped into min..max)")
    r.add_argument("--to-time", metavar="TIME", help="the offset of this store time: ms since "
                                                    "the epoch or ISO 8601")
    r.add_argument("--boundary", choices=("LOWER", "UPPER"), default="LOWER",
                   help="with --to-time: LOWER = first message at or after, UPPER = last at or "
                        "before (default LOWER)")
    r.add_argument("--to-earliest", action="store_true", help="each queue's min offset")
    r.add_argument("--to-latest", action="store_true", help="each queue's max offset (skip all)")
    r.add_argument("--dry-run", action="store_true", help="show what would be committed")
    r.add_argument("--json", action="store_true", help="print one JSON array")
    r.set_defaults(func=_reset)
