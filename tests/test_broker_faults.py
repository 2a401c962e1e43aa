"""``rocketstore broker`` under faults: kill -9 mid-stream, malformed and hostile input.

Real processes (the NameServer and the broker), real sockets; the clients are ours over TCP.
"""
from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from pulling import pull_all  # noqa: E402  (tests/pulling.py)
from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

FILE = 16 << 20
CONF = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": str(FILE),
        "flushConsumerOffsetInterval": "200"}


def consume(namesrv: str, group: str, topic: str, want: set[str], timeout: float) -> list[str]:
    """Run a push consumer until every key of ``want`` arrived (or the timeout); returns the
    UNIQ_KEYs received, duplicates included."""
    got: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            got.extend(m.uniq_key for m in msgs)
            if want <= set(got):
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer(group, namesrv_addr=namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    try:
        done.wait(timeout)
        time.sleep(0.3)          # a late duplicate would show up here
    finally:
        c.shutdown()
    return got


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.fixture
def namesrv(tmp_path):
    ns = start_namesrv(tmp_path)
    yield ns
    assert ns.stop() == 0


def test_kill_9_loses_no_acknowledged_send_and_consumers_resume(namesrv, tmp_path):
    store = tmp_path / "store"
    broker = start_broker(store, namesrv.addr, CONF)
    listen = broker.addr
    try:
        with Producer("pg-k9", namesrv_addr=namesrv.addr) as p:
            first = [p.send(Message("K9", b"first-%d" % i)).msg_id for i in range(40)]
            got = consume(namesrv.addr, "cg-k9", "K9", set(first), 30)
            assert set(first) <= set(got)
            # the group's offsets reach consumerOffset.json (flushed every 200 ms here)
            offsets = store / "config" / "consumerOffset.json"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "cg-k9" not in (
                    offsets.read_text() if offsets.exists() else ""):
                time.sleep(0.05)
            assert "cg-k9" in offsets.read_text()
            acked: list[str] = []
            stop = threading.Event()

            def send_loop() -> None:
                i = 0
                while not stop.is_set():
                    try:
                        r = p.send(Message("K9", b"second-%d" % i))
                    except (MQBrokerError, MQClientError, TransportError):
                        continue
                    if r.status.value == "SEND_OK":
                        acked.append(r.msg_id)
                    i += 1
            t = threading.Thread(target=send_loop)
            t.start()
            deadline = time.monotonic() + 20
            while len(acked) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            broker.kill()                                   # kill -9 mid-stream
            stop.set()
            t.join(30)
        assert len(acked) >= 200
        broker = start_broker(store, namesrv.addr, CONF, listen=listen)
        again = consume(namesrv.addr, "cg-k9", "K9", set(acked), 60)
        lost = set(acked) - set(again)
        assert not lost, f"{len(lost)} acknowledged messages lost"
        # resumed from the committed offsets: nothing of the first, consumed batch again
        assert not set(first) & set(again)
    finally:
        assert broker.stop() == 0


def _frames(rng: random.Random) -> bytes:
    """One hostile input."""
    kind = rng.randrange(9)
    good = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "pg", "b": "F", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0, "i": ""},
        b"body").encode()
    if kind == 0:
        return os.urandom(rng.randrange(1, 64))
    if kind == 1:
        return struct.pack(">i", rng.choice([-1, -(2 ** 31), 0, 1, 3, 2 ** 31 - 1, 16 << 20]))
    if kind == 2:
        hdr = b'{"code":310,"extFields":{"a":'
        return struct.pack(">ii", 4 + len(hdr), len(hdr)) + hdr
    if kind == 3:
        cut = rng.randrange(1, len(good))
        return good[:cut]                                 # half a frame, then silence/close
    if kind == 4:
        return struct.pack(">ii", 12, 0x7FFFFF) + b"x" * 8  # header past the frame
    if kind == 5:
        fields = {"a": 5, "b": None, "c": [1], "d": "x", "e": "-9", "f": "9" * 30, "g": {}, "h": ""}
        hdr = json.dumps({"code": 310, "extFields": fields, "flag": 0, "opaque": 1}).encode()
        return struct.pack(">ii", 4 + len(hdr), len(hdr)) + hdr
    if kind == 6:
        hdr = json.dumps({"code": rng.randrange(-5, 5000), "flag": 0, "opaque": 1}).encode()
        return struct.pack(">ii", 4 + len(hdr), len(hdr)) + hdr
    if kind == 7:
        hdr = json.dumps({"code": 11, "extFields": {"consumerGroup": "g", "topic": "../x",
                          "queueId": "99999", "queueOffset": "-5", "maxMsgNums": "0",
                          "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "1"},
                          "flag": 0, "opaque": 3}).encode()
        return struct.pack(">ii", 4 + len(hdr), len(hdr)) + hdr
    body = os.urandom(rng.randrange(0, 200))
    hdr = json.dumps({"code": rng.choice([34, 41, 42, 320, 36, 37]), "flag": 0, "opaque": 4,
                      "extFields": {"group": "g", "offset": "1", "delayLevel": "0"}}).encode()
    return struct.pack(">ii", 4 + len(hdr) + len(body), len(hdr)) + hdr + body


def test_malformed_frames_never_hurt_a_well_behaved_client(namesrv, tmp_path):
    broker = start_broker(tmp_path / "store", namesrv.addr,
                          {"mappedFileSizeCommitLog": str(FILE)})
    host, port = broker.addr.rsplit(":", 1)
    rng = random.Random(7)
    try:
        with Producer("pg-good", namesrv_addr=namesrv.addr) as p:
            p.send(Message("Good", b"warm-up"))
            rss0 = rss_kb(broker.proc.pid)
            sent = []
            stop = threading.Event()
            errors: list[BaseException] = []

            def good_client() -> None:
                i = 0
                while not stop.is_set():
                    try:
                        sent.append(p.send(Message("Good", b"g%d" % i)).msg_id)
                    except BaseException as e:      # any failure of a good client is a bug
                        errors.append(e)
                        return
                    i += 1
            t = threading.Thread(target=good_client)
            t.start()
            cases = 0
            held: list[socket.socket] = []
            for round_ in range(60):
                socks = []
                for _ in range(40):                 # a flood of connections, hostile frames
                    s = socket.create_connection((host, int(port)), timeout=5)
                    s.sendall(_frames(rng))
                    socks.append(s)
                    cases += 1
                for s in socks[:30]:
                    s.close()
                held.extend(socks[30:])             # some stay open, silent
                if round_ % 10 == 9:
                    for s in held:
                        s.close()
                    held.clear()
            for s in held:
                s.close()
            # a client that never reads its answers is paused, not buffered without bound
            s = socket.create_connection((host, int(port)), timeout=5)
            ping = RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                           {"topic": "Good", "queueId": 0}).encode()
            s.setblocking(False)
            pushed = 0
            pending = memoryview(ping * 200)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    n = s.send(pending)           # whole frames only: keep the stream valid
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                pushed += n
                pending = pending[n:] if n < len(pending) else memoryview(ping * 200)
            s.close()
            stop.set()
            t.join(30)
            assert not errors, errors[:3]
            assert len(sent) > 50 and cases == 2400
            assert broker.proc.poll() is None            # still up
            grew = rss_kb(broker.proc.pid) - rss0
            assert grew < 150_000, f"broker RSS grew by {grew} kB"
            assert p.send(Message("Good", b"after")).status.value == "SEND_OK"
        c = RemotingClient()
        try:
            r = c.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                              {"topic": "Good", "queueId": 0}))
            assert r.code == ResponseCode.SUCCESS
        finally:
            c.close()
        assert pushed > 1_000_000
    finally:
        assert broker.stop() == 0
    with MessageStore.open(str(tmp_path / "store"), StoreConfig(mapped_file_size_commit_log=FILE),
                           read_only=True) as st:
        stored = {m.uniq_key for q in range(4) for m in pull_all(st, "Good", q)}
    assert set(sent) <= stored
    assert not any(t.startswith("../") for t in os.listdir(tmp_path / "store" / "consumequeue"))
