#!/usr/bin/env python3
"""Broker-side CPU per request on the remoting path, without sockets.

``python tools/bench_request_path.py [--num 30000] [--repeat 5]``

A real broker (in this process, defaults on, ASYNC_FLUSH) behind the server's real processor
chain (``RoutingProcessor`` → ``BrokerProcessor``) and a real ``Connection`` whose transport
only keeps what is written. Each row feeds pre-encoded frames to ``Connection.data_received``
one at a time, as the event loop would, and reports the calling thread's CPU µs per request
(best of ``--repeat``, so other load on the machine counts as little as possible). What the
rows leave out is the kernel's share (recv/send system calls) and uvloop's own C.

Rows (same run):
- ``frame split``: ``FrameDecoder.feed`` alone (the baseline: reading the frame).
- ``in-process send``: ``Broker.send_one`` of the same message (the broker's rules and the
  store's put, no remoting): what the wire path adds is the difference.
- ``SEND_MESSAGE_V2``: the whole path: frame, header, ACL hook (off), checks, put, answer
  encoded and written.
- ``SEND_BATCH_MESSAGE x32``: per message.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketstore import Message, StoreConfig  # noqa: E402
from rocketstore.broker.broker import Broker  # noqa: E402
from rocketstore.broker.config import BrokerConfig  # noqa: E402
from rocketstore.client.sending import stamp  # noqa: E402
from rocketstore.client.tcp import TcpTransport  # noqa: E402
from rocketstore.common.protocol import SendMessageRequest  # noqa: E402
from rocketstore.remoting.broker_processor import BrokerProcessor  # noqa: E402
from rocketstore.remoting.command import FrameDecoder  # noqa: E402
from rocketstore.remoting.connection import Connection  # noqa: E402
from rocketstore.remoting.executors import BrokerExecutors, RoutingProcessor  # noqa: E402


class _Sink:
    """A transport that keeps nothing but a count (the socket's place)."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def writelines(self, parts: list[bytes]) -> None:
        self.writes += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _frames(n: int, batch: int) -> list[bytes]:
    # stamped as a producer stamps them (UNIQ_KEY, WAIT): the properties every client sends
    msgs, _ = stamp([Message("Bench", b"x" * 100) for _ in range(batch)])
    req = SendMessageRequest("bench-pg", "Bench", 0, msgs, batch=batch > 1)
    cmd = TcpTransport._send_command(None, req)  # type: ignore[arg-type]
    out = []
    for i in range(n):
        cmd.opaque = i + 1
        out.append(cmd.encode())
    return out


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=30000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    n = args.num
    tmp = tempfile.mkdtemp(prefix="rs-reqpath-")
    bc = BrokerConfig()
    broker = Broker.open(tmp, bc, StoreConfig())
    ex = BrokerExecutors(bc)
    try:
        conn = Connection(RoutingProcessor(BrokerProcessor(broker, executor=ex.executor), ex))
        sink = _Sink()
        conn.transport = sink       # type: ignore[assignment]
        conn.peer = "127.0.0.1:40000"
        singles, batches = _frames(n, 1), _frames(max(1, n // 32), 32)
        conn.data_received(singles[0])
        assert sink.writes == 1, "the broker did not answer the first send"

        def split() -> None:
            d = FrameDecoder()
            for f in singles:
                d.feed(f)

        msg = Message("Bench", b"x" * 100)

        def local() -> None:
            for _ in range(n):
                broker.send_one("bench-pg", "Bench", 0, msg)

        def wire() -> None:
            for f in singles:
                conn.data_received(f)

        def wire_batch() -> None:
            for f in batches:
                conn.data_received(f)

        rows = [("frame split", _best(split, args.repeat) / n),
                ("in-process send", _best(local, args.repeat) / n),
                ("SEND_MESSAGE_V2", _best(wire, args.repeat) / n),
                ("SEND_BATCH_MESSAGE x32", _best(wire_batch, args.repeat) / (len(batches) * 32))]
        base = rows[1][1]
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {n:,} requests, "
              f"100 B bodies; thread CPU per message, best of {args.repeat}")
        for name, s in rows:
            print(f"{name:24s} {s * 1e6:8.2f} us   x{s / base:5.2f} vs in-process send")
    finally:
        ex.shutdown()
        broker.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
