#!/usr/bin/env python3
"""rocketstore benchmarks, in the style of leveldb's db_bench.

Each named workload prints msgs/s and MB/s and its ratio against baselines measured in the
same run on the same data:
  file_write   a Python loop of f.write(body) on a buffered file (the bare-append floor)
  mmap_struct  Python mmap + struct.pack_into of a RocketMQ-like header + body slice copy

Messages are built before timing (1,024 distinct Message objects cycled, as db_bench
builds its values first); a Message caches its encoded properties and body CRC, so
``put_fresh`` also measures the realistic path of building a Message per put.

The headline (run first) is the realistic put path: a new ``Message`` per put, 100 B bodies,
the default StoreConfig (index and dispatch thread on, files not warmed), against a bare
f.write loop and lmdb (when installed: ``pip install lmdb``) in the same run, with the
targets of issue 11.

Usage: python tools/bench.py [--benchmarks=headline,put,put_batch,...] [--num=N] [--dir=DIR]
   or: rocketstore bench store [--quick] (python -m rocketstore.tools.bench store)
"""
from __future__ import annotations

import os

# numpy's OpenBLAS threads spin on start-up and steal a core on small machines
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import dataclasses
import mmap
import shutil
import struct
import sys
import tempfile
import time
import zlib
from typing import Callable

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.store._codec import body_crc  # noqa: E402

GiB = 1 << 30
POOL = 1024          # distinct messages cycled through
BATCH = 256          # messages per put_messages call
HEADLINE_BATCH = 1000   # the headline's batches, and lmdb's transactions
TOPIC = "BenchTopic"


class Result:
    def __init__(self, name: str, count: int, nbytes: int, seconds: float) -> None:
        self.name, self.count, self.nbytes, self.seconds = name, count, nbytes, seconds

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def mbps(self) -> float:
        return self.nbytes / self.seconds / 1e6


def timed(fn: Callable[[], tuple[int, int]]) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    count, nbytes = fn()
    return count, nbytes, time.perf_counter() - t0


# -- baselines ------------------------------------------------------------------------------

def baseline_file_write(workdir: str, bodies: list[bytes], num: int) -> Result:
    path = os.path.join(workdir, "baseline.append")
    with open(path, "wb") as f:
        w = f.write
        mask = POOL - 1

        def run():
            for i in range(num):
                w(bodies[i & mask])
            return num, num * len(bodies[0])
        count, nbytes, dt = timed(run)
    os.unlink(path)
    return Result("file_write", count, nbytes, dt)


def baseline_mmap_struct(workdir: str, bodies: list[bytes], num: int, record_size: int) -> Result:
    """What a pure-Python store would do: pack a header with struct, copy the body in."""
    path = os.path.join(workdir, "baseline.mmap")
    size = record_size * num + 4096
    with open(path, "w+b") as f:
        f.truncate(size)
        mm = mmap.mmap(f.fileno(), size)
        hdr = struct.Struct(">iiiiiqqiq")
        crcs = [zlib.crc32(b) & 0x7FFFFFFF for b in bodies]
        mask = POOL - 1

        def run():
            pos = 0
            pack = hdr.pack_into
            blen = len(bodies[0])
            for i in range(num):
                j = i & mask
                pack(mm, pos, record_size, -626843481, crcs[j], 0, 0, i, pos, 0, 0)
                mm[pos + 52:pos + 52 + blen] = bodies[j]
                pos += record_size
            return num, num * blen
        count, nbytes, dt = timed(run)
        mm.close()
    os.unlink(path)
    return Result("mmap_struct", count, nbytes, dt)


# -- rocketstore workloads ---------------------------------------------------------------------

def open_store(workdir: str, warm: bool, extent: int | None = None,
               crc: bool = True) -> MessageStore:
    root = tempfile.mkdtemp(prefix="store-", dir=workdir)
    cfg = StoreConfig(mapped_file_size_commit_log=GiB, warm_maped_file_enable=warm,
                      enabled_append_prop_crc=crc)
    if extent is not None:
        cfg = dataclasses.replace(cfg, allocation_extent=extent)
    store = MessageStore.open(root, cfg)
    # create (and warm) the first file and let the next one's pre-allocation finish, so
    # the timed part measures puts, not a one-off 1 GiB allocation
    store.put_message(Message(TOPIC, b"warm-up"))
    store.allocator.wait_idle(120)
    return store


def close_store(store: MessageStore) -> None:
    root = store.root
    store.close()
    shutil.rmtree(root, ignore_errors=True)
    os.sync()       # the next timed run should not pay for this one's writeback and deletion


def bench_put(store: MessageStore, msgs: list[Message], num: int) -> tuple[int, int]:
    put = store.put_message
    mask = POOL - 1
    for i in range(num):
        put(msgs[i & mask])
    return num, num * len(msgs[0].body)


def bench_put_batch(store: MessageStore, msgs: list[Message], num: int) -> tuple[int, int]:
    put = store.put_messages
    batches = [msgs[i:i + BATCH] for i in range(0, POOL, BATCH)]
    nb = len(batches)
    calls = num // BATCH
    for i in range(calls):
        put(batches[i % nb])
    return calls * BATCH, calls * BATCH * len(msgs[0].body)


def bench_put_fresh(store: MessageStore, bodies: list[bytes], num: int) -> tuple[int, int]:
    put = store.put_message
    mask = POOL - 1
    for i in range(num):
        put(Message(TOPIC, bodies[i & mask], tags="TagA"))
    return num, num * len(bodies[0])


# -- the headline: the realistic put path -----------------------------------------------------

def _headline_store(workdir: str, **overrides) -> MessageStore:
    """A store as a user opens it (default StoreConfig: index and dispatch thread on, files
    not warmed), after its first file exists and the next one's pre-allocation is done."""
    root = tempfile.mkdtemp(prefix="store-", dir=workdir)
    store = MessageStore.open(root, StoreConfig(**overrides))
    store.put_message(Message("HeadlineWarmUp", b"warm-up"))
    store.allocator.wait_idle(120)
    return store


def _wait_dispatched(store: MessageStore) -> None:
    while store.dispatch_behind_bytes() > 0:
        time.sleep(0.0005)


def headline_rocketstore(workdir: str, bodies: list[bytes], num: int, mode: str) -> dict[str, float]:
    """One run: ``num`` puts, each of a Message built in the loop; msgs/s when the last put
    returns, and (``_readable``) when consumers can see every message."""
    store = _headline_store(workdir)
    mask = POOL - 1
    try:
        t0 = time.perf_counter()
        if mode == "batch":
            put_batch = store.put_messages
            for s in range(0, num, HEADLINE_BATCH):
                put_batch([Message(TOPIC, bodies[i & mask]) for i in range(s, min(s + HEADLINE_BATCH, num))])
        else:
            put = store.put_message
            for i in range(num):
                put(Message(TOPIC, bodies[i & mask]))
        t_put = time.perf_counter() - t0
        _wait_dispatched(store)
        t_readable = time.perf_counter() - t0
        assert store.get_max_offset_in_queue(TOPIC, 0) == num
    finally:
        close_store(store)
    return {mode: num / t_put, mode + "_readable": num / t_readable}


def headline_file_write(workdir: str, bodies: list[bytes], num: int) -> dict[str, float]:
    """The bare-append floor: a buffered file, f.write of a 4-byte length then the body."""
    path = os.path.join(workdir, "headline.append")
    mask = POOL - 1
    with open(path, "wb") as f:
        w = f.write
        t0 = time.perf_counter()
        for i in range(num):
            b = bodies[i & mask]
            w(len(b).to_bytes(4, "big"))
            w(b)
        dt = time.perf_counter() - t0
    os.unlink(path)
    return {"file_write": num / dt}


def headline_lmdb(workdir: str, bodies: list[bytes], num: int) -> dict[str, float]:
    """lmdb as tools/bench_peers.py drives it: txn.put(append=True) with a write transaction
    per 1,000 puts, and cursor.putmulti of 1,000 prebuilt pairs per transaction; sync off."""
    import lmdb
    keys = [i.to_bytes(8, "big") for i in range(num)]
    mask = POOL - 1
    out = {}
    for mode in ("lmdb_txn", "lmdb_putmulti"):
        path = tempfile.mkdtemp(prefix="lmdb-", dir=workdir)
        env = lmdb.open(path, map_size=64 << 30, sync=False, metasync=False, max_spare_txns=16)
        items = [[(keys[i], bodies[i & mask]) for i in range(s, min(s + HEADLINE_BATCH, num))]
                 for s in range(0, num, HEADLINE_BATCH)] if mode == "lmdb_putmulti" else None
        t0 = time.perf_counter()
        if items is None:
            for s in range(0, num, HEADLINE_BATCH):
                with env.begin(write=True) as txn:
                    put = txn.put
                    for i in range(s, min(s + HEADLINE_BATCH, num)):
                        put(keys[i], bodies[i & mask], append=True)
        else:
            for batch in items:
                with env.begin(write=True) as txn:
                    txn.cursor().putmulti(batch, append=True)
        out[mode] = num / (time.perf_counter() - t0)
        env.close()
        shutil.rmtree(path, ignore_errors=True)
    return out


def bench_headline(workdir: str, num: int, repeat: int) -> None:
    """The realistic put path (issue 11): a new Message per put, 100 B bodies, default
    StoreConfig, against a bare f.write loop and lmdb in the same run. Rows interleave over
    ``repeat`` rounds (best kept), so a noisy moment does not fall on one row only."""
    try:
        import lmdb  # noqa: F401
        have_lmdb = True
    except ImportError:
        have_lmdb = False
    bodies = [os.urandom(100) for _ in range(POOL)]
    best: dict[str, float] = {}
    for _ in range(repeat):
        runs = [lambda: headline_file_write(workdir, bodies, num),
                lambda: headline_rocketstore(workdir, bodies, num, "thread"),
                lambda: headline_rocketstore(workdir, bodies, num, "batch")]
        if have_lmdb:
            runs.append(lambda: headline_lmdb(workdir, bodies, num))
        for run in runs:
            for k, v in run().items():
                best[k] = max(best.get(k, 0.0), v)
    load = os.getloadavg()[0]
    print(f"-- headline: a new Message per put, 100 B bodies, {num:,} puts, default StoreConfig "
          f"(index on, files not warmed); best of {repeat}, load average {load:.1f}")
    base = best["file_write"]
    lm, lmb = best.get("lmdb_txn"), best.get("lmdb_putmulti")
    rows = [("file_write", "f.write(len) + f.write(body) per message (baseline)", None),
            ("lmdb_txn", f"lmdb txn.put, a txn per {HEADLINE_BATCH:,} (baseline)", None),
            ("lmdb_putmulti", f"lmdb putmulti of {HEADLINE_BATCH:,} prebuilt pairs (baseline)", None),
            ("thread", "put_message(Message(...)), dispatch thread", "lmdb_txn"),
            ("thread_readable", "  ... until consumers see all", "lmdb_txn"),
            ("batch", f"put_messages([Message(...) x {HEADLINE_BATCH:,}]), dispatch thread", "lmdb_putmulti"),
            ("batch_readable", "  ... until consumers see all", "lmdb_putmulti")]
    for key, label, peer in rows:
        if key not in best:
            continue
        r = best[key]
        line = f"{label:58s} {r / 1e6:6.2f} M msgs/s"
        if peer is not None:
            line += f"   {r / base:5.2f}x f.write"
            if best.get(peer):
                line += f"  {r / best[peer]:5.2f}x {peer}"
        print(line)
    targets = [("one put per message >= 1.0x f.write", best["thread"] / base, 1.0)]
    if lm:
        targets.append(("one put per message >= 2x lmdb (txn per 1,000)", best["thread"] / lm, 2.0))
    if lmb:
        targets.append(("batched puts >= 4x lmdb putmulti", best["batch"] / lmb, 4.0))
    for label, ratio, want in targets:
        print(f"  target {label:54s} {ratio:5.2f}x  {'met' if ratio >= want else 'NOT met'}")
    print()


def bench_get_seq(store: MessageStore, offsets: list[int]) -> tuple[int, int]:
    look = store.look_message_by_offset
    n = 0
    for off in offsets:
        n += len(look(off).body)
    return len(offsets), n


def bench_get_batch(store: MessageStore, queues: int, per_queue: int) -> tuple[int, int]:
    """Pull every queue from 0 in calls of 32, touching each body (a zero-copy view)."""
    get = store.get_message
    n = nbytes = 0
    for q in range(queues):
        offset = 0
        while offset < per_queue:
            r = get("bench", TOPIC, q, offset, 32)
            for m in r.messages:
                nbytes += len(m.body)
            n += len(r.messages)
            offset = r.next_begin_offset
    return n, nbytes


def baseline_read_struct(bodies: list[bytes], num: int, record_size: int) -> Result:
    """Python reading the same records back: struct-unpack a header, slice the body."""
    blen = len(bodies[0])
    buf = bytearray(record_size * min(num, 200_000))
    hdr = struct.Struct(">iiiiiqqiq")
    for i in range(len(buf) // record_size):
        hdr.pack_into(buf, i * record_size, record_size, -626843481, 0, 0, 0, i, 0, 0, 0)
    mv = memoryview(buf)

    def run():
        n = nbytes = 0
        unpack = hdr.unpack_from
        pos = 0
        end = len(buf)
        while pos < end:
            size = unpack(mv, pos)[0]
            nbytes += len(mv[pos + 52:pos + 52 + blen])
            n += 1
            pos += size
        return n, nbytes
    count, nbytes, dt = timed(run)
    return Result("read_struct", count, nbytes, dt)


def bench_dispatch(workdir: str, msgs: list[Message], num: int) -> Result:
    """Put ``num`` messages in batches and wait until consumers can see all of them."""
    root = tempfile.mkdtemp(prefix="store-", dir=workdir)
    cfg = StoreConfig(mapped_file_size_commit_log=GiB, warm_maped_file_enable=True)
    store = MessageStore.open(root, cfg)
    try:
        store.put_message(Message(TOPIC, b"warm-up"), 1)
        store.allocator.wait_idle(120)
        batches = [msgs[i:i + BATCH] for i in range(0, POOL, BATCH)]
        calls = num // BATCH

        def run():
            put = store.put_messages
            for i in range(calls):
                put(batches[i % len(batches)], 0)
            while store.dispatch_behind_bytes() > 0:
                time.sleep(0.0005)
            return calls * BATCH, calls * BATCH * len(msgs[0].body)
        count, nbytes, dt = timed(run)
        assert store.get_max_offset_in_queue(TOPIC, 0) == calls * BATCH
    finally:
        close_store(store)
    return Result("dispatch_thread", count, nbytes, dt)


def bench_query_key(workdir: str, num_keys: int, queries: int) -> None:
    """key queries/s on an index holding ``num_keys`` keys, hits and misses."""
    import random
    root = tempfile.mkdtemp(prefix="store-", dir=workdir)
    cfg = StoreConfig(mapped_file_size_commit_log=GiB)
    with MessageStore.open(root, cfg) as store:
        body = os.urandom(100)
        for i in range(0, num_keys, BATCH):
            store.put_messages([Message(TOPIC, body, keys=[f"key-{j}"])
                                for j in range(i, min(i + BATCH, num_keys))], (i // BATCH) % 4)
        while store.dispatch_behind_bytes() > 0:
            time.sleep(0.01)
        rnd = random.Random(7)
        hits = [f"key-{rnd.randrange(num_keys)}" for _ in range(queries)]
        misses = [f"nokey-{rnd.randrange(num_keys)}" for _ in range(queries)]
        q = store.query_message
        for name, keys, want in (("query_key_hit", hits, 1), ("query_key_miss", misses, 0)):
            t0 = time.perf_counter()
            found = 0
            for k in keys:
                found += len(q(TOPIC, k))
            dt = time.perf_counter() - t0
            assert found == want * len(keys), (name, found)
            print(f"{name:14s} {len(keys) / dt / 1e3:8.1f} k queries/s  ({num_keys:,} keys indexed, "
                  f"{len(store.index_service.files)} index file(s))")
    shutil.rmtree(root, ignore_errors=True)


def bench_dispatch_index(workdir: str, num: int) -> None:
    """Dispatch throughput with and without index building (keys + UNIQ_KEY per message)."""
    rates = {}
    for index in (False, True):
        root = tempfile.mkdtemp(prefix="store-", dir=workdir)
        cfg = StoreConfig(mapped_file_size_commit_log=GiB, message_index_enable=index)
        with MessageStore.open(root, cfg) as store:
            body = os.urandom(100)
            msgs = [Message(TOPIC, body, keys=[f"key-{j}"]) for j in range(BATCH)]
            svc = store.dispatch_service
            with svc.lock:      # the dispatch thread waits: put now, dispatch timed below
                for i in range(num // BATCH):
                    store.commit_log.put_messages(msgs, i % 4)
                t0 = time.perf_counter()
                n = 0
                while True:
                    done = store.dispatch_core.dispatch(svc.bound(), 1 << 16, svc.follow)
                    if not done:
                        break
                    n += done
                rates[index] = n / (time.perf_counter() - t0)
        shutil.rmtree(root, ignore_errors=True)
    cost = 1 - rates[True] / rates[False]
    print(f"dispatch       {rates[False] / 1e6:8.2f} M records/s without index, "
          f"{rates[True] / 1e6:.2f} M with (2 keys each): index costs {cost * 100:.0f} % of dispatch")


def bench_put_sync(workdir: str, threads: int, seconds: float) -> None:
    """Sync flush: ``threads`` producers, one put_message each call, for ``seconds``; then
    batched sync against batched async puts."""
    import threading
    syncs = [0]
    for label, flush in (("put_sync", "SYNC_FLUSH"),):
        root = tempfile.mkdtemp(prefix="store-", dir=workdir)
        cfg = StoreConfig(mapped_file_size_commit_log=GiB, warm_maped_file_enable=True,
                          flush_disk_type=flush)
        store = MessageStore.open(root, cfg)
        store.put_message(Message(TOPIC, b"warm-up"))
        store.allocator.wait_idle(120)
        body = os.urandom(100)
        done = [0] * threads
        stop = threading.Event()

        def producer(t):
            m = Message(TOPIC, body)
            put = store.put_message
            n = 0
            while not stop.is_set():
                if put(m, t % 4).ok:
                    n += 1
            done[t] = n
        ts = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        syncs[0] = -store.commit_log.sync_count
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        syncs[0] += store.commit_log.sync_count     # rounds of the GIL-free group commit
        total = sum(done)
        print(f"{label:14s} {total / dt / 1e3:8.1f} k msgs/s  {threads} threads, 100 B, "
              f"{syncs[0]} msyncs: {total / max(syncs[0], 1):.1f} msgs per sync, "
              f"{syncs[0] / dt:.0f} syncs/s")
        close_store(store)
    rates = {}
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        root = tempfile.mkdtemp(prefix="store-", dir=workdir)
        cfg = StoreConfig(mapped_file_size_commit_log=GiB, warm_maped_file_enable=True,
                          flush_disk_type=flush)
        store = MessageStore.open(root, cfg)
        store.put_message(Message(TOPIC, b"warm-up"))
        store.allocator.wait_idle(120)
        msgs = [Message(TOPIC, os.urandom(100)) for _ in range(BATCH)]
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < seconds:
            store.put_messages(msgs, 0)
            n += BATCH
        rates[flush] = n / (time.perf_counter() - t0)
        close_store(store)
    print(f"put_batch_sync {rates['SYNC_FLUSH'] / 1e6:8.2f} M msgs/s  vs async "
          f"{rates['ASYNC_FLUSH'] / 1e6:.2f} M: {rates['SYNC_FLUSH'] / rates['ASYNC_FLUSH'] * 100:.0f} %"
          f" (one caller, batches of {BATCH}, each batch waits for its sync)")


def bench_recover(workdir: str, gib: float) -> None:
    """Abnormal recovery: CRC scan of ``gib`` GiB of commit log after a crash (abort file,
    zeroed checkpoint: every file is scanned), and the re-dispatch that follows."""
    root = tempfile.mkdtemp(prefix="store-", dir=workdir)
    cfg = StoreConfig(mapped_file_size_commit_log=256 << 20)
    body = os.urandom(1024)
    msgs = [Message(TOPIC, body) for _ in range(BATCH)]
    with MessageStore.open(root, cfg) as store:
        while store.get_max_phy_offset() < gib * GiB:
            store.put_messages(msgs, 0)
    open(os.path.join(root, "abort"), "w").close()
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(bytes(4096))
    os.sync()
    t0 = time.perf_counter()
    with MessageStore.open(root, cfg) as store:
        rec = store.recovery
    total = time.perf_counter() - t0
    print(f"recover        {rec['bytes_scanned'] / rec['scan_seconds'] / 1e9:8.2f} GB/s CRC scan of "
          f"{rec['bytes_scanned'] / 1e9:.2f} GB in {rec['files_scanned']} files; open with "
          f"re-dispatch of {rec['messages_redispatched']:,} records {total:.2f} s")
    shutil.rmtree(root, ignore_errors=True)


def bench_prop_crc(workdir: str, msgs: list[Message], num: int, rounds: int = 10) -> None:
    """The record CRC property's cost: put and put_messages into a store with it and one
    without, interleaved in short rounds so the machine's other load hits both alike."""
    stores = {crc: open_store(workdir, False, crc) for crc in (True, False)}
    spent = {(crc, k): 0.0 for crc in (True, False) for k in ("put", "put_batch")}
    per = max(BATCH, num // rounds)
    try:
        for _ in range(rounds):
            for crc, store in stores.items():
                spent[(crc, "put")] += timed(lambda: bench_put(store, msgs, per))[2]
                spent[(crc, "put_batch")] += timed(lambda: bench_put_batch(store, msgs, per))[2]
    finally:
        for store in stores.values():
            close_store(store)
    for k in ("put", "put_batch"):
        on, off = rounds * per / spent[(True, k)], rounds * per / spent[(False, k)]
        print(f"{k:14s} record CRC on {on / 1e6:6.2f} M msgs/s, off {off / 1e6:6.2f} M msgs/s: "
              f"{on / off:5.2f}x ({(off / on - 1) * 100:.0f} % more time per message)")


def bench_crc32(bodies: list[bytes], num: int) -> tuple[int, int]:
    mask = POOL - 1
    for i in range(num):
        body_crc(bodies[i & mask])
    return num, num * len(bodies[0])


WORKLOADS = {
    "headline": "the realistic put path: a new Message per put, defaults, vs f.write and lmdb",
    "put": "one put_message call per message, 100 B bodies",
    "put_batch": f"put_messages in batches of {BATCH}, 100 B bodies",
    "put_1k": "one put_message call per message, 1 KiB bodies",
    "put_batch_1k": f"put_messages in batches of {BATCH}, 1 KiB bodies, warmed files",
    "put_fresh": "a new Message built per put (tags set), 100 B bodies",
    "put_nocrc": "put without the record CRC property (enabled_append_prop_crc=False): its cost",
    "prop_crc": "record CRC on vs off, put and put_messages interleaved in rounds, 100 B",
    "put_batch_nocrc": f"put_messages in batches of {BATCH} without the record CRC property",
    "get_seq": "look_message_by_offset over every stored message, in order, 100 B",
    "crc32": "body CRC (zlib CRC-32) of 1 KiB bodies",
    "get_batch": "get_message 32 per call over 4 queues, zero-copy bodies touched, 100 B",
    "get_batch_1k": "get_message 32 per call over 4 queues, zero-copy bodies touched, 1 KiB",
    "get_batch_nocrc": "get_batch over records without the record CRC (body CRC checked), 100 B",
    "dispatch_thread": "put in batches until consume queues hold all (dispatch thread), 100 B",
    "tag_scan": "vectorized tag filter over 50 M consume-queue units at 1 % (tools/bench_scan.py)",
    "query_key": "query_message by key on an index of 1 M keys, hits and misses",
    "dispatch_index": "dispatch rate with and without index building",
    "put_sync": "sync flush: 64 producer threads one put each, and batched sync vs async",
    "recover": "abnormal recovery: CRC scan of 1 GiB of commit log, then re-dispatch",
}


def fmt(r: Result, baselines: list[Result]) -> str:
    ratios = "  ".join(f"{r.rate / b.rate:5.2f}x {b.name}" for b in baselines)
    return f"{r.name:14s} {r.rate / 1e6:8.2f} M msgs/s {r.mbps:9.1f} MB/s   {ratios}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmarks", default=",".join(WORKLOADS),
                    help="comma-separated workloads: " + ", ".join(WORKLOADS))
    ap.add_argument("--num", type=int, default=3_000_000, help="messages per 100 B workload")
    ap.add_argument("--num_1k", type=int, default=600_000, help="messages per 1 KiB workload")
    ap.add_argument("--num_headline", type=int, default=300_000, help="puts per headline run")
    ap.add_argument("--repeat", type=int, default=3, help="headline rounds (best kept)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir in /tmp)")
    ap.add_argument("--no-warm", action="store_true", help="do not warm mapped files")
    ap.add_argument("--extents", default=None,
                    help="comma-separated StoreConfig.allocation_extent values in bytes (0: whole "
                         "files, as RocketMQ); each put/get workload runs once per value, and "
                         "rows after the first show their ratio to the first (with --no-warm: "
                         "warmed files are allocated whole anyway)")
    args = ap.parse_args(argv)
    extents: list[int | None] = [int(x) for x in args.extents.split(",")] if args.extents else [None]
    names = [n for n in args.benchmarks.split(",") if n]
    for n in names:
        if n not in WORKLOADS:
            ap.error(f"unknown workload {n!r}; known: {', '.join(WORKLOADS)}")
    if "tag_scan" in names:
        # a workload of its own (1 GB of units in RAM, its own baselines): run it first
        from rocketstore.tools import bench_scan
        print("-- tag_scan (rocketstore.tools.bench_scan)")
        bench_scan.main([])
        print()
        names = [n for n in names if n != "tag_scan"]
    workdir = tempfile.mkdtemp(prefix="rocketstore-bench-", dir=args.dir)
    if "headline" in names:
        bench_headline(workdir, args.num_headline, args.repeat)
        names = [n for n in names if n != "headline"]
    if "recover" in names:
        print("-- recovery")
        bench_recover(workdir, 1.0)
        print()
        names = [n for n in names if n != "recover"]
    if "put_sync" in names:
        print("-- sync flush (group commit)")
        bench_put_sync(workdir, 64, 3.0)
        print()
        names = [n for n in names if n != "put_sync"]
    if "query_key" in names or "dispatch_index" in names:
        print("-- index")
        if "query_key" in names:
            bench_query_key(workdir, 1_000_000, 200_000)
        if "dispatch_index" in names:
            bench_dispatch_index(workdir, min(args.num, 2_000_000))
        print()
        names = [n for n in names if n not in ("query_key", "dispatch_index")]
    if "prop_crc" in names:
        print("-- record CRC property (enabled_append_prop_crc), 100 B bodies")
        bench_prop_crc(workdir, [Message(TOPIC, os.urandom(100)) for _ in range(POOL)],
                       min(args.num, 1_000_000))
        print()
        names = [n for n in names if n != "prop_crc"]
    warm = not args.no_warm
    print(f"rocketstore bench: {os.cpu_count()} cpus, work dir {workdir}, warm={warm}")
    for n in names:
        print(f"  {n:14s} {WORKLOADS[n]}")
    print()
    try:
        for size in (100, 1024):
            sized = [n for n in names if (n.endswith("_1k") or n == "crc32") == (size == 1024)]
            if not sized:
                continue
            num = args.num if size == 100 else args.num_1k
            bodies = [os.urandom(size) for _ in range(POOL)]
            msgs = [Message(TOPIC, b) for b in bodies]
            record = 91 + size + len(TOPIC) + 42
            baselines = [baseline_file_write(workdir, bodies, num),
                         baseline_mmap_struct(workdir, bodies, num, record)]
            print(f"-- {size} B bodies, {num:,} messages")
            for b in baselines:
                print(f"{b.name:14s} {b.rate / 1e6:8.2f} M msgs/s {b.mbps:9.1f} MB/s   (baseline)")
            for name in sized:
                if name == "crc32":
                    r = Result(name, *timed(lambda: bench_crc32(bodies, num)))
                    print(fmt(r, baselines))
                    continue
                if name.startswith("dispatch_"):
                    r = bench_dispatch(workdir, msgs, num)
                    print(fmt(r, baselines))
                    continue
                first: Result | None = None
                crc = not name.endswith("_nocrc")       # the record CRC property off
                for extent in extents:
                    r = run_store_workload(workdir, warm, extent, name.removesuffix("_nocrc"),
                                           msgs, bodies, num, record, baselines, crc)
                    if r is None:
                        continue
                    if not crc:
                        r.name += "_nocrc"
                    if extent is not None:
                        r.name = f"{name}@{extent >> 20}M" if extent else f"{name}@whole"
                    line = fmt(r, baselines)
                    if first is None:
                        first = r
                    else:
                        line += f"  {r.rate / first.rate:5.2f}x {first.name}"
                    print(line)
            print()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def run_store_workload(workdir: str, warm: bool, extent: int | None, name: str,
                       msgs: list[Message], bodies: list[bytes], num: int, record: int,
                       baselines: list[Result], crc: bool = True) -> Result | None:
    """One put/get workload in a fresh store; None when it printed its own line."""
    store = open_store(workdir, warm, extent, crc)
    try:
        if name in ("put", "put_1k"):
            r = Result(name, *timed(lambda: bench_put(store, msgs, num)))
        elif name in ("put_batch", "put_batch_1k"):
            r = Result(name, *timed(lambda: bench_put_batch(store, msgs, num)))
        elif name == "put_fresh":
            r = Result(name, *timed(lambda: bench_put_fresh(store, bodies, num)))
        elif name in ("get_batch", "get_batch_1k"):
            per_queue = num // 4
            for q in range(4):
                for j in range(per_queue // BATCH):
                    store.put_messages(msgs[(j * BATCH) % POOL:(j * BATCH) % POOL + BATCH], q)
            deadline = time.time() + 120
            while store.dispatch_behind_bytes() > 0 and time.time() < deadline:
                time.sleep(0.01)
            per_queue = (per_queue // BATCH) * BATCH
            r = Result(name if crc else name + "_nocrc",
                       *timed(lambda: bench_get_batch(store, 4, per_queue)))
            base = baseline_read_struct(bodies, num, record)
            print(fmt(r, baselines + [base]))
            return None
        elif name == "get_seq":
            res = store.put_messages(msgs[:BATCH])
            offsets = []
            for _ in range(num // BATCH):
                res = store.put_messages(msgs[:BATCH])
                offsets.extend(res.commitlog_offsets)
            r = Result(name, *timed(lambda: bench_get_seq(store, offsets)))
        else:
            raise AssertionError(name)
        return r
    finally:
        close_store(store)


if __name__ == "__main__":
    sys.exit(main())
