"""Benchmark: what plain ACL costs the broker, against the same broker without it, same run.

Starts two ``rocketstore namesrv`` + ``rocketstore broker`` pairs on temporary stores, one broker
with ``aclEnable=false`` and one with ``aclEnable=true`` (one account), and measures with
100 B bodies:

  sync send, 1 thread     Producer.send from one thread: unsigned to the plain broker, signed
                          (access_key/secret_key) to the ACL broker
  sync send, 8 threads    the same from 8 threads

and, in this process, the per-request cost of ``PlainAccessValidator.check`` on a signed
SEND_MESSAGE_V2 frame next to the cost of decoding that frame (``decode_frame``), the work every
request costs anyway. Each row prints the ACL figure, the baseline and their ratio.

  python tools/bench_acl.py [--num 5000]
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

ACL_YML = """
accounts:
  - accessKey: BenchKey1
    secretKey: BenchSecret1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def send_rate(namesrv: str, topic: str, n: int, threads: int, **creds: str) -> float:
    from rocketstore.client import Message, Producer
    with Producer(f"PG-bench-{threads}", namesrv_addr=namesrv, **creds) as p:
        p.send(Message(topic, b"w" * 100))          # route + topic creation out of the timing
        per = n // threads

        def work() -> None:
            for _ in range(per):
                p.send(Message(topic, b"x" * 100))
        ts = [threading.Thread(target=work) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return per * threads / (time.perf_counter() - t0)


def micro(n: int) -> tuple[float, float]:
    """(µs per check, µs per frame decode) for a signed 100 B SEND_MESSAGE_V2."""
    from rocketstore.acl import PlainAccessValidator, SessionCredentials
    from rocketstore.common.codes import RequestCode
    from rocketstore.remoting.command import RemotingCommand, decode_frame
    tmp = Path(tempfile.mkdtemp(prefix="bench-acl-"))
    try:
        (tmp / "plain_acl.yml").write_text(ACL_YML)
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "BenchTopic", "c": "TBW102", "d": 4, "e": 1, "f": 0,
            "g": 1700000000000, "h": 0, "i": "KEYS\x01k\x02TAGS\x01t\x02", "j": 0, "k": False,
            "l": 16, "m": False}, b"x" * 100)
        SessionCredentials("BenchKey1", "BenchSecret1").sign(cmd.ext_fields, cmd.body)
        frame = cmd.encode()[4:]
        req = decode_frame(frame)
        with PlainAccessValidator(str(tmp / "plain_acl.yml"), watch=False) as v:
            assert v.check(req, "127.0.0.1:5000") is None
            t0 = time.perf_counter()
            for _ in range(n):
                v.check(req, "127.0.0.1:5000")
            check_us = (time.perf_counter() - t0) / n * 1e6
        t0 = time.perf_counter()
        for _ in range(n):
            decode_frame(frame)
        decode_us = (time.perf_counter() - t0) / n * 1e6
        return check_us, decode_us
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=5000)
    args = ap.parse_args()
    from servers import start_broker, start_namesrv
    tmp = Path(tempfile.mkdtemp(prefix="bench-acl-"))
    procs = []
    try:
        conf = {"mappedFileSizeCommitLog": str(64 << 20)}
        for d in ("ns-plain", "ns-acl"):
            (tmp / d).mkdir()
        (tmp / "plain").mkdir()
        ns_plain = start_namesrv(tmp / "ns-plain")
        procs.append(ns_plain)
        procs.append(start_broker(tmp / "plain" / "store", ns_plain.addr, conf))
        ns_acl = start_namesrv(tmp / "ns-acl")
        procs.append(ns_acl)
        (tmp / "acl" / "store" / "conf").mkdir(parents=True)
        (tmp / "acl" / "store" / "conf" / "plain_acl.yml").write_text(ACL_YML)
        acl = start_broker(tmp / "acl" / "store", ns_acl.addr, dict(conf, aclEnable="true"))
        procs.append(acl)
        creds = {"access_key": "BenchKey1", "secret_key": "BenchSecret1"}
        print(f"{'row':<26}{'ACL on':>14}{'ACL off':>14}{'on/off':>9}")
        for threads in (1, 8):
            off = send_rate(ns_plain.addr, "BenchTopic", args.num, threads)
            on = send_rate(ns_acl.addr, "BenchTopic", args.num, threads, **creds)
            print(f"{f'sync send, {threads} thread(s)':<26}{on:>10.0f} m/s{off:>10.0f} m/s"
                  f"{on / off:>9.2f}")
        check_us, decode_us = micro(20000)
        print(f"{'check vs frame decode':<26}{check_us:>11.1f} µs{decode_us:>11.1f} µs"
              f"{check_us / decode_us:>9.2f}")
        refused = acl.output.count("ACL refused")
        assert refused == 0, f"the ACL broker refused {refused} requests"
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
