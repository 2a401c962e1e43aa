"""Benchmark: RocketMQ 5.x's Python client through ``rocketstore proxy``, against 4.x clients on
the same broker, same run.

Starts ``rocketstore namesrv`` + ``broker`` + ``proxy`` on a temporary store and measures, with
100 B bodies:

  5.x sync send           rocketmq-python-client Producer.send, one thread, through the proxy
  5.x async send          Producer.send_async, 64 in flight
  5.x simple consume      SimpleConsumer.receive(32, 30) + ack of each, until all are acked
  5.x ack latency         p50 / p99 of one SimpleConsumer.ack (an AckMessage round trip)
  4.x sync send (ours)    rocketstore.client.Producer.send over remoting, one thread
  4.x sync send (C++)     the C++ client (PyPI ``rocketmq``) over remoting, one thread

The 5.x client runs in its own venv (its package name clashes with the C++ binding's):
``--client-venv DIR`` (made and installed on first use).

  python tools/bench_grpc.py [--num 2000] [--client-venv ~/.cache/rocketstore/rmq5-venv]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

CLIENT = '''
import threading
N = int(os.environ["BENCH_N"])
p = Producer(CONFIG, ("BenchG",))
p.startup()
for _ in range(50):
    p.send(msg("BenchG", b"w" * 100))
t0 = time.perf_counter()
for _ in range(N):
    p.send(msg("BenchG", b"x" * 100))
sync = N / (time.perf_counter() - t0)
window = threading.Semaphore(64)
done = threading.Event()
left = [N]
lock = threading.Lock()
def finished(_):
    window.release()
    with lock:
        left[0] -= 1
        if left[0] == 0:
            done.set()
t0 = time.perf_counter()
for _ in range(N):
    window.acquire()
    p.send_async(msg("BenchG", b"y" * 100)).add_done_callback(finished)
done.wait(600)
asynchronous = N / (time.perf_counter() - t0)
p.shutdown()
total = 2 * N + 50
c = SimpleConsumer(CONFIG, "BenchCG", {"BenchG": FilterExpression("*")}, 5)
c.startup()
acks = []
got = 0
t0 = time.perf_counter()
while got < total:
    batch = c.receive(32, 30)
    if not batch:
        break
    for m in batch:
        a = time.perf_counter()
        c.ack(m)
        acks.append(time.perf_counter() - a)
    got += len(batch)
consume = got / (time.perf_counter() - t0)
c.shutdown()
acks.sort()
out(sync=sync, asynchronous=asynchronous, consume=consume, consumed=got,
    ack_p50=acks[len(acks) // 2] * 1e3, ack_p99=acks[int(len(acks) * .99)] * 1e3)
'''


def ours_sync(namesrv: str, topic: str, n: int) -> float:
    from rocketstore.client import Message, Producer
    with Producer("PG-bench-grpc", namesrv_addr=namesrv) as p:
        for _ in range(50):
            p.send(Message(topic, b"w" * 100))
        t0 = time.perf_counter()
        for _ in range(n):
            p.send(Message(topic, b"x" * 100))
        return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=2000)
    ap.add_argument("--client-venv", default=str(Path.home() / ".cache" / "rocketstore" /
                                                  "rocketmq-python-client-venv"))
    args = ap.parse_args()
    from rocketstore.tools.bench_broker import cpp
    from grpc_client import ClientVenv
    from rocketstore.remoting.admin_client import AdminClient
    from servers import ServerProcess, start_broker, start_namesrv
    venv = ClientVenv(Path(args.client_venv))
    venv.ensure()
    tmp = Path(tempfile.mkdtemp(prefix="bench-grpc-"))
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    proxy = None
    try:
        with AdminClient(ns.addr) as admin:
            for t in ("BenchG", "Bench4", "BenchCpp"):
                admin.update_topic(t, read_queue_nums=4, write_queue_nums=4,
                                   broker_addr=broker.addr)
        proxy = ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                               "--data-dir", str(tmp / "proxy")])
        r = venv.run(CLIENT, proxy.addr, tmp / "home", timeout=1800,
                     env={"BENCH_N": str(args.num)})
        ours = ours_sync(ns.addr, "Bench4", args.num)
        c = cpp(ns.addr, args.num, "BenchCpp", tmp)
    finally:
        for p in (proxy, broker, ns):
            if p is not None:
                p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'5.x sync send (proxy)':28} {r['sync']:10,.0f} msg/s")
    print(f"{'5.x async send (proxy)':28} {r['asynchronous']:10,.0f} msg/s")
    print(f"{'5.x simple consume + ack':28} {r['consume']:10,.0f} msg/s "
          f"({r['consumed']} messages)")
    print(f"{'5.x ack latency':28} p50 {r['ack_p50']:.2f} ms, p99 {r['ack_p99']:.2f} ms")
    print(f"{'4.x sync send (ours)':28} {ours:10,.0f} msg/s")
    if c is not None:
        print(f"{'4.x sync send (C++)':28} {c['sync1']:10,.0f} msg/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
