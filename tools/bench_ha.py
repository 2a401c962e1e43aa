"""Benchmark: master/slave replication (rocketstore.ha), every figure against a same-run baseline.

Real processes on 127.0.0.1 (``rocketstore namesrv`` + ``rocketstore broker`` master and SLAVE):

  sync sends      Producer.send from one thread, 256 B bodies: SYNC_MASTER (answered after the
                  slave's ack) vs ASYNC_MASTER (never waits), each with its slave running;
                  msgs/s and p99 latency, and the ratio.
  replication     a master store pre-filled with --mb MiB (1 KiB records); a new, empty slave
                  catches up (it gets the master's last file, here all of it; timed from the
                  first 10 % on, so without the slave's start-up): MB/s, vs a raw
                  loopback TCP copy of the same bytes in the same run (sender: a process doing
                  socket.sendfile of the file; receiver: recv_into a buffer, one copy into an
                  mmap, as the slave's append does; best of 3). Catch-up time per GiB follows.
  slave lag       under the ASYNC_MASTER send load: time from SEND_OK on the master to the
                  record's bytes being in the slave's file (every 20th send), p50 / p99 / max.

  loss window     (--loss-window) an ASYNC_MASTER under a steady send rate is killed -9
                  mid-stream: how many SEND_OK messages the slave lacks (they exist only on the
                  master's disk) and the time they cover (from the earliest such SEND_OK to the
                  kill), checked against both stores: the slave's commit log is a
                  byte-identical prefix of the master's.

  python tools/bench_ha.py [--num 3000] [--mb 256]
  python tools/bench_ha.py --loss-window [--rate 2000] [--seconds 3]
"""
from __future__ import annotations

import argparse
import mmap
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

FILE = 1 << 30          # RocketMQ's default commit-log file size: one file holds everything


def ha_addr(addr: str) -> str:
    host, port = addr.rsplit(":", 1)
    return f"{host}:{int(port) + 1}"


def log_file(store: Path, offset: int) -> Path:
    return store / "commitlog" / f"{offset - offset % FILE:020d}"


def same_bytes(master: Path, slave: Path, offset: int, n: int = 32) -> bool:
    """Whether the slave's file holds the master's ``n`` bytes at ``offset``."""
    pos = offset % FILE
    try:
        with open(log_file(master, offset), "rb") as a, open(log_file(slave, offset), "rb") as b:
            return os.pread(a.fileno(), n, pos) == os.pread(b.fileno(), n, pos)
    except FileNotFoundError:
        return False


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def sends(ns: str, n: int, master_store: Path | None = None, slave_store: Path | None = None):
    """``n`` sync sends from one thread: (msgs/s, p99 ms, lag samples in ms)."""
    from rocketstore.client import Message, Producer, SendStatus
    p = Producer("bench-ha", namesrv_addr=ns, send_msg_timeout=10_000).start()
    lags: list[float] = []
    watch: list[tuple[int, float]] = []
    stop = threading.Event()

    def poll() -> None:         # when does each watched record reach the slave's file?
        while not stop.is_set() or watch:
            if not watch:
                time.sleep(0.0005)
                continue
            off, t = watch[0]
            if same_bytes(master_store, slave_store, off):
                lags.append((time.perf_counter() - t) * 1000)
                watch.pop(0)
            else:
                time.sleep(0.0002)
            if stop.is_set() and time.perf_counter() - t > 30:
                break
    poller = threading.Thread(target=poll, daemon=True)
    if master_store is not None:
        poller.start()
    try:
        for _ in range(50):
            p.send(Message("BenchHa", b"w" * 256))
        lat = []
        t0 = time.perf_counter()
        for i in range(n):
            s = time.perf_counter()
            r = p.send(Message("BenchHa", b"b" * 256))
            e = time.perf_counter()
            lat.append(e - s)
            assert r.status == SendStatus.SEND_OK, r.status
            if master_store is not None and i % 20 == 0:
                watch.append((int(r.offset_msg_id[-16:], 16), e))
        el = time.perf_counter() - t0
    finally:
        stop.set()
        if poller.is_alive():
            poller.join(60)
        p.shutdown()
    return n / el, pct(lat, 0.99) * 1000, lags


def run_pair(tmp: Path, role: str, n: int) -> tuple[float, float, list[float]]:
    from servers import start_broker, start_namesrv
    d = tmp / role
    d.mkdir()
    ns = start_namesrv(d)
    (d / "m").mkdir()
    (d / "s").mkdir()
    master = start_broker(d / "m" / "store", ns.addr, {"brokerRole": role})
    slave = start_broker(d / "s" / "store", "", {"brokerRole": "SLAVE", "brokerId": "1",
                                                "haMasterAddress": ha_addr(master.addr)})
    try:
        time.sleep(0.5)
        watch = role == "ASYNC_MASTER"
        return sends(ns.addr, n, d / "m" / "store" if watch else None,
                     d / "s" / "store" if watch else None)
    finally:
        slave.stop()
        master.stop()
        ns.stop()


def fill(store: Path, mib: int) -> int:
    from rocketstore import Message, MessageStore, StoreConfig
    body = os.urandom(1000)
    with MessageStore.open(store, StoreConfig()) as st:
        while st.get_max_phy_offset() < mib << 20:
            st.put_messages([Message("BenchFill", body) for _ in range(64)])
        return st.get_max_phy_offset()


def replication(tmp: Path, mib: int) -> tuple[float, int]:
    """A new slave's catch-up over ``mib`` MiB: (MB/s, bytes)."""
    from servers import start_broker, start_namesrv
    d = tmp / "catchup"
    (d / "m").mkdir(parents=True)
    (d / "s").mkdir()
    end = fill(d / "m" / "store", mib)
    ns = start_namesrv(d)
    master = start_broker(d / "m" / "store", ns.addr, {"brokerRole": "ASYNC_MASTER"})
    m, s = d / "m" / "store", d / "s" / "store"
    first = (end // 10) - (end // 10) % 4096        # timed from here: no process start-up in it
    try:
        slave = start_broker(s, "", {"brokerRole": "SLAVE", "brokerId": "1",
                                     "haMasterAddress": ha_addr(master.addr)})
        try:
            while not same_bytes(m, s, first, 64):
                time.sleep(0.0005)
            t0 = time.perf_counter()
            while not same_bytes(m, s, end - 64, 64):
                time.sleep(0.0005)
            el = time.perf_counter() - t0
        finally:
            slave.stop()
    finally:
        master.stop()
        ns.stop()
    return (end - first) / el / 1e6, end


@dataclass
class LossWindow:
    """What an ASYNC_MASTER kill -9 mid-stream left (``loss_window``)."""

    master_store: Path
    slave_store: Path
    sent: list[bytes]                           # every body sent, in order
    ok: list[tuple[int, bytes, float]]          # SEND_OK: (commit-log offset, body, answer time)
    failed: int                                 # sends answered with an error (after the kill)
    killed_at: float                            # perf_counter() of the kill
    slave_end: int = 0                          # the slave's commit-log end after the kill

    @property
    def absent(self) -> list[tuple[int, bytes, float]]:
        """SEND_OK messages the slave does not have."""
        return [r for r in self.ok if r[0] >= self.slave_end]

    @property
    def window_ms(self) -> float:
        """From the earliest SEND_OK the slave lacks to the kill (0 when it lacks none)."""
        a = self.absent
        return (self.killed_at - min(t for _, _, t in a)) * 1000 if a else 0.0


def loss_window(tmp: Path, rate: int, seconds: float, file_size: int = FILE) -> LossWindow:
    """Send ``rate`` messages/s (futures, no waiting) to an ASYNC_MASTER with a slave, kill -9
    the master after ``seconds``, keep sending for 0.3 s (those fail), then stop the slave
    cleanly. Both stores are left in ``tmp`` for inspection."""
    from rocketstore import MessageStore, StoreConfig
    from rocketstore.client import Message, Producer, SendStatus
    from servers import start_broker, start_namesrv
    d = tmp / "loss"
    for sub in ("m", "s"):
        (d / sub).mkdir(parents=True)
    ns = start_namesrv(d)
    m, s = d / "m" / "store", d / "s" / "store"
    conf = {"mappedFileSizeCommitLog": str(file_size)}
    master = start_broker(m, ns.addr, {**conf, "brokerRole": "ASYNC_MASTER"})
    slave = start_broker(s, "", {**conf, "brokerRole": "SLAVE", "brokerId": "1",
                                 "haMasterAddress": ha_addr(master.addr)})
    res = LossWindow(m, s, [], [], 0, 0.0)
    lock = threading.Lock()
    p = Producer("bench-ha-loss", namesrv_addr=ns.addr, send_msg_timeout=3000,
                 retry_times_when_send_failed=0).start()
    try:
        r = p.send(Message("BenchHaLoss", b"warm-up"))  # route and connection ready
        res.sent.append(b"warm-up")
        res.ok.append((int(r.offset_msg_id[-16:], 16), b"warm-up", time.perf_counter()))
        futs = []

        def answered(body: bytes, f) -> None:
            t = time.perf_counter()
            try:
                r = f.result()
            except Exception:  # noqa: BLE001 - a send the dead master never answered
                with lock:
                    res.failed += 1
                return
            if r.status == SendStatus.SEND_OK:
                with lock:
                    res.ok.append((int(r.offset_msg_id[-16:], 16), body, t))
        t0 = time.perf_counter()
        kill_at, end_at = t0 + seconds, t0 + seconds + 0.3
        i = 0
        while True:
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            if not res.killed_at and time.perf_counter() >= kill_at:
                master.proc.kill()                      # SIGKILL, sends in flight
                res.killed_at = time.perf_counter()
            if time.perf_counter() >= end_at:
                break
            body = b"loss-%08d" % i
            res.sent.append(body)
            f = p.send_future(Message("BenchHaLoss", body))
            f.add_done_callback(lambda f, body=body: answered(body, f))
            futs.append(f)
            i += 1
        for f in futs:
            try:
                f.result(30)
            except Exception:  # noqa: BLE001 - counted by the callback
                pass
    finally:
        p.shutdown()
        master.kill()
        slave.stop()
        ns.stop()
    with MessageStore.open(s, StoreConfig(mapped_file_size_commit_log=file_size),
                           read_only=True) as st:
        res.slave_end = st.get_max_phy_offset()
    return res


def on_master_disk(res: LossWindow) -> int:
    """How many of the SEND_OK messages the slave lacks the killed master's store holds (it
    is opened, so recovered, as a restarted master would be)."""
    from rocketstore import MessageStore, StoreConfig
    with MessageStore.open(res.master_store, StoreConfig(
            mapped_file_size_commit_log=_file_size(res.master_store))) as st:
        return sum(1 for off, body, _ in res.absent
                   if (got := st.look_message_by_offset(off)) is not None and got.body == body)


def _file_size(store: Path) -> int:
    return (store / "commitlog" / f"{0:020d}").stat().st_size


def loss_report(res: LossWindow, rate: int) -> str:
    a = res.absent
    return (f"ASYNC_MASTER kill -9 at {rate} msgs/s: sent {len(res.sent)}, SEND_OK "
            f"{len(res.ok)}, failed {res.failed}; SEND_OK absent from the slave {len(a)} "
            f"({on_master_disk(res)} of them on the master's disk), covering "
            f"{res.window_ms:.1f} ms before the kill")


SENDER = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
with open(sys.argv[2], "rb") as f:
    s.sendfile(f, 0, int(sys.argv[3]))
s.close()
"""


def raw_copy(src: Path, n: int, tmp: Path) -> float:
    """The same ``n`` bytes over a loopback TCP socket into an mmap, timed from the connection
    (the sender's start-up left out, as the slave's is): MB/s."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    dst = tmp / "raw.bin"
    with open(dst, "wb") as f:
        f.truncate(n)
    fd = os.open(dst, os.O_RDWR)
    mm = mmap.mmap(fd, n)
    buf = bytearray(4 << 20)
    mv = memoryview(buf)
    proc = subprocess.Popen([sys.executable, "-c", SENDER, str(ls.getsockname()[1]), str(src), str(n)])
    c, _ = ls.accept()
    t0 = time.perf_counter()
    got = 0
    while got < n:
        k = c.recv_into(mv)
        if not k:
            break
        mm[got:got + k] = mv[:k]        # one copy into the mapping, as the slave's append
        got += k
    el = time.perf_counter() - t0
    proc.wait()
    c.close()
    ls.close()
    mm.close()
    os.close(fd)
    assert got == n
    return n / el / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=3000, help="sync sends per mode")
    ap.add_argument("--mb", type=int, default=256, help="MiB a new slave catches up on")
    ap.add_argument("--loss-window", action="store_true",
                    help="only the ASYNC_MASTER kill -9 loss window")
    ap.add_argument("--rate", type=int, default=2000, help="loss window: sends per second")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="loss window: seconds of sends before the kill")
    ap.add_argument("--runs", type=int, default=3, help="loss window: repetitions")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_ha_"))
    if args.loss_window:
        try:
            for k in range(args.runs):
                print(loss_report(loss_window(tmp / f"run{k}", args.rate, args.seconds),
                                  args.rate), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        sync_rate, sync_p99, _ = run_pair(tmp, "SYNC_MASTER", args.num)
        async_rate, async_p99, lags = run_pair(tmp, "ASYNC_MASTER", args.num)
        print(f"sync sends/s, 1 thread   SYNC_MASTER {sync_rate:8.0f}  ASYNC_MASTER "
              f"{async_rate:8.0f}  ratio {sync_rate / async_rate:.2f}")
        print(f"send p99 ms              SYNC_MASTER {sync_p99:8.2f}  ASYNC_MASTER "
              f"{async_p99:8.2f}  ratio {sync_p99 / async_p99:.2f}")
        mbps, n = replication(tmp, args.mb)
        # the baseline's best of 3 (the machine is shared): the ratio errs against us
        raw = max(raw_copy(log_file(tmp / "catchup" / "m" / "store", 0), n, tmp)
                  for _ in range(3))
        print(f"replication MB/s         new slave  {mbps:8.0f}  raw loopback copy "
              f"{raw:8.0f}  ratio {mbps / raw:.2f}  ({n / 1e6:.0f} MB; catch-up "
              f"{(1 << 30) / 1e6 / mbps:.1f} s per GiB)")
        if lags:
            print(f"slave lag ms (ASYNC load) p50 {statistics.median(lags):.2f}  "
                  f"p99 {pct(lags, 0.99):.2f}  max {max(lags):.2f}  ({len(lags)} samples)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
