"""Speed of ``rocketstore verify`` against baselines measured in the same run.

Builds a store of N messages (or uses ``--dir``), then times over the same files:

  walk          _verify.walk_file over every commit-log file, CRC on (verify's scan)
  recovery      CommitLog.scan_file(check_crc=True): recovery's scan, no columns, no listing
  zlib          zlib.crc32 over every byte of the files: the raw cost of reading and CRC-ing
  python        iter_messages + zlib.crc32(body) == body_crc per message: a Python verifier
  verify        the whole command in-process (walk + consume-queue and index cross-checks)

and prints messages/s, GB/s of records and each one's time as a multiple of the walk's.

    python tools/bench_verify.py --num 1000000
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
import zlib
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.store._verify import walk_file  # noqa: E402
from rocketstore.cli import main  # noqa: E402
from rocketstore.cli._common import detect_config  # noqa: E402


def build(root: str, n: int) -> None:
    cfg = StoreConfig(mapped_file_size_commit_log=128 << 20)
    bodies = [os.urandom(s) for s in (64, 128, 256, 512, 1024)]
    with MessageStore.open(root, cfg) as store:
        for start in range(0, n, 64):       # batches of 64, one topic and queue each
            b = start // 64
            batch = [Message(f"T{b % 4}", bodies[i % 5], tags=f"tag{i % 7}", keys=[f"k{i}"])
                     for i in range(start, min(start + 64, n))]
            assert store.put_messages(batch, b % 8).ok


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=1_000_000)
    ap.add_argument("--dir", help="an existing store to measure (default: build one)")
    args = ap.parse_args()
    tmp = None
    root = args.dir
    if root is None:
        tmp = tempfile.mkdtemp(prefix="bench_verify.")
        root = os.path.join(tmp, "store")
        print(f"building {args.num:,} messages in {root} ...", flush=True)
        build(root, args.num)
    try:
        store = MessageStore.open(root, detect_config(root), read_only=True)
        files = store.commit_log_queue.files
        count = 0
        size = 0

        def walk() -> None:
            nonlocal count, size
            topics: dict[bytes, int] = {}
            count = size = 0
            for mf in files:
                recs, _, problems, end, _ = walk_file(mf, True, topics)
                assert not problems
                count += len(recs)
                size += end

        def recovery() -> None:
            for mf in files:
                store.commit_log.scan_file(mf, True, False)

        def raw_crc() -> None:
            for mf in files:
                v = mf.view(0, mf.file_size)
                zlib.crc32(v)
                v.release()

        def python() -> None:
            for m in store.iter_messages():
                # RocketMQ keeps the CRC as crc32 & 0x7FFFFFFF (UtilAll.crc32)
                if zlib.crc32(m.stored_body) & 0x7FFFFFFF != m.body_crc:
                    raise AssertionError(m.commitlog_offset)

        results = {}
        for name, fn in (("walk", walk), ("recovery", recovery), ("zlib", raw_crc),
                         ("python", python)):
            timed(fn)                               # warm the page cache and the code
            results[name] = min(timed(fn) for _ in range(3))
        store.close()

        def verify() -> None:
            with redirect_stdout(io.StringIO()) as out:
                rc = main(["verify", root])
            assert rc == 0, out.getvalue()
        results["verify"] = min(timed(verify) for _ in range(2))
        base = results["walk"]
        print(f"{count:,} messages, {size / 1e6:.1f} MB of records in {len(files)} file(s)")
        for name, s in results.items():
            print(f"{name:9s} {s * 1000:8.1f} ms  {count / s / 1e6:6.2f} M msgs/s  "
                  f"{size / s / 1e9:5.2f} GB/s  {s / base:5.2f}x the walk's time" if name != "walk"
                  else f"{name:9s} {s * 1000:8.1f} ms  {count / s / 1e6:6.2f} M msgs/s  "
                       f"{size / s / 1e9:5.2f} GB/s")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main_()
