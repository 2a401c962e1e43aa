#!/usr/bin/env python3
"""Instructions per message of the in-process send paths under callgrind (deterministic where
the machine's clock speed is not: compare trees with it, not with wall-clock rates).

Each row runs this script under ``valgrind --tool=callgrind`` twice, with 0 and with N sends
after the same setup (broker, producer, warm-up), and prints (instructions of the second -
the first) / messages. The count includes the store's dispatch thread (consume queue, index)
for those messages.

Rows: batch (``send_batch`` of 32 fresh-looking Messages, 100 B), one (``send``), async
(``send_async``, futures dropped), async-kept (``send_async``, every future kept, then
``result()`` of each).

Usage: python tools/callgrind_sends.py [--rows batch,one,async,async-kept] [--count N]
                                      [--tree DIR]
(``--tree``: the checkout measured, with its built modules; default this one)
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(row: str, n: int) -> None:
    import shutil

    from rocketstore import Message, StoreConfig
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.client import Producer
    tmp = tempfile.mkdtemp(prefix="cg_sends")
    b = Broker.open(tmp, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 30))
    pool = [Message("CgTopic", os.urandom(100)) for _ in range(1024)]
    batches = [pool[32 * i:32 * i + 32] for i in range(32)]
    try:
        with Producer("cg_pg", broker=b) as p:
            p.send(Message("CgTopic", b"warm"))
            for _ in range(3):          # every lane warm, every path taken once
                p.send_batch(batches[0])
                p.send(pool[0])
                p.send_async(pool[0]).result()
            if row == "batch":
                for i in range(n):
                    p.send_batch(batches[i & 31])
            elif row == "one":
                for i in range(n):
                    p.send(pool[i & 1023])
            elif row == "async":
                for i in range(n):
                    p.send_async(pool[i & 1023])
                p.flush()
            else:
                futs = [p.send_async(pool[i & 1023]) for i in range(n)]
                [f.result() for f in futs]
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)


def instructions(tree: str, row: str, n: int) -> int:
    env = dict(os.environ, PYTHONPATH=tree)
    with tempfile.NamedTemporaryFile(prefix="callgrind.") as out:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                        sys.executable, os.path.abspath(__file__), "--child", row, str(n)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env, cwd=tree)
        m = re.search(rb"^(?:summary|totals): (\d+)", open(out.name, "rb").read(), re.M)
        if m is None:
            raise SystemExit("callgrind wrote no totals")
        return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="batch,one,async,async-kept")
    ap.add_argument("--count", type=int, default=20000, help="messages per row")
    ap.add_argument("--tree", default=CHECKOUT, help="checkout to measure")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    for row in args.rows.split(","):
        per = 32 if row == "batch" else 1
        n = max(1, args.count // per)
        delta = instructions(args.tree, row, n) - instructions(args.tree, row, 0)
        print(f"{row:10s} {delta / (n * per):9,.0f} instructions per message "
              f"({n * per} messages)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
