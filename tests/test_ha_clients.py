"""Consumers across a master's kill -9 (issue 24, HA.md §5), real processes on 127.0.0.1.

A NameServer, a SYNC_MASTER and its SLAVE (both registered, so routes list both): every SEND_OK
message is on the slave, and what a user relies on is that consumers carry on there:

* the C++ client (PyPI ``rocketmq`` 0.4.4) consumes every message from the slave once the
  master is gone, and commits its offsets there. One that was consuming when the master died
  moves to the slave when it next reads the route; until then it retries the dead master's
  pulls without a pause, which starves its own timers: 3 s to minutes here
  (docs/replication.md §7.5), so that case is a stress variant;
* an orderly consumer (our client) stops as RocketMQ 4.9.8's does: LOCK_BATCH_MQ goes to the
  master only, so once its locks expire (``lockMaxLiveTime``) no message of that broker is
  consumed although the slave has them; restarted on the same store, the master takes the
  locks again and consumption resumes, every queue in order, nothing lost or repeated.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import rocketmq.client  # noqa: F401  (the test extra installs rocketmq==0.4.4)

from rocketstore.client import Message, Producer, SendStatus
from servers import ServerProcess, start_broker, start_namesrv, wait_until  # noqa: E402

WAIT_S = 120.0          # a deadline for polling, never a timing assertion


_wait = functools.partial(wait_until, within=WAIT_S)   # tests/servers.py


def _config(store: Path, name: str) -> dict:
    from rocketstore.remoting import fastjson
    p = store / "config" / name
    return fastjson.loads(p.read_text()) if p.exists() else {}


def _route_ids(ns_addr: str, topic: str) -> set[str]:
    """The broker ids of ``broker-a`` in the NameServer's route of ``topic``."""
    from rawwire import RawClient
    from rocketstore.remoting import fastjson
    with RawClient(ns_addr) as c:
        h, body = c.call(105, {"topic": topic})         # GET_ROUTEINFO_BY_TOPIC
    if h["code"] != 0:
        return set()
    return {str(i) for b in fastjson.loads(body).get("brokerDatas", [])
            for i in (b.get("brokerAddrs") or {})}


class Pair:
    """NameServer, SYNC_MASTER and SLAVE under ``tmp``; ``close`` stops what still runs."""

    def __init__(self, tmp: Path, role: str = "SYNC_MASTER") -> None:
        for d in ("m", "s"):
            (tmp / d).mkdir(exist_ok=True)
        self.tmp = tmp
        self.procs: list[ServerProcess] = []
        self.ns = self._up(start_namesrv(tmp))
        self.master_store = tmp / "m" / "store"
        self.slave_store = tmp / "s" / "store"
        self.master = self.start_master(role)
        host, port = self.master.addr.rsplit(":", 1)
        self.slave = self._up(start_broker(self.slave_store, self.ns.addr, conf={
            "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": f"{host}:{int(port) + 1}"}))

    def _up(self, p: ServerProcess) -> ServerProcess:
        self.procs.append(p)
        return p

    def start_master(self, role: str, listen: str = "127.0.0.1:0") -> ServerProcess:
        self.role = role
        return self._up(start_broker(self.master_store, self.ns.addr,
                                     conf={"brokerRole": role}, listen=listen))

    def wait_synced(self, topic: str) -> None:
        """The slave serves a topic's pulls once its metadata sync brought the topic."""
        _wait(lambda: topic in _config(self.slave_store, "topics.json").get(
            "topicConfigTable", {}), f"the slave synced topic {topic}")

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
                p.kill()


@pytest.fixture
def pair(tmp_path):
    pr = Pair(tmp_path)
    yield pr
    pr.close()


# -- the C++ client ---------------------------------------------------------------------------

CPP_PUSH = textwrap.dedent("""
    import sys, threading
    from rocketmq.client import PushConsumer
    namesrv, group, topic = sys.argv[1:4]
    lock = threading.Lock()
    def on_message(m):
        with lock:
            print(m.queue_id, m.queue_offset, m.body.decode(), flush=True)
    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, on_message)
    c.start()
    sys.stdin.read()            # consume until the test closes stdin
    c.shutdown()                # commits its offsets
    print("shutdown", flush=True)
""")


class CppConsumer:
    """``CPP_PUSH`` in a process of its own; ``got`` fills with (queue id, offset, body)."""

    def __init__(self, tmp: Path, ns_addr: str, group: str, topic: str) -> None:
        script = tmp / "cpp_push.py"
        script.write_text(CPP_PUSH)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), ns_addr, group, topic], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp,
            env=dict(os.environ, HOME=str(tmp)))
        self.got: list[tuple[int, int, str]] = []
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            q, o, body = (line.split() + ["", "", ""])[:3]
            if q.isdigit():
                self.got.append((int(q), int(o), body))

    def bodies(self) -> set[str]:
        return {b for _, _, b in self.got}

    def shutdown(self) -> None:
        """Close its stdin: it shuts down (committing its offsets) and exits 0."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0
        self._reader.join(10)
        self.proc.stdout.close()
        assert self.lines[-1] == "shutdown"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                f.close()


def _send_all(pair: Pair, topic: str, bodies: list[str],
              sent: dict[tuple[int, int], str]) -> None:
    with Producer("PG-cpp-slave", namesrv_addr=pair.ns.addr,
                  retry_times_when_send_failed=0) as p:
        for body in bodies:
            r = p.send(Message(topic, body.encode()))
            assert r.status == SendStatus.SEND_OK       # SYNC_MASTER: on the slave too
            sent[(r.message_queue.queue_id, r.queue_offset)] = body


def _check_cpp_read_the_slave(pair: Pair, c: CppConsumer, topic: str, group: str,
                              sent: dict[tuple[int, int], str]) -> None:
    """Every body is the one sent at its queue offset (the slave's copy), and the offsets the
    consumer committed at shutdown went to the slave, the only node left."""
    for q, o, body in c.got:
        assert sent[(q, o)] == body, (q, o, body)
    c.shutdown()
    assert pair.slave.stop() == 0
    committed = _config(pair.slave_store, "consumerOffset.json")["offsetTable"][
        f"{topic}@{group}"]
    ends: dict[int, int] = {}
    for q, o in sent:
        ends[q] = max(ends.get(q, 0), o + 1)
    assert {int(q): int(o) for q, o in committed.items()} == ends


def test_cpp_push_consumer_reads_everything_from_the_slave_once_the_master_is_gone(
        pair, tmp_path):
    """The master killed -9, a C++ push consumer of a new group starts: its route lists the
    slave only, and it consumes every SEND_OK message there."""
    topic, group = "CppSlave", "CG-cpp-slave"
    sent: dict[tuple[int, int], str] = {}
    _send_all(pair, topic, [f"m{i:03d}" for i in range(100)], sent)
    pair.wait_synced(topic)
    pair.master.kill()
    _wait(lambda: _route_ids(pair.ns.addr, topic) == {"1"}, "the route lists the slave only")
    c = CppConsumer(tmp_path, pair.ns.addr, group, topic)
    try:
        _wait(lambda: c.bodies() >= set(sent.values()),
              "the C++ consumer read every message from the slave")
        _check_cpp_read_the_slave(pair, c, topic, group, sent)
    finally:
        c.kill()


@pytest.mark.stress
def test_cpp_push_consumer_continues_from_the_slave_after_master_kill9(pair, tmp_path):
    """A C++ push consumer that fell behind (stopped) when the master died continues on the
    slave. When it moves there depends on its timers and on how hard it spins on the dead
    master (3 s to minutes on this machine), hence a stress variant."""
    topic, group = "CppSlave", "CG-cpp-slave"
    sent: dict[tuple[int, int], str] = {}
    _send_all(pair, topic, [f"a{i:03d}" for i in range(20)], sent)
    c = CppConsumer(tmp_path, pair.ns.addr, group, topic)
    try:
        _wait(lambda: len(c.got) >= 20, "the C++ consumer read the first 20 from the master")
        # a long-polling pull may already hold one message per queue, the rest are left
        # for the slave
        os.kill(c.proc.pid, signal.SIGSTOP)
        try:
            _send_all(pair, topic, [f"b{i:03d}" for i in range(200)], sent)
            pair.wait_synced(topic)
            pair.master.kill()
            _wait(lambda: _route_ids(pair.ns.addr, topic) == {"1"},
                  "the route lists the slave only")
        finally:
            os.kill(c.proc.pid, signal.SIGCONT)
        seen_at_kill = len(c.bodies())
        _wait(lambda: c.bodies() >= set(sent.values()),
              "the C++ consumer read every message, the rest from the slave", within=600)
        assert seen_at_kill <= 20 + 4 < len(sent)
        _check_cpp_read_the_slave(pair, c, topic, group, sent)
    finally:
        c.kill()


# -- orderly consumption -------------------------------------------------------------------------

def test_orderly_consumer_stops_while_the_master_is_down_and_resumes_in_order(
        pair, monkeypatch):
    """4.9.8 (HA.md §5 item 6, checklist 28): an orderly consumer renews its queue locks on the
    master every 20 s and consumes a queue only while its lock is younger than 30 s; with the
    master gone the renewal fails, so consumption goes on until the locks expire, then stops.
    The two periods are RocketMQ system properties (``rocketmq.client.rebalance.lockInterval``,
    ``lockMaxLiveTime``); here 0.5 s and 2 s, so the test waits seconds, not a minute."""
    from rocketstore.client import ConsumeOrderlyStatus, MessageQueue, PushConsumer
    from rocketstore.client import process_queue, push_consumer
    monkeypatch.setattr(push_consumer, "LOCK_INTERVAL_MS", 500)
    monkeypatch.setattr(process_queue, "REBALANCE_LOCK_MAX_LIVE_TIME_MS", 2000)
    live_ms = 2000
    topic, group, queues, per_queue = "OrderlyHa", "CG-orderly-ha", 4, 30
    sent: dict[int, list[str]] = {q: [] for q in range(queues)}
    with Producer("PG-orderly-ha", namesrv_addr=pair.ns.addr,
                  retry_times_when_send_failed=0) as p:
        for i in range(per_queue):
            for q in range(queues):
                body = f"q{q}-{i:03d}"
                r = p.send(Message(topic, body.encode()),
                           message_queue=MessageQueue(topic, "broker-a", q))
                assert r.status == SendStatus.SEND_OK and r.queue_offset == i
                sent[q].append(body)
    pair.wait_synced(topic)

    got: dict[int, list[tuple[int, str]]] = {q: [] for q in range(queues)}
    late: list[tuple[int, float]] = []         # calls made with the queue's lock expired
    consumed = threading.Condition()
    gate = threading.Event()                   # the first messages wait for the kill
    c = PushConsumer(group, namesrv_addr=pair.ns.addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     poll_name_server_interval=500, heartbeat_broker_interval=500,
                     pull_batch_size=4)

    def listener(msgs, ctx):
        mq = ctx.message_queue
        pq = c.rebalance.process_queue_table.get(mq)
        if pq is not None:
            age = time.time() * 1000 - pq.last_lock_timestamp
            if age > live_ms + 1000:        # checked just before the call: a margin
                late.append((mq.queue_id, age))
        for m in msgs:
            with consumed:
                got[mq.queue_id].append((m.queue_offset, m.body_bytes.decode()))
                consumed.notify_all()
        if sum(map(len, got.values())) >= 8:
            gate.wait(30)
            time.sleep(0.15)        # slower than the locks live: some are left when they expire
        return ConsumeOrderlyStatus.SUCCESS

    c.subscribe(topic, "*")
    c.register_message_listener(listener, orderly=True)
    c.start()
    try:
        _wait(lambda: sum(map(len, got.values())) >= 8, "the orderly consumer started")
        master_addr = pair.master.addr
        pair.master.kill()
        gate.set()

        def expired() -> bool:
            pqs = [pq for mq, pq in list(c.rebalance.process_queue_table.items())
                   if mq.topic == topic]
            return len(pqs) == queues and all(pq.is_lock_expired() for pq in pqs)
        _wait(expired, "every queue lock expired")
        time.sleep(0.5)                         # a call already running finishes
        during = sum(map(len, got.values()))
        assert during < queues * per_queue      # consumption stopped with messages left
        time.sleep(1.5)                         # master down, locks expired: nothing consumed
        assert sum(map(len, got.values())) == during
        assert late == []

        pair.master = pair.start_master(pair.role, listen=master_addr)
        _wait(lambda: sum(map(len, got.values())) >= queues * per_queue,
              "consumption resumed after the master came back")
    finally:
        gate.set()
        c.shutdown()
    for q in range(queues):
        assert got[q] == list(enumerate(sent[q])), q     # in order, nothing lost or repeated
    assert late == []
