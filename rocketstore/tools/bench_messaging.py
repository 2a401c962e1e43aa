#!/usr/bin/env python3
"""Messaging end to end: a producer and a push consumer group, against Redis Streams and the
raw store, in one run (issue 12 item 5).

Rows (100 B bodies unless --body):
  store put one      the raw store, the baseline of "send": MessageStore.put_message one
                     message at a time (no broker, no client)
  store bodies       the raw store, the baseline of the e2e rows: put_messages of --batch,
                     then get_message_bodies 32 at a time (one buffer per read, no
                     MessageExt)
  store put+get      the raw store: put_messages of --batch messages into --queues queues,
                     then get_message 32 at a time until all are read (the floor: no broker,
                     no client)
  e2e one-message    a producer thread sending (send_batch of --batch messages, round robin
                     over --queues queues) while a PushConsumer (CLUSTERING, 20 consume
                     threads) consumes with a listener that takes one message per call
                     (consume_message_batch_max_size=1); time from the first send to the
                     last message consumed
  e2e batch-32       the same with consume_message_batch_max_size=32
  e2e single-send    the batch-32 consumer with Producer.send per message (no send batching)
  drain one/32      the consumer alone: --count messages sent first (not timed), then a new
                     group consumes them from offset 0 with a one-message / 32-message
                     listener (shows what the client's consume side does without a producer
                     competing for the GIL)
  redis streams      Debian's redis-server on 127.0.0.1 (temp dir, no persistence, started
                     here): a producer thread pipelining XADD (--batch per pipeline), a
                     consumer group reader XREADGROUP COUNT 32 BLOCK and pipelined XACK;
                     skipped when redis-server is absent
  sync async-send    a SYNC_FLUSH broker: Producer.send_async per message with up to
                     --window futures in flight (every future completes once on disk)

Every row has the process's CPU seconds per 100 k messages (getrusage: user + system of
all threads, over the row's timed span), comparable across machines where msgs/s is not;
the load average is printed first.

A warm-up pass runs first, untimed (a store-bodies row of --count messages, thrown away;
--no-warmup skips it): on a VM the first few hundred MB a run writes after a quiet spell cost
about twice what later writes do (fresh guest memory the host must back; later rows reuse
pages the earlier ones freed), so without it the first row -- a baseline -- came out about
half as fast as the same row run again, and every ratio to it was flattered.

End-to-end latency per message = consume time - born timestamp (the store stamps the born
time at put, ms resolution); p50/p99 over all messages. Ratios are rocketstore / peer of the
same run. The machine is shared: figures move with other load.

Usage: python tools/bench_messaging.py [--count N] [--body B] [--rows a,b,..]
   or: rocketstore bench messaging [--quick] (python -m rocketstore.tools.bench messaging)
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.client import (ConsumeConcurrentlyStatus, Producer,  # noqa: E402
                                PushConsumer)

TOPIC = "BenchTopic"
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pct(values: list[int], p: float) -> float:
    """``values`` sorted ascending."""
    if not values:
        return float("nan")
    return float(values[min(len(values) - 1, int(len(values) * p))])


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Row:
    def __init__(self, name: str, count: int, seconds: float, lat: list[int] | None = None,
                 note: str = "", cpu: float = float("nan")) -> None:
        self.name, self.count, self.seconds, self.note = name, count, seconds, note
        self.cpu = cpu
        lat = sorted(lat) if lat else []
        self.p50 = pct(lat, 0.50)
        self.p99 = pct(lat, 0.99)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")

    @property
    def cpu_per_100k(self) -> float:
        return self.cpu / self.count * 100_000 if self.count else float("nan")


def store_config(args: argparse.Namespace, sync: bool = False) -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024,
                       flush_disk_type="SYNC_FLUSH" if sync else "ASYNC_FLUSH")


def bodies(n: int, size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(n)]


# -- raw store ----------------------------------------------------------------------------------

def put_batches(store: MessageStore, args: argparse.Namespace) -> None:
    """``args.count`` new Messages (as a user builds them) in ``put_messages`` calls of
    ``args.batch``, round robin over the queues: the put half of the store baselines."""
    pool = bodies(1024, args.body)
    sent = q = 0
    while sent < args.count:
        n = min(args.batch, args.count - sent)
        store.put_messages([Message(TOPIC, pool[(sent + i) & 1023]) for i in range(n)],
                           queue_id=q % args.queues)
        q += 1
        sent += n


def bench_store(args: argparse.Namespace, tmp: str) -> Row:
    path = os.path.join(tmp, "raw")
    with MessageStore.open(path, store_config(args)) as store:
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        put_batches(store, args)
        got = 0
        offsets = [0] * args.queues
        while got < args.count:
            progressed = False
            for qid in range(args.queues):
                r = store.get_message("bench", TOPIC, qid, offsets[qid], 32)
                if r.messages:
                    got += len(r.messages)
                    offsets[qid] = r.next_begin_offset
                    progressed = True
            if not progressed:
                time.sleep(0.001)      # dispatch catching up
        dt = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
    shutil.rmtree(path, ignore_errors=True)
    return Row("store put+get", args.count, dt, note=f"put_messages x{args.batch}, get x32",
               cpu=cpu)


def bench_store_put_one(args: argparse.Namespace, tmp: str) -> Row:
    """The floor under ``Producer.send``: ``put_message`` of one message at a time."""
    pool = bodies(1024, args.body)
    path = os.path.join(tmp, "raw_one")
    n = args.sync_count
    with MessageStore.open(path, store_config(args)) as store:
        put = store.put_message
        queues = args.queues
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        for i in range(n):
            put(Message(TOPIC, pool[i & 1023]), i % queues)     # a new Message per put
        dt = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
    shutil.rmtree(path, ignore_errors=True)
    return Row("store put one", n, dt, note="put_message(Message(...)) x1 (baseline of send)", cpu=cpu)


def bench_store_bodies(args: argparse.Namespace, tmp: str) -> Row:
    """The floor under the e2e rows: batched puts, then reads of bodies in one buffer."""
    path = os.path.join(tmp, "raw_bodies")
    with MessageStore.open(path, store_config(args)) as store:
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        put_batches(store, args)
        got = 0
        offsets = [0] * args.queues
        while got < args.count:
            progressed = False
            for qid in range(args.queues):
                r = store.get_message_bodies(TOPIC, qid, offsets[qid], 32)
                k = len(r)
                if k:
                    got += k
                    offsets[qid] = r.next_begin_offset
                    progressed = True
            if not progressed:
                time.sleep(0.001)
        dt = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
    shutil.rmtree(path, ignore_errors=True)
    return Row("store bodies", args.count, dt, note=f"put_messages x{args.batch}, "
               f"get_message_bodies x32 (baseline of e2e)", cpu=cpu)


# -- rocketstore end to end ---------------------------------------------------------------------

def open_broker(path: str, args: argparse.Namespace, sync: bool = False):  # noqa: ANN201
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    return Broker.open(path, BrokerConfig(), store_config(args, sync))


def bench_e2e(args: argparse.Namespace, tmp: str, name: str, consume_batch: int,
              send_batch: bool) -> Row:
    path = os.path.join(tmp, name.replace(" ", "_"))
    broker = open_broker(path, args)
    done = threading.Event()
    lat: list[int] = []
    first_send = [0.0]
    first_cpu = [0.0]

    def listener(msgs, ctx):  # noqa: ANN001, ANN202
        # no lock: list.extend is atomic under the GIL, and a listener lock shared by the
        # consume threads would measure its own contention, not the client's
        t = now_ms()
        lat.extend([t - m.born_timestamp for m in msgs])
        if len(lat) >= args.count:
            done.set()
        return OK

    pool = bodies(1024, args.body)      # a new Message per send, as an application sends
    try:
        with Producer("bench_pg", broker=broker, default_topic_queue_nums=args.queues) as p:
            p.send(Message(TOPIC, b"warm"))       # creates the topic with --queues queues
            c = PushConsumer("bench_cg", broker=broker,
                             consume_from_where="CONSUME_FROM_LAST_OFFSET",
                             consume_message_batch_max_size=consume_batch,
                             pull_batch_size=32)
            c.subscribe(TOPIC, "*")
            c.register_message_listener(listener)
            c.start()
            deadline = time.monotonic() + 30
            while len(c.assignment(TOPIC)) < args.queues and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)                       # first pulls parked at the queue heads

            def produce() -> None:
                first_send[0] = time.perf_counter()
                first_cpu[0] = cpu_seconds()
                sent = 0
                i = 0
                while sent < args.count:
                    if send_batch:
                        n = min(args.batch, args.count - sent)
                        p.send_batch([Message(TOPIC, pool[(i + k) & 1023]) for k in range(n)])
                    else:
                        n = 1
                        p.send(Message(TOPIC, pool[i & 1023]))
                    i += n
                    sent += n
            t = threading.Thread(target=produce, name="bench-producer")
            t.start()
            finished = done.wait(args.timeout)
            dt = time.perf_counter() - first_send[0]
            cpu = cpu_seconds() - first_cpu[0]
            t.join()
            c.shutdown()
    finally:
        broker.close()
        shutil.rmtree(path, ignore_errors=True)
    note = (f"send_batch x{args.batch}" if send_batch else "send per message") + \
        f", listener x{consume_batch}"
    if not finished:
        note += f", TIMED OUT with {len(lat)} consumed"
    return Row(name, len(lat), dt, lat, note, cpu=cpu)


def bench_drain(args: argparse.Namespace, tmp: str, name: str, consume_batch: int) -> Row:
    path = os.path.join(tmp, name.replace(" ", "_"))
    broker = open_broker(path, args)
    done = threading.Event()
    counts: list[int] = []

    def listener(msgs, ctx):  # noqa: ANN001, ANN202
        counts.append(len(msgs))          # no lock: see bench_e2e
        if len(counts) * consume_batch >= args.count and sum(counts) >= args.count:
            done.set()
        return OK

    pool = bodies(1024, args.body)
    try:
        with Producer("bench_pg", broker=broker, default_topic_queue_nums=args.queues) as p:
            sent = 0
            while sent < args.count:
                n = min(args.batch, args.count - sent)
                p.send_batch([Message(TOPIC, pool[(sent + k) & 1023]) for k in range(n)])
                sent += n
        c = PushConsumer("bench_drain", broker=broker,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         consume_message_batch_max_size=consume_batch)
        c.subscribe(TOPIC, "*")
        c.register_message_listener(listener)
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        c.start()
        finished = done.wait(args.timeout)
        dt = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
        c.shutdown()
    finally:
        broker.close()
        shutil.rmtree(path, ignore_errors=True)
    note = f"pre-filled, listener x{consume_batch}" + ("" if finished else ", TIMED OUT")
    return Row(name, sum(counts), dt, note=note, cpu=cpu)


def bench_sync_async_send(args: argparse.Namespace, tmp: str) -> Row:
    path = os.path.join(tmp, "sync")
    broker = open_broker(path, args, sync=True)
    pool = bodies(1024, args.body)
    n = args.sync_count
    window = threading.Semaphore(args.window)
    done = threading.Event()
    acked = [0]
    errors = [0]
    lock = threading.Lock()

    def on_done(f) -> None:  # noqa: ANN001
        window.release()
        with lock:
            if f.exception() is not None:
                errors[0] += 1
            acked[0] += 1
            if acked[0] == n:
                done.set()
    try:
        with Producer("bench_sync_pg", broker=broker, default_topic_queue_nums=args.queues) as p:
            p.send(Message(TOPIC, b"warm"))
            t0 = time.perf_counter()
            c0 = cpu_seconds()
            for i in range(n):
                window.acquire()
                p.send_async(Message(TOPIC, pool[i & 1023])).add_done_callback(on_done)
            done.wait(args.timeout)
            dt = time.perf_counter() - t0
            cpu = cpu_seconds() - c0
    finally:
        broker.close()
        shutil.rmtree(path, ignore_errors=True)
    note = f"SYNC_FLUSH, window {args.window}"
    if errors[0]:
        note += f", {errors[0]} failed"
    return Row("sync async-send", acked[0], dt, note=note, cpu=cpu)


def bench_send_modes(args: argparse.Namespace, tmp: str) -> tuple[Row, Row]:
    path = os.path.join(tmp, "modes")
    broker = open_broker(path, args)
    pool = bodies(1024, args.body)
    n = args.sync_count
    try:
        with Producer("bench_modes_pg", broker=broker, default_topic_queue_nums=args.queues) as p:
            p.send(Message(TOPIC, b"warm"))
            t0 = time.perf_counter()
            c0 = cpu_seconds()
            for i in range(n):          # a new Message per send, as an application sends
                p.send(Message(TOPIC, pool[i & 1023]))
            t_send = time.perf_counter() - t0
            c_send = cpu_seconds() - c0
            t0 = time.perf_counter()
            c0 = cpu_seconds()
            futs = [p.send_async(Message(TOPIC, pool[i & 1023])) for i in range(n)]
            failed = sum(1 for f in futs if f.exception(args.timeout) is not None)
            t_async = time.perf_counter() - t0
            c_async = cpu_seconds() - c0
    finally:
        broker.close()
        shutil.rmtree(path, ignore_errors=True)
    note = "ASYNC_FLUSH, no consumer" + (f", {failed} failed" if failed else "")
    return (Row("send", n, t_send, note="Producer.send one by one, " + note, cpu=c_send),
            Row("async-send", n, t_async, note=note, cpu=c_async))


# -- Redis Streams ------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of another process (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_redis(args: argparse.Namespace, tmp: str) -> Row | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    import redis
    port = _free_port()
    rdir = tempfile.mkdtemp(prefix="redis-", dir=tmp)
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
                             "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(200):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        r.xgroup_create("bench", "g", id="$", mkstream=True)
        payload = bodies(1024, args.body)
        n = args.redis_count
        lat: list[int] = []
        got = [0]
        t_first = [0.0]

        def produce() -> None:
            pr = redis.Redis(port=port)
            t_first[0] = time.perf_counter()
            sent = 0
            i = 0
            while sent < n:
                k = min(args.batch, n - sent)
                pipe = pr.pipeline(transaction=False)
                ts = str(now_ms()).encode()
                for j in range(k):
                    pipe.xadd("bench", {b"b": payload[(i + j) & 1023], b"t": ts})
                pipe.execute()
                i += k
                sent += k

        def consume() -> None:
            cr = redis.Redis(port=port)
            while got[0] < n:
                res = cr.xreadgroup("g", "c1", {"bench": ">"}, count=32, block=1000)
                if not res:
                    continue
                entries = res[0][1]
                t = now_ms()
                pipe = cr.pipeline(transaction=False)
                ids = []
                for eid, fields in entries:
                    lat.append(t - int(fields[b"t"]))
                    ids.append(eid)
                pipe.xack("bench", "g", *ids)
                pipe.execute()
                got[0] += len(entries)
        c0 = cpu_seconds() + proc_cpu(proc.pid)
        ct = threading.Thread(target=consume)
        ct.start()
        pt = threading.Thread(target=produce)
        pt.start()
        pt.join()
        ct.join(args.timeout)
        dt = time.perf_counter() - t_first[0]
        cpu = cpu_seconds() + proc_cpu(proc.pid) - c0
        return Row("redis streams", got[0], dt, lat,
                   f"XADD pipelined x{args.batch}, XREADGROUP x32, XACK pipelined "
                   f"(CPU: clients + server)", cpu=cpu)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(rdir, ignore_errors=True)


# -- main -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--redis-count", type=int, default=None)
    ap.add_argument("--sync-count", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32, help="messages per send_batch / pipeline")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--window", type=int, default=4096, help="async sends in flight")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--rows", default="storeone,storebodies,store,one,batch32,single,drain1,"
                                       "drain32,redis,modes,sync",
                    help="comma list of: storeone storebodies store one batch32 single "
                         "drain1 drain32 redis modes sync")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the untimed first pass (see the module's docstring)")
    args = ap.parse_args(argv)
    args.redis_count = args.redis_count or args.count
    rows = set(args.rows.split(","))
    tmp = tempfile.mkdtemp(prefix="bench-msg-", dir=args.dir)
    out: dict[str, Row | None] = {}
    print("load average %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    try:
        if not args.no_warmup:
            warm = bench_store_bodies(args, tmp)
            print(f"warm-up (not a row): {warm.rate:,.0f} msgs/s", flush=True)
        if "storeone" in rows:
            out["storeone"] = bench_store_put_one(args, tmp)
        if "storebodies" in rows:
            out["storebodies"] = bench_store_bodies(args, tmp)
        if "store" in rows:
            out["store"] = bench_store(args, tmp)
        if "one" in rows:
            out["one"] = bench_e2e(args, tmp, "e2e one-message", 1, True)
        if "batch32" in rows:
            out["batch32"] = bench_e2e(args, tmp, "e2e batch-32", 32, True)
        if "single" in rows:
            out["single"] = bench_e2e(args, tmp, "e2e single-send", 32, False)
        if "drain1" in rows:
            out["drain1"] = bench_drain(args, tmp, "drain one-message", 1)
        if "drain32" in rows:
            out["drain32"] = bench_drain(args, tmp, "drain batch-32", 32)
        if "redis" in rows:
            out["redis"] = bench_redis(args, tmp)
        if "modes" in rows:
            out["send"], out["async"] = bench_send_modes(args, tmp)
        if "sync" in rows:
            out["sync"] = bench_sync_async_send(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    print(f"{'row':18} {'msgs':>9} {'msgs/s':>11} {'CPU s/100k':>10} {'p50 ms':>7} "
          f"{'p99 ms':>7}  note")
    for key, r in out.items():
        if r is None:
            print(f"{'redis streams':18} {'-':>9} {'skipped':>11}  redis-server not installed")
            continue
        print(f"{r.name:18} {r.count:9d} {r.rate:11,.0f} {r.cpu_per_100k:10.2f} {r.p50:7.0f} "
              f"{r.p99:7.0f}  {r.note}")
    redis_row = out.get("redis")
    store_row = out.get("store")
    bodies_row = out.get("storebodies")
    print()
    for key in ("one", "batch32", "single", "drain1", "drain32"):
        r = out.get(key)
        if r is None:
            continue
        parts = []
        if redis_row is not None:
            parts.append(f"{r.rate / redis_row.rate:.2f}x redis streams")
        if bodies_row is not None:
            parts.append(f"{r.rate / bodies_row.rate:.2f}x raw store bodies")
        if store_row is not None:
            parts.append(f"{r.rate / store_row.rate:.2f}x raw store put+get")
        print(f"{r.name:18} " + ", ".join(parts))
    if out.get("send") is not None and out.get("storeone") is not None:
        print(f"{'send':18} {out['send'].rate / out['storeone'].rate:.2f}x raw store put one")
    if out.get("send") is not None and out.get("async") is not None:
        print(f"{'async-send':18} {out['async'].rate / out['send'].rate:.2f}x send")
    return 0


if __name__ == "__main__":
    sys.exit(main())
