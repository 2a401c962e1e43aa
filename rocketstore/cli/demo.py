"""``rocketstore demo`` (alias ``bench``): the README's main job.

Writes a realistic workload into a store directory, reopens it (recovery), consumes every
queue, pulls one with a tag filter, looks a message up by id, and prints the figures.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

DEFAULT_STORE_DIR = os.path.join(".rocketstore", "demo")


def _demo(args: argparse.Namespace) -> int:
    import shutil

    from rocketstore import Message, MessageStore, StoreConfig

    rnd = random.Random(args.seed)
    topics = [f"Orders{i}" for i in range(args.topics)]
    tags = ["created", "paid", "shipped", "cancelled", "refunded"]
    payloads = [rnd.randbytes(rnd.choice((64, 128, 200, 512, 1024))) for _ in range(256)]
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size,
                      warm_maped_file_enable=True)
    if not args.keep and os.path.isdir(args.dir):
        shutil.rmtree(args.dir)
    total = args.messages
    with MessageStore.open(args.dir, cfg) as store:
        start = store.get_max_phy_offset()
        # build the workload first: Message objects are what an application hands over
        t0 = time.perf_counter()
        msgs = [Message(topics[i % len(topics)], payloads[i % len(payloads)],
                        tags=tags[i % len(tags)], keys=[f"order-{i}"],
                        properties={"region": "eu-west"})
                for i in range(total)]
        build_s = time.perf_counter() - t0
        # half one call per message, half in batches of 64 per (topic, queue)
        half = total // 2
        results = []
        # the first put creates (and warms) the first file: timed on its own
        t0 = time.perf_counter()
        results.append(store.put_message(msgs[0], queue_id=0))
        first_s = time.perf_counter() - t0
        store.allocator.wait_idle(60)
        t0 = time.perf_counter()
        for i in range(1, half):
            results.append(store.put_message(msgs[i], queue_id=i % args.queues))
        single_s = time.perf_counter() - t0
        by_topic: dict[str, list] = {}
        for m in msgs[half:]:
            by_topic.setdefault(m.topic, []).append(m)
        batches = 0
        t0 = time.perf_counter()
        for topic, lst in by_topic.items():
            for j in range(0, len(lst), 64):
                results.append(store.put_messages(lst[j:j + 64], queue_id=batches % args.queues))
                batches += 1
        batch_s = time.perf_counter() - t0
        failed = sum(not r.ok for r in results)
        written = store.get_max_phy_offset() - start
        probe_id = results[len(results) // 3].msg_id.split(",")[0]
    # reopen: the store recovers its end and queue offsets from the files alone
    t0 = time.perf_counter()
    with MessageStore.open(args.dir, cfg) as store:
        reopen_s = time.perf_counter() - t0
        # consume every queue from its start, as a consumer group pulling 32 at a time
        t0 = time.perf_counter()
        n_read = body_bytes = 0
        for topic in topics:
            for q in range(args.queues):
                offset = store.get_min_offset_in_queue(topic, q)
                while True:
                    r = store.get_message("demo-group", topic, q, offset, 32)
                    if not r.messages:
                        break
                    n_read += len(r.messages)
                    for m in r.messages:
                        body_bytes += len(m.body)
                    offset = r.next_begin_offset
                store.commit_offset("demo-group", topic, q, offset)
        read_s = time.perf_counter() - t0
        # a tag-filtered pull: only "paid" messages of one queue
        t0 = time.perf_counter()
        paid = 0
        offset = 0
        while True:
            r = store.get_message("demo-group", topics[0], 0, offset, 32, tags="paid")
            if not r.messages and r.next_begin_offset == offset:
                break
            paid += len(r.messages)
            offset = r.next_begin_offset
            if offset >= store.get_max_offset_in_queue(topics[0], 0):
                break
        paid_s = time.perf_counter() - t0
        found = store.look_message_by_id(probe_id)
        files = len(store.commit_log_queue.files)
        queues = store.consume_queues.max_offsets()
        recovery = store.recovery
    print(f"store {os.path.abspath(args.dir)}")
    print(f"built {total:,} messages in {build_s:.2f} s ({total / build_s / 1e6:.2f} M/s)")
    print(f"first put (creates and warms a {args.file_size >> 20} MiB commit-log file): "
          f"{first_s * 1000:.0f} ms")
    print(f"put   {half:,} one call each: {half / single_s / 1e6:.2f} M msgs/s; "
          f"{total - half:,} in {batches:,} batches: {(total - half) / batch_s / 1e6:.2f} M msgs/s; "
          f"{written / 1e6:.1f} MB written, {failed} failed")
    print(f"reopen: {reopen_s * 1000:.0f} ms ({recovery['files_scanned']} of {recovery['files']} commit-log "
          f"file(s) scanned, {recovery['messages_redispatched']} messages re-dispatched)")
    print(f"consume {n_read:,} messages with get_message (32 per call): {read_s:.2f} s "
          f"({n_read / read_s / 1e6:.2f} M msgs/s, {body_bytes / 1e6:.1f} MB of bodies)")
    print(f"tag-filtered pull of {topics[0]}/0 for 'paid': {paid:,} messages in "
          f"{paid_s * 1000:.0f} ms")
    where = (f"{found.topic} queue {found.queue_id} offset {found.queue_offset}"
             if found is not None else "NOT FOUND")
    print(f"lookup by id {probe_id}: {where}")
    print(f"{len(queues)} topic-queues, {sum(queues.values()):,} messages in all")
    ok = n_read == total and not failed and found is not None
    if not ok:
        print("demo: read-back did not match what was written", file=sys.stderr)
    if args.keep:
        print(f"kept {os.path.abspath(args.dir)} ({_disk_usage(args.dir) / 1e6:.0f} MB on disk)")
    else:
        used = _disk_usage(args.dir)
        shutil.rmtree(args.dir)
        parent = os.path.dirname(os.path.abspath(args.dir))
        if os.path.basename(parent) == ".rocketstore" and not os.listdir(parent):
            os.rmdir(parent)
        print(f"removed the demo store ({used / 1e6:.0f} MB on disk; --keep keeps it)")
    return 0 if ok else 1


def _disk_usage(root: str) -> int:
    """Bytes of disk the files under ``root`` take (allocated blocks, not lengths)."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512
               for d, _, files in os.walk(root) for f in files)


def register(sub) -> None:
    """Add ``demo`` (alias ``bench``): the README's main job."""
    demo = sub.add_parser("demo", aliases=["bench"],
                          help="write a realistic workload, read it back, print figures")
    demo.add_argument("--dir", default=DEFAULT_STORE_DIR, help=f"store directory (default {DEFAULT_STORE_DIR})")
    demo.add_argument("--messages", type=int, default=1_000_000)
    demo.add_argument("--topics", type=int, default=4)
    demo.add_argument("--queues", type=int, default=4)
    demo.add_argument("--file-size", type=int, default=256 * 1024 * 1024,
                      help="commit-log file size in bytes (RocketMQ's default is 1 GiB)")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--keep", action="store_true",
                      help="keep the store afterwards (and append to an existing one); by "
                           "default the demo removes what it wrote")
    demo.set_defaults(func=_demo)
