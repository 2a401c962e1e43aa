"""The Spark source's wire read (``namesrv`` mode) without Spark: rows/s of one task's work.

    python tools/bench_spark_wire.py                 # 200 000 messages, 4 queues, 100-byte bodies
    python tools/bench_spark_wire.py --num 1000000 --pull-batch 32

Starts ``rocketstore namesrv`` and one ``rocketstore broker`` (temporary store, removed after),
sends the messages with a Producer (batches), then reads every queue, each way ``--repeat``
times interleaved (best kept):

- raw pulls: the same PULL_MESSAGE loop decoding the records to messages, no Arrow (the
  floor of any reader over the wire);
- wire: ``rocketstore.spark.wire.read_split`` (pulls, checks, Arrow RecordBatches);
- local: ``rocketstore.spark.scan.read_split`` on the broker's own store directory, opened
  read-only while the broker runs (the local source's task; no network).

Then writes ``--num`` rows again, each way ``--repeat`` times interleaved (best kept):

- raw sends: ``Producer.send_batch`` of prebuilt Messages, ``--write-batch`` a send;
- wire write: ``rocketstore.spark.wire_sink.WireWritePlan.send`` of Arrow batches (body, tags)
  as one task does it (rows to Messages, then the same batch sends).

Ratios are wire / raw pulls, wire / local and wire write / raw sends. The load average is
printed: the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    """A ``rocketstore`` server process and the address it prints once it listens."""
    p = subprocess.Popen([sys.executable, "-m", "rocketstore", *args], stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    assert p.stderr is not None
    for line in p.stderr:
        if line.startswith(f"rocketstore {args[0]}: listening on"):
            # keep draining stderr so a chatty server never blocks
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, line.strip().rsplit(" ", 1)[1]
    p.wait()
    raise RuntimeError(f"rocketstore {args[0]} did not start")


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    p.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num", type=int, default=200_000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--pull-batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-batch", type=int, default=128)
    a = ap.parse_args()

    from rocketstore.client import Message, Producer
    from rocketstore.common import MessageQueue
    from rocketstore.common.protocol import PullMessageRequest, ResponseCode
    from rocketstore.spark import scan, wire
    from rocketstore.store.paths import config_dir
    from rocketstore.store.topics import TopicConfig, TopicConfigManager

    tmp = tempfile.mkdtemp(prefix="bench_spark_wire_")
    procs = []
    try:
        store = os.path.join(tmp, "broker-a")
        topics = TopicConfigManager(config_dir(store))
        topics.update(TopicConfig("Bench", a.queues, a.queues))
        topics.update(TopicConfig("BenchW", a.queues, a.queues))
        conf = os.path.join(tmp, "broker.conf")
        with open(conf, "w") as f:
            f.write(f"mappedFileSizeCommitLog={64 << 20}\nmappedFileSizeConsumeQueue={300_000 * 20}\n")
        ns, ns_addr = _start(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                              os.path.join(tmp, "kv.json")])
        procs.append(ns)
        broker, _ = _start(["broker", store, "--namesrv", ns_addr, "--listen", "127.0.0.1:0",
                            "--broker-name", "broker-a", "-c", conf])
        procs.append(broker)
        opts = wire.WireOptions.from_options({"namesrv": ns_addr, "topics": "Bench",
                                              "pullBatchSize": str(a.pull_batch)})
        t = wire.open_transport(opts)
        try:
            deadline = time.monotonic() + 30
            while not wire.discover(t, opts):
                if time.monotonic() > deadline:
                    raise RuntimeError("the broker never registered the topic")
                time.sleep(0.1)
            body = b"x" * a.body
            t0 = time.perf_counter()
            with Producer("bench-pg", namesrv_addr=ns_addr) as p:
                for start in range(0, a.num, 256):
                    q = (start // 256) % a.queues
                    p.send_batch([Message("Bench", body, tags="T") for _ in range(min(256, a.num - start))],
                                 MessageQueue("Bench", "broker-a", q))
            print(f"sent {a.num} messages in {time.perf_counter() - t0:.1f} s")
            splits = wire.plan(opts, t)
            assert sum(s.end - s.start for s in splits) == a.num

            def raw() -> int:
                n = 0
                for s in splits:
                    off = s.start
                    while off < s.end:
                        r = t.pull_message(s.broker, PullMessageRequest(
                            opts.group, s.topic, s.queue_id, off, min(a.pull_batch, s.end - off),
                            sys_flag=wire.FLAG_SUBSCRIPTION, suspend_timeout_millis=0,
                            subscription="*")).result(30)
                        assert r.code == ResponseCode.SUCCESS
                        n += len(r.messages)
                        off = r.next_begin_offset
                return n

            def wired() -> int:
                return sum(b.num_rows for s in splits for b in wire.read_split(t, s, opts))

            sopts = scan.ScanOptions(topics=frozenset({"Bench"}))

            def local() -> int:
                with scan.open_reader(store, sopts) as st:
                    return sum(b.num_rows for sp in scan.plan(store, sopts, st)
                               for b in scan.read_split(st, sp, sopts))

            best: dict[str, float] = {}
            for _ in range(a.repeat):
                for name, fn in (("raw pulls", raw), ("wire", wired), ("local", local)):
                    t0 = time.perf_counter()
                    n = fn()
                    dt = time.perf_counter() - t0
                    assert n == a.num, (name, n)
                    best[name] = min(best.get(name, float("inf")), dt)

            import pyarrow as pa
            from pyspark.sql.types import BinaryType, StringType, StructField, StructType
            from rocketstore.spark.wire_sink import WireWritePlan
            plan = WireWritePlan({"namesrv": ns_addr, "topic": "BenchW",
                                  "batchSize": str(a.write_batch)},
                                 StructType([StructField("body", BinaryType()),
                                             StructField("tags", StringType())]))
            arrow = [pa.record_batch([pa.array([body] * n, pa.binary()), pa.array(["T"] * n)],
                                     names=["body", "tags"])
                     for n in [min(10_000, a.num - i) for i in range(0, a.num, 10_000)]]

            def raw_sends() -> int:
                with Producer("bench-pg", namesrv_addr=ns_addr) as p:
                    for start in range(0, a.num, a.write_batch):
                        p.send_batch([Message("BenchW", body, tags="T")
                                      for _ in range(min(a.write_batch, a.num - start))])
                return a.num

            def wire_write() -> int:
                return plan.send(iter(arrow)).rows

            for _ in range(a.repeat):
                for name, fn in (("raw sends", raw_sends), ("wire write", wire_write)):
                    t0 = time.perf_counter()
                    n = fn()
                    dt = time.perf_counter() - t0
                    assert n == a.num, (name, n)
                    best[name] = min(best.get(name, float("inf")), dt)
        finally:
            t.close()
        print(f"load average {os.getloadavg()[0]:.2f}; {a.num} rows, {a.queues} queues, "
              f"{a.body}-byte bodies, pullBatchSize {a.pull_batch}, best of {a.repeat}")
        for name, dt in best.items():
            print(f"  {name:10s} {a.num / dt:12,.0f} rows/s")
        print(f"  wire / raw pulls: {best['raw pulls'] / best['wire']:.2f}x the rate; "
              f"wire / local: {best['local'] / best['wire']:.3f}x the rate; "
              f"wire write / raw sends: {best['raw sends'] / best['wire write']:.2f}x the rate")
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
