"""Benchmark: one NameServer with one broker against the same with two, and a broker crash.

Starts ``rocketstore namesrv`` and ``rocketstore broker`` processes (tests/cluster_support.py)
on temporary stores and measures, with 100 B bodies:

  sync send, N threads     Producer.send over a topic on broker-a only, then over one spread on
                           broker-a and broker-b (4 queues each): msgs/s and the ratio 2 : 1
  kill -9 mid-stream       one thread sending while broker-b is killed: the longest gap between
                           two SEND_OKs, sends that raised, and the attempts after the kill that
                           still went to the dead broker, with send_latency_fault_enable off
                           (RocketMQ's default) and on

  python tools/bench_cluster.py [--seconds 5] [--threads 8] [--flush SYNC_FLUSH|ASYNC_FLUSH]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from cluster_support import Cluster  # noqa: E402

from rocketstore.client import Message, Producer  # noqa: E402
from rocketstore.errors import RocketStoreError  # noqa: E402

BODY = b"x" * 100


def send_rate(namesrv: str, topic: str, threads: int, seconds: float) -> float:
    """Messages per second of ``threads`` threads sending sync for ``seconds``."""
    counts = [0] * threads
    stop = threading.Event()
    with Producer("bench-cluster", namesrv_addr=namesrv) as p:
        for _ in range(50):
            p.send(Message(topic, BODY))           # routes and connections warm

        def loop(i: int) -> None:
            while not stop.is_set():
                p.send(Message(topic, BODY))
                counts[i] += 1
        ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        start = time.perf_counter()
        for t in ts:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        return sum(counts) / (time.perf_counter() - start)


def crash_run(tmp: Path, conf: dict[str, str], fault: bool, seconds: float) -> dict[str, float]:
    """Send from one thread, kill -9 broker-b after ``seconds``/2; figures of the outage."""
    c = Cluster(tmp, ["broker-a", "broker-b"], conf=conf)
    c.create_topic("BC", {"broker-a": 4, "broker-b": 4})
    try:
        c.start()
        c.wait_route("BC", {"broker-a": 4, "broker-b": 4})
        ok_times: list[float] = []
        raised = 0
        kill_at = [0.0]
        with Producer("bench-crash", namesrv_addr=c.namesrv_addr,
                      send_latency_fault_enable=fault) as p:
            sends = p.transport.send_message
            to_dead = [0]

            def counting(broker_name, request, timeout_ms=3000):  # noqa: ANN001, ANN202
                if kill_at[0] and broker_name == "broker-b":
                    to_dead[0] += 1
                return sends(broker_name, request, timeout_ms)
            p.transport.send_message = counting           # type: ignore[method-assign]
            end = time.monotonic() + seconds
            killer = threading.Timer(seconds / 2, lambda: (c.kill("broker-b"),
                                                           kill_at.__setitem__(0, time.monotonic())))
            killer.start()
            while time.monotonic() < end:
                try:
                    p.send(Message("BC", BODY))
                    ok_times.append(time.monotonic())
                except RocketStoreError:
                    raised += 1
            killer.join()
        gaps = [b - a for a, b in zip(ok_times, ok_times[1:]) if b > kill_at[0] - 1]
        return {"max_gap_ms": max(gaps) * 1000 if gaps else float("nan"), "raised": raised,
                "attempts_to_dead": to_dead[0], "sent": len(ok_times)}
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--flush", default="SYNC_FLUSH", choices=["SYNC_FLUSH", "ASYNC_FLUSH"])
    args = ap.parse_args()
    conf = {"flushDiskType": args.flush, "mappedFileSizeCommitLog": str(64 << 20)}
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        c = Cluster(tmp / "rate", ["broker-a", "broker-b"], conf=conf)
        c.create_topic("ONE", {"broker-a": 8})
        c.create_topic("TWO", {"broker-a": 4, "broker-b": 4})
        try:
            c.start()
            c.wait_route("ONE", {"broker-a": 8})
            c.wait_route("TWO", {"broker-a": 4, "broker-b": 4})
            one = send_rate(c.namesrv_addr, "ONE", args.threads, args.seconds)
            two = send_rate(c.namesrv_addr, "TWO", args.threads, args.seconds)
        finally:
            c.stop()
        print(f"sync send, {args.threads} threads, {args.flush}")
        print(f"  1 broker   {one:10,.0f} msgs/s")
        print(f"  2 brokers  {two:10,.0f} msgs/s   ratio 2:1 = {two / one:.2f}")
        print(f"kill -9 of broker-b mid-stream (1 thread, {args.seconds:.0f} s, {args.flush})")
        for fault in (False, True):
            r = crash_run(tmp / f"crash-{fault}", conf, fault, args.seconds)
            print(f"  send_latency_fault_enable={str(fault):5}  SEND_OK {r['sent']:6}  raised "
                  f"{r['raised']}  attempts to the dead broker {r['attempts_to_dead']:4}  "
                  f"longest gap {r['max_gap_ms']:.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
