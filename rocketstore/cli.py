"""The ``rocketstore`` command (``python -m rocketstore``).

Subcommands so far:
  demo   write a realistic workload into a store directory, read it back, print figures
Errors print one line saying what was wrong and where, not a traceback.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

DEFAULT_STORE_DIR = os.path.join(".rocketstore", "demo")


def _demo(args: argparse.Namespace) -> int:
    from rocketstore import Message, MessageStore, StoreConfig

    rnd = random.Random(args.seed)
    topics = [f"Orders{i}" for i in range(args.topics)]
    tags = ["created", "paid", "shipped", "cancelled", "refunded"]
    payloads = [bytes(rnd.getrandbits(8) for _ in range(rnd.choice((64, 200, 512, 1024, 4096))))
                for _ in range(256)]
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size)
    t_open = time.perf_counter()
    with MessageStore.open(args.dir, cfg) as store:
        opened_ms = (time.perf_counter() - t_open) * 1000
        start = store.get_max_phy_offset()
        print(f"store {os.path.abspath(args.dir)}: opened in {opened_ms:.1f} ms, "
              f"{store.recovery['messages']:,} messages already stored, "
              f"commit log at offset {start:,}")
        # build the workload first: Message objects are what an application hands over
        t0 = time.perf_counter()
        msgs = []
        for i in range(args.messages):
            topic = topics[i % len(topics)]
            msgs.append(Message(topic, payloads[i % len(payloads)], tags=tags[i % len(tags)],
                                keys=[f"order-{i}"], properties={"region": "eu-west"}))
        build_s = time.perf_counter() - t0
        # half one call per message, half in batches of 64 per (topic, queue)
        half = args.messages // 2
        results = []
        t0 = time.perf_counter()
        for i in range(half):
            results.append(store.put_message(msgs[i], queue_id=i % args.queues))
        single_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        by_topic: dict[str, list] = {}
        for m in msgs[half:]:
            by_topic.setdefault(m.topic, []).append(m)
        batches = 0
        for topic, lst in by_topic.items():
            for j in range(0, len(lst), 64):
                results.append(store.put_messages(lst[j:j + 64], queue_id=batches % args.queues))
                batches += 1
        batch_s = time.perf_counter() - t0
        failed = [r for r in results if not r.ok]
        written = store.get_max_phy_offset() - start
        # read everything back through the commit log and check it against what was sent
        t0 = time.perf_counter()
        n_read = 0
        body_bytes = 0
        for m in store.iter_messages(start):
            n_read += 1
            body_bytes += len(m.body)
        read_s = time.perf_counter() - t0
        probe = results[len(results) // 3]
        found = store.look_message_by_id(probe.msg_id.split(",")[0])
        files = len(store.commit_log_queue.files)
        queues = store.commit_log.queue_offsets()
    total = args.messages
    print(f"built {total:,} messages in {build_s:.2f} s ({total / build_s / 1e6:.2f} M/s)")
    print(f"put   {half:,} one by one: {half / single_s / 1e6:.2f} M msgs/s; "
          f"{total - half:,} in {batches} batches: {(total - half) / batch_s / 1e6:.2f} M msgs/s; "
          f"{written / 1e6:.1f} MB written, {len(failed)} failed")
    print(f"read  {n_read:,} messages back in {read_s:.2f} s ({n_read / read_s / 1e6:.2f} M msgs/s, "
          f"{body_bytes / 1e6:.1f} MB of bodies)")
    print(f"lookup by id {probe.msg_id.split(',')[0]}: "
          f"{'found ' + found.topic + ' queue ' + str(found.queue_id) + ' offset ' + str(found.queue_offset) if found else 'NOT FOUND'}")
    print(f"commit log: {files} file(s) of {args.file_size:,} bytes; {len(queues)} topic-queues, "
          f"{sum(queues.values()):,} messages in all")
    ok = n_read == total and not failed and found is not None
    if not ok:
        print("demo: read-back did not match what was written", file=sys.stderr)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rocketstore", description="RocketMQ-compatible message store")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write a realistic workload, read it back, print figures")
    demo.add_argument("--dir", default=DEFAULT_STORE_DIR, help=f"store directory (default {DEFAULT_STORE_DIR})")
    demo.add_argument("--messages", type=int, default=1_000_000)
    demo.add_argument("--topics", type=int, default=4)
    demo.add_argument("--queues", type=int, default=4)
    demo.add_argument("--file-size", type=int, default=256 * 1024 * 1024,
                      help="commit-log file size in bytes (RocketMQ's default is 1 GiB)")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from rocketstore.errors import RocketStoreError
    try:
        return args.func(args)
    except (RocketStoreError, OSError) as e:
        print(f"rocketstore {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
