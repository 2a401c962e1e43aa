#!/usr/bin/env python3
"""One flush-policy experiment: one configuration in, one JSON line out.

Producer threads put messages of one size for a count or a duration into a fresh store
configured as asked; the line reports throughput, put latency percentiles (an HDR histogram:
exact to 3 significant digits over microseconds to minutes, which a sorted list of samples
cannot give cheaply under load), the syncs issued and bytes per sync, and the largest
unflushed window seen -- bytes and milliseconds at risk on a power loss -- sampled every
millisecond. The experiment sweeps (issue 6) run this unit once per grid point.

Example:
  python tools/flush_bench.py --flush SYNC_FLUSH --threads 16 --size 100 --duration 3
  python tools/flush_bench.py --flush SYNC_FLUSH --threads 1 --async-put --duration 3
  python tools/flush_bench.py --flush SYNC_FLUSH --threads 1 --async-put --batch 100 --duration 3
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hdrh.histogram import HdrHistogram  # noqa: E402

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402


def run(args: argparse.Namespace) -> dict:
    root = tempfile.mkdtemp(prefix="flush-bench-", dir=args.dir)
    cfg = StoreConfig(mapped_file_size_commit_log=args.file_size, flush_disk_type=args.flush,
                      flush_interval_commit_log=args.interval,
                      flush_commit_log_least_pages=args.least_pages,
                      flush_commit_log_thorough_interval=args.thorough_interval,
                      warm_maped_file_enable=args.warm, message_index_enable=False,
                      transient_store_pool_enable=args.transient_pool,
                      transient_store_pool_size=args.pool_size,
                      commit_interval_commit_log=args.commit_interval)
    store = MessageStore.open(root, cfg)
    store.put_message(Message("FlushBench", b"warm-up"))
    store.allocator.wait_idle(120)
    body = os.urandom(args.size)
    hists = [HdrHistogram(1, 60_000_000, 3) for _ in range(args.threads)]   # microseconds
    counts = [0] * args.threads
    stop = threading.Event()
    per_thread = args.count // args.threads if args.count else 0
    window = {"bytes": 0, "ms": 0.0, "uncommitted": 0}

    def producer(t: int) -> None:
        msg = Message("FlushBench", body)
        h = hists[t]
        n = 0
        clock = time.perf_counter_ns
        if args.batch > 1 and not args.async_put:   # put_messages of --batch; latency per call
            batch = [msg] * args.batch
            put_batch = store.put_messages
            while not stop.is_set() and (not per_thread or n < per_thread):
                t0 = clock()
                put_batch(batch, t % 8)
                h.record_value(max(1, (clock() - t0) // 1000))
                n += args.batch
            counts[t] = n
            return
        if args.async_put:
            # put_message(s)_async with up to --window futures in flight; latency (submit to
            # acknowledgement) is sampled on every 64th future by its completion callback
            from collections import deque
            inflight: deque = deque()
            put_async = store.put_messages_async if args.batch > 1 else store.put_message_async
            item = [msg] * args.batch if args.batch > 1 else msg
            step = max(1, args.batch)
            i = 0
            while not stop.is_set() and (not per_thread or n < per_thread):
                f = put_async(item, t % 8)
                if i & 63 == 0:
                    t0 = clock()
                    f.add_done_callback(lambda _f, t0=t0: h.record_value(max(1, (clock() - t0) // 1000)))
                i += 1
                inflight.append(f)
                if len(inflight) > args.window:
                    inflight.popleft().result()
                n += step
            for f in inflight:
                if not f.result().ok:
                    raise RuntimeError(f"put failed: {f.result()}")
            counts[t] = n
            return
        put = store.put_message
        while not stop.is_set() and (not per_thread or n < per_thread):
            t0 = clock()
            put(msg, t % 8)
            h.record_value(max(1, (clock() - t0) // 1000))
            n += 1
        counts[t] = n

    def monitor() -> None:
        # the age of the oldest unflushed byte: when did the log first reach past the
        # flushed offset? samples of (time, end of log), dropped once flushed
        from collections import deque
        cl = store.commit_log
        mfq = cl.mapped_file_queue
        samples: deque = deque()
        while not stop.wait(0.001):
            now = time.monotonic()
            last = mfq.last_file()
            # everything written counts, also what waits in the transient pool's buffers
            end = last.file_from_offset + last.wrote_pos if last is not None else 0
            window["uncommitted"] = max(window["uncommitted"], end - cl.get_max_offset())
            flushed = cl.flushed_where
            samples.append((now, end))
            while samples and samples[0][1] <= flushed:
                samples.popleft()
            window["bytes"] = max(window["bytes"], end - flushed)
            if samples:
                # the byte at `flushed` was written no later than the first sample past it
                window["ms"] = max(window["ms"], (now - samples[0][0]) * 1000)

    syncs0 = store.commit_log.sync_count + store.flush_service.syncs
    threads = [threading.Thread(target=producer, args=(t,)) for t in range(args.threads)]
    mon = threading.Thread(target=monitor)
    t0 = time.perf_counter()
    mon.start()
    for t in threads:
        t.start()
    if args.count:
        for t in threads:
            t.join()
    else:
        time.sleep(args.duration)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    mon.join()
    syncs = store.commit_log.sync_count + store.flush_service.syncs - syncs0
    pool = store.transient_pool
    commits = store.commit_service.rounds if store.commit_service is not None else 0
    fallback = pool.fallback_commits if pool is not None else 0
    written = sum(counts) * (91 + args.size + len("FlushBench") + 42)
    store.close()
    shutil.rmtree(root, ignore_errors=True)
    merged = hists[0]
    for h in hists[1:]:
        merged.add(h)
    total = sum(counts)
    return {
        "flush": args.flush, "threads": args.threads, "size": args.size, "batch": args.batch,
        "async_put": args.async_put,
        "interval_ms": args.interval, "least_pages": args.least_pages,
        "thorough_interval_ms": args.thorough_interval, "warm": args.warm,
        "file_size": args.file_size, "transient_pool": args.transient_pool,
        "pool_size": args.pool_size, "commit_interval_ms": args.commit_interval,
        "messages": total, "seconds": round(elapsed, 3),
        "msgs_per_s": round(total / elapsed, 1), "mb_per_s": round(written / elapsed / 1e6, 2),
        "latency_us": {"p50": merged.get_value_at_percentile(50),
                       "p99": merged.get_value_at_percentile(99),
                       "p99.9": merged.get_value_at_percentile(99.9),
                       "max": merged.get_max_value()},
        "syncs": syncs, "bytes_per_sync": round(written / syncs) if syncs else None,
        "unflushed_max_bytes": window["bytes"], "unflushed_max_ms": round(window["ms"], 1),
        # transient pool only: bytes a process crash would lose, commit rounds, and rolls
        # where the writer had to commit because every buffer was lent
        "uncommitted_max_bytes": window["uncommitted"], "commits": commits,
        "pool_fallback_commits": fallback, "pool_used": pool is not None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--batch", type=int, default=1,
                    help="messages per put_messages call (1: put_message per message)")
    ap.add_argument("--count", type=int, default=0, help="messages in all (0: use --duration)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds")
    ap.add_argument("--interval", type=int, default=500, help="flush_interval_commit_log ms")
    ap.add_argument("--least-pages", type=int, default=4)
    ap.add_argument("--thorough-interval", type=int, default=10_000)
    ap.add_argument("--transient-pool", action="store_true",
                    help="transient store pool (ASYNC_FLUSH only; ignored with SYNC_FLUSH)")
    ap.add_argument("--pool-size", type=int, default=5, help="transient_store_pool_size")
    ap.add_argument("--commit-interval", type=int, default=200, help="commit_interval_commit_log ms")
    ap.add_argument("--async-put", action="store_true",
                    help="put_message(s)_async: futures acknowledged by the flush, no thread "
                         "waiting per put (latency sampled on every 64th)")
    ap.add_argument("--window", type=int, default=10_000,
                    help="--async-put: futures in flight per thread")
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--file-size", type=int, default=1 << 30)
    ap.add_argument("--dir", default=None)
    print(json.dumps(run(ap.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
