"""Benchmark: the broker's pull path over loopback, with the broker's CPU seconds.

Starts ``rocketstore namesrv`` and ``rocketstore broker`` as processes (from whatever
``rocketstore`` is first on ``PYTHONPATH``, so two trees can be compared run for run), fills a
topic with batches of 100, then measures:

  push consume        a PushConsumer with a 32-message batch listener draining the topic
  raw pull            one socket issuing PULL_MESSAGE (32 messages) on queue 0 back to back,
                      the answers read and counted (no client decoding)

Each row prints msgs/s, MB/s of records and the broker process's CPU seconds (user + system
from /proc/<pid>/stat) during the row, per 100 k messages; the load average is printed first.

  PYTHONPATH=$PWD python tools/bench_pull.py [--num 100000] [--body 100] [--fill-batch 100]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Server:
    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketstore", *args], cwd=cwd,
                                     stderr=subprocess.PIPE, text=True)
        prefix = f"rocketstore {args[0]}: listening on"
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith(prefix):
                self.addr = line.strip().rsplit(" ", 1)[1]
                break
        else:
            raise RuntimeError(f"{args[0]} did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def fill(namesrv: str, topic: str, n: int, body: bytes, batch: int) -> None:
    """``n`` messages in batches of ``batch`` (each batch lands in one queue: its records are
    adjacent in the commit log); ``batch`` 1 sends one by one from 8 threads, so a queue's
    records interleave with the other queues' as under sync sends."""
    from rocketstore.client import Message, Producer
    with Producer("bench-pull-pg", namesrv_addr=namesrv) as p:
        if batch > 1:
            for _ in range(n // batch):
                p.send_batch([Message(topic, body) for _ in range(batch)])
            return

        def worker() -> None:
            for _ in range(n // 8):
                p.send(Message(topic, body))
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def push_consume(namesrv: str, topic: str, total: int, pid: int) -> tuple[float, float]:
    from rocketstore.client import PushConsumer
    from rocketstore.common import ConsumeConcurrentlyStatus
    got = 0
    done = threading.Event()
    lock = threading.Lock()

    def listener(msgs, ctx):
        nonlocal got
        with lock:
            got += len(msgs)
            if got >= total:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer("bench-pull-cg", namesrv_addr=namesrv,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     consume_message_batch_max_size=32)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    c.start()
    done.wait(600)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    c.shutdown()
    return got / elapsed, cpu * 100_000 / max(got, 1)


def _frame(code: int, fields: dict[str, object], opaque: int) -> bytes:
    import json
    header = json.dumps({"code": code, "language": "JAVA", "version": 395, "flag": 0,
                         "opaque": opaque, "extFields": {k: str(v) for k, v in fields.items()}},
                        separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(header), len(header)) + header


def raw_pull(addr: str, topic: str, pid: int) -> tuple[float, float, float]:
    """PULL_MESSAGE on queue 0 until it is drained: (msgs/s, MB/s, CPU s per 100 k)."""
    import json
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = sock.makefile("rb")
    offset = msgs = nbytes = 0
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    while True:
        sock.sendall(_frame(11, {"consumerGroup": "bench-raw-cg", "topic": topic, "queueId": 0,
                                 "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 4,
                                 "commitOffset": 0, "suspendTimeoutMillis": 0,
                                 "subscription": "*", "subVersion": 0}, offset + 1))
        total, hlen = struct.unpack(">ii", f.read(8))
        hlen &= 0xFFFFFF
        header = json.loads(f.read(hlen))
        body = f.read(total - 4 - hlen)
        if header["code"] != 0:
            break
        pos = 0
        while pos < len(body):
            pos += struct.unpack_from(">i", body, pos)[0]
            msgs += 1
        nbytes += len(body)
        offset = int(header["extFields"]["nextBeginOffset"])
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    sock.close()
    return msgs / elapsed, nbytes / elapsed / 1e6, cpu * 100_000 / max(msgs, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=100, help="body size in bytes")
    ap.add_argument("--fill-batch", type=int, default=100,
                    help="messages per send when filling (1: one by one, records interleaved)")
    args = ap.parse_args()
    import rocketstore
    tmp = Path(tempfile.mkdtemp(prefix="bench_pull_"))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.num:,} messages of {args.body} B, "
          f"sent {args.fill_batch} per call; "
          f"rocketstore from {Path(rocketstore.__file__).parent.parent}", flush=True)
    ns = Server(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                 str(tmp / "kvConfig.json")], tmp)
    broker = Server(["broker", str(tmp / "store"), "--namesrv", ns.addr, "--listen",
                     "127.0.0.1:0"], tmp)
    try:
        body = b"x" * args.body
        per = 8 if args.fill_batch == 1 else args.fill_batch
        total = args.num // per * per
        fill(ns.addr, "BenchPull", args.num, body, args.fill_batch)
        time.sleep(1.0)
        rate, cpu = push_consume(ns.addr, "BenchPull", total, broker.proc.pid)
        print(f"{'push consume (32/listener)':<28} {rate:>10,.0f} msgs/s  "
              f"broker CPU {cpu:5.2f} s per 100 k", flush=True)
        rate, mbs, cpu = raw_pull(broker.addr, "BenchPull", broker.proc.pid)
        print(f"{'raw pull, queue 0, 32/pull':<28} {rate:>10,.0f} msgs/s  {mbs:7.1f} MB/s  "
              f"broker CPU {cpu:5.2f} s per 100 k", flush=True)
    finally:
        broker.stop()
        ns.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
