"""Benchmark: rocketstore's broker over loopback, against Redis Streams measured in the same run.

Starts ``rocketstore namesrv`` and ``rocketstore broker`` as processes on a temporary store and
measures, with 100 B bodies:

  sync send, 1 thread          Producer.send from one thread (msgs/s, p50/p99 latency)
  sync send, 8 threads         the same from 8 threads
  batch send, 100 per call     Producer.send_batch
  push consume                 a PushConsumer with a 32-message batch listener draining the topic
  (C++ client)                 the same sync send and push consume through PyPI's rocketmq 0.4.4
  TCP echo (baseline)          100 B round trips to a Python echo process over loopback, one at
                               a time: the floor of any sync send from Python, always measured
  Redis Streams                redis-py: XADD one by one from 1 and 8 threads, pipelined XADD x100,
                               XREADGROUP + XACK in batches of 32 (a redis-server started on
                               127.0.0.1 with a temporary directory; rows skipped if it is absent)

and prints each row's rate, a sync row's ratio to the TCP echo floor, its ratio to the
matching Redis row and to Apache RocketMQ 4.9.8's
own broker with its Java client on this kind of machine (21 k/s sync 1 thread, 31 k/s 8 threads,
218 k/s batches of 100, 110-160 k/s push consume: the issue's targets), and the broker
process's CPU seconds (user + system, from /proc/<pid>/stat) per 100 k messages of the row: a
figure that compares across machines and loads better than a rate.

  python tools/bench_broker.py [--num 20000] [--flush ASYNC_FLUSH|SYNC_FLUSH] [--no-cpp] [--no-redis]
                               [--no-push] [--repo OTHER_CHECKOUT]
  rocketstore bench broker [--quick]     (python -m rocketstore.tools.bench broker)

``--repo`` runs the servers and the client from another checkout (e.g. main's, for a baseline
measured in the same session: alternate runs with and without it).

``--metrics-cost`` instead runs the rocketstore client rows against brokers with the metrics
counters off (``metricsEnable=false``) and on (counters plus a ``metricsPort`` endpoint),
alternating off/on/off/on on fresh stores, and prints each row's on/off ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rocketstore.tools.servers import REPO, start_broker, start_namesrv

TARGETS = {"sync1": 21_000, "sync8": 31_000, "batch": 218_000, "push": 110_000}
# the figures above are RocketMQ's under ASYNC_FLUSH: rows of another flush type show none
_compare_with = TARGETS
BODY = b"x" * 100


def pct(lat: list[float], p: float) -> float:
    if not lat:
        return float("nan")
    s = sorted(lat)
    return s[min(len(s) - 1, int(len(s) * p))] * 1e6


def timed_threads(n: int, fn: Callable[[], None]) -> float:
    """Run ``fn`` on ``n`` threads at once; the seconds until the last one ends."""
    ts = [threading.Thread(target=fn) for _ in range(n)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


_TICK = os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds (user + system) a process has used, from /proc/<pid>/stat."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/stat"

    def __call__(self) -> float:
        with open(self.path) as f:
            # the command name may hold spaces: fields counted after its closing parenthesis
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK     # utime, stime (fields 14, 15)


def cpu_per_100k(seconds: float, messages: float) -> str:
    return f"broker CPU {seconds / messages * 100_000:5.2f} s/100k" if messages else ""


def row(name: str, rate: float, base: float | None = None, target: str | None = None,
        extra: str = "", cpu: str = "", floor: float | None = None) -> None:
    parts = [f"{name:<34} {rate:>12,.0f} msgs/s"]
    if cpu:
        parts.append(cpu)
    if floor:
        parts.append(f"x{rate / floor:5.2f} vs TCP echo")
    if base:
        parts.append(f"x{rate / base:5.2f} vs Redis")
    if target and target in _compare_with:
        parts.append(f"x{rate / _compare_with[target]:5.2f} vs RocketMQ 4.9.8 "
                     f"({_compare_with[target]:,}/s)")
    if extra:
        parts.append(extra)
    print("  ".join(parts), flush=True)


# -- rocketstore client ---------------------------------------------------------------------

def ours(namesrv: str, n: int, topic: str, cpu: Callable[[], float] | None = None,
         push: bool = True) -> dict[str, float]:
    """The rocketstore client's rows; ``cpu`` (the broker's CPU seconds) adds ``<row>_cpu``,
    the broker's CPU seconds over each row."""
    from rocketstore.client import Message, Producer, PushConsumer
    from rocketstore.common import ConsumeConcurrentlyStatus
    out: dict[str, float] = {}
    meter = cpu or (lambda: 0.0)
    with Producer("bench-pg", namesrv_addr=namesrv) as p:
        for _ in range(200):
            p.send(Message(topic, BODY))
        lat: list[float] = []
        c0 = meter()
        t0 = time.perf_counter()
        for _ in range(n):
            a = time.perf_counter()
            p.send(Message(topic, BODY))
            lat.append(time.perf_counter() - a)
        out["sync1"] = n / (time.perf_counter() - t0)
        out["sync1_cpu"] = meter() - c0
        out["sync1_p50"], out["sync1_p99"] = pct(lat, .5), pct(lat, .99)

        per = n // 8

        def worker() -> None:
            for _ in range(per):
                p.send(Message(topic, BODY))
        c0 = meter()
        out["sync8"] = 8 * per / timed_threads(8, worker)
        out["sync8_cpu"] = meter() - c0
        batches = max(1, n * 5 // 100)
        c0 = meter()
        t0 = time.perf_counter()
        for _ in range(batches):
            p.send_batch([Message(topic, BODY) for _ in range(100)])
        out["batch"] = batches * 100 / (time.perf_counter() - t0)
        out["batch_cpu"] = meter() - c0
        out["n_sync1"], out["n_sync8"], out["n_batch"] = n, 8 * per, batches * 100
        total = 200 + n + 8 * per + batches * 100
    if not push:
        return out
    got = 0
    done = threading.Event()
    lock = threading.Lock()
    first: list[float] = []

    def listener(msgs, ctx):
        nonlocal got
        with lock:
            if not first:
                first.append(time.perf_counter())
            got += len(msgs)
            if got >= total:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer("bench-cg", namesrv_addr=namesrv,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     consume_message_batch_max_size=32)
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c0 = meter()
    t0 = time.perf_counter()
    c.start()
    done.wait(300)
    elapsed = time.perf_counter() - t0
    out["push_cpu"] = meter() - c0
    c.shutdown()
    out["push"] = got / elapsed
    out["push_total"] = got
    return out


# -- the floor: a request/response over loopback ---------------------------------------------

ECHO = textwrap.dedent("""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
""")


def echo_rate(n: int) -> float:
    """Round trips per second of 100 B to a Python echo server in another process over
    loopback, one at a time: what any sync send from Python costs at least (same run)."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            for _ in range(n):
                s.sendall(BODY)
                got = 0
                while got < len(BODY):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise ConnectionError("echo server closed")
                    got += len(chunk)
            return n / (time.perf_counter() - t0)
    finally:
        proc.kill()
        proc.wait()


# -- C++ client -----------------------------------------------------------------------------

CPP = textwrap.dedent("""
    import json, sys, threading, time
    from rocketmq.client import Producer, Message, PushConsumer
    namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = Producer("bench-cpp-pg")
    p.set_namesrv_addr(namesrv)
    p.start()
    def msg():
        m = Message(topic); m.set_body(b"x" * 100); return m
    for _ in range(100):
        p.send_sync(msg())
    lat = []
    t0 = time.perf_counter()
    for _ in range(n):
        a = time.perf_counter(); p.send_sync(msg()); lat.append(time.perf_counter() - a)
    sync1 = n / (time.perf_counter() - t0)
    print("sent", flush=True)       # the parent reads the broker's CPU, then lets us go on
    sys.stdin.readline()
    p.shutdown()
    lat.sort()
    got = [0]; done = threading.Event(); lock = threading.Lock(); total = n + 100
    def on_message(m):
        with lock:
            got[0] += 1
            if got[0] >= total:
                done.set()
    c = PushConsumer("bench-cpp-cg")
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, on_message)
    t0 = time.perf_counter()
    c.start()
    done.wait(300)
    push = got[0] / (time.perf_counter() - t0)
    c.shutdown()
    print(json.dumps({"sync1": sync1, "p50": lat[len(lat)//2] * 1e6,
                      "p99": lat[int(len(lat) * .99)] * 1e6, "push": push}), flush=True)
""")


def cpp(namesrv: str, n: int, topic: str, tmp: Path,
        cpu: Callable[[], float] | None = None) -> dict[str, float] | None:
    """The C++ client's rows, run in a child process; ``send_cpu``/``push_cpu``: the broker's
    CPU seconds over its sends (warm-up included) and over its push consume."""
    try:
        import rocketmq.client  # noqa: F401
    except (ImportError, OSError):
        return None
    script = tmp / "cpp_bench.py"
    script.write_text(CPP)
    meter = cpu or (lambda: 0.0)
    c0 = meter()
    proc = subprocess.Popen([sys.executable, str(script), namesrv, topic, str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp, env=dict(os.environ, HOME=str(tmp)))
    assert proc.stdin is not None and proc.stdout is not None
    first = proc.stdout.readline()
    c1 = meter()
    if first.strip() == "sent":
        proc.stdin.write("go\n")
        proc.stdin.flush()
    try:
        rest, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, err = proc.communicate()
    if proc.returncode != 0 or first.strip() != "sent":
        print("C++ client run failed:", (first + err)[-2000:], file=sys.stderr)
        return None
    out = json.loads(rest.strip().splitlines()[-1])
    out["send_cpu"], out["push_cpu"], out["n_send"] = c1 - c0, meter() - c1, n + 100
    return out


# -- Redis Streams --------------------------------------------------------------------------

def redis_rows(n: int, tmp: Path) -> dict[str, float] | None:
    exe = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        return None
    if exe is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp),
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        for _ in range(n):
            r.xadd("s", {"b": BODY})
        out["sync1"] = n / (time.perf_counter() - t0)
        per = n // 8

        def worker() -> None:
            rr = redis.Redis(port=port)
            for _ in range(per):
                rr.xadd("s", {"b": BODY})
        out["sync8"] = 8 * per / timed_threads(8, worker)
        batches = max(1, n * 5 // 100)
        t0 = time.perf_counter()
        for _ in range(batches):
            pipe = r.pipeline(transaction=False)
            for _ in range(100):
                pipe.xadd("s", {"b": BODY})
            pipe.execute()
        out["batch"] = batches * 100 / (time.perf_counter() - t0)
        total = r.xlen("s")
        r.xgroup_create("s", "g", id="0")
        got = 0
        t0 = time.perf_counter()
        while got < total:
            resp = r.xreadgroup("g", "c", {"s": ">"}, count=32)
            if not resp:
                break
            ids = [i for i, _ in resp[0][1]]
            r.xack("s", "g", *ids)
            got += len(ids)
        out["push"] = got / (time.perf_counter() - t0)
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def _rerun_from(repo: str, argv: list[str]) -> int:
    """``--repo``: this benchmark run again by another checkout's code (servers and client),
    with ``--repo`` left out; the other checkout needs ``rocketstore/tools``."""
    root = Path(repo).resolve()
    if not (root / "rocketstore" / "tools" / "bench_broker.py").is_file():
        print(f"--repo {repo}: no rocketstore/tools/bench_broker.py there (an older checkout: "
              f"run its tools/bench_broker.py)", file=sys.stderr)
        return 2
    i = argv.index("--repo")
    rest = argv[:i] + argv[i + 2:]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.call([sys.executable, "-m", "rocketstore.tools.bench_broker", *rest],
                           cwd=root, env=env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=20000)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--no-cpp", action="store_true")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--no-push", action="store_true", help="skip the push consume rows")
    ap.add_argument("--repo", help="run the servers and the client from this checkout instead")
    ap.add_argument("--metrics-cost", action="store_true",
                    help="compare brokers with metrics off and on (rocketstore rows only)")
    args = ap.parse_args(argv)
    if args.repo and Path(args.repo).resolve() != REPO:
        return _rerun_from(args.repo, argv)
    if args.metrics_cost:
        return metrics_cost(args.num, args.flush)
    tmp = Path(tempfile.mkdtemp(prefix="bench_broker_"))
    global _compare_with
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.num:,} "
          f"messages of 100 B; {args.flush}; code from {REPO}", flush=True)
    if args.flush != "ASYNC_FLUSH":
        _compare_with = {}
        print("(RocketMQ 4.9.8's figures are ASYNC_FLUSH ones: no ratio to them here)")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr, {"flushDiskType": args.flush})
    meter = CpuMeter(broker.proc.pid)
    try:
        red = None if args.no_redis else redis_rows(args.num, tmp)
        echo = echo_rate(args.num)
        mine = ours(ns.addr, args.num, "BenchT", meter, push=not args.no_push)
        rb = red or {}
        row("TCP echo, 1 thread (baseline)", echo, extra="100 B round trips to a Python echo "
            "process")
        row("rocketstore client, sync 1 thread", mine["sync1"], rb.get("sync1"), "sync1",
            f"p50 {mine['sync1_p50']:.0f} us, p99 {mine['sync1_p99']:.0f} us",
            cpu_per_100k(mine["sync1_cpu"], mine["n_sync1"]), floor=echo)
        row("rocketstore client, sync 8 threads", mine["sync8"], rb.get("sync8"), "sync8",
            cpu=cpu_per_100k(mine["sync8_cpu"], mine["n_sync8"]))
        row("rocketstore client, batch of 100", mine["batch"], rb.get("batch"), "batch",
            cpu=cpu_per_100k(mine["batch_cpu"], mine["n_batch"]))
        if "push" in mine:
            row("rocketstore client, push consume", mine["push"], rb.get("push"), "push",
                f"({mine['push_total']:,.0f} messages)",
                cpu_per_100k(mine["push_cpu"], mine["push_total"]))
        c = None if args.no_cpp else cpp(ns.addr, args.num // 2, "BenchCpp", tmp, meter)
        if c:
            row("C++ client, sync 1 thread", c["sync1"], rb.get("sync1"), "sync1",
                f"p50 {c['p50']:.0f} us, p99 {c['p99']:.0f} us",
                cpu_per_100k(c["send_cpu"], c["n_send"]), floor=echo)
            row("C++ client, push consume", c["push"], rb.get("push"), "push",
                cpu=cpu_per_100k(c["push_cpu"], c["n_send"]))
        else:
            print("C++ client rows skipped (rocketmq 0.4.4 not importable or it failed)")
        if red:
            for k, name in (("sync1", "XADD, 1 thread"), ("sync8", "XADD, 8 threads"),
                            ("batch", "pipelined XADD x100"), ("push", "XREADGROUP+XACK x32")):
                row(f"Redis Streams, {name}", red[k])
        else:
            print("Redis rows skipped (redis-server or redis-py missing)")
    finally:
        broker.stop()
        ns.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def metrics_cost(n: int, flush: str) -> int:
    """The send/consume rows with the broker's metrics off and on, two rounds each."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_metrics_"))
    print(f"load average {os.getloadavg()[0]:.2f}; {n:,} messages of 100 B; {flush}; "
          "metrics off vs on", flush=True)
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    try:
        for i, mode in enumerate(("off", "on", "off", "on")):
            (tmp / f"ns{i}").mkdir(exist_ok=True)
            ns = start_namesrv(tmp / f"ns{i}")
            conf = {"flushDiskType": flush, "metricsEnable": "false" if mode == "off" else "true"}
            if mode == "on":
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    conf["metricsPort"] = str(s.getsockname()[1])
            broker = start_broker(tmp / f"store{i}", ns.addr, conf)
            try:
                results[mode].append(ours(ns.addr, n, "BenchM"))
            finally:
                broker.stop()
                ns.stop()
                shutil.rmtree(tmp / f"store{i}", ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for key, name in (("sync1", "sync send, 1 thread"), ("sync8", "sync send, 8 threads"),
                      ("batch", "batch send, 100 per call"), ("push", "push consume")):
        off = max(r[key] for r in results["off"])
        on = max(r[key] for r in results["on"])
        print(f"{name:<28} off {off:>10,.0f}/s  on {on:>10,.0f}/s  on/off x{on / off:.3f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
